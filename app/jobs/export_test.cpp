// Job exports: the Markdown report (results per document, citations marked verified or
// unverified with the reason, failed documents with theirs) and the CSV (RFC 4180 quoting,
// CRLF, one row per document x clause), and the file written by export_job.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "app/jobs/jobs.h"
#include "app/jobs/jobs_test_util.h"
#include "app/store/test_temp_dir.h"

namespace spw::app {
namespace {

JobRecord clauses_job() {
  JobRecord j;
  j.id = 7;
  j.spec.title = "Contracts, batch \"A\"";
  j.spec.task = JobTask::Clauses;
  j.spec.clauses = {"termination", "renewal"};
  j.spec.model_path = "/m/model.gguf";
  j.spec.n_predict = 64;
  j.state = JobState::Failed;
  j.reason = "1 of 2 documents failed";
  j.n_docs = 2;
  j.n_done = 1;
  j.n_failed = 1;
  return j;
}

std::vector<JobDocument> two_docs() {
  JobDocument a;
  a.doc_id = 3;
  a.position = 0;
  a.title = "Lease, \"Main St\"";
  a.state = DocState::Done;
  JobDocument b;
  b.doc_id = 9;
  b.position = 1;
  b.title = "Gone";
  b.state = DocState::Failed;
  b.reason = "no document with id 9";
  return {a, b};
}

std::vector<JobResult> clause_rows() {
  JobResult t;
  t.doc_id = 3;
  t.clause = "termination";
  t.text = "[p. 2] \"Either party may end\nthis lease\" with notice.";
  t.found = true;
  t.page = 2;
  t.quote = "Either party may end\nthis lease";
  t.verified = true;
  t.citations = {{2, "Either party may end\nthis lease", true, ""},
                 {5, "thirty days", false, "page 5 is not in the document (pages 1-4)"}};
  JobResult r;
  r.doc_id = 3;
  r.clause = "renewal";
  r.text = "NONE";
  r.found = false;
  return {t, r};
}

TEST(JobExport, CsvQuotesByRfc4180WithOneRowPerClause) {
  const std::string csv = export_csv(clauses_job(), two_docs(), clause_rows());
  const std::string expected =
      "job,document_id,document,clause,found,page,quote,verified,state,reason,answer\r\n"
      "7,3,\"Lease, \"\"Main St\"\"\",termination,yes,2,\"Either party may end\nthis lease\","
      "yes,done,,\"[p. 2] \"\"Either party may end\nthis lease\"\" with notice.\"\r\n"
      "7,3,\"Lease, \"\"Main St\"\"\",renewal,no,,,no,done,,NONE\r\n"
      "7,9,Gone,,,,,,failed,no document with id 9,\r\n";
  EXPECT_EQ(csv, expected);
}

TEST(JobExport, SummaryCsvRowsCarryTheAnswerOnly) {
  JobRecord j = clauses_job();
  j.spec.task = JobTask::Summary;
  JobResult r;
  r.doc_id = 3;
  r.text = "  A lease of a shop. [p. 1] \"shop\"\n";
  r.citations = {{1, "shop", true, ""}};
  const std::string csv = export_csv(j, {two_docs()[0]}, {r});
  EXPECT_EQ(
      csv,
      "job,document_id,document,clause,found,page,quote,verified,state,reason,answer\r\n"
      "7,3,\"Lease, \"\"Main St\"\"\",,,,,,done,,\"A lease of a shop. [p. 1] \"\"shop\"\"\"\r\n");
  const std::string md = export_markdown(j, {two_docs()[0]}, {r});
  EXPECT_NE(
      md.find("A lease of a shop. [p. 1] \"shop\"\n\nCitations (1 verified, 0 unverified):\n\n"
              "- [p. 1] \"shop\" — verified\n"),
      std::string::npos)
      << md;
}

// A cell a spreadsheet would run as a formula gets a leading apostrophe (CSV injection).
TEST(JobExport, CsvNeutralisesFormulaCells) {
  JobRecord j = clauses_job();
  j.spec.task = JobTask::Summary;
  JobResult r;
  r.doc_id = 3;
  r.text = "=HYPERLINK(\"http://x\",\"y\")";
  const std::string csv = export_csv(j, {two_docs()[0]}, {r});
  EXPECT_NE(csv.find(",done,,\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"\r\n"), std::string::npos)
      << csv;
  r.text = "@SUM(A1)";
  EXPECT_NE(export_csv(j, {two_docs()[0]}, {r}).find(",done,,'@SUM(A1)\r\n"), std::string::npos);
}

TEST(JobExport, MarkdownMarksCitationsAndFailures) {
  const std::string md = export_markdown(clauses_job(), two_docs(), clause_rows());
  EXPECT_EQ(md.rfind("# Job 7: Contracts, batch \"A\"\n", 0), 0u) << md;
  EXPECT_NE(md.find("- Task: clauses (termination, renewal)\n"), std::string::npos) << md;
  EXPECT_NE(md.find("- State: failed (1 of 2 documents failed)\n"), std::string::npos);
  EXPECT_NE(md.find("## 1. Lease, \"Main St\" (document 3)\n"), std::string::npos);
  EXPECT_NE(md.find("### termination\n\n> \"Either party may end this lease\" (p. 2, verified)"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Citations (1 verified, 1 unverified):\n\n"
                    "- [p. 2] \"Either party may end this lease\" — verified\n"
                    "- [p. 5] \"thirty days\" — **unverified**: page 5 is not in the document "
                    "(pages 1-4)\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("### renewal\n\nNot found in the document.\n"), std::string::npos) << md;
  EXPECT_NE(md.find("## 2. Gone (document 9)\n\nState: failed — no document with id 9\n"),
            std::string::npos)
      << md;
}

TEST(JobExport, ExportJobWritesTheFileAndNamesABadPath) {
  testing::TempDir tmp("spillway-export");
  const auto db = library_db_file(tmp.path());
  auto store = JobStore::open(db);
  ASSERT_TRUE(store.ok());
  const int64_t doc = testing::add_test_document(db, "one");
  JobSpec s;
  s.doc_ids = {doc};
  s.model_path = "/m.gguf";
  const int64_t id = *(*store)->add(s);
  const auto out = tmp.path() / "report.csv";
  ASSERT_TRUE(export_job(**store, id, ExportFormat::Csv, out).ok());
  std::ifstream in(out, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(),
            "job,document_id,document,clause,found,page,quote,verified,state,reason,answer\r\n"
            "1,1,one,,,,,,pending,,\r\n");
  auto bad = export_job(**store, id, ExportFormat::Markdown, tmp.path() / "no" / "such" / "x.md");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("x.md"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(export_job(**store, 99, ExportFormat::Csv, out).ok());
  EXPECT_EQ(*parse_export_format("md"), ExportFormat::Markdown);
  EXPECT_FALSE(parse_export_format("pdf").ok());
}

}  // namespace
}  // namespace spw::app
