// The fixture of the ask tests (ask_test.cpp, kept_answer_test.cpp): a real tiny model
// (stories260K, from ../shared/models; the tests skip without it), a snapshot index and a part
// store in maps, and a story document of N pages.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "app/ask/ask.h"
#include "engine/backend/cpu/cpu_session.h"
#include "engine/kv/snapshot.h"
#include "engine/model/model.h"

namespace spw::app::test {

namespace fs = std::filesystem;

inline fs::path stories() { return fs::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf"; }

class TempFolder {
 public:
  TempFolder() {
    std::string tmpl = (fs::temp_directory_path() / "spillway-ask-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

class MapIndex final : public SnapshotIndex {
 public:
  std::optional<std::string> find(const SnapshotKey& k) override {
    auto it = records.find({k.model_fingerprint, k.prefix_hash});
    if (it == records.end()) return std::nullopt;
    return it->second;
  }
  Status put(const SnapshotKey& k, const std::string& path, int64_t, int64_t) override {
    records[{k.model_fingerprint, k.prefix_hash}] = path;
    return Status::Ok();
  }
  void remove(const SnapshotKey& k) override {
    records.erase({k.model_fingerprint, k.prefix_hash});
  }
  std::map<std::pair<uint64_t, uint64_t>, std::string> records;
};

class MapPartStore final : public PartStore {
 public:
  std::optional<PartAnswer> find(uint64_t fp, uint64_t key) override {
    auto it = answers.find({fp, key});
    if (it == answers.end()) return std::nullopt;
    return it->second;
  }
  Status put(uint64_t fp, uint64_t key, int, int, const PartAnswer& a) override {
    answers[{fp, key}] = a;
    ++puts;
    return Status::Ok();
  }
  std::map<std::pair<uint64_t, uint64_t>, PartAnswer> answers;
  int puts = 0;
};

inline DocumentText story_doc(int n_pages) {
  const char* texts[] = {
      "Once upon a time, there was a little girl named Lily. She loved to play in the park.",
      "One day, Lily saw a big red ball under a tree. She wanted to play with the ball.",
      "Lily's mom said they had to go home. Lily was sad, but she said goodbye to the ball.",
  };
  DocumentText d;
  d.id = 1;
  d.title = "Lily";
  for (int i = 0; i < n_pages; ++i)
    d.pages.push_back({i + 1, texts[i % 3], false, false, false, {}});
  return d;
}

class AskDocument : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(stories())) GTEST_SKIP() << "shared test data not found at " << stories();
    auto m = Model::load(stories().string());
    ASSERT_TRUE(m) << m.error().message;
    model_ = std::move(*m);
    auto t = Tokenizer::from_gguf(model_->file());
    ASSERT_TRUE(t) << t.error().message;
    tok_ = std::move(*t);
    params_.n_predict = 12;
    params_.sampling.temp = 0;
    params_.snapshot_dir = (dir_.path() / "snapshots").string();
    params_.model_fingerprint = kv::model_fingerprint(*model_);
    params_.kv_config = snapshot_kv_config(sp_, kv::KvSettings{});
    params_.question = "Who is Lily?";
    sp_.n_threads = 1;
  }

  Expected<AskResult> ask(const DocumentText& doc) {
    notes_.clear();
    const SessionFactory factory = session_factory();
    AskCallbacks cb;
    cb.note = [this](const std::string& s) { notes_ += s + "\n"; };
    return ask_document(*tok_, doc, params_, factory, &index_, cb);
  }

  // CPU sessions of the model with sp_.
  SessionFactory session_factory() {
    return [this]() -> Expected<std::unique_ptr<Session>> {
      auto s = cpu::CpuSession::create(*model_, sp_);
      if (!s) return s.error();
      return std::unique_ptr<Session>(std::move(*s));
    };
  }

  TempFolder dir_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  SessionParams sp_;
  AskParams params_;
  MapIndex index_;
  std::string notes_;
};

}  // namespace spw::app::test
