// ChatPanel with a real EngineWorker: a question streams tokens into the view and is stored; a
// citation link emits the page; Stop ends generation within 200 ms; Esc stops; the progress bar
// follows the events (map-reduce parts, fake prefill ones); Copy and Export; the planner's banner;
// the no-model help. The model is ../shared/models/stories260K.gguf when present, else a generated
// test model (tests/support/test_model.h).
#include "ui/chat_panel.h"
#include "ui/plan_banner.h"

#include <gtest/gtest.h>
#include <QApplication>
#include <QClipboard>
#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBlock>
#include <QTextBrowser>
#include <QThread>
#include <QToolButton>
#include <QXYSeries>
#include <atomic>
#include <filesystem>
#include <vector>

#include "app/store/library.h"
#include "app/worker/engine_worker.h"
#include "tests/support/test_model.h"
#include "ui/dashboard_dock.h"
#include "ui/question_box.h"
#include "ui/run_progress.h"
#include "ui/test_chat_links.h"

namespace spw::ui {
namespace {

namespace fs = std::filesystem;

class ChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.isValid());
    db_ = dir_.filePath(QStringLiteral("library.sqlite3"));
    auto l = app::Library::open(db_.toStdString());
    ASSERT_TRUE(l) << l.error().message;
    lib_ = std::move(*l);
    const fs::path stories = fs::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf";
    if (fs::exists(stories)) {
      model_ = stories.string();
    } else {
      TestModelSpec spec;
      spec.n_ctx = 4096;
      model_ = dir_.filePath(QStringLiteral("test-model.gguf")).toStdString();
      auto st = write_test_model(spec, model_);
      ASSERT_TRUE(st) << st.error().message;
    }
  }

  int64_t addStory(int n_pages, char sha) {
    app::DocumentRecord d;
    d.title = "Lily and the ball";
    d.sha256 = std::string(64, sha);
    std::vector<app::PageRecord> pages;
    for (int i = 1; i <= n_pages; ++i) {
      app::PageRecord p;
      p.page_no = i;
      p.text = "Once upon a time, there was a little girl named Lily. She had a red ball. On day " +
               std::to_string(i) + " she played with the ball in the park with her friend Tom.";
      p.original_text = p.text;
      pages.push_back(p);
    }
    auto id = lib_->add_document(d, pages);
    EXPECT_TRUE(id) << (id ? "" : id.error().message);
    return id ? *id : 0;
  }

  app::EngineWorker::Params params() const {
    app::EngineWorker::Params p;
    p.library_file = db_;
    p.snapshot_dir = dir_.filePath(QStringLiteral("kv"));
    return p;
  }

  // Loads the model into `w` (n_ctx tokens of context) and waits for it.
  void load(app::EngineWorker& w, int64_t n_ctx) {
    QSignalSpy loaded(&w, &app::EngineWorker::modelLoaded);
    QSignalSpy failed(&w, &app::EngineWorker::modelFailed);
    w.loadModel(QStringLiteral("{\"model_path\": \"%1\", \"n_ctx\": %2, \"device\": \"cpu\", "
                               "\"n_threads\": 1}")
                    .arg(QString::fromStdString(model_))
                    .arg(n_ctx));
    ASSERT_TRUE(QTest::qWaitFor([&] { return loaded.count() + failed.count() > 0; }, 60000));
    ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  }

  void setUpPanel(ChatPanel& p, app::EngineWorker* w, int64_t doc_id) {
    if (w) p.setWorker(w);
    QString error;
    ASSERT_TRUE(p.setLibraryFile(db_, &error)) << error.toStdString();
    p.setDocuments({doc_id});
    p.resize(520, 700);
    p.show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(&p));
  }

  QTemporaryDir dir_;
  QString db_;
  std::unique_ptr<app::Library> lib_;
  std::string model_;
};

