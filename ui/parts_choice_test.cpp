// "Always answer this document over parts": the planner's banner's box, stored in the library
// with Use map-reduce; later questions on that document are asked over parts without the banner
// (the worker gets a map-reduce request) and a note says why with an Undo link; another document
// still gets the banner; Undo brings it back; the choice survives a new window and controller on
// the same data folder. A generated model with a 1,024-token context answers (the documents are
// about 2,900 tokens).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <QApplication>
#include <QCheckBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QTextBrowser>
#include <QToolButton>

#include "app/store/library.h"
#include "app/worker/engine_worker.h"
#include "tests/support/test_model.h"
#include "ui/app_controller.h"
#include "ui/chat_panel.h"
#include "ui/main_window.h"
#include "ui/plan_banner.h"
#include "ui/test_chat_links.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;

class PartsChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path root(dir_.path());
    data_ = root / "data";
    fs::create_directories(data_);
    model_ = (root / "m.gguf").string();
    TestModelSpec spec;
    spec.n_ctx = 1024;
    auto st = write_test_model(spec, model_);
    ASSERT_TRUE(st.ok()) << st.error().message;
    auto lib = app::Library::open(app::library_db_file(data_));
    ASSERT_TRUE(lib.ok()) << lib.error().message;
    lease_ = addDocument(**lib, "Lease", 'a');
    loan_ = addDocument(**lib, "Loan agreement", 'b');
  }

  // Twelve pages of about 240 characters each: longer than the context, split into parts.
  static int64_t addDocument(app::Library& lib, const std::string& title, char sha) {
    app::DocumentRecord d;
    d.title = title;
    d.sha256 = std::string(64, sha);
    std::vector<app::PageRecord> pages;
    for (int i = 1; i <= 12; ++i) {
      app::PageRecord p;
      p.page_no = i;
      p.text = "Clause " + std::to_string(i) +
               ". The tenant pays the rent on the first day of each month to the landlord's "
               "account. Repairs of the roof, the walls and the heating are the landlord's; "
               "repairs of the fittings are the tenant's. Notice is given in writing.";
      p.original_text = p.text;
      pages.push_back(p);
    }
    auto id = lib.add_document(d, pages);
    EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
    return id.ok() ? *id : 0;
  }

  // The window and its controller on the data folder, the model loaded.
  void start() {
    controller_.reset();
    window_.reset();
    MainWindowParams wp;
    wp.version = QStringLiteral("test");
    wp.data_dir = QString::fromStdString(data_.string());
    wp.add_sample = false;
    wp.restore_layout = false;
    AppControllerParams cp;
    cp.data_dir = wp.data_dir;
    cp.cache_dir = QString::fromStdString((fs::path(dir_.path()) / "cache").string());
    cp.model_path = QString::fromStdString(model_);
    cp.run_jobs = false;
    window_ = std::make_unique<MainWindow>(wp);
    controller_ = std::make_unique<AppController>(*window_, cp);
    chat().setMaxAnswerTokens(8);
    window_->show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(window_.get()));
    QSignalSpy loaded(worker(), &app::EngineWorker::modelLoaded);
    QSignalSpy failed(worker(), &app::EngineWorker::modelFailed);
    if (!worker()->hasModel())
      ASSERT_TRUE(QTest::qWaitFor([&] { return loaded.count() + failed.count() > 0; }, 60000));
    ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  }

  void stop() {
    controller_.reset();
    window_.reset();
  }

  ChatPanel& chat() const { return *controller_->chat(); }
  app::EngineWorker* worker() const { return controller_->worker(); }
  PlanBanner& banner() const { return *chat().planBanner(); }

  // The verdict of asking `question` on `doc`, and the request as the worker got it (the
  // planner's echo); the run is left going.
  struct Asked {
    app::PlanSummary plan;
    app::AskRequest request;
  };
  Asked ask(int64_t doc, const QString& question) {
    chat().setDocuments({doc});
    QSignalSpy plans(worker(), &app::EngineWorker::planReady);
    chat().askQuestion(question);
    EXPECT_TRUE(QTest::qWaitFor([&] { return plans.count() > 0; }, 60000));
    QApplication::processEvents();
    if (plans.count() == 0) return {};
    return {plans.first().at(0).value<app::PlanSummary>(),
            plans.first().at(1).value<app::AskRequest>()};
  }

  // Stops the run going (if any) and waits until the worker is idle.
  void stopRun() {
    worker()->stop();
    ASSERT_TRUE(QTest::qWaitFor([&] { return !worker()->isBusy(); }, 60000));
    QApplication::processEvents();
  }

  // The column itself, read on a connection of its own (what the next start reads).
  int64_t storedFlag(int64_t doc) const {
    auto lib = app::Library::open(app::library_db_file(data_));
    EXPECT_TRUE(lib.ok()) << (lib.ok() ? "" : lib.error().message);
    if (!lib.ok()) return -1;
    auto d = (*lib)->document(doc);
    EXPECT_TRUE(d.ok()) << (d.ok() ? "" : d.error().message);
    return d.ok() ? (d->answer_over_parts ? 1 : 0) : -1;
  }

  QString viewText() const { return chat().view()->toPlainText(); }

  TempDir dir_{"spillway-parts-choice"};
  fs::path data_;
  std::string model_;
  int64_t lease_ = 0, loan_ = 0;
  std::unique_ptr<MainWindow> window_;
  std::unique_ptr<AppController> controller_;
};

