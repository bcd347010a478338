// The app controller's settings path: the saved-KV budget typed in Settings is stored in the
// library, read again by the next start, and every question the chat asks carries it to the
// engine worker (AskRequest::snapshot_budget, the planner's echo of the request).
#include "ui/app_controller.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include <QApplication>
#include <QCheckBox>
#include <QDockWidget>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QToolButton>

#include "app/settings/app_settings.h"
#include "app/store/library.h"
#include "app/worker/engine_worker.h"
#include "tests/support/test_model.h"
#include "ui/chat_panel.h"
#include "ui/main_window.h"
#include "ui/page_viewer.h"
#include "ui/plan_banner.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;

TEST(AppController, TheSavedKvBudgetOfSettingsIsStoredReloadedAndAskedWith) {
  TempDir dir{"spillway-controller-ui"};
  const fs::path root(dir.path());
  const fs::path data = root / "data", cache = root / "cache";
  fs::create_directories(data);
  const std::string model = (root / "m.gguf").string();
  TestModelSpec spec;
  spec.n_ctx = 2048;
  ASSERT_TRUE(write_test_model(spec, model).ok());
  int64_t doc_id = 0;
  {
    auto lib = app::Library::open(app::library_db_file(data));
    ASSERT_TRUE(lib.ok()) << lib.error().message;
    app::DocumentRecord d;
    d.title = "Lease";
    d.sha256 = std::string(64, 'c');
    app::PageRecord p;
    p.page_no = 1;
    p.text = p.original_text = "The term of this lease is two years.";
    auto id = (*lib)->add_document(d, {p});
    ASSERT_TRUE(id.ok()) << id.error().message;
    doc_id = *id;
  }
  MainWindowParams wp;
  wp.version = QStringLiteral("test");
  wp.data_dir = QString::fromStdString(data.string());
  wp.add_sample = false;
  wp.restore_layout = false;
  AppControllerParams cp;
  cp.data_dir = wp.data_dir;
  cp.cache_dir = QString::fromStdString(cache.string());
  cp.model_path = QString::fromStdString(model);
  cp.run_jobs = false;
  constexpr int64_t kBudget = int64_t{96} << 20;

  {
    MainWindow w(wp);
    AppController c(w, cp);
    EXPECT_EQ(c.chat()->snapshotBudget(), 0);  // nothing stored: the default
    auto s = app::app_settings_from_json(c.settingsJson().toStdString());
    ASSERT_TRUE(s.ok()) << s.error().message;
    s->snapshot_budget = kBudget;
    c.applySettings(QString::fromStdString(app::app_settings_to_json(*s)));
    EXPECT_EQ(c.chat()->snapshotBudget(), kBudget);
  }
  // In SQLite, as the next start and `spillway-cli ask` read it.
  {
    auto lib = app::Library::open(app::library_db_file(data));
    ASSERT_TRUE(lib.ok()) << lib.error().message;
    auto stored = app::load_app_settings(**lib);
    ASSERT_TRUE(stored.ok()) << stored.error().message;
    EXPECT_EQ(stored->snapshot_budget, kBudget);
  }

  // The next start reads it, and a question goes to the worker with it.
  MainWindow w(wp);
  AppController c(w, cp);
  EXPECT_EQ(c.chat()->snapshotBudget(), kBudget);
  QSignalSpy loaded(c.worker(), &app::EngineWorker::modelLoaded);
  QSignalSpy failed(c.worker(), &app::EngineWorker::modelFailed);
  ASSERT_TRUE(QTest::qWaitFor([&] { return loaded.count() + failed.count() > 0; }, 60000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  QSignalSpy plans(c.worker(), &app::EngineWorker::planReady);
  c.chat()->setDocuments({doc_id});
  c.chat()->askQuestion(QStringLiteral("How long is the term?"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return plans.count() > 0; }, 60000));
  const auto req = plans.first().at(1).value<app::AskRequest>();
  EXPECT_EQ(req.snapshot_budget, kBudget);
  EXPECT_EQ(req.doc_ids, QList<qint64>{doc_id});
  c.worker()->stop();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !c.worker()->isBusy(); }, 60000));
}