TEST_F(ChatTest, AQuestionStreamsTokensIntoTheViewAndIsStored) {
  const int64_t doc_id = addStory(2, 'a');
  app::EngineWorker w(params());
  ChatPanel p;
  p.setMaxAnswerTokens(24);
  EXPECT_EQ(p.input()->placeholderText(), QStringLiteral("No model: Settings › Model"));
  setUpPanel(p, &w, doc_id);
  load(w, 2048);
  // The question box says what it is for once the model is in.
  EXPECT_TRUE(p.askButton()->isEnabled());
  EXPECT_EQ(p.input()->placeholderText(), QStringLiteral("Ask about the document…"));
  DashboardDock dash;
  QObject::connect(&w, &app::EngineWorker::telemetry, &dash, &DashboardDock::addSample);

  // Every piece is in the view when the next signal handler runs (the panel's comes first).
  QString streamed;
  int pieces = 0, shown = 0;
  QObject::connect(&w, &app::EngineWorker::piece, [&](const QString& t) {
    streamed += t;
    ++pieces;
    if (p.view()->toPlainText().contains(streamed)) ++shown;
  });
  QSignalSpy finished(&w, &app::EngineWorker::answerFinished);
  QSignalSpy failed(&w, &app::EngineWorker::answerFailed);

  ASSERT_TRUE(p.askButton()->isEnabled());
  QTest::keyClicks(p.input(), QStringLiteral("What color is the ball?"));
  QTest::mouseClick(p.askButton(), Qt::LeftButton);
  EXPECT_TRUE(p.input()->toPlainText().isEmpty());
  EXPECT_TRUE(p.stopButton()->isEnabled());
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() + failed.count() > 0; }, 60000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  const auto r = finished.at(0).at(0).value<app::AnswerResult>();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !w.isBusy(); }, 10000));

  EXPECT_GT(pieces, 1);
  EXPECT_EQ(shown, pieces);  // streamed into the view token by token
  EXPECT_EQ(streamed, r.answer);
  const QString text = p.view()->toPlainText();
  EXPECT_TRUE(text.contains(QStringLiteral("What color is the ball?")));
  EXPECT_TRUE(text.contains(QStringLiteral("tokens in context"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("prefill"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("no saved KV reused"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("tokens/s"))) << text.toStdString();
  EXPECT_FALSE(p.stopButton()->isEnabled());
  EXPECT_TRUE(p.askButton()->isEnabled());

  // Stored: the question and the answer, in the chat the panel shows.
  EXPECT_EQ(p.chatId(), r.chat_id);
  auto msgs = lib_->messages(r.chat_id);
  ASSERT_TRUE(msgs);
  ASSERT_EQ(msgs->size(), 2u);
  EXPECT_EQ((*msgs)[0].content, "What color is the ball?");
  EXPECT_EQ(QString::fromStdString((*msgs)[1].content), r.answer);

  // The dashboard moved while it ran.
  EXPECT_GT(dash.series(QStringLiteral("blocks_window"))->count(), 0);
  EXPECT_GT(dash.series(QStringLiteral("rss"))->count(), 0);

  // Selecting the document again reloads the chat from the library.
  ChatPanel again;
  setUpPanel(again, nullptr, doc_id);
  EXPECT_EQ(again.chatId(), r.chat_id);
  const QString reloaded = again.view()->toPlainText();
  EXPECT_TRUE(reloaded.contains(QStringLiteral("What color is the ball?")));
  EXPECT_TRUE(reloaded.contains(r.answer.trimmed())) << reloaded.toStdString();
}

TEST_F(ChatTest, ClickingACitationEmitsItsPageAndUnverifiedOnesAreMarked) {
  const int64_t doc_id = addStory(3, 'b');
  auto chat = lib_->create_chat(doc_id, "Lily and the ball");
  ASSERT_TRUE(chat);
  ASSERT_TRUE(lib_->add_message(*chat, "user", "Where did she play?"));
  ASSERT_TRUE(lib_->add_message(
      *chat, "assistant",
      "In the park [p. 2] \"On day 2 she played with the ball\". She met a dragon "
      "[p. 3] \"a green dragon\"."));
  ChatPanel p;
  setUpPanel(p, nullptr, doc_id);
  EXPECT_EQ(p.chatId(), *chat);

  // The anchors in the view, in order.
  struct Anchor {
    QString href;
    int pos;
    QString text;
  };
  std::vector<Anchor> anchors;
  for (QTextBlock b = p.view()->document()->begin(); b.isValid(); b = b.next()) {
    for (auto it = b.begin(); !it.atEnd(); ++it) {
      const QTextFragment f = it.fragment();
      if (f.charFormat().isAnchor() &&
          f.charFormat().anchorHref().startsWith(QStringLiteral("cite:")))
        anchors.push_back({f.charFormat().anchorHref(), f.position(), f.text()});
    }
  }
  ASSERT_EQ(anchors.size(), 2u);
  EXPECT_TRUE(anchors[0].text.startsWith(QStringLiteral("[p. 2]")))
      << anchors[0].text.toStdString();
  EXPECT_TRUE(anchors[1].text.contains(QStringLiteral("⚠"))) << anchors[1].text.toStdString();
  const QString text = p.view()->toPlainText();
  EXPECT_TRUE(text.contains(QStringLiteral("unverified: quote not found on page 3")))
      << text.toStdString();

  // A real click on the first link.
  QSignalSpy spy(&p, &ChatPanel::citationActivated);
  QTextCursor c(p.view()->document());
  c.setPosition(anchors[0].pos + 2);
  p.view()->setTextCursor(c);
  p.view()->ensureCursorVisible();
  const QPoint at = p.view()->cursorRect(c).center();
  QTest::mouseClick(p.view()->viewport(), Qt::LeftButton, Qt::NoModifier, at);
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(spy.at(0).at(0).toLongLong(), doc_id);
  EXPECT_EQ(spy.at(0).at(1).toInt(), 2);
  EXPECT_EQ(spy.at(0).at(2).toString(), QStringLiteral("On day 2 she played with the ball"));
}

TEST_F(ChatTest, StopEndsGenerationWithin200Ms) {
  const int64_t doc_id = addStory(2, 'c');
  std::atomic<bool> first_piece{false}, release{false};
  app::EngineWorker::Params params_held = params();
  // Holds the run after its first piece until Stop is pressed: the stop lands mid-answer.
  params_held.piece_hook = [&] {
    first_piece = true;
    while (!release) QThread::msleep(1);
  };
  app::EngineWorker w(params_held);
  ChatPanel p;
  p.setMaxAnswerTokens(400);
  setUpPanel(p, &w, doc_id);
  load(w, 2048);
  QSignalSpy finished(&w, &app::EngineWorker::answerFinished);
  QSignalSpy failed(&w, &app::EngineWorker::answerFailed);
  p.askQuestion(QStringLiteral("Tell me a long story about Lily."));
  ASSERT_TRUE(QTest::qWaitFor([&] { return first_piece.load() || failed.count() > 0; }, 60000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  ASSERT_TRUE(p.stopButton()->isEnabled());
  QElapsedTimer t;
  t.start();
  QTest::mouseClick(p.stopButton(), Qt::LeftButton);
  release = true;
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() + failed.count() > 0; }, 5000));
  const qint64 ms = t.elapsed();
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  EXPECT_LT(ms, 200) << "Stop took " << ms << " ms";
  const auto r = finished.at(0).at(0).value<app::AnswerResult>();
  EXPECT_TRUE(r.stopped);
  EXPECT_TRUE(p.view()->toPlainText().contains(QStringLiteral("stopped")));
  auto msgs = lib_->messages(r.chat_id);
  ASSERT_TRUE(msgs);
  ASSERT_EQ(msgs->size(), 2u);
  EXPECT_EQ((*msgs)[1].content, r.answer.toStdString());
  app::AnswerResult meta;
  ASSERT_TRUE(app::answer_from_meta((*msgs)[1].meta, meta));
  EXPECT_TRUE(meta.stopped);
  // Reloaded from the library, the answer keeps its header and its stopped mark.
  p.setDocuments({});
  p.setDocuments(r.doc_id == 0 ? QList<qint64>{} : QList<qint64>{r.doc_id});
  const QString reloaded = p.view()->toPlainText();
  EXPECT_TRUE(reloaded.contains(QStringLiteral("tokens in context"))) << reloaded.toStdString();
  EXPECT_TRUE(reloaded.contains(QStringLiteral("stopped")));
}

TEST_F(ChatTest, APlanThatDoesNotFitShowsTheChoicesInsteadOfFailing) {
  const int64_t doc_id = addStory(60, 'd');
  app::EngineWorker w(params());
  ChatPanel p;
  p.setMaxAnswerTokens(8);
  setUpPanel(p, &w, doc_id);
  load(w, 1024);
  QSignalSpy plans(&w, &app::EngineWorker::planReady);
  QSignalSpy finished(&w, &app::EngineWorker::answerFinished);
  QSignalSpy failed(&w, &app::EngineWorker::answerFailed);
  QSignalSpy progress(&w, &app::EngineWorker::progress);
  p.askQuestion(QStringLiteral("Who is Tom?"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return plans.count() > 0 && !w.isBusy(); }, 60000));
  EXPECT_TRUE(p.planBanner()->isVisible());
  EXPECT_TRUE(p.mapReduceButton()->isEnabled());
  // The plain-language verdict first, the numbers behind Details.
  const auto plan = plans.at(0).at(0).value<app::PlanSummary>();
  ASSERT_FALSE(plan.headline.empty());
  EXPECT_TRUE(p.planBanner()->headlineText().contains(QString::fromStdString(plan.headline)))
      << p.planBanner()->headlineText().toStdString();
  EXPECT_FALSE(p.planBanner()->headlineText().contains(QStringLiteral("tokens of prompt")));
  EXPECT_FALSE(p.planBanner()->detailsShown());
  p.planBanner()->detailsButton()->click();
  EXPECT_TRUE(p.planBanner()->detailsShown());
  EXPECT_TRUE(p.planBanner()->detailsText().contains(
      QStringLiteral("%1 tokens of prompt").arg(plan.prompt_tokens)))
      << p.planBanner()->detailsText().toStdString();
  EXPECT_EQ(finished.count() + failed.count(), 0);
  EXPECT_TRUE(lib_->chats(doc_id)->empty());

  // No "Run anyway": a prompt longer than the context cannot run as it is.
  EXPECT_FALSE(p.runAnywayButton()->isVisible());

  // Choose map-reduce.
  QTest::mouseClick(p.mapReduceButton(), Qt::LeftButton);
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() > 0; }, 120000));
  EXPECT_TRUE(finished.at(0).at(0).value<app::AnswerResult>().map_reduce);
  EXPECT_TRUE(p.view()->toPlainText().contains(QStringLiteral("map-reduce over parts")));

  // The parts came as progress events, one per part and one for the combining prompt, each
  // "done of N" with N the same; between them each prompt's prefill events (per ubatch, ending
  // at its total) and decode events. The part lines went to the run's log, not into the chat.
  std::vector<app::ProgressEvent> parts;
  int prefill_events = 0, prefill_ends = 0;
  for (int i = 0; i < progress.count(); ++i) {
    const auto e = progress.at(i).at(0).value<app::ProgressEvent>();
    if (e.phase == app::ProgressPhase::Part) parts.push_back(e);
    if (e.phase == app::ProgressPhase::Prefill) {
      ++prefill_events;
      EXPECT_LE(e.done, e.total);
      if (e.done == e.total) ++prefill_ends;
    }
  }
  ASSERT_GE(parts.size(), 2u);
  const app::ProgressEvent last = parts.back();
  EXPECT_GT(last.total, 1);
  EXPECT_EQ(last.done, last.total);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].total, last.total);
    EXPECT_EQ(parts[i].done, i + 1 < parts.size() ? static_cast<int64_t>(i) : last.total)
        << "part event " << i;
  }
  EXPECT_GT(prefill_events, 0);
  EXPECT_GE(prefill_ends, static_cast<int>(last.total)) << "each part's prompt ends its prefill";
  bool part_line = false;
  for (const QString& line : p.runProgress()->logLines()) {
    if (!line.startsWith(QStringLiteral("part 1 of "))) continue;
    part_line = true;
    EXPECT_FALSE(p.view()->toPlainText().contains(line)) << line.toStdString();
  }
  EXPECT_TRUE(part_line) << p.runProgress()->logLines().join('\n').toStdString();
}

