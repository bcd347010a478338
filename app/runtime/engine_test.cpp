// The app's engine runtime on generated models: settings round trip and validation, chat and
// text completions against a hand-written greedy loop, stop strings, max_tokens, cancellation
// between ubatches and tokens, the usage feed, and asking a library document with saved KV.
#include "app/runtime/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_session.h"
#include "tests/support/test_model.h"

namespace spw::app {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  TempDir dir{"spillway-runtime"};
  std::string model;
  Fixture() {
    TestModelSpec spec;
    spec.n_ctx = 512;
    model = dir.path() + "/m.gguf";
    EXPECT_TRUE(write_test_model(spec, model).ok());
  }
  std::unique_ptr<Engine> engine(EngineSettings s = {}) {
    s.model_path = model;
    s.n_threads = 1;
    if (s.kv.spill_dir.empty()) s.kv.spill_dir = dir.path();
    auto e = Engine::load(s);
    EXPECT_TRUE(e.ok()) << (e ? "" : e.error().message);
    return e ? std::move(*e) : nullptr;
  }
};

// The reference: greedy decoding written out on a fresh CPU session.
std::vector<int32_t> greedy_ids(const Engine& e, const std::vector<int32_t>& prompt, int n) {
  auto s = e.new_session();
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(s->session->eval(prompt, true).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t id = argmax(s->session->logits());
    if (e.tokenizer().is_eog(id)) break;
    out.push_back(id);
    const int32_t one[1] = {id};
    EXPECT_TRUE(s->session->eval(one, true).ok());
  }
  return out;
}

std::string pieces(const Engine& e, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += e.tokenizer().token_to_piece(id);
  return s;
}

SamplerParams greedy() {
  SamplerParams p;
  p.temp = 0;
  return p;
}

TEST(EngineSettings, JsonRoundTripKeepsEveryField) {
  EngineSettings s;
  s.model_path = "/models/qwen.gguf";
  s.n_ctx = 32768;
  s.n_threads = 6;
  s.kv_type_k = "q8_0";
  s.kv_type_v = "f32";
  s.device = "cpu";
  s.n_ubatch = 128;
  s.kv.block_size = 64;
  s.kv.n_sinks = 8;
  s.kv.window_tokens = 2048;
  s.kv.host_budget = 1 << 30;
  s.kv.disk_budget = 4LL << 30;
  s.kv.spill_dir = "/tmp/spill";
  ASSERT_TRUE(set_attention(s, "topk:8").ok());
  s.template_name = "chatml";
  s.use_snapshots = false;
  auto back = engine_settings_from_json(engine_settings_to_json(s));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(engine_settings_to_json(*back), engine_settings_to_json(s));
  EXPECT_EQ(back->kv_type_k, "q8_0");
  EXPECT_EQ(back->kv.disk_budget, 4LL << 30);
  EXPECT_FALSE(back->use_snapshots);
}

// Settings files written before the window could be auto (every key, kv_window a number)
// read back and write out byte for byte as they were; the default now writes "auto".
TEST(EngineSettings, FilesWrittenBeforeAutoRoundTripUnchanged) {
  for (const std::string old : {
           std::string(R"({"attention":"exact","device":"auto","disk_budget":0,"host_budget":-1,)"
                       R"("kv_block":256,"kv_sinks":4,"kv_type_k":"f16","kv_type_v":"f16",)"
                       R"("kv_window":4096,"model_path":"","n_ctx":0,"n_threads":0,)"
                       R"("n_ubatch":512,"spill_dir":"","template_name":"","use_snapshots":true})"),
           std::string(R"({"attention":"topk:8","device":"cpu","disk_budget":4294967296,)"
                       R"("host_budget":1073741824,"kv_block":64,"kv_sinks":8,"kv_type_k":"q8_0",)"
                       R"("kv_type_v":"f32","kv_window":2048,"model_path":"/m.gguf","n_ctx":32768,)"
                       R"("n_threads":6,"n_ubatch":128,"spill_dir":"/tmp/spill",)"
                       R"("template_name":"chatml","use_snapshots":false})"),
       }) {
    auto s = engine_settings_from_json(old);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(engine_settings_to_json(*s), old);
  }
  auto s = engine_settings_from_json(R"({"kv_window":4096})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kv.window_tokens, 4096);  // an explicit window stays explicit
  const std::string fresh = engine_settings_to_json(EngineSettings{});
  EXPECT_NE(fresh.find(R"("kv_window":"auto")"), std::string::npos) << fresh;
  auto back = engine_settings_from_json(fresh);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->kv.window_tokens.has_value());
  EXPECT_EQ(engine_settings_from_json(R"({"kv_window":"big"})").error().message,
            "engine settings: 'kv_window' must be an integer or \"auto\"");
  EXPECT_NE(
      engine_settings_from_json(R"({"attention":"fuzzy"})").error().message.find("'attention'"),
      std::string::npos);
}