TEST_F(PartsChoiceTest, AlwaysOverPartsIsRememberedPerDocumentAndCanBeUndone) {
  ASSERT_GT(lease_, 0);
  ASSERT_GT(loan_, 0);
  start();

  // First question: the verdict, with the box unchecked beside Use map-reduce.
  Asked first = ask(lease_, QStringLiteral("Who repairs the roof?"));
  ASSERT_TRUE(first.plan.needs_choice());
  ASSERT_GT(first.plan.n_parts, 1);
  EXPECT_FALSE(first.request.map_reduce);
  ASSERT_TRUE(QTest::qWaitFor([&] { return !worker()->isBusy(); }, 60000));
  ASSERT_TRUE(banner().isVisible());
  QCheckBox* box = banner().alwaysOverPartsBox();
  EXPECT_TRUE(box->isVisible());
  EXPECT_FALSE(box->isChecked());
  EXPECT_EQ(box->text(), QStringLiteral("Always answer this document over parts"));
  EXPECT_EQ(storedFlag(lease_), 0);

  // Checked, then Use map-reduce: stored in the document's row, and the run is over parts.
  QTest::mouseClick(box, Qt::LeftButton, Qt::NoModifier, QPoint(8, box->height() / 2));
  ASSERT_TRUE(box->isChecked());
  QSignalSpy plans(worker(), &app::EngineWorker::planReady);
  QTest::mouseClick(chat().mapReduceButton(), Qt::LeftButton);
  EXPECT_FALSE(banner().isVisible());
  EXPECT_EQ(storedFlag(lease_), 1);
  EXPECT_EQ(storedFlag(loan_), 0);
  EXPECT_TRUE(chat().answersOverParts(lease_));
  EXPECT_TRUE(viewText().contains(
      QStringLiteral("“Lease” is answered over parts from now on, without asking first. Undo")))
      << viewText().toStdString();
  ASSERT_TRUE(QTest::qWaitFor([&] { return plans.count() > 0; }, 60000));
  EXPECT_TRUE(plans.first().at(1).value<app::AskRequest>().map_reduce);
  stopRun();

  // A second question on it: no banner; the worker gets a map-reduce request and answers over
  // parts; the note says why.
  QSignalSpy finished(worker(), &app::EngineWorker::answerFinished);
  QSignalSpy failed(worker(), &app::EngineWorker::answerFailed);
  Asked second = ask(lease_, QStringLiteral("When is the rent paid?"));
  EXPECT_TRUE(second.plan.needs_choice()) << "the verdict would have asked";
  EXPECT_TRUE(second.request.map_reduce);
  EXPECT_FALSE(second.request.skip_plan);
  EXPECT_EQ(second.request.doc_ids, QList<qint64>{lease_});
  EXPECT_FALSE(banner().isVisible());
  const QString note = QStringLiteral(
      "Answering over parts without asking first: you chose to always answer “Lease” over "
      "parts. Undo");
  EXPECT_TRUE(viewText().contains(note)) << viewText().toStdString();
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() + failed.count() > 0; }, 120000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  const auto answer = finished.at(0).at(0).value<app::AnswerResult>();
  EXPECT_TRUE(answer.map_reduce);
  EXPECT_EQ(answer.n_parts, second.plan.n_parts);
  EXPECT_EQ(answer.doc_id, lease_);
  ASSERT_TRUE(QTest::qWaitFor([&] { return !worker()->isBusy(); }, 60000));
  EXPECT_FALSE(banner().isVisible());

  // Another document still asks first.
  Asked other = ask(loan_, QStringLiteral("Who repairs the roof?"));
  EXPECT_TRUE(other.plan.needs_choice());
  EXPECT_FALSE(other.request.map_reduce);
  ASSERT_TRUE(QTest::qWaitFor([&] { return !worker()->isBusy(); }, 60000));
  EXPECT_TRUE(banner().isVisible());
  EXPECT_FALSE(banner().alwaysOverPartsBox()->isChecked());
  QTest::mouseClick(banner().cancelButton(), Qt::LeftButton);
  EXPECT_EQ(storedFlag(loan_), 0);

  // A new window and controller on the same data folder: still over parts without asking.
  stop();
  start();
  Asked again = ask(lease_, QStringLiteral("Who gives notice?"));
  EXPECT_TRUE(again.request.map_reduce);
  EXPECT_FALSE(banner().isVisible());
  EXPECT_TRUE(viewText().contains(note)) << viewText().toStdString();
  stopRun();

  // Undo (the note's link): stored as off, the note says so, and the banner is back.
  ASSERT_TRUE(clickLink(chat(), QStringLiteral("parts-ask:")));
  QApplication::processEvents();
  EXPECT_EQ(storedFlag(lease_), 0);
  EXPECT_FALSE(chat().answersOverParts(lease_));
  EXPECT_TRUE(viewText().contains(
      QStringLiteral("you chose to always answer “Lease” over parts. (undone)")))
      << viewText().toStdString();
  EXPECT_TRUE(viewText().contains(
      QStringLiteral("Questions on this document show the planner's verdict first again.")));
  Asked undone = ask(lease_, QStringLiteral("Who repairs the roof?"));
  EXPECT_FALSE(undone.request.map_reduce);
  ASSERT_TRUE(QTest::qWaitFor([&] { return !worker()->isBusy(); }, 60000));
  EXPECT_TRUE(banner().isVisible());
  EXPECT_FALSE(banner().alwaysOverPartsBox()->isChecked());
  stop();
}