TEST_F(ChatTest, EscStopsARunWhoseProgressBarFollowsItsEvents) {
  const int64_t doc_id = addStory(2, 'f');
  std::atomic<bool> first_piece{false}, release{false};
  app::EngineWorker::Params params_held = params();
  params_held.piece_hook = [&] {
    first_piece = true;
    while (!release) QThread::msleep(1);
  };
  app::EngineWorker w(params_held);
  ChatPanel p;
  p.setMaxAnswerTokens(400);
  setUpPanel(p, &w, doc_id);
  load(w, 2048);
  QSignalSpy finished(&w, &app::EngineWorker::answerFinished);
  QSignalSpy failed(&w, &app::EngineWorker::answerFailed);
  p.askQuestion(QStringLiteral("Tell me a long story about Lily."));
  ASSERT_TRUE(QTest::qWaitFor([&] { return first_piece.load() || failed.count() > 0; }, 60000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  ASSERT_TRUE(QTest::qWaitFor([&] { return p.stopButton()->isEnabled(); }, 5000));

  // Fake events of a long prefill and a note, as the worker sends them.
  RunProgress* run = p.runProgress();
  EXPECT_TRUE(run->bar()->isVisible());
  app::ProgressEvent e;
  e.phase = app::ProgressPhase::Prefill;
  e.done = 4096;
  e.total = 16384;
  e.tokens_per_s = 64;
  e.eta_s = 192;
  emit w.progress(e);
  EXPECT_EQ(run->bar()->value(), 25);
  EXPECT_EQ(run->label()->text(),
            QStringLiteral("Reading the document: 4,096/16,384 tokens (25%) · 64 t/s · ETA 3m12s"));
  const QString note = QStringLiteral("saved KV of the document prefix: 1739 tokens");
  emit w.note(note);
  EXPECT_EQ(run->logLines().last(), note);
  EXPECT_FALSE(p.view()->toPlainText().contains(note));

  // Esc, with the focus in the question box, stops the answer; what it had is kept, marked.
  p.activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(&p));
  p.input()->setFocus();
  QTest::keyClick(p.input(), Qt::Key_Escape);
  release = true;
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() + failed.count() > 0; }, 5000));
  ASSERT_EQ(failed.count(), 0) << failed.at(0).at(0).toString().toStdString();
  EXPECT_TRUE(finished.at(0).at(0).value<app::AnswerResult>().stopped);
  ASSERT_TRUE(QTest::qWaitFor([&] { return !w.isBusy(); }, 10000));
  EXPECT_FALSE(run->bar()->isVisible());
  EXPECT_TRUE(run->logToggle()->isVisible());  // the log stays after the run
  // Esc with no run does nothing (the shortcut is off).
  QSignalSpy busy(&w, &app::EngineWorker::busyChanged);
  QTest::keyClick(p.input(), Qt::Key_Escape);
  QTest::qWait(50);
  EXPECT_EQ(busy.count(), 0);
}