// The host arena's page settings (--huge-pages, --numa-node) reach the engine from a settings
// file or a job's row; at their defaults they are not written (older files stay byte-identical).
TEST(EngineSettings, HugePagesAndNumaNodeRoundTripAndDefaultsAreNotWritten) {
  EngineSettings s;
  s.kv.huge_pages = false;
  s.kv.numa.mode = NumaSetting::Mode::Node;
  s.kv.numa.node = 1;
  const std::string text = engine_settings_to_json(s);
  EXPECT_NE(text.find(R"("huge_pages":false)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("numa_node":"1")"), std::string::npos) << text;
  auto back = engine_settings_from_json(text);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_FALSE(back->kv.huge_pages);
  EXPECT_EQ(back->kv.numa.mode, NumaSetting::Mode::Node);
  EXPECT_EQ(back->kv.numa.node, 1);
  EXPECT_EQ(*back, s);
  auto off = engine_settings_from_json(R"({"numa_node":"off","huge_pages":true})");
  ASSERT_TRUE(off.ok()) << off.error().message;
  EXPECT_EQ(off->kv.numa.mode, NumaSetting::Mode::Off);
  EXPECT_TRUE(off->kv.huge_pages);
  auto numeric = engine_settings_from_json(R"({"numa_node":0})");
  ASSERT_TRUE(numeric.ok());
  EXPECT_EQ(numeric->kv.numa.mode, NumaSetting::Mode::Node);
  EXPECT_EQ(numeric->kv.numa.node, 0);
  const std::string fresh = engine_settings_to_json(EngineSettings{});
  EXPECT_EQ(fresh.find("huge_pages"), std::string::npos) << fresh;
  EXPECT_EQ(fresh.find("numa_node"), std::string::npos) << fresh;
  EXPECT_EQ(engine_settings_from_json(R"({"huge_pages":"no"})").error().message,
            "engine settings: 'huge_pages' must be true or false");
  for (const char* bad : {R"({"numa_node":"two"})", R"({"numa_node":-1})", R"({"numa_node":[]})"})
    EXPECT_EQ(engine_settings_from_json(bad).error().message,
              "engine settings: 'numa_node' must be \"auto\", \"off\" or a node number")
        << bad;
}

TEST(EngineSettings, JsonErrorsNameTheField) {
  EXPECT_EQ(engine_settings_from_json("{").error().message, "engine settings: not valid JSON");
  EXPECT_EQ(engine_settings_from_json(R"({"n_ctx":"big"})").error().message,
            "engine settings: 'n_ctx' must be an integer");
  auto partial = engine_settings_from_json(R"({"device":"cpu","unknown":1})");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->device, "cpu");
  EXPECT_FALSE(partial->kv.window_tokens.has_value());  // missing: the default (auto)
}

TEST(EngineSettings, ValidateNamesTheOption) {
  EngineSettings s;
  s.kv_type_k = "q4";
  EXPECT_NE(validate(s).error().message.find("--cache-type-k"), std::string::npos);
  s = {};
  s.kv.attention = kv::KvAttention::TopK;
  s.kv.top_k = 0;
  EXPECT_NE(validate(s).error().message.find("--attention"), std::string::npos);
  EXPECT_NE(set_attention(s, "topk:0").error().message.find("--attention"), std::string::npos);
  s = {};
  s.kv.disk_budget = 1 << 20;
  EXPECT_NE(validate(s).error().message.find("spill"), std::string::npos);
  EXPECT_TRUE(validate(EngineSettings{}).ok());
}

