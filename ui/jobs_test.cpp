// Widget tests of the Jobs dock and the "New batch…" dialog: a job added through the dialog is a
// row of the jobs table in SQLite and of the dock, "queued"; cancel, pause and the dialog's
// refusals; and a job run by the dock's runner (a scripted generator, no model) ends "done"
// with its result shown and exported.
#include "ui/jobs_dock.h"
#include "ui/result_links.h"

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <QComboBox>
#include <QDateTime>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTest>
#include <QTextBrowser>
#include <QTextCursor>
#include <QTextDocument>
#include <QTimeEdit>

#include "app/jobs/job_store.h"
#include "app/store/library.h"
#include "tests/support/test_model.h"
#include "ui/job_documents.h"
#include "ui/new_batch_dialog.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;

// One value from a query on a separate connection (what another process sees).
std::string query(const fs::path& db_file, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  std::string v;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
    v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

// A library with two small documents.
struct JobsFixture {
  TempDir dir{"spillway-jobs-ui"};
  fs::path db = app::library_db_file(dir.path());
  int64_t doc_a = 0, doc_b = 0;

  JobsFixture() {
    auto lib = app::Library::open(db);
    EXPECT_TRUE(lib.ok()) << lib.error().message;
    doc_a = add(**lib, "Lease A", 2);
    doc_b = add(**lib, "Lease B", 3);
  }
  static int64_t add(app::Library& lib, const std::string& title, int n_pages) {
    app::DocumentRecord d;
    d.title = title;
    d.path = "/nowhere/" + title + ".pdf";
    d.sha256 = std::string(63, 'a') + (title.back() == 'A' ? "1" : "2");
    std::vector<app::PageRecord> pages;
    for (int i = 1; i <= n_pages; ++i) {
      app::PageRecord p;
      p.page_no = i;
      p.text = p.original_text =
          title + " page " + std::to_string(i) + ". The term ends on notice.";
      pages.push_back(p);
    }
    auto id = lib.add_document(d, pages);
    EXPECT_TRUE(id.ok()) << id.error().message;
    return id.ok() ? *id : 0;
  }
  JobsDockParams params(bool run_jobs = false) const {
    JobsDockParams p;
    p.db_file = db;
    p.cache_dir = fs::path(dir.path()) / "cache";
    p.run_jobs = run_jobs;
    p.refresh_ms = 0;
    p.watch_poll_ms = 50;
    return p;
  }
};

QString cell(JobsDock& dock, int64_t id, int col) {
  const int row = dock.rowOf(id);
  if (row < 0) return QStringLiteral("<no row>");
  return dock.table()->item(row, col)->text();
}

template <typename W>
W* child(QWidget* parent, const char* name) {
  W* w = parent->findChild<W*>(QLatin1String(name));
  EXPECT_NE(w, nullptr) << name;
  return w;
}

TEST(JobsDock, JobAddedThroughTheDialogIsQueuedAndCancelChangesItsState) {
  JobsFixture f;
  JobsDock dock(f.params());
  EXPECT_EQ(dock.table()->rowCount(), 0);
  EXPECT_TRUE(dock.errorText().isEmpty()) << dock.errorText().toStdString();

  dock.setCurrentModel("/models/tiny.gguf", R"({"n_ctx": 2048})");
  NewBatchDialog* dlg = dock.newBatch({f.doc_a});
  ASSERT_NE(dlg, nullptr);
  ASSERT_TRUE(dlg->setDocumentChecked(f.doc_b, true));
  auto* task = child<QComboBox>(dlg, "task");
  task->setCurrentIndex(task->findData("clauses"));
  child<QLineEdit>(dlg, "clauses")->setText("termination, governing law");
  EXPECT_EQ(child<QLineEdit>(dlg, "model")->text(), "/models/tiny.gguf");
  QSignalSpy added(dlg, &NewBatchDialog::jobAdded);
  dlg->accept();
  ASSERT_EQ(added.count(), 1) << dlg->errorText().toStdString();
  const int64_t id = added.first().first().toLongLong();
  ASSERT_GT(id, 0);

  // In SQLite: one queued clauses job over both documents, with the model and settings.
  const std::string where = " WHERE id = " + std::to_string(id);
  EXPECT_EQ(query(f.db, "SELECT state FROM jobs" + where), "queued");
  EXPECT_EQ(query(f.db, "SELECT task FROM jobs" + where), "clauses");
  EXPECT_EQ(query(f.db, "SELECT model_path FROM jobs" + where), "/models/tiny.gguf");
  EXPECT_EQ(query(f.db, "SELECT engine_json FROM jobs" + where), R"({"n_ctx": 2048})");
  EXPECT_EQ(query(f.db, "SELECT schedule FROM jobs" + where), "now");
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM job_documents WHERE job_id = " + std::to_string(id)),
            "2");
  EXPECT_EQ(query(f.db,
                  "SELECT group_concat(doc_id) FROM (SELECT doc_id FROM job_documents "
                  "WHERE job_id = " +
                      std::to_string(id) + " ORDER BY position)"),
            std::to_string(f.doc_a) + "," + std::to_string(f.doc_b));

  // In the dock.
  ASSERT_EQ(dock.table()->rowCount(), 1);
  EXPECT_EQ(cell(dock, id, JobsDock::kColState), "queued");
  EXPECT_EQ(cell(dock, id, JobsDock::kColTask), "clauses");
  EXPECT_EQ(cell(dock, id, JobsDock::kColDocs), "0/2");
  EXPECT_EQ(cell(dock, id, JobsDock::kColWhen), "now");

  // Cancel: the state changes in SQLite and in the dock.
  QSignalSpy state(&dock, &JobsDock::jobStateChanged);
  ASSERT_TRUE(dock.cancelJob(id)) << dock.errorText().toStdString();
  EXPECT_EQ(query(f.db, "SELECT state FROM jobs" + where), "cancelled");
  EXPECT_EQ(cell(dock, id, JobsDock::kColState), "cancelled");
  ASSERT_EQ(state.count(), 1);
  EXPECT_EQ(state.first().at(1).toString(), "cancelled");
  // A second cancel is refused with the store's message, shown in the dock.
  EXPECT_FALSE(dock.cancelJob(id));
  EXPECT_TRUE(dock.errorText().contains("cancelled")) << dock.errorText().toStdString();
}