TEST_F(ChatTest, CopyPutsAnAnswerWithItsCitationsOnTheClipboardAndExportWritesMarkdown) {
  const int64_t doc_id = addStory(3, 'g');
  auto chat = lib_->create_chat(doc_id, "Lily and the ball");
  ASSERT_TRUE(chat);
  ASSERT_TRUE(lib_->add_message(*chat, "user", "Where did she play?"));
  const std::string answer =
      "In the park [p. 2] \"On day 2 she played with the ball\". She met a dragon "
      "[p. 3] \"a green dragon\".";
  ASSERT_TRUE(lib_->add_message(*chat, "assistant", answer));
  ChatPanel p;
  setUpPanel(p, nullptr, doc_id);
  EXPECT_TRUE(p.exportButton()->isEnabled());

  const QString expected_answer =
      QString::fromStdString(answer) +
      QStringLiteral(
          "\n\nCitations (Lily and the ball):\n"
          "- p. 2: “On day 2 she played with the ball” (verified)\n"
          "- p. 3: “a green dragon” (unverified: quote not found on page 3)");
  EXPECT_EQ(p.answerText(1), expected_answer);
  EXPECT_TRUE(p.answerText(0).isEmpty());  // the question is no answer

  // One Copy link per answer; clicking it fills the clipboard.
  QStringList copies;
  for (QTextBlock b = p.view()->document()->begin(); b.isValid(); b = b.next()) {
    for (auto it = b.begin(); !it.atEnd(); ++it) {
      const QTextCharFormat f = it.fragment().charFormat();
      if (f.isAnchor() && f.anchorHref().startsWith(QStringLiteral("copy:")))
        copies << f.anchorHref();
    }
  }
  ASSERT_EQ(copies, QStringList{QStringLiteral("copy:1")});
  QApplication::clipboard()->clear();
  emit p.view()->anchorClicked(QUrl(copies[0]));
  EXPECT_EQ(QApplication::clipboard()->text(), expected_answer);

  const QString file = dir_.filePath(QStringLiteral("chat.md"));
  QString error;
  ASSERT_TRUE(p.exportMarkdown(file, &error)) << error.toStdString();
  QFile f(file);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  EXPECT_EQ(QString::fromUtf8(f.readAll()),
            QStringLiteral("# Lily and the ball\n\n## You\n\nWhere did she play?\n\n"
                           "## Lily and the ball\n\n*from the library*\n\n") +
                expected_answer + QStringLiteral("\n"));
  // A folder that does not exist: the error names the file.
  const QString bad = dir_.filePath(QStringLiteral("no/such/dir/chat.md"));
  EXPECT_FALSE(p.exportMarkdown(bad, &error));
  EXPECT_TRUE(error.startsWith(bad)) << error.toStdString();
}

