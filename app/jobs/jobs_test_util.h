// For the app/jobs tests: a library with documents, and a scripted Generator (no model) whose
// answers, failures and waits the test chooses.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "app/jobs/jobs.h"
#include "app/store/library.h"

namespace spw::app::testing {

/// Adds a document with `n_pages` pages ("Page K of NAME. The term ends on notice.") to the
/// library at `db_file`; returns its id.
inline int64_t add_test_document(const std::filesystem::path& db_file, const std::string& name,
                                 int n_pages = 2) {
  auto lib = Library::open(db_file);
  EXPECT_TRUE(lib.ok());
  if (!lib) return 0;
  DocumentRecord d;
  d.title = name;
  d.path = "/nowhere/" + name + ".pdf";
  d.sha256 = fmt::format("{:064x}", std::hash<std::string>{}(name));
  std::vector<PageRecord> pages;
  for (int i = 1; i <= n_pages; ++i) {
    PageRecord p;
    p.page_no = i;
    p.text = fmt::format("Page {} of {}. The term ends on notice.", i, name);
    p.original_text = p.text;
    pages.push_back(std::move(p));
  }
  auto id = (*lib)->add_document(d, pages);
  EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
  return id.ok() ? *id : 0;
}

/// What the scripted generator does, shared by every generator a factory makes.
struct Script {
  std::mutex mu;
  /// Failures to return, in order, for a document before it answers: (message, transient).
  std::map<int64_t, std::deque<std::pair<std::string, bool>>> failures;
  std::map<int64_t, int> calls;  // run() calls per document
  /// Answers starting "NONE" for these clause types.
  std::vector<std::string> absent_clauses;
  /// Called at the start of every run() (outside the lock); may wait for req.cancelled().
  std::function<void(const GenRequest&)> during;
  /// Map-reduce documents: their parts. run() reports each part's start (GenRequest::part_start)
  /// with a prefill event (50 of 100 tokens) and a part event (k of N), calls at_part, then
  /// the combination's start; the result says N parts, none kept.
  std::map<int64_t, int> parts;
  std::function<void(int64_t doc_id, int part)> at_part;
  int total_calls() {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (auto& [doc, c] : calls) n += c;
    return n;
  }
  int calls_for(int64_t doc) {
    std::lock_guard<std::mutex> lock(mu);
    return calls.count(doc) ? calls[doc] : 0;
  }
};

class ScriptedGenerator final : public Generator {
 public:
  explicit ScriptedGenerator(std::shared_ptr<Script> s) : s_(std::move(s)) {}
  std::string describe() const override { return "scripted"; }
  GenResult run(const GenRequest& req) override {
    if (s_->during) s_->during(req);
    GenResult r;
    int n_parts = 0;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      n_parts = s_->parts.count(req.doc_id) ? s_->parts[req.doc_id] : 0;
    }
    for (int k = 1; k <= n_parts; ++k) {
      if (req.part_start) req.part_start(k, n_parts);
      ProgressEvent e;
      e.phase = ProgressPhase::Prefill;
      e.done = 50;
      e.total = 100;
      e.eta_s = 1;
      if (req.events) req.events(e);
      e.phase = ProgressPhase::Part;
      e.done = k;
      e.total = n_parts;
      e.eta_s = 10.0 * (n_parts - k);
      if (req.events) req.events(e);
      if (s_->at_part) s_->at_part(req.doc_id, k);
    }
    if (n_parts > 0 && req.part_start) req.part_start(0, n_parts);
    r.n_parts = n_parts;
    std::lock_guard<std::mutex> lock(s_->mu);
    ++s_->calls[req.doc_id];
    auto& q = s_->failures[req.doc_id];
    if (!q.empty()) {
      r.error = q.front().first;
      r.transient = q.front().second;
      q.pop_front();
      return r;
    }
    if (req.cancelled && req.cancelled()) {
      r.error = "cancelled";
      return r;
    }
    for (const std::string& c : s_->absent_clauses) {
      if (req.question.find("Find the " + c + " clause") != std::string::npos) {
        r.ok = true;
        r.text = "NONE";
        return r;
      }
    }
    r.ok = true;
    r.text = fmt::format("Answer for document {}: [p. 1] \"The term ends\"", req.doc_id);
    r.citations.push_back({1, "The term ends", true, ""});
    r.citations.push_back({2, "made up", false, "quote not found on page 2"});
    r.prompt_tokens = 100;
    r.generated_tokens = 10;
    r.decode_s = 0.5;
    return r;
  }

 private:
  std::shared_ptr<Script> s_;
};

inline GeneratorFactory scripted_factory(std::shared_ptr<Script> s) {
  return [s](const JobRecord&) -> Expected<std::unique_ptr<Generator>> {
    return std::unique_ptr<Generator>(new ScriptedGenerator(s));
  };
}

/// Runner options for tests: short heartbeats, millisecond backoff, the scripted generator.
inline RunnerOptions test_runner_options(const std::filesystem::path& db_file,
                                         std::shared_ptr<Script> s, const std::string& owner) {
  RunnerOptions o;
  o.db_file = db_file;
  o.owner = owner;
  o.heartbeat_ms = 20;
  o.lease_ms = 2000;
  o.backoff_ms = 1;
  o.generator = scripted_factory(std::move(s));
  o.load_1min = [] { return 0.0; };
  return o;
}

}  // namespace spw::app::testing
