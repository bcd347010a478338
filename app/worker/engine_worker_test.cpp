// EngineWorker, telemetry and the plan summary. The runs use ../shared/models/stories260K.gguf
// (skipped with a message when it is missing) over documents stored straight into a temporary
// library.
#include "app/worker/engine_worker.h"

#include <gtest/gtest.h>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QThread>
#include <atomic>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app/runtime/engine.h"
#include "app/runtime/speed_profile.h"
#include "app/store/library.h"
#include "app/store/test_temp_dir.h"
#include "app/worker/plan_summary.h"
#include "app/worker/telemetry.h"
#include "engine/session/session.h"

namespace spw::app {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const fs::path kStories = fs::path(SPILLWAY_SHARED_DIR) / "models" / "stories260K.gguf";

// One QCoreApplication for the worker tests (spillway_app_tests has a plain gtest main).
void ensure_app() {
  if (QCoreApplication::instance() != nullptr) return;
  static int argc = 1;
  static char name[] = "spillway_app_tests";
  static char* argv[] = {name, nullptr};
  new QCoreApplication(argc, argv);  // lives until exit
}

// Runs the event loop until `done` or `timeout_ms`; true when done.
bool wait_until(const std::function<bool()>& done, int timeout_ms = 60000) {
  QElapsedTimer t;
  t.start();
  while (!done()) {
    if (t.elapsed() > timeout_ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
    QThread::msleep(1);
  }
  return true;
}

std::string settings_json(int64_t n_ctx) {
  EngineSettings s;
  s.model_path = kStories.string();
  s.n_ctx = n_ctx;
  s.n_threads = 1;
  s.device = "cpu";
  return engine_settings_to_json(s);
}

// A document of `n_pages` pages of short story text, stored in `lib`.
int64_t add_story(Library& lib, int n_pages, const std::string& sha,
                  const std::string& title = "Lily and the ball") {
  DocumentRecord d;
  d.title = title;
  d.path = "/tmp/story.pdf";
  d.sha256 = sha;
  std::vector<PageRecord> pages;
  for (int i = 1; i <= n_pages; ++i) {
    PageRecord p;
    p.page_no = i;
    p.text = "Once upon a time, there was a little girl named Lily. She had a red ball. On day " +
             std::to_string(i) + " she played with the ball in the park with her friend Tom.";
    p.original_text = p.text;
    pages.push_back(p);
  }
  auto id = lib.add_document(d, pages);
  EXPECT_TRUE(id) << (id ? "" : id.error().message);
  return id ? *id : 0;
}

// Collects every signal of a worker.
struct Recorder {
  std::vector<QString> pieces, notes, failures;
  std::vector<AnswerResult> finished;
  std::vector<PlanSummary> plans;
  std::vector<TelemetrySample> samples;
  std::vector<qint64> stored_chats;
  bool loaded = false, load_failed = false, busy = false;
  QString load_error;

  explicit Recorder(EngineWorker& w) {
    QObject::connect(&w, &EngineWorker::modelLoaded,
                     [this](const ModelLoadedInfo&) { loaded = true; });
    QObject::connect(&w, &EngineWorker::modelFailed, [this](const QString& m) {
      load_failed = true;
      load_error = m;
    });
    QObject::connect(&w, &EngineWorker::piece, [this](const QString& p) { pieces.push_back(p); });
    QObject::connect(&w, &EngineWorker::note, [this](const QString& n) { notes.push_back(n); });
    QObject::connect(&w, &EngineWorker::answerFailed,
                     [this](const QString& m) { failures.push_back(m); });
    QObject::connect(&w, &EngineWorker::answerFinished,
                     [this](const AnswerResult& r) { finished.push_back(r); });
    QObject::connect(&w, &EngineWorker::planReady,
                     [this](const PlanSummary& p, const AskRequest&) { plans.push_back(p); });
    QObject::connect(&w, &EngineWorker::telemetry,
                     [this](const TelemetrySample& s) { samples.push_back(s); });
    QObject::connect(&w, &EngineWorker::questionStored,
                     [this](qint64 chat, qint64) { stored_chats.push_back(chat); });
    QObject::connect(&w, &EngineWorker::busyChanged, [this](bool b) { busy = b; });
  }
  QString text() const {
    QString t;
    for (const QString& p : pieces) t += p;
    return t;
  }
};

class EngineWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kStories)) GTEST_SKIP() << "no " << kStories << " (../shared is not here)";
    ensure_app();
    auto l = Library::open(library_db_file(dir_.path()));
    ASSERT_TRUE(l) << l.error().message;
    lib_ = std::move(*l);
  }
  EngineWorker::Params params() const {
    EngineWorker::Params p;
    p.library_file = QString::fromStdString(library_db_file(dir_.path()).string());
    p.snapshot_dir = QString::fromStdString((dir_.path() / "kv").string());
    return p;
  }
  void load(EngineWorker& w, Recorder& rec, int64_t n_ctx) {
    w.loadModel(QString::fromStdString(settings_json(n_ctx)));
    ASSERT_TRUE(wait_until([&] { return rec.loaded || rec.load_failed; }));
    ASSERT_TRUE(rec.loaded) << rec.load_error.toStdString();
    EXPECT_TRUE(w.hasModel());
  }

  TempDir dir_{"spillway-worker"};
  std::unique_ptr<Library> lib_;
};