TEST_F(ChatTest, WithoutAModelTheChatSaysHowToGetOne) {
  const int64_t doc_id = addStory(1, 'e');
  app::EngineWorker w(params());
  ChatPanel p;
  setUpPanel(p, &w, doc_id);
  const QString text = p.view()->toPlainText();
  for (const char* s : {"GGUF", "llama.cpp", "LM Studio", "Ollama", "GPT4All", "Hugging Face",
                        "Settings > Model"}) {
    EXPECT_TRUE(text.contains(QLatin1String(s))) << s << " missing from: " << text.toStdString();
  }
  EXPECT_FALSE(p.askButton()->isEnabled());
  // Asking anyway (Return in the field) explains inline instead of failing.
  p.askQuestion(QStringLiteral("Hello?"));
  EXPECT_TRUE(p.view()->toPlainText().contains(QStringLiteral("No model is loaded")));
}

TEST_F(ChatTest, AScannedDocumentsHintSaysWhatToClickNotACliFlag) {
  app::DocumentRecord d;
  d.title = "Scan";
  d.sha256 = std::string(64, 's');
  app::PageRecord page;
  page.page_no = 1;
  page.scanned = true;  // an image without a text layer, not read with OCR
  auto doc_id = lib_->add_document(d, {page});
  ASSERT_TRUE(doc_id) << doc_id.error().message;
  app::EngineWorker w(params());
  ChatPanel p;
  setUpPanel(p, &w, *doc_id);
  load(w, 2048);
  QSignalSpy failed(&w, &app::EngineWorker::answerFailed);
  p.askQuestion(QStringLiteral("What does it say?"));
  ASSERT_TRUE(QTest::qWaitFor([&] { return failed.count() > 0; }, 60000));
  // The engine's message names the CLI flag; the chat names the library's menu entry.
  EXPECT_TRUE(failed.first().first().toString().contains(QLatin1String("--ocr")));
  const QString text = p.view()->toPlainText();
  EXPECT_TRUE(text.contains(QStringLiteral(
      "it needs OCR (right-click the document in the library and choose “Read scanned pages "
      "with OCR”)")))
      << text.toStdString();
  EXPECT_FALSE(text.contains(QLatin1String("--ocr"))) << text.toStdString();
  ASSERT_TRUE(QTest::qWaitFor([&] { return !w.isBusy(); }, 60000));
}

