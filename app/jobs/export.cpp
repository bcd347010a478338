// Job exports (app/jobs/jobs.h): the Markdown report and the CSV.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "app/jobs/jobs.h"
#include "app/jobs/schedule.h"

namespace spw::app {

namespace {

// RFC 4180 quoting. A text that a spreadsheet would run as a formula (it starts with = + - @,
// tab or carriage return: model output can be steered by document text) gets a leading
// apostrophe, the OWASP advice against CSV injection; numbers written by the exporter itself
// never start with those.
std::string csv_field(const std::string& text) {
  std::string s = text;
  if (!s.empty() && std::string_view("=+-@\t\r").find(s[0]) != std::string_view::npos)
    s.insert(s.begin(), '\'');
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string csv_row(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    out += csv_field(fields[i]);
  }
  out += "\r\n";
  return out;
}

// Markdown text on one line: newlines become spaces (quotes and table-free lists).
std::string one_line(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == '\n' || c == '\r') ? ' ' : c;
  return out;
}

std::string citation_md(const JobCitation& c) {
  std::string line = fmt::format("[p. {}]", c.page);
  if (!c.quote.empty()) line += fmt::format(" \"{}\"", one_line(c.quote));
  if (c.verified) return line + " — verified";
  return line + " — **unverified**" + (c.reason.empty() ? "" : ": " + c.reason);
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return std::string();
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string task_line(const JobSpec& spec) {
  switch (spec.task) {
    case JobTask::Summary:
      return fmt::format("summary ({})", spec.summary_length);
    case JobTask::Clauses: {
      std::string list;
      for (const std::string& c : spec.clauses) list += (list.empty() ? "" : ", ") + c;
      return fmt::format("clauses ({})", list);
    }
    case JobTask::Prompt:
      return fmt::format("prompt: \"{}\"", one_line(spec.prompt));
  }
  return "";
}

}  // namespace

Expected<ExportFormat> parse_export_format(const std::string& s) {
  if (s == "md" || s == "markdown") return ExportFormat::Markdown;
  if (s == "csv") return ExportFormat::Csv;
  return make_error("--format '{}': use md or csv", s);
}

std::string export_markdown(const JobRecord& job, const std::vector<JobDocument>& docs,
                            const std::vector<JobResult>& results) {
  std::multimap<int64_t, const JobResult*> by_doc;
  for (const JobResult& r : results) by_doc.emplace(r.doc_id, &r);
  std::string md = fmt::format("# Job {}: {}\n\n", job.id, job.spec.title);
  md += fmt::format("- Task: {}\n", task_line(job.spec));
  if (job.spec.endpoint.empty()) {
    md += fmt::format("- Model: {}\n", job.spec.model_path);
  } else {
    md += fmt::format("- Model: {} at {}\n", job.spec.model_path, job.spec.endpoint);
  }
  md += fmt::format("- Settings: -n {}, temperature {}, seed {}\n", job.spec.n_predict,
                    job.spec.temp, job.spec.seed);
  md += fmt::format("- State: {}{}\n", job_state_name(job.state),
                    job.reason.empty() ? "" : " (" + job.reason + ")");
  md += fmt::format("- Documents: {} done, {} failed, {} in all\n", job.n_done, job.n_failed,
                    job.n_docs);
  md += fmt::format("- Created: {}; finished: {}\n", format_local_time(job.created),
                    format_local_time(job.finished));
  for (const JobDocument& d : docs) {
    if (md.size() < 2 || md.compare(md.size() - 2, 2, "\n\n") != 0) md += "\n";
    md += fmt::format("## {}. {} (document {})\n\n", d.position + 1, one_line(d.title), d.doc_id);
    if (d.state != DocState::Done) {
      md += fmt::format("State: {}{}\n", doc_state_name(d.state),
                        d.reason.empty() ? "" : " — " + d.reason);
      continue;
    }
    auto [b, e] = by_doc.equal_range(d.doc_id);
    for (auto it = b; it != e; ++it) {
      const JobResult& r = *it->second;
      if (job.spec.task == JobTask::Clauses) {
        md += fmt::format("### {}\n\n", r.clause);
        if (!r.found) {
          md += "Not found in the document.\n\n";
        } else if (!r.quote.empty()) {
          md += fmt::format("> \"{}\" (p. {}, {})\n\n", one_line(r.quote), r.page,
                            r.verified ? "verified" : "unverified");
        } else {
          md += "No quote given (unverified).\n\n";
        }
      }
      const std::string answer = trimmed(r.text);
      md += (answer.empty() ? std::string("(empty answer)") : answer) + "\n\n";
      if (r.citations.empty()) {
        md += "Citations: none\n\n";
      } else {
        size_t verified = 0;
        for (const JobCitation& c : r.citations) verified += c.verified;
        md += fmt::format("Citations ({} verified, {} unverified):\n\n", verified,
                          r.citations.size() - verified);
        for (const JobCitation& c : r.citations) md += "- " + citation_md(c) + "\n";
        md += "\n";
      }
    }
  }
  return md;
}

std::string export_csv(const JobRecord& job, const std::vector<JobDocument>& docs,
                       const std::vector<JobResult>& results) {
  std::string out = csv_row({"job", "document_id", "document", "clause", "found", "page", "quote",
                             "verified", "state", "reason", "answer"});
  std::multimap<int64_t, const JobResult*> by_doc;
  for (const JobResult& r : results) by_doc.emplace(r.doc_id, &r);
  const std::string job_id = std::to_string(job.id);
  for (const JobDocument& d : docs) {
    const std::string doc_id = std::to_string(d.doc_id);
    if (d.state != DocState::Done) {
      out += csv_row(
          {job_id, doc_id, d.title, "", "", "", "", "", doc_state_name(d.state), d.reason, ""});
      continue;
    }
    auto [b, e] = by_doc.equal_range(d.doc_id);
    for (auto it = b; it != e; ++it) {
      const JobResult& r = *it->second;
      std::string reason;
      if (r.found && !r.verified) {
        for (const JobCitation& c : r.citations) {
          if (c.page == r.page && c.quote == r.quote) {
            reason = c.reason;
            break;
          }
        }
        if (reason.empty()) reason = r.quote.empty() ? "no quote" : "";
      }
      if (job.spec.task != JobTask::Clauses) {  // no clause row: the answer only
        out += csv_row({job_id, doc_id, d.title, "", "", "", "", "", "done", "", trimmed(r.text)});
        continue;
      }
      out += csv_row({job_id, doc_id, d.title, r.clause, r.found ? "yes" : "no",
                      r.page > 0 ? std::to_string(r.page) : "", r.quote, r.verified ? "yes" : "no",
                      "done", reason, trimmed(r.text)});
    }
  }
  return out;
}

Status export_job(JobStore& store, int64_t id, ExportFormat format,
                  const std::filesystem::path& path) {
  auto job = store.job(id);
  if (!job) return job.error();
  auto docs = store.documents(id);
  if (!docs) return docs.error();
  auto results = store.results(id);
  if (!results) return results.error();
  const std::string text = format == ExportFormat::Csv ? export_csv(*job, *docs, *results)
                                                       : export_markdown(*job, *docs, *results);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return make_error("cannot write '{}': it is a folder; give a file name", path.string());
  const std::filesystem::path parent =
      path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  if (!std::filesystem::is_directory(parent, ec))
    return make_error("cannot write '{}': the folder {} does not exist", path.string(),
                      parent.string());
  const std::filesystem::path tmp =
      path.string() + fmt::format(".tmp-{}", static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error("cannot write '{}': {}", path.string(), std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      out.close();
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return make_error("cannot write '{}' (disk full?)", path.string());
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return make_error("cannot write '{}': {}", path.string(), ec.message());
  }
  return Status::Ok();
}

}  // namespace spw::app