TEST(EngineLoad, ErrorsAreTheLoaders) {
  EngineSettings s;
  EXPECT_EQ(Engine::load(s).error().message, "no model chosen: pick a GGUF file");
  TempDir d;
  s.model_path = d.path() + "/missing.gguf";
  auto e = Engine::load(s);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message.find("missing.gguf"), std::string::npos);
  EXPECT_FALSE(probe_model(s.model_path).ok());
}

// Context 0: the trained context if its KV fits the machine, else the largest that does, said
// once through the note; every session runs it. Blocks of 16 tokens are 4 KiB; the window is 1
// sink block and 4 recent ones (20 KiB); the 512 trained tokens are 32 blocks (128 KiB).
TEST(EngineLoad, TheDefaultContextFollowsTheMachine) {
  Fixture f;
  EngineSettings s;
  s.model_path = f.model;
  s.n_threads = 1;
  s.kv.spill_dir = f.dir.path();
  s.kv.block_size = 16;
  s.kv.window_tokens = 64;
  MachineMemory roomy;
  roomy.available_bytes = int64_t{1} << 30;
  auto whole = Engine::load(s, {}, roomy);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ((*whole)->n_ctx(), 512);
  EXPECT_EQ((*whole)->context_note(), "");
  EXPECT_EQ((*whole)->kv_settings(), s.kv);

  // The weights, then a RAM budget of 60 KiB: the window's 20 KiB and 10 host blocks.
  MachineMemory tight;
  tight.available_bytes = mapped_weight_bytes((*whole)->model()) + 2 * 60 * 1024;
  std::vector<std::string> notes;
  auto cut = Engine::load(
      s, [&](const std::string& n) { notes.push_back(n); }, tight);
  ASSERT_TRUE(cut.ok()) << cut.error().message;
  const Engine& e = **cut;
  EXPECT_EQ(e.n_ctx(), (5 + 10) * 16);
  const std::string note =
      "note: context 240 of 512 trained: KV needs 128.0 KiB, RAM budget 60.0 KiB (half the "
      "available memory less the weights); -c or Settings to change";
  EXPECT_EQ(e.context_note(), note);
  EXPECT_EQ(std::count(notes.begin(), notes.end(), note), 1);
  EXPECT_EQ(e.kv_settings().host_budget, 10 * 4096);
  auto session = e.new_session();
  ASSERT_TRUE(session.ok()) << session.error().message;
  EXPECT_EQ(session->session->n_ctx(), 240);

  // A context that is set is kept as set.
  s.n_ctx = 300;
  auto set = Engine::load(s, {}, tight);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ((*set)->n_ctx(), 300);
  EXPECT_EQ((*set)->context_note(), "");
}

TEST(EngineProbe, DescribesTheModel) {
  Fixture f;
  auto i = probe_model(f.model);
  ASSERT_TRUE(i.ok()) << i.error().message;
  EXPECT_EQ(i->architecture, "llama");
  EXPECT_EQ(i->n_ctx_train, 512);
  EXPECT_EQ(i->n_layer, 2);
  EXPECT_EQ(i->n_kv_heads, 2);
  EXPECT_EQ(i->head_dim, 16);
  EXPECT_EQ(i->kv_bytes_per_token_f16, 2 * 2 * 2 * 16 * 2);  // layers * K,V * kv heads * dim * 2 B
  ASSERT_FALSE(i->tensor_types.empty());
  EXPECT_EQ(i->tensor_types[0], "F32");
  EXPECT_EQ(i->file_bytes, static_cast<int64_t>(fs::file_size(f.model)));
}

TEST(EngineComplete, GreedyTextEqualsAHandWrittenLoop) {
  Fixture f;
  auto e = f.engine();
  const std::string prompt = "the cat";
  const auto ids = e->tokenizer().encode(prompt, true, false);
  const auto want = greedy_ids(*e, ids, 12);
  Completion c;
  c.max_tokens = 12;
  c.sampling = greedy();
  std::string streamed;
  int usage_calls = 0;
  RunCallbacks cb;
  cb.piece = [&](const std::string& p) { streamed += p; };
  cb.usage = [&](const SessionUsage& u) {
    ++usage_calls;
    EXPECT_GT(u.n_past, 0);
  };
  auto r = complete_text(*e, prompt, c, cb);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->text, pieces(*e, want));
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->prompt_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(r->completion_tokens, static_cast<int64_t>(want.size()));
  if (want.size() == 12) EXPECT_EQ(r->finish_reason, "length");
  EXPECT_GE(usage_calls, static_cast<int>(want.size()));  // prefill + a decode step per token
}