TEST_F(ChatTest, AStoppedMapReduceAnswerShowsItsPartsAndContinueResumesAtTheNextPart) {
  const int64_t doc_id = addStory(3, 'c');
  auto chat = lib_->create_chat(doc_id, "Lily and the ball");
  ASSERT_TRUE(chat);
  ASSERT_TRUE(lib_->add_message(*chat, "user", "Where did she play?"));
  app::AnswerResult stopped;
  stopped.stopped = true;
  stopped.map_reduce = true;
  stopped.n_parts = 5;
  stopped.early_stop = QStringLiteral("stopped after part 2 of 5");
  ASSERT_TRUE(lib_->add_message(*chat, "assistant",
                                "(page 1)\nIn the park.\n\n(page 2)\nWith Tom.\n\n"
                                "[stopped: stopped after part 2 of 5]",
                                app::answer_meta_json(stopped)));
  // A plain answer next to it has no Continue.
  ASSERT_TRUE(lib_->add_message(*chat, "user", "What color is the ball?"));
  ASSERT_TRUE(lib_->add_message(*chat, "assistant", "Red.", app::answer_meta_json({})));

  app::EngineWorker w(params());
  ChatPanel p;
  p.setMaxAnswerTokens(16);
  p.setSnapshotBudget(int64_t{64} << 20);
  setUpPanel(p, &w, doc_id);
  load(w, 2048);
  ASSERT_EQ(p.entryCount(), 4);
  // The finished parts are shown with where it stopped, and only that answer continues.
  const QString text = p.view()->toPlainText();
  for (const char* kept : {"(page 1)", "In the park.", "(page 2)", "With Tom."})
    EXPECT_TRUE(text.contains(QLatin1String(kept))) << kept << " in: " << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("ended early: stopped after part 2 of 5")))
      << text.toStdString();
  app::AskRequest req;
  ASSERT_TRUE(p.continueRequest(1, &req));
  EXPECT_FALSE(p.continueRequest(3, nullptr));
  EXPECT_FALSE(p.continueRequest(0, nullptr));  // a question
  EXPECT_EQ(text.count(QStringLiteral("Continue")), 1) << text.toStdString();

  QSignalSpy plans(&w, &app::EngineWorker::planReady);
  QSignalSpy finished(&w, &app::EngineWorker::answerFinished);
  QSignalSpy failed(&w, &app::EngineWorker::answerFailed);
  ASSERT_TRUE(clickLink(p, QStringLiteral("continue:")));
  ASSERT_TRUE(QTest::qWaitFor([&] { return plans.count() > 0; }, 60000));
  const auto sent = plans.first().at(1).value<app::AskRequest>();
  EXPECT_TRUE(sent.continue_parts);
  EXPECT_TRUE(sent.map_reduce);
  EXPECT_EQ(sent.question, QStringLiteral("Where did she play?"));
  EXPECT_EQ(sent.doc_ids, QList<qint64>{doc_id});
  EXPECT_EQ(sent.chat_id, *chat);
  EXPECT_EQ(sent.snapshot_budget, int64_t{64} << 20);
  EXPECT_TRUE(p.view()->toPlainText().contains(
      QStringLiteral("Continuing (stopped after part 2 of 5): the finished parts are kept.")))
      << p.view()->toPlainText().toStdString();
  ASSERT_TRUE(QTest::qWaitFor([&] { return finished.count() + failed.count() > 0; }, 120000));
  ASSERT_TRUE(QTest::qWaitFor([&] { return !w.isBusy(); }, 60000));
}