// What a stopped or finished answer stores and shows: valid UTF-8, the same bytes either way.
TEST(AnswerText, DropsACutCharacterAndReplacesStrayBytes) {
  EXPECT_EQ(answer_text("plain"), "plain");
  EXPECT_EQ(answer_text("price \xE2\x82\xAC"), "price \xE2\x82\xAC");  // a whole euro sign
  EXPECT_EQ(answer_text("price \xE2\x82"), "price ");                  // cut by a stop: dropped
  EXPECT_EQ(answer_text("\x89"), "\xEF\xBF\xBD");                      // a stray continuation byte
  EXPECT_EQ(answer_text("a\x89"
                        "b\xFF"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  EXPECT_EQ(answer_text(""), "");
}

// The streamed pieces add up to the stored answer whatever the splits: random bytes (stray
// bytes, lead bytes interrupted by other lead bytes, whole and cut characters) split at random.
TEST(AnswerText, StreamedPiecesAddUpToTheAnswerWhateverTheSplits) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a",    "\xE2", "\x82", "\xAC", "\xF0", "\x9F", "\x98",
                                  "\x80", "\xC3", "\xA9", "\xFF", "\xED", "\xA0", " "};
  // The case the chat test met: a lead byte, then another character's lead byte.
  {
    AnswerStream st;
    std::string got = st.add("x\xE2");
    got += st.add("\xE2");  // the first lead byte is final now: U+FFFD
    got += st.add("\x82\xAC");
    got += st.finish();
    EXPECT_EQ(got, answer_text("x\xE2\xE2\x82\xAC"));
    EXPECT_EQ(got, "x\xEF\xBF\xBD\xE2\x82\xAC");
  }
  for (int trial = 0; trial < 2000; ++trial) {
    std::string all;
    AnswerStream st;
    std::string got;
    const int n_pieces = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n_pieces; ++i) {
      std::string piece;
      const int len = static_cast<int>(rng() % 4);
      for (int j = 0; j < len; ++j) piece += alphabet[rng() % std::size(alphabet)];
      all += piece;
      got += st.add(piece);
    }
    got += st.finish();
    ASSERT_EQ(got, answer_text(all)) << "trial " << trial;
  }
}

TEST(Telemetry, CsvRowHasAColumnPerHeaderField) {
  TelemetrySample s;
  s.t_ms = 1234;
  s.n_past = 77;
  s.host_bytes = 4096;
  s.rss_bytes = 1 << 20;
  const auto count = [](const std::string& line) {
    return std::count(line.begin(), line.end(), ',') + 1;
  };
  const std::string header = telemetry_csv_header(), row = telemetry_csv_row(s);
  EXPECT_EQ(count(header), count(row));
  EXPECT_EQ(count(header), 21);
  EXPECT_EQ(row.rfind("1234,0,0,77,", 0), 0u) << row;
  // Unknown VRAM (-1) is an empty cell: ",,,," between moved_bytes_per_token and rss.
  EXPECT_NE(row.find(",,,,1048576,"), std::string::npos) << row;
}