// Unbounded, a completion ends when prompt and completion fill the context, never past it: the
// usage (prompt + completion tokens) is the context, and the text is the greedy continuation.
TEST(EngineComplete, UnboundedCompletionFillsTheContextAndNoMore) {
  Fixture f;
  EngineSettings s;
  s.n_ctx = 16;
  auto e = f.engine(s);
  ASSERT_NE(e, nullptr);
  const std::string prompt = "the cat";
  const auto ids = e->tokenizer().encode(prompt, true, false);
  const int n_room = 16 - static_cast<int>(ids.size());
  const auto want = greedy_ids(*e, ids, n_room - 1);  // the last one needs no eval
  Completion c;
  c.max_tokens = -1;
  c.sampling = greedy();
  auto r = complete_text(*e, prompt, c, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_LE(r->prompt_tokens + r->completion_tokens, 16);
  if (static_cast<int>(want.size()) < n_room - 1) GTEST_SKIP() << "greedy text ends early";
  EXPECT_EQ(r->finish_reason, "length");
  EXPECT_EQ(r->prompt_tokens + r->completion_tokens, 16);
  EXPECT_TRUE(r->text.starts_with(pieces(*e, want))) << r->text;
}

TEST(EngineComplete, StopStringCutsTheTextAndIsNeverStreamed) {
  Fixture f;
  auto e = f.engine();
  const auto ids = e->tokenizer().encode("the cat", true, false);
  const std::string full = pieces(*e, greedy_ids(*e, ids, 24));
  ASSERT_GE(full.size(), 8u);
  const std::string stop = full.substr(4, 3);  // three bytes from the middle
  const size_t at = full.find(stop);
  Completion c;
  c.max_tokens = 24;
  c.sampling = greedy();
  c.stop = {"\x01never", stop};
  std::string streamed;
  RunCallbacks cb;
  cb.piece = [&](const std::string& p) { streamed += p; };
  auto r = complete_text(*e, "the cat", c, cb);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, full.substr(0, at));
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->finish_reason, "stop");
}

TEST(EngineComplete, ChatUsesTheTemplate) {
  Fixture f;
  EngineSettings s;
  s.template_name = "chatml";
  auto e = f.engine(s);
  const std::vector<ChatMessage> msgs = {{ChatRole::System, "be brief"}, {ChatRole::User, "hello"}};
  const auto ids = tokenize_chat(e->tokenizer(), ChatFamily::ChatML, msgs, true);
  Completion c;
  c.max_tokens = 6;
  c.sampling = greedy();
  auto r = complete_chat(*e, msgs, c, {});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->prompt_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_EQ(r->text, pieces(*e, greedy_ids(*e, ids, 6)));
}

TEST(EngineComplete, CancelStopsBetweenUbatchesAndTokens) {
  Fixture f;
  EngineSettings s;
  s.n_ubatch = 4;
  auto e = f.engine(s);
  std::string prompt;
  for (int i = 0; i < 30; ++i) prompt += "the cat ";
  // Cancelled during the prompt: after the first ubatch, nothing generated.
  int64_t seen_past = 0;
  RunCallbacks cb;
  cb.usage = [&](const SessionUsage& u) { seen_past = u.n_past; };
  cb.cancelled = [&] { return seen_past >= 4; };
  Completion c;
  c.max_tokens = 50;
  c.sampling = greedy();
  auto r = complete_text(*e, prompt, c, cb);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_EQ(r->completion_tokens, 0);
  EXPECT_EQ(seen_past, 4);  // one ubatch ran
  // Cancelled after 3 tokens.
  int n = 0;
  RunCallbacks cb2;
  cb2.piece = [&](const std::string&) { ++n; };
  cb2.cancelled = [&] { return n >= 3; };
  auto r2 = complete_text(*e, "the cat", c, cb2);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->finish_reason, "cancelled");
  EXPECT_LE(r2->completion_tokens, 4);
}