TEST_F(ChatTest, AnAnswerCutByTheLengthLimitContinuesFromItsKeptTokens) {
  const int64_t doc_id = addStory(1, 'd');
  auto chat = lib_->create_chat(doc_id, "Lily and the ball");
  ASSERT_TRUE(chat);
  ASSERT_TRUE(lib_->add_message(*chat, "user", "Tell the story."));
  app::AnswerResult cut;
  cut.early_stop = QStringLiteral("length limit 48 tokens");
  ASSERT_TRUE(lib_->add_message(*chat, "assistant", "Once upon a time, Lily had a re",
                                app::answer_meta_json(cut)));
  ChatPanel p;
  p.setMaxAnswerTokens(32);
  setUpPanel(p, nullptr, doc_id);
  app::AskRequest req;
  ASSERT_TRUE(p.continueRequest(1, &req));
  EXPECT_EQ(req.n_predict, 32);  // up to this many more
  EXPECT_TRUE(req.continue_answer);
  EXPECT_FALSE(req.continue_parts);
  EXPECT_FALSE(req.map_reduce);
  EXPECT_EQ(req.question, QStringLiteral("Tell the story."));
  EXPECT_TRUE(p.view()->toPlainText().contains(QStringLiteral("Continue")));
  EXPECT_FALSE(p.continueAnswer(1));  // no worker: nothing is asked
}