TEST(Telemetry, ProcessAndSystemMemoryAreRead) {
  EXPECT_GT(process_rss_bytes(), 1 << 20);  // a process with a C++ runtime and Qt loaded
  EXPECT_GT(system_available_bytes(), 0);
  const TelemetrySample s = idle_sample();
  EXPECT_FALSE(s.running);
  EXPECT_GT(s.t_ms, 1600000000000);  // after 2020, in milliseconds
}

TEST(Telemetry, SampleFromUsageComputesRatesAndBytesPerToken) {
  SessionUsage u;
  u.n_past = 100;
  u.n_ctx = 512;
  u.prefill_tokens_computed = 80;
  u.prefill_s = 0.5;
  u.decode_tokens = 20;
  u.decode_s = 0.25;
  u.kv.window_to_host_bytes = 1000;
  u.kv.cold_to_window_bytes = 600;
  u.kv.host_blocks = 3;
  const TelemetrySample a = sample_from_usage(u, nullptr, -1);
  EXPECT_TRUE(a.running);
  EXPECT_EQ(a.moved_bytes, 1600);
  EXPECT_DOUBLE_EQ(a.moved_bytes_per_token, 16.0);  // 1600 bytes over 100 tokens
  EXPECT_DOUBLE_EQ(a.prefill_tokens_per_s, 160.0);
  EXPECT_DOUBLE_EQ(a.decode_tokens_per_s, 80.0);
  EXPECT_EQ(a.host_blocks, 3);
  EXPECT_EQ(a.vram_weights, -1);  // a CPU session
  u.n_past = 110;
  u.kv.window_to_host_bytes = 1500;  // 500 more bytes over 10 more tokens
  const TelemetrySample b = sample_from_usage(u, &a, -1);
  EXPECT_DOUBLE_EQ(b.moved_bytes_per_token, 50.0);
}

TEST(Telemetry, ThrottlePassesTheFirstThenOnePerInterval) {
  TelemetryThrottle t(300);
  EXPECT_TRUE(t.due(1000));
  EXPECT_FALSE(t.due(1100));
  EXPECT_FALSE(t.due(1299));
  EXPECT_TRUE(t.due(1300));
  t.reset();
  EXPECT_TRUE(t.due(1301));
}

// The usage feed of a run as dashboard samples: the first reading at once, the next ones at
// most one per interval, and the last one forced out at the end.
TEST(Telemetry, UsageSamplerThrottlesAndFinishesWithTheLastReading) {
  std::vector<TelemetrySample> out;
  UsageSampler sampler(60000, [&](const TelemetrySample& s) { out.push_back(s); });
  SessionUsage u;
  u.n_ctx = 512;
  for (int64_t n = 1; n <= 5; ++n) {
    u.n_past = 64 * n;
    sampler.add(u);
  }
  ASSERT_EQ(out.size(), 1u);  // the 60 s interval let only the first through
  EXPECT_TRUE(out[0].running);
  EXPECT_EQ(out[0].n_past, 64);
  sampler.finish();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].n_past, 320);
  EXPECT_EQ(out[1].n_ctx, 512);
  sampler.finish();  // nothing new since
  EXPECT_EQ(out.size(), 2u);
}

// A batch job's samples reach the same telemetry() stream as the worker's own runs, and the
// idle sampler leaves them standing while they come.
TEST_F(EngineWorkerTest, RunSamplesOfAJobReachTheTelemetryStream) {
  EngineWorker::Params p = params();
  p.idle_interval_ms = 50;
  EngineWorker w(p);
  Recorder rec(w);
  ASSERT_TRUE(wait_until([&] { return !rec.samples.empty(); }));  // idle samples come
  EXPECT_FALSE(rec.samples.back().running);
  TelemetrySample job;
  job.running = true;
  job.n_past = 777;
  job.n_ctx = 2048;
  job.t_ms = 1;
  w.addRunSample(job);
  ASSERT_FALSE(rec.samples.empty());
  EXPECT_TRUE(rec.samples.back().running);
  EXPECT_EQ(rec.samples.back().n_past, 777);
  EXPECT_EQ(rec.samples.back().n_ctx, 2048);
  // The idle ticks that follow (every 50 ms) repeat the job's state with the process memory
  // now: a job's ubatch may take seconds without a sample.
  const size_t n = rec.samples.size();
  ASSERT_TRUE(wait_until([&] { return rec.samples.size() >= n + 2; }));
  for (size_t i = n; i < rec.samples.size(); ++i) {
    EXPECT_TRUE(rec.samples[i].running) << i;
    EXPECT_EQ(rec.samples[i].n_past, 777) << i;
  }
}