TEST(EngineComplete, PromptLongerThanTheContextIsAnError) {
  Fixture f;
  EngineSettings s;
  s.n_ctx = 16;
  auto e = f.engine(s);
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "the cat ";
  auto r = complete_text(*e, prompt, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("the context holds 16"), std::string::npos);
}

TEST(EngineAsk, LibraryDocumentSavesThenReusesKv) {
  Fixture f;
  EngineSettings s;
  s.device = "cpu";
  auto e = f.engine(s);
  auto lib = Library::open(fs::path(f.dir.path()) / "library.sqlite3");
  ASSERT_TRUE(lib.ok());
  DocumentRecord d;
  d.title = "Contract";
  d.sha256 = std::string(64, 'a');
  std::vector<PageRecord> pages(2);
  pages[0].page_no = 1;
  pages[0].text = pages[0].original_text = "the term is one year";
  pages[1].page_no = 2;
  pages[1].text = pages[1].original_text = "the law of the state";
  auto id = (*lib)->add_document(d, pages);
  ASSERT_TRUE(id.ok());

  DocumentAsk ask;
  ask.doc_id = *id;
  ask.question = "what is the term?";
  ask.n_predict = 5;
  ask.sampling = greedy();
  ask.snapshot_dir = fs::path(f.dir.path()) / "snapshots";
  std::string streamed;
  int usage_calls = 0;
  RunCallbacks cb;
  cb.piece = [&](const std::string& p) { streamed += p; };
  cb.usage = [&](const SessionUsage&) { ++usage_calls; };
  auto a1 = ask_library_document(*e, **lib, ask, cb);
  ASSERT_TRUE(a1.ok()) << a1.error().message;
  EXPECT_EQ(streamed, a1->result.answer);
  EXPECT_FALSE(a1->result.reused_snapshot);
  EXPECT_GT(a1->result.prefill_tokens_computed, 0);
  EXPECT_GT(usage_calls, 0);
  EXPECT_EQ(a1->backend.rfind("cpu", 0), 0u) << a1->backend;
  auto snaps = (*lib)->snapshots();
  ASSERT_TRUE(snaps.ok());
  ASSERT_EQ(snaps->size(), 1u);
  EXPECT_TRUE(fs::exists((*snaps)[0].path));

  auto a2 = ask_library_document(*e, **lib, ask, {});
  ASSERT_TRUE(a2.ok()) << a2.error().message;
  EXPECT_TRUE(a2->result.reused_snapshot);
  EXPECT_EQ(a2->result.answer, a1->result.answer);  // greedy: the same answer from saved KV
  EXPECT_LT(a2->result.prefill_tokens_computed, a1->result.prefill_tokens_computed);

  ask.doc_id = 999;
  EXPECT_EQ(ask_library_document(*e, **lib, ask, {}).error().message, "no document with id 999");
}

TEST(EngineAsk, CancelledAskIsAnError) {
  Fixture f;
  EngineSettings s;
  s.device = "cpu";
  auto e = f.engine(s);
  auto lib = Library::open(fs::path(f.dir.path()) / "library.sqlite3");
  ASSERT_TRUE(lib.ok());
  DocumentRecord d;
  d.title = "T";
  d.sha256 = std::string(64, 'b');
  std::vector<PageRecord> pages(1);
  pages[0].page_no = 1;
  pages[0].text = pages[0].original_text = "some text on a page";
  auto id = (*lib)->add_document(d, pages);
  ASSERT_TRUE(id.ok());
  DocumentAsk ask;
  ask.doc_id = *id;
  ask.question = "q?";
  ask.n_predict = 50;
  ask.sampling = greedy();
  std::atomic<int> n{0};
  RunCallbacks cb;
  cb.piece = [&](const std::string&) { ++n; };
  cb.cancelled = [&] { return n >= 2; };
  auto a = ask_library_document(*e, **lib, ask, cb);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message, "cancelled");
}

}  // namespace
}  // namespace spw::app