TEST(JobsDock, PauseAndResumeAQueuedJob) {
  JobsFixture f;
  JobsDock dock(f.params());
  NewBatchDialog* dlg = dock.newBatch({f.doc_a});
  ASSERT_NE(dlg, nullptr);
  child<QLineEdit>(dlg, "model")->setText("/models/tiny.gguf");
  dlg->accept();
  const int64_t id = dlg->addedJobId();
  ASSERT_GT(id, 0) << dlg->errorText().toStdString();
  ASSERT_TRUE(dock.setPaused(id, true)) << dock.errorText().toStdString();
  EXPECT_EQ(cell(dock, id, JobsDock::kColState), "queued, paused");
  EXPECT_EQ(query(f.db, "SELECT paused FROM jobs WHERE id = " + std::to_string(id)), "1");
  ASSERT_TRUE(dock.setPaused(id, false));
  EXPECT_EQ(cell(dock, id, JobsDock::kColState), "queued");
  EXPECT_EQ(query(f.db, "SELECT paused FROM jobs WHERE id = " + std::to_string(id)), "0");
}

TEST(NewBatchDialog, RefusesWhatTheStoreRefusesAndStoresNothing) {
  JobsFixture f;
  JobsDock dock(f.params());
  NewBatchDialog* dlg = dock.newBatch();
  ASSERT_NE(dlg, nullptr);
  child<QLineEdit>(dlg, "model")->setText("/models/tiny.gguf");

  // No document checked.
  QSignalSpy added(dlg, &NewBatchDialog::jobAdded);
  dlg->accept();
  EXPECT_EQ(added.count(), 0);
  EXPECT_EQ(dlg->errorText(), "Choose at least one document.");

  // A custom prompt left empty: the store's message, nothing stored.
  dlg->setDocumentChecked(f.doc_a, true);
  auto* task = child<QComboBox>(dlg, "task");
  task->setCurrentIndex(task->findData("prompt"));
  dlg->accept();
  EXPECT_EQ(added.count(), 0);
  EXPECT_FALSE(dlg->errorText().isEmpty());
  EXPECT_TRUE(dlg->errorText().contains("prompt", Qt::CaseInsensitive))
      << dlg->errorText().toStdString();
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM jobs"), "0");

  // An empty clause list.
  task->setCurrentIndex(task->findData("clauses"));
  child<QLineEdit>(dlg, "clauses")->setText(" , ;");
  dlg->accept();
  EXPECT_EQ(added.count(), 0);
  EXPECT_TRUE(dlg->errorText().startsWith("Clause types:")) << dlg->errorText().toStdString();
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM jobs"), "0");

  // Fixed: a nightly prompt job at 02:30.
  task->setCurrentIndex(task->findData("prompt"));
  child<QPlainTextEdit>(dlg, "prompt")->setPlainText("Who are the parties?");
  child<QRadioButton>(dlg, "scheduleNightly")->setChecked(true);
  child<QTimeEdit>(dlg, "nightly")->setTime(QTime(2, 30));
  const app::JobSpec spec = dlg->spec();
  EXPECT_EQ(spec.schedule.kind, app::ScheduleKind::Nightly);
  EXPECT_EQ(spec.schedule.nightly_minute, 150);
  EXPECT_EQ(spec.prompt, "Who are the parties?");
  dlg->accept();
  ASSERT_EQ(added.count(), 1) << dlg->errorText().toStdString();
  const std::string id = std::to_string(dlg->addedJobId());
  EXPECT_EQ(query(f.db, "SELECT schedule FROM jobs WHERE id = " + id), "nightly");
  EXPECT_EQ(query(f.db, "SELECT nightly_minute FROM jobs WHERE id = " + id), "150");
  EXPECT_TRUE(cell(dock, dlg->addedJobId(), JobsDock::kColWhen).startsWith("nightly 02:30"))
      << cell(dock, dlg->addedJobId(), JobsDock::kColWhen).toStdString();
}