TEST_F(EngineWorkerTest, PlanSaysWhenTheDocumentDoesNotFitTheContext) {
  EngineSettings s;
  s.model_path = kStories.string();
  s.n_ctx = 512;
  s.device = "cpu";
  auto engine = Engine::load(s);
  ASSERT_TRUE(engine) << engine.error().message;
  const int64_t short_id = add_story(*lib_, 1, std::string(64, 'a'));
  const int64_t long_id = add_story(*lib_, 30, std::string(64, 'b'));
  const auto doc = [&](int64_t id) { return document_text(*lib_->document(id), *lib_->pages(id)); };
  const PlanProbes probes;  // no bandwidths: predictions unknown
  const PlanSummary fits = plan_document_ask(**engine, doc(short_id), "Who is Lily?", 32, probes);
  ASSERT_TRUE(fits.error.empty()) << fits.error;
  EXPECT_TRUE(fits.fits_context) << plan_summary_text(fits);
  EXPECT_FALSE(fits.needs_choice());
  EXPECT_EQ(fits.n_ctx, 512);
  EXPECT_EQ(fits.answer_reserve, 32);
  EXPECT_GT(fits.prompt_tokens, 20);
  EXPECT_EQ(fits.planned_tokens, fits.prompt_tokens + 32);
  EXPECT_FALSE(fits.gpu);
  EXPECT_GT(fits.window.bytes, 0);

  const PlanSummary big = plan_document_ask(**engine, doc(long_id), "Who is Lily?", 32, probes);
  ASSERT_TRUE(big.error.empty()) << big.error;
  EXPECT_FALSE(big.fits_context);
  EXPECT_TRUE(big.needs_choice());
  EXPECT_GT(big.prompt_tokens, 512);
  EXPECT_GT(big.n_parts, 1);
  ASSERT_FALSE(big.suggestions.empty());
  EXPECT_EQ(big.suggestions[0].kind, "map-reduce");
  EXPECT_EQ(big.planned_tokens, 512);
  // stories260K was trained on 2048 tokens: a longer context that holds the prompt is offered.
  ASSERT_GE(big.suggestions.size(), 2u);
  EXPECT_EQ(big.suggestions[1].kind, "ctx");
  EXPECT_EQ(big.suggestions[1].flag, "-c " + std::to_string(big.prompt_tokens + 32));
  const std::string text = plan_summary_text(big);
  EXPECT_NE(text.find("map-reduce"), std::string::npos) << text;
}