// Without the box checked, Use map-reduce stores nothing; where the document cannot be split
// the box is not offered.
TEST_F(PartsChoiceTest, TheBoxIsOfferedOnlyWithMapReduceAndStoresNothingUnchecked) {
  start();
  Asked first = ask(lease_, QStringLiteral("Who repairs the roof?"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return !worker()->isBusy(); }, 60000));
  ASSERT_TRUE(banner().isVisible());
  QSignalSpy plans(worker(), &app::EngineWorker::planReady);
  QTest::mouseClick(chat().mapReduceButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return plans.count() > 0; }, 60000));
  EXPECT_TRUE(plans.first().at(1).value<app::AskRequest>().map_reduce);
  stopRun();
  EXPECT_EQ(storedFlag(lease_), 0);
  EXPECT_FALSE(viewText().contains(QStringLiteral("from now on"))) << viewText().toStdString();

  // A verdict that cannot be split (a fake one): no box.
  app::PlanSummary plan = first.plan;
  plan.n_parts = 0;
  app::AskRequest req = first.request;
  emit worker()->planReady(plan, req);
  QApplication::processEvents();
  ASSERT_TRUE(banner().isVisible());
  EXPECT_FALSE(chat().mapReduceButton()->isEnabled());
  EXPECT_FALSE(banner().alwaysOverPartsBox()->isVisible());
  EXPECT_FALSE(banner().alwaysOverParts());
  stop();
}

}  // namespace
}  // namespace spw::ui