// Answers every prompt at once with a fixed text naming the document.
class ScriptedGenerator final : public app::Generator {
 public:
  std::string describe() const override { return "scripted"; }
  app::GenResult run(const app::GenRequest& req) override {
    app::GenResult r;
    r.ok = true;
    r.text = "Summary of document " + std::to_string(req.doc_id) +
             ". It ends on notice [p. 2] \"The term ends on notice.\"";
    r.prompt_tokens = 100;
    r.generated_tokens = 8;
    r.decode_s = 0.5;
    return r;
  }
};

// The report's citations as links: under a document's heading every [p. N] with its quote is a
// link to that page; the quote goes through the URL unchanged, whatever characters it has;
// lines outside a document's section stay as they are.
TEST(JobResultLinks, CitationsUnderADocumentHeadingBecomePageLinks) {
  const QString quote = QStringLiteral("He said “a & b = c + d” #1 (50%) [sic]");
  qint64 doc = 0;
  int page = 0;
  QString back;
  ASSERT_TRUE(parsePageLink(pageLink(12, 7, quote), &doc, &page, &back));
  EXPECT_EQ(doc, 12);
  EXPECT_EQ(page, 7);
  EXPECT_EQ(back, quote);
  EXPECT_FALSE(parsePageLink(QUrl(QStringLiteral("https://example.com/3/4")), &doc, &page, &back));

  const std::string md =
      "# Job 3: Summary of 2 documents\n\n- Task: summary [p. 9]\n\n"
      "## 1. Lease (document 12)\n\nThe rent is due monthly [p. 3] \"rent is due\".\n\n"
      "- [p. 3] \"rent is due\" — verified\n\n"
      "## 2. Other (document 40)\n\nSee [p. 1].\n";
  const QString linked = linkCitations(md);
  EXPECT_TRUE(linked.contains(QStringLiteral("- Task: summary [p. 9]\n"))) << linked.toStdString();
  const QString rent = QStringLiteral("[\\[p. 3\\] \"rent is due\"](") +
                       pageLink(12, 3, QStringLiteral("rent is due")).toString(QUrl::FullyEncoded) +
                       QLatin1Char(')');
  EXPECT_EQ(linked.count(rent), 2) << linked.toStdString();
  EXPECT_TRUE(linked.contains(QStringLiteral("See [\\[p. 1\\]](") +
                              pageLink(40, 1, {}).toString(QUrl::FullyEncoded) + QLatin1Char(')')))
      << linked.toStdString();
}