// With a measured speed profile the verdict predicts from it and says so, in plain language
// first; "Run anyway" is offered only for a run that can work.
TEST_F(EngineWorkerTest, PlanPredictsFromTheMeasuredProfileInPlainLanguage) {
  EngineSettings s;
  s.model_path = kStories.string();
  s.n_ctx = 512;
  s.device = "cpu";
  auto engine = Engine::load(s);
  ASSERT_TRUE(engine) << engine.error().message;
  const int64_t short_id = add_story(*lib_, 1, std::string(64, 'p'));
  const int64_t long_id = add_story(*lib_, 30, std::string(64, 'q'));
  const auto doc = [&](int64_t id) { return document_text(*lib_->document(id), *lib_->pages(id)); };
  auto profile = std::make_shared<SpeedProfile>();
  profile->calibrated_at = 1796185200;             // 2026-12-02 04:20 UTC
  profile->prefill = DepthCost::line(0.01, 1e-5);  // 100 tokens/s near depth 0
  profile->decode = DepthCost::line(0.1, 1e-4);
  PlanProbes probes;
  probes.profile = profile;

  const PlanSummary fits = plan_document_ask(**engine, doc(short_id), "Who is Lily?", 32, probes);
  ASSERT_TRUE(fits.fits_context);
  EXPECT_DOUBLE_EQ(fits.prefill_s, profile->prefill_s(fits.prompt_tokens));
  EXPECT_DOUBLE_EQ(fits.decode_tokens_per_s, profile->decode_tokens_per_s(fits.prompt_tokens));
  EXPECT_DOUBLE_EQ(fits.answer_s, fits.prefill_s + profile->decode_s(32, fits.prompt_tokens));
  EXPECT_TRUE(fits.can_run_anyway);
  EXPECT_EQ(fits.prediction_basis, "measured profile, calibrated 2026-12-02 04:20 UTC");
  const std::string text = plan_summary_text(fits);
  EXPECT_EQ(text.rfind(fits.headline + "\n\n", 0), 0u) << text;  // the summary comes first
  EXPECT_EQ(fits.headline.rfind("This " + std::to_string(fits.prompt_tokens) +
                                    "-token document fits in the model's 512-token context. "
                                    "Answering takes about ",
                                0),
            0u)
      << fits.headline;
  EXPECT_NE(text.find("(measured profile, calibrated 2026-12-02 04:20 UTC)"), std::string::npos)
      << text;

  const PlanSummary big = plan_document_ask(**engine, doc(long_id), "Who is Lily?", 32, probes);
  ASSERT_FALSE(big.fits_context);
  ASSERT_GT(big.n_parts, 1);
  EXPECT_FALSE(big.can_run_anyway);  // the prompt is longer than the context: it cannot run
  // Every part's prefill and answer, and the combination's: more than the parts' prefill alone.
  EXPECT_GT(big.answer_s, big.prefill_s);
  EXPECT_GT(big.prefill_s, profile->prefill_s(512));
  EXPECT_NE(big.headline.find("-token document does not fit in the model's 512-token context. "
                              "Answering over " +
                              std::to_string(big.n_parts) + " parts takes about "),
            std::string::npos)
      << big.headline;

  // Without a profile the verdict says what it predicts from.
  const PlanSummary bandwidth =
      plan_document_ask(**engine, doc(short_id), "Who is Lily?", 32, PlanProbes{});
  EXPECT_EQ(bandwidth.prediction_basis,
            "memory traffic only (a lower bound); no measured speed profile yet");
}

TEST_F(EngineWorkerTest, AskStreamsPiecesStoresMessagesAndPublishesTelemetry) {
  const int64_t doc_id = add_story(*lib_, 2, std::string(64, 'c'));
  EngineWorker w(params());
  Recorder rec(w);
  load(w, rec, 1024);

  AskRequest req;
  req.doc_ids = {doc_id};
  req.question = "What color is the ball?";
  req.n_predict = 24;
  w.ask(req);
  EXPECT_TRUE(w.isBusy());
  ASSERT_TRUE(wait_until([&] { return !rec.finished.empty() || !rec.failures.empty(); }));
  ASSERT_TRUE(rec.failures.empty()) << rec.failures[0].toStdString();
  ASSERT_TRUE(wait_until([&] { return !w.isBusy(); }));
  const AnswerResult& r = rec.finished[0];
  EXPECT_FALSE(r.stopped);
  EXPECT_GT(r.generated_tokens, 0);
  EXPECT_LE(r.generated_tokens, 24);
  EXPECT_FALSE(rec.pieces.empty());
  EXPECT_EQ(rec.text(), r.answer);  // the streamed pieces are the answer
  EXPECT_GT(r.context_tokens, r.generated_tokens);
  EXPECT_EQ(r.n_ctx, 1024);
  EXPECT_GT(r.prefill_s, 0);
  EXPECT_FALSE(r.reused_kv);  // the first question computes the document

  // The plan came first, and fitted.
  ASSERT_EQ(rec.plans.size(), 1u);
  EXPECT_TRUE(rec.plans[0].fits_context);

  // Stored: the chat of the document with the question and the answer.
  auto chats = lib_->chats(doc_id);
  ASSERT_TRUE(chats);
  ASSERT_EQ(chats->size(), 1u);
  EXPECT_EQ((*chats)[0].id, r.chat_id);
  EXPECT_EQ(find_chat_for(*lib_, {doc_id}), r.chat_id);
  auto msgs = lib_->messages(r.chat_id);
  ASSERT_TRUE(msgs);
  ASSERT_EQ(msgs->size(), 2u);
  EXPECT_EQ((*msgs)[0].role, "user");
  EXPECT_EQ((*msgs)[0].content, "What color is the ball?");
  EXPECT_EQ((*msgs)[1].role, "assistant");
  EXPECT_EQ(QString::fromStdString((*msgs)[1].content), r.answer);
  EXPECT_EQ((*msgs)[1].id, r.message_id);

  // Telemetry of the run: the session's context filled.
  const auto run_sample = std::find_if(rec.samples.begin(), rec.samples.end(),
                                       [](const TelemetrySample& s) { return s.running; });
  ASSERT_NE(run_sample, rec.samples.end());
  int64_t max_past = 0;
  for (const TelemetrySample& s : rec.samples) max_past = std::max(max_past, s.n_past);
  EXPECT_EQ(max_past, r.context_tokens);
  EXPECT_EQ(run_sample->n_ctx, 1024);
  EXPECT_GT(run_sample->window_blocks, 0);
  EXPECT_GT(run_sample->rss_bytes, 0);

  // A second question in the same chat reuses the document's saved KV.
  req.question = "Who is Tom?";
  rec.finished.clear();
  w.ask(req);
  ASSERT_TRUE(wait_until([&] { return !rec.finished.empty() || !rec.failures.empty(); }));
  ASSERT_TRUE(rec.failures.empty()) << rec.failures[0].toStdString();
  EXPECT_EQ(rec.finished[0].chat_id, r.chat_id);
  EXPECT_TRUE(rec.finished[0].reused_kv);
  EXPECT_EQ(lib_->messages(r.chat_id)->size(), 4u);
}