TEST_F(ChatTest, RepeatedNoticesAreCountedAndOlderOnesFold) {
  const int64_t doc_id = addStory(1, 'f');
  ChatPanel p;
  setUpPanel(p, nullptr, doc_id);
  // Asked three times without a model: one error line, counted.
  for (int i = 0; i < 3; ++i) p.askQuestion(QStringLiteral("Hello?"));
  QString text = p.view()->toPlainText();
  EXPECT_EQ(text.count(QStringLiteral("No model is loaded")), 1) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("Settings > Model. ×3"))) << text.toStdString();

  // Five different notices after it: the last three shown, the three before folded (the
  // counted error is one of them), a click on the fold shows them all.
  for (int i = 1; i <= 5; ++i) p.addNotice(QStringLiteral("notice %1").arg(i), false);
  text = p.view()->toPlainText();
  EXPECT_TRUE(text.contains(QStringLiteral("3 earlier notices"))) << text.toStdString();
  for (const char* shown : {"notice 3", "notice 4", "notice 5"})
    EXPECT_TRUE(text.contains(QLatin1String(shown))) << shown;
  for (const char* folded : {"notice 1", "notice 2", "No model is loaded"})
    EXPECT_FALSE(text.contains(QLatin1String(folded))) << folded;
  ASSERT_TRUE(clickLink(p, QStringLiteral("notices:")));
  text = p.view()->toPlainText();
  EXPECT_FALSE(text.contains(QStringLiteral("earlier notice"))) << text.toStdString();
  for (const char* all : {"notice 1", "notice 2", "notice 5", "Settings > Model. ×3"})
    EXPECT_TRUE(text.contains(QString::fromUtf8(all))) << all;
  EXPECT_EQ(p.entryCount(), 8);  // every notice is kept, only shown folded
}

}  // namespace
}  // namespace spw::ui