// The whole window (chat, dashboard and jobs widgets in their docks) at a small size: it is
// the size asked for (the docks' minimum sizes fit), the side docks narrow with the window and
// the page is shown at a readable fit-width zoom; the library's badges stay in view.
TEST(AppController, SmallWindowsKeepTheirSizeAndTheDocksLeaveRoomForThePage) {
  for (const QSize size : {QSize(1024, 640), QSize(800, 500)}) {
    SCOPED_TRACE(std::to_string(size.width()) + "x" + std::to_string(size.height()));
    TempDir dir{"spillway-small-ui"};
    const fs::path root(dir.path());
    fs::create_directories(root / "data");
    MainWindowParams wp;
    wp.version = QStringLiteral("test");
    wp.data_dir = QString::fromStdString((root / "data").string());
    wp.add_sample = false;
    wp.files = {QString::fromStdString(
        (fs::path(SPILLWAY_SOURCE_DIR) / "resources/sample/spillway-sample-contract.pdf")
            .string())};
    AppControllerParams cp;
    cp.data_dir = wp.data_dir;
    cp.cache_dir = QString::fromStdString((root / "cache").string());
    cp.run_jobs = false;
    MainWindow w(wp);
    AppController c(w, cp);
    w.resize(size);
    QSignalSpy shown(w.pageViewer(), &PageViewer::pageShown);
    w.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&w));
    ASSERT_TRUE(shown.count() > 0 || shown.wait(60000)) << "the page was never shown";
    QApplication::processEvents();
    EXPECT_EQ(w.size(), size) << "minimum " << w.minimumSizeHint().width() << "x"
                              << w.minimumSizeHint().height() << "; jobs dock min "
                              << w.jobsDock()->minimumSizeHint().width() << ", memory dock min "
                              << w.dashboardDock()->minimumSizeHint().width() << ", chat min "
                              << w.chatDock()->minimumSizeHint().height();
    EXPECT_TRUE(w.docksFollowWindowSize());
    const MainWindow::DockSizes want = MainWindow::dockSizesFor(size);
    // The side docks narrow with the window (down to their minimum widths at 800 px).
    const int lib_w = std::max(want.library, w.libraryDock()->minimumSizeHint().width());
    const int chat_w = std::max(want.chat, w.chatDock()->minimumSizeHint().width());
    EXPECT_NEAR(w.libraryDock()->width(), lib_w, 12);
    EXPECT_NEAR(w.chatDock()->width(), chat_w, 12);
    EXPECT_LE(w.libraryDock()->width() + w.chatDock()->width(), size.width() * 11 / 20);
    EXPECT_GE(w.pageViewer()->width(), size.width() * 2 / 5);
    if (size.width() >= 1024) EXPECT_GE(w.pageViewer()->zoom(), 0.5);
    // Every dock inside the window.
    for (QDockWidget* d : {w.libraryDock(), w.chatDock(), w.dashboardDock(), w.jobsDock()})
      EXPECT_TRUE(w.rect().contains(d->geometry())) << d->objectName().toStdString();

    // The planner's verdicts in the chat keep the window's size: their text scrolls and their
    // buttons wrap in the narrow chat dock. Two long ones offer every choice between them: a
    // document over the context (Use map-reduce, "Always answer this document over parts") and
    // one within it whose KV is over the RAM budget (Run anyway). The planner never offers both
    // (parts only for a prompt over the context, Run anyway only for one within it).
    const qint64 doc = w.pageViewer()->documentId();
    c.chat()->setDocuments({doc});
    struct Verdict {
      const char* name;
      int64_t prompt_tokens;
      int n_parts;
      bool can_run_anyway;
      const char* headline;
    };
    for (const Verdict& v :
         {Verdict{"over the context", 7642, 3, false,
                  "This 7,642-token document does not fit in the model's 4,096-token context, "
                  "nor do its KV blocks in the RAM budget. Answering over 3 parts takes about 4 "
                  "minutes; a longer context needs 2.1 GiB more RAM than the budget holds."},
          Verdict{"over the RAM budget", 3900, 0, true,
                  "This 3,900-token document fits in the model's 4,096-token context, but its KV "
                  "blocks do not fit in the RAM budget. Running it anyway can work if the "
                  "machine has the memory; a smaller context or q8_0 KV would fit the budget."}}) {
      SCOPED_TRACE(v.name);
      app::PlanSummary plan;
      plan.doc_id = doc;
      plan.doc_title = "Master Services Agreement (Spillway sample)";
      plan.prompt_tokens = v.prompt_tokens;
      plan.n_ctx = 4096;
      plan.n_parts = v.n_parts;
      plan.can_run_anyway = v.can_run_anyway;
      plan.headline = v.headline;
      plan.problems = {"the prompt is longer than the context", "the KV does not fit the budgets"};
      app::AskRequest req;
      req.doc_ids = {doc};
      req.question = "What is the term of the agreement?";
      emit c.worker()->planReady(plan, req);
      QApplication::processEvents();
      ASSERT_TRUE(c.chat()->planBanner()->isVisible());
      c.chat()->planBanner()->detailsButton()->click();
      QApplication::processEvents();
      EXPECT_EQ(w.size(), size) << "with the verdict shown: minimum " << w.minimumSizeHint().width()
                                << "x" << w.minimumSizeHint().height() << ", chat min "
                                << w.chatDock()->minimumSizeHint().width() << "x"
                                << w.chatDock()->minimumSizeHint().height();
      EXPECT_LE(w.minimumSizeHint().height(), size.height());
      EXPECT_LE(w.minimumSizeHint().width(), size.width());
      EXPECT_TRUE(w.rect().contains(w.chatDock()->geometry()));
      EXPECT_LE(c.chat()->minimumSizeHint().height(), c.chat()->height());
      // Every choice offered is on screen inside the chat dock, the box's text whole (a
      // shorter form where the sentence does not fit).
      QCheckBox* always = c.chat()->planBanner()->alwaysOverPartsBox();
      EXPECT_EQ(always->isVisible(), v.n_parts > 0);
      EXPECT_EQ(c.chat()->runAnywayButton()->isVisible(), v.can_run_anyway);
      EXPECT_EQ(c.chat()->mapReduceButton()->isEnabled(), v.n_parts > 0);
      if (always->isVisible())
        EXPECT_GE(always->width(), always->sizeHint().width()) << always->text().toStdString();
      for (QWidget* b :
           {static_cast<QWidget*>(c.chat()->runAnywayButton()),
            static_cast<QWidget*>(c.chat()->mapReduceButton()), static_cast<QWidget*>(always)}) {
        if (!b->isVisible()) continue;
        const QRect r(b->mapTo(w.chatDock(), QPoint(0, 0)), b->size());
        EXPECT_TRUE(w.chatDock()->rect().contains(r))
            << b->objectName().toStdString() << " at " << r.x() << "," << r.y() << " " << r.width()
            << "x" << r.height() << " in " << w.chatDock()->width() << "x"
            << w.chatDock()->height();
      }
    }
  }
}

}  // namespace
}  // namespace spw::ui