TEST(JobsDock, TheDocksRunnerRunsAJobToDoneAndItsResultOpensAndExports) {
  JobsFixture f;
  JobsDockParams p = f.params(/*run_jobs=*/true);
  p.generator = [](const app::JobRecord&) -> Expected<std::unique_ptr<app::Generator>> {
    return std::unique_ptr<app::Generator>(std::make_unique<ScriptedGenerator>());
  };
  JobsDock dock(p);
  QSignalSpy state(&dock, &JobsDock::jobStateChanged);
  NewBatchDialog* dlg = dock.newBatch({f.doc_a, f.doc_b});
  ASSERT_NE(dlg, nullptr);
  child<QLineEdit>(dlg, "model")->setText("/models/tiny.gguf");
  dlg->accept();
  const int64_t id = dlg->addedJobId();
  ASSERT_GT(id, 0) << dlg->errorText().toStdString();

  // Wait (bounded) for the runner to report the job done.
  bool done = false;
  for (int i = 0; i < 600 && !done; ++i) {  // at most a minute on a loaded machine
    state.wait(100);
    for (const auto& args : state)
      done = done || (args.at(0).toLongLong() == id && args.at(1).toString() == "done");
  }
  ASSERT_TRUE(done) << "state " << cell(dock, id, JobsDock::kColState).toStdString() << "; "
                    << dock.errorText().toStdString();
  dock.refresh();
  EXPECT_EQ(cell(dock, id, JobsDock::kColState), "done");
  EXPECT_EQ(cell(dock, id, JobsDock::kColDocs), "2/2");
  EXPECT_EQ(query(f.db, "SELECT count(*) FROM job_results WHERE job_id = " + std::to_string(id)),
            "2");

  QDialog* result = dock.openResult(id);
  ASSERT_NE(result, nullptr);
  auto* view = child<QTextBrowser>(result, "jobResultText");
  EXPECT_TRUE(view->toPlainText().contains(QStringLiteral("Summary of document %1.").arg(f.doc_b)))
      << view->toPlainText().toStdString();
  // Each citation is a link: clicking the second document's opens its page 2 with the quote.
  ASSERT_TRUE(QTest::qWaitForWindowExposed(result));
  QSignalSpy cited(&dock, &JobsDock::citationActivated);
  QTextCursor at = view->document()->find(QStringLiteral("[p. 2]"));
  ASSERT_FALSE(at.isNull());
  at = view->document()->find(QStringLiteral("[p. 2]"), at);  // the second document's answer
  ASSERT_FALSE(at.isNull());
  EXPECT_FALSE(at.charFormat().anchorHref().isEmpty()) << "the citation is a link";
  QTextCursor mid(view->document());
  mid.setPosition(at.selectionStart() + 2);
  view->ensureCursorVisible();
  view->setTextCursor(mid);
  view->ensureCursorVisible();
  const QPoint spot = view->cursorRect(mid).center();
  QTest::mouseClick(view->viewport(), Qt::LeftButton, Qt::NoModifier, spot);
  ASSERT_EQ(cited.count(), 1);
  EXPECT_EQ(cited[0][0].toLongLong(), f.doc_b);
  EXPECT_EQ(cited[0][1].toInt(), 2);
  EXPECT_EQ(cited[0][2].toString(), QStringLiteral("The term ends on notice."));
  result->close();

  const fs::path md = fs::path(f.dir.path()) / "report.md";
  ASSERT_TRUE(dock.exportJob(id, QString::fromStdString(md.string())))
      << dock.errorText().toStdString();
  std::ifstream in(md);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("Summary of document " + std::to_string(f.doc_a) + "."),
            std::string::npos)
      << text.str();
}