TEST_F(EngineWorkerTest, StopEndsGenerationQuicklyAndKeepsThePartialAnswerMarked) {
  const int64_t doc_id = add_story(*lib_, 2, std::string(64, 'd'));
  std::atomic<bool> first_piece{false}, release{false};
  EngineWorker::Params p = params();
  // Hold the run after its first piece until the test has pressed Stop: the stop then lands in
  // the middle of generation, deterministically.
  p.piece_hook = [&] {
    first_piece = true;
    while (!release) QThread::msleep(1);
  };
  EngineWorker w(p);
  Recorder rec(w);
  load(w, rec, 2048);
  AskRequest req;
  req.doc_ids = {doc_id};
  req.question = "Tell me a long story about Lily.";
  req.n_predict = 400;
  w.ask(req);
  ASSERT_TRUE(wait_until([&] { return first_piece.load() || !rec.failures.empty(); }));
  ASSERT_TRUE(rec.failures.empty()) << rec.failures[0].toStdString();
  QElapsedTimer t;
  t.start();
  w.stop();
  release = true;
  ASSERT_TRUE(wait_until([&] { return !rec.finished.empty() || !rec.failures.empty(); }, 5000));
  const qint64 stop_ms = t.elapsed();
  ASSERT_TRUE(rec.failures.empty()) << rec.failures[0].toStdString();
  EXPECT_LT(stop_ms, 200) << "Stop took " << stop_ms << " ms";
  const AnswerResult& r = rec.finished[0];
  EXPECT_TRUE(r.stopped);
  EXPECT_FALSE(r.answer.isEmpty());
  EXPECT_LE(r.generated_tokens, 3);  // the token of the first piece, at most one more
  auto msgs = lib_->messages(r.chat_id);
  ASSERT_TRUE(msgs);
  ASSERT_EQ(msgs->size(), 2u);
  EXPECT_EQ((*msgs)[1].content, r.answer.toStdString());
  AnswerResult meta;
  ASSERT_TRUE(answer_from_meta((*msgs)[1].meta, meta)) << (*msgs)[1].meta;
  EXPECT_TRUE(meta.stopped);
  EXPECT_EQ(meta.generated_tokens, r.generated_tokens);
  EXPECT_EQ(meta.n_ctx, r.n_ctx);
  EXPECT_TRUE((*msgs)[0].meta.empty());  // the question
  ASSERT_TRUE(wait_until([&] { return !w.isBusy(); }, 5000));
}