// A runner's progress rows as the dock shows them: the job is claimed and its first document's
// progress written through the runner's own store functions (what `jobs run-due` does in another
// process); the dock's clock is the test's, so "not reported for N s" is exact.
TEST(JobsDock, DocumentRowsShowTheRunnersProgressAndSayWhenItStopsReporting) {
  JobsFixture f;
  auto store = app::JobStore::open(f.db);
  ASSERT_TRUE(store.ok()) << store.error().message;
  app::JobSpec spec;
  spec.title = "Leases";
  spec.doc_ids = {f.doc_a, f.doc_b};
  spec.model_path = "/models/tiny.gguf";
  auto id = (*store)->add(spec);
  ASSERT_TRUE(id.ok()) << id.error().message;
  sqlite3* db = (*store)->handle();

  const int64_t t0 = app::jobs_db::now_ms();
  const int64_t lease_ms = 15000;
  std::string why;
  ASSERT_EQ(*app::jobs_db::acquire_lease(db, *id, "runner-1", t0, lease_ms, t0 / 1000, &why),
            app::jobs_db::LeaseResult::Acquired)
      << why;
  bool stop = false;
  auto doc = app::jobs_db::claim_next_document(db, *id, "runner-1", t0, &stop);
  ASSERT_TRUE(doc.ok() && doc->has_value());
  ASSERT_EQ((*doc)->doc_id, f.doc_a);
  app::JobDocumentProgress p;
  p.phase = "prefill";
  p.n_prompts = 1;
  p.part = 3;
  p.n_parts = 6;
  p.parts_done = 2;
  p.tokens_done = 512;
  p.tokens_total = 1024;
  p.eta_s = 130;
  p.updated_ms = t0;
  ASSERT_TRUE(app::jobs_db::write_document_progress(db, *id, f.doc_a, "runner-1", p).ok());

  int64_t clock = t0 + 1000;
  JobsDockParams params = f.params();
  params.now_ms = [&clock] { return clock; };
  JobsDock dock(params);
  // Nothing selected: the running job's documents.
  JobDocumentsTable* docs = dock.documentsTable();
  ASSERT_EQ(docs->jobId(), *id);
  EXPECT_EQ(dock.documentsCaption(), QStringLiteral("Documents of job %1: Leases").arg(*id));
  ASSERT_EQ(docs->rowCount(), 2);
  auto text = [docs](int row, int col) { return docs->item(row, col)->text().toStdString(); };
  EXPECT_EQ(text(0, JobDocumentsTable::kColTitle), "Lease A");
  EXPECT_EQ(text(0, JobDocumentsTable::kColState), "running");
  EXPECT_EQ(text(0, JobDocumentsTable::kColWhere),
            "part 3 of 6 (2 done), prefill 512/1,024 tokens");
  EXPECT_EQ(text(0, JobDocumentsTable::kColEta), "2m10s");
  EXPECT_EQ(text(0, JobDocumentsTable::kColUpdated),
            QDateTime::fromMSecsSinceEpoch(t0).toString("HH:mm:ss").toStdString());
  // Two parts done and half of the third's prefill: 2.5 of 6 parts.
  ASSERT_NE(docs->progressBar(0), nullptr);
  EXPECT_EQ(docs->progressBar(0)->value(), 417);
  EXPECT_EQ(docs->progressBar(0)->text(), "41%");
  EXPECT_TRUE(docs->progressBar(0)->isEnabled());
  EXPECT_EQ(text(1, JobDocumentsTable::kColTitle), "Lease B");
  EXPECT_EQ(text(1, JobDocumentsTable::kColState), "pending");
  EXPECT_EQ(text(1, JobDocumentsTable::kColWhere), "");
  EXPECT_EQ(docs->progressBar(1)->value(), 0);

  // The runner goes on to part 4 and renews its lease: the next refresh shows it.
  p.part = 4;
  p.parts_done = 3;
  p.phase = "part";
  p.tokens_done = p.tokens_total = 0;
  p.eta_s = 95;
  p.updated_ms = t0 + 2000;
  ASSERT_TRUE(app::jobs_db::write_document_progress(db, *id, f.doc_a, "runner-1", p).ok());
  ASSERT_TRUE(*app::jobs_db::renew_lease(db, *id, "runner-1", t0 + 3000, lease_ms));
  clock = t0 + 3000 + lease_ms;  // exactly the lease since its heartbeat: not stale yet
  dock.refresh();
  EXPECT_EQ(text(0, JobDocumentsTable::kColWhere), "part 4 of 6 (3 done)");
  EXPECT_EQ(text(0, JobDocumentsTable::kColEta), "1m35s");
  EXPECT_EQ(docs->progressBar(0)->value(), 500);
  EXPECT_EQ(text(0, JobDocumentsTable::kColUpdated),
            QDateTime::fromMSecsSinceEpoch(t0 + 2000).toString("HH:mm:ss").toStdString());

  // The runner dies: neither progress nor heartbeat for longer than the lease.
  clock = t0 + 3000 + lease_ms + 7400;
  dock.refresh();
  EXPECT_EQ(text(0, JobDocumentsTable::kColUpdated), "its runner has not reported for 22 s");
  EXPECT_EQ(text(0, JobDocumentsTable::kColEta), "");
  EXPECT_FALSE(docs->progressBar(0)->isEnabled());
  EXPECT_EQ(text(1, JobDocumentsTable::kColUpdated), "");  // pending: nothing to report

  // Selecting the job keeps it shown; the document's row stays "running" in SQLite too.
  dock.table()->selectRow(dock.rowOf(*id));
  EXPECT_EQ(docs->jobId(), *id);
  EXPECT_EQ(
      query(f.db, "SELECT state FROM job_documents WHERE doc_id = " + std::to_string(f.doc_a)),
      "running");
}

// The dock's refresh timer picks up progress rows written while the job runs, with no call from
// the test (bounded wait: generous for a loaded machine).
TEST(JobsDock, DocumentRowsFollowTheRunnerWhileTheJobRuns) {
  JobsFixture f;
  auto store = app::JobStore::open(f.db);
  ASSERT_TRUE(store.ok()) << store.error().message;
  app::JobSpec spec;
  spec.doc_ids = {f.doc_a};
  spec.model_path = "/models/tiny.gguf";
  auto id = (*store)->add(spec);
  ASSERT_TRUE(id.ok()) << id.error().message;
  sqlite3* db = (*store)->handle();
  const int64_t t0 = app::jobs_db::now_ms();
  std::string why;
  ASSERT_EQ(*app::jobs_db::acquire_lease(db, *id, "runner-2", t0, 3600 * 1000, t0 / 1000, &why),
            app::jobs_db::LeaseResult::Acquired);
  bool stop = false;
  ASSERT_TRUE(app::jobs_db::claim_next_document(db, *id, "runner-2", t0, &stop).ok());

  JobsDockParams params = f.params();
  params.refresh_ms = 50;
  JobsDock dock(params);
  JobDocumentsTable* docs = dock.documentsTable();
  ASSERT_EQ(docs->rowCount(), 1);
  EXPECT_EQ(docs->item(0, JobDocumentsTable::kColWhere)->text(), "");

  app::JobDocumentProgress p;
  p.phase = "decode";
  p.n_prompts = 1;
  p.tokens_done = 64;
  p.tokens_total = 256;
  p.updated_ms = app::jobs_db::now_ms();
  ASSERT_TRUE(app::jobs_db::write_document_progress(db, *id, f.doc_a, "runner-2", p).ok());
  const QString want = QStringLiteral("decode 64/256 tokens");
  EXPECT_TRUE(QTest::qWaitFor(
      [&] { return docs->item(0, JobDocumentsTable::kColWhere)->text() == want; }, 30000))
      << docs->item(0, JobDocumentsTable::kColWhere)->text().toStdString();
  EXPECT_EQ(docs->progressBar(0)->value(), 250);
}

}  // namespace
// A job queue that could not be opened (a damaged library file): no button acts on a job.
TEST(JobsDock, AQueueThatCannotBeOpenedOffersNoJobButtons) {
  TempDir dir{"spillway-jobs-ui-bad"};
  const fs::path db = fs::path(dir.path()) / "library.sqlite3";
  {
    std::ofstream f(db, std::ios::binary);
    f << std::string(5000, 'x');
  }
  JobsDockParams p;
  p.db_file = db;
  p.cache_dir = fs::path(dir.path()) / "cache";
  p.refresh_ms = 0;
  JobsDock dock(p);
  for (const char* name : {"newBatch", "runNow", "pause", "cancel", "retryFailed"}) {
    auto* b = child<QPushButton>(&dock, name);
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->isEnabled()) << name;
  }
}

}  // namespace spw::ui