TEST_F(EngineWorkerTest, APlanThatDoesNotFitWaitsForTheUsersChoice) {
  const int64_t doc_id = add_story(*lib_, 30, std::string(64, 'e'));
  EngineWorker w(params());
  Recorder rec(w);
  load(w, rec, 512);
  AskRequest req;
  req.doc_ids = {doc_id};
  req.question = "Who is Lily?";
  req.n_predict = 16;
  w.ask(req);
  ASSERT_TRUE(wait_until([&] { return !w.isBusy(); }));
  ASSERT_EQ(rec.plans.size(), 1u);
  EXPECT_TRUE(rec.plans[0].needs_choice());
  EXPECT_TRUE(rec.finished.empty());
  EXPECT_TRUE(rec.failures.empty());
  EXPECT_TRUE(lib_->chats(doc_id)->empty());  // nothing stored before the choice

  req.map_reduce = true;  // "Use map-reduce"
  w.ask(req);
  ASSERT_TRUE(wait_until([&] { return !rec.finished.empty() || !rec.failures.empty(); }));
  ASSERT_TRUE(rec.failures.empty()) << rec.failures[0].toStdString();
  EXPECT_TRUE(rec.finished[0].map_reduce);
  EXPECT_EQ(lib_->messages(rec.finished[0].chat_id)->size(), 2u);
}

TEST_F(EngineWorkerTest, ASelectionIsAskedOneDocumentAfterAnother) {
  const int64_t a = add_story(*lib_, 1, std::string(64, 'g'), "Story A");
  const int64_t b = add_story(*lib_, 1, std::string(64, 'h'), "Story B");
  EngineWorker w(params());
  Recorder rec(w);
  load(w, rec, 1024);
  AskRequest req;
  req.doc_ids = {b, a};
  req.question = "Who is Lily?";
  req.n_predict = 8;
  w.ask(req);
  ASSERT_TRUE(wait_until([&] { return !w.isBusy(); }));
  ASSERT_TRUE(rec.failures.empty()) << rec.failures[0].toStdString();
  ASSERT_EQ(rec.finished.size(), 2u);
  EXPECT_EQ(rec.finished[0].doc_id, b);  // in the order of the selection
  EXPECT_EQ(rec.finished[1].doc_id, a);
  // One chat for the selection (no document of its own), titled by the ids.
  const int64_t chat = find_chat_for(*lib_, {a, b});
  ASSERT_GT(chat, 0);
  EXPECT_EQ(rec.finished[0].chat_id, chat);
  EXPECT_EQ(selection_chat_title({b, a}),
            "Selection: " + std::to_string(a) + ", " + std::to_string(b));
  EXPECT_EQ(find_chat_for(*lib_, {a}), 0);  // not the chat of document a alone
  auto msgs = lib_->messages(chat);
  ASSERT_TRUE(msgs);
  ASSERT_EQ(msgs->size(), 3u);  // the question, then one answer per document
  EXPECT_EQ((*msgs)[0].content, "Who is Lily?");
  EXPECT_EQ((*msgs)[1].content.rfind("From \"Story B\":\n", 0), 0u) << (*msgs)[1].content;
  EXPECT_EQ((*msgs)[2].content.rfind("From \"Story A\":\n", 0), 0u) << (*msgs)[2].content;
}

TEST_F(EngineWorkerTest, ErrorsComeAsSignalsAndTheWorkerKeepsWorking) {
  EngineWorker w(params());
  Recorder rec(w);
  AskRequest req;
  req.doc_ids = {1};
  req.question = "Anything?";
  w.ask(req);  // no model yet
  ASSERT_TRUE(wait_until([&] { return !rec.failures.empty(); }));
  EXPECT_NE(rec.failures[0].indexOf("Settings > Model"), -1) << rec.failures[0].toStdString();

  w.loadModel(QStringLiteral("{\"model_path\": \"/no/such/model.gguf\"}"));
  ASSERT_TRUE(wait_until([&] { return rec.load_failed; }));
  EXPECT_FALSE(w.hasModel());
  EXPECT_NE(rec.load_error.indexOf("model.gguf"), -1) << rec.load_error.toStdString();

  rec.load_failed = false;
  load(w, rec, 1024);
  req.doc_ids = {999};  // no such document
  rec.failures.clear();
  w.ask(req);
  ASSERT_TRUE(wait_until([&] { return !rec.failures.empty(); }));
  EXPECT_NE(rec.failures[0].indexOf("999"), -1) << rec.failures[0].toStdString();
}

TEST_F(EngineWorkerTest, DestroyingTheWorkerWhileGeneratingStopsAndStoresThePartialAnswer) {
  const int64_t doc_id = add_story(*lib_, 2, std::string(64, 'f'));
  std::atomic<int> n_pieces{0};
  EngineWorker::Params p = params();
  p.piece_hook = [&] {
    ++n_pieces;
    QThread::msleep(5);  // a slow model: still generating when the window closes
  };
  auto w = std::make_unique<EngineWorker>(p);
  Recorder rec(*w);
  load(*w, rec, 2048);
  AskRequest req;
  req.doc_ids = {doc_id};
  req.question = "Tell me a long story about Lily.";
  req.n_predict = 400;
  w->ask(req);
  ASSERT_TRUE(wait_until([&] { return n_pieces.load() > 0 || !rec.failures.empty(); }));
  ASSERT_TRUE(rec.failures.empty()) << rec.failures[0].toStdString();
  QElapsedTimer t;
  t.start();
  w.reset();
  EXPECT_LT(t.elapsed(), 2000);  // no hang (a bound far above the expected few ms)
  const int64_t chat_id = find_chat_for(*lib_, {doc_id});
  ASSERT_GT(chat_id, 0);
  auto msgs = lib_->messages(chat_id);
  ASSERT_TRUE(msgs);
  ASSERT_EQ(msgs->size(), 2u);
  AnswerResult meta;
  ASSERT_TRUE(answer_from_meta((*msgs)[1].meta, meta));
  EXPECT_TRUE(meta.stopped);
  EXPECT_FALSE((*msgs)[1].content.empty());
}

// The library's Tokens column: each document's page block ("[p. N]" and its text) counted with
// the model's tokenizer after the load, and again on request after a document is added.
TEST_F(EngineWorkerTest, TokenCountsFollowTheModelAndTheLibrary) {
  const int64_t a = add_story(*lib_, 2, std::string(64, 'e'));
  EngineWorker w(params());
  Recorder rec(w);
  QHash<qint64, qint64> counts;
  int n_counts = 0;
  QObject::connect(&w, &EngineWorker::tokenCounts, [&](const QHash<qint64, qint64>& c) {
    counts = c;
    ++n_counts;
  });
  load(w, rec, 1024);
  ASSERT_TRUE(wait_until([&] { return n_counts == 1; }));
  ASSERT_EQ(counts.size(), 1);
  auto model = Model::load(kStories.string());
  ASSERT_TRUE(model);
  auto tok = Tokenizer::from_gguf((*model)->file());
  ASSERT_TRUE(tok);
  auto rec_a = lib_->document(a);
  auto pages_a = lib_->pages(a);
  ASSERT_TRUE(rec_a && pages_a);
  const DocumentText doc = document_text(*rec_a, *pages_a);
  const auto want =
      (*tok)->encode(document_block(doc, PageRange{0, doc.pages.size()}), false, false);
  EXPECT_EQ(counts.value(a), static_cast<qint64>(want.size()));
  EXPECT_GT(counts.value(a), 50);

  const int64_t b = add_story(*lib_, 5, std::string(64, 'f'));
  w.countTokens();
  ASSERT_TRUE(wait_until([&] { return n_counts == 2; }));
  ASSERT_EQ(counts.size(), 2);
  EXPECT_GT(counts.value(b), counts.value(a));  // five pages of the same story against two

  // A document without text (scanned, no OCR) has no tokens: it is never put in a prompt.
  DocumentRecord scan;
  scan.title = "Scanned lease";
  scan.path = "/tmp/scan.pdf";
  scan.sha256 = std::string(64, 'a');
  std::vector<PageRecord> scan_pages(3);
  for (int i = 0; i < 3; ++i) {
    scan_pages[static_cast<size_t>(i)].page_no = i + 1;
    scan_pages[static_cast<size_t>(i)].scanned = true;
  }
  auto c = lib_->add_document(scan, scan_pages);
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(lib_->document(*c)->no_text);
  w.countTokens();
  ASSERT_TRUE(wait_until([&] { return n_counts == 3; }));
  ASSERT_EQ(counts.size(), 3);
  EXPECT_EQ(counts.value(*c), 0);
  EXPECT_EQ(counts.value(a), static_cast<qint64>(want.size()));
}

}  // namespace
}  // namespace spw::app
