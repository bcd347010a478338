#include "engine/kv/tier_policy.h"

#include <algorithm>
#include <cassert>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "engine/common/size.h"
#include "engine/gguf/ggml_types.h"

namespace spw::kv {

// ---- The settings -----------------------------------------------------------------------------

namespace {

// The checks of a block size, a sink count and a window, shared by validate() (the settings)
// and plan_tiers() (the numbers a cache or a plan is made from).
Status check_paging(int64_t block_size, int64_t n_sinks, int64_t window_tokens) {
  if (block_size < 1)
    return make_error("--kv-block {}: a block holds at least 1 token", block_size);
  if (block_size > kMaxBlockTokens) {
    return make_error("--kv-block {} is too large (at most {} tokens)", block_size,
                      kMaxBlockTokens);
  }
  if (n_sinks < 0) return make_error("--kv-sinks {} must not be negative", n_sinks);
  if (window_tokens < 1)
    return make_error("--kv-window {}: the window holds at least 1 token", window_tokens);
  return Status::Ok();
}

}  // namespace

Status validate(const KvSettings& s, bool need_spill_dir) {
  if (Status st = check_paging(s.block_size, s.n_sinks, s.window_tokens.value_or(1)); !st)
    return st;
  if (s.disk_budget < 0) return make_error("--disk-budget {} must not be negative", s.disk_budget);
  if (need_spill_dir && s.disk_budget > 0 && s.spill_dir.empty())
    return Error{"--disk-budget needs a folder for the spill file: set --spill-dir DIR"};
  if (s.attention == KvAttention::TopK && s.top_k < 1)
    return make_error("--attention topk needs K >= 1 (got {})", s.top_k);
  return Status::Ok();
}

Status parse_kv_window(std::string_view text, KvSettings& s) {
  if (text.size() == 4 && std::tolower(static_cast<unsigned char>(text[0])) == 'a' &&
      std::tolower(static_cast<unsigned char>(text[1])) == 'u' &&
      std::tolower(static_cast<unsigned char>(text[2])) == 't' &&
      std::tolower(static_cast<unsigned char>(text[3])) == 'o') {  // auto, any case
    s.window_tokens.reset();
    return Status::Ok();
  }
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || text[0] == '-') {
    return make_error("--kv-window '{}': give a number of tokens (at least 1) or auto", text);
  }
  if (Status st = check_paging(kDefaultBlockTokens, 0, n); !st) return st;
  s.window_tokens = n;
  return Status::Ok();
}

std::string kv_window_name(const KvSettings& s) {
  return s.window_tokens ? std::to_string(*s.window_tokens) : std::string("auto");
}

Status parse_kv_attention(std::string_view text, KvSettings& s) {
  if (text == "exact" || text == "streaming") {
    s.attention = text == "exact" ? KvAttention::Exact : KvAttention::Streaming;
    s.top_k = 0;
    return Status::Ok();
  }
  constexpr std::string_view kTopK = "topk:";
  if (text.substr(0, kTopK.size()) == kTopK && text.size() > kTopK.size() &&
      text.size() <= kTopK.size() + 9) {
    int64_t k = 0;
    bool digits = true;
    for (const char c : text.substr(kTopK.size())) {
      digits &= c >= '0' && c <= '9';
      k = k * 10 + (c - '0');
    }
    if (digits && k >= 1) {
      s.attention = KvAttention::TopK;
      s.top_k = k;
      return Status::Ok();
    }
  }
  return make_error("unknown attention mode '{}' (accepted: exact, streaming, topk:K with K >= 1)",
                    text);
}

std::string kv_attention_name(const KvSettings& s, bool labelled) {
  switch (s.attention) {
    case KvAttention::Exact:
      return "exact";
    case KvAttention::Streaming:
      return labelled ? "streaming (approximate)" : "streaming";
    case KvAttention::TopK:
      return fmt::format("topk:{}{}", s.top_k, labelled ? " (approximate)" : "");
  }
  return "unknown";
}

// ---- From settings to tiers -------------------------------------------------------------------

int64_t window_tokens(const KvSettings& s, WindowHome home, int64_t n_ctx) {
  if (s.window_tokens) return *s.window_tokens;
  return home == WindowHome::Ram ? kDefaultRamWindowTokens : std::max<int64_t>(1, n_ctx);
}

std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::Window:
      return "window";
    case Tier::Host:
      return "host";
    case Tier::Disk:
      return "disk";
  }
  return "?";
}

TierConfig tier_config(const KvSettings& s, WindowHome home, int64_t n_ctx) {
  TierConfig c;
  c.n_ctx = n_ctx;
  c.block_size = s.block_size;
  c.n_sinks = s.n_sinks;
  c.window_tokens = window_tokens(s, home, n_ctx);
  c.host_budget = s.host_budget;
  c.disk_budget = s.disk_budget;
  return c;
}

Expected<int64_t> kv_row_bytes(GgmlType type, int64_t head_dim, std::string_view what) {
  switch (type) {
    case GgmlType::F32:
      return 4 * head_dim;
    case GgmlType::F16:
      return 2 * head_dim;
    case GgmlType::Q8_0:
      if (head_dim % kQK8_0 != 0) {
        return make_error("q8_0 KV cache needs {} % 32 == 0 (this model has {} {})", what, what,
                          head_dim);
      }
      return head_dim / kQK8_0 * static_cast<int64_t>(sizeof(BlockQ8_0));
    default:
      return make_error("unsupported KV cache type {} (accepted: f32, f16, q8_0)",
                        type_name(static_cast<uint32_t>(type)));
  }
}

QueryBlocks WindowRule::query(int64_t p) const {
  QueryBlocks q;
  q.last = p / block_size;
  q.sink_end = std::min(sink_blocks, q.last + 1);
  q.cold_end = std::max(q.sink_end, q.last - recent_blocks + 1);
  return q;
}

int64_t WindowRule::cold_end(int64_t n_blocks) const {
  return n_blocks == 0 ? 0 : query((n_blocks - 1) * block_size).cold_end;
}

Tier TierLayout::tier_of(int64_t pos, int64_t n_past) const {
  assert(pos >= 0 && pos < n_past);
  if (drops()) return Tier::Window;  // held or dropped: never cold
  const int64_t b = pos / block_size;
  if (!window.query(n_past - 1).cold(b)) return Tier::Window;
  return b - window.sink_blocks < host_slots ? Tier::Host : Tier::Disk;
}

int64_t TierLayout::pool_slots(int64_t n_ubatch) const {
  if (drops()) {  // the span before the ubatch's first query, and the ubatch's own positions
    return std::min(n_blocks,
                    ceil_div(span_tokens - 1 + std::min(n_ubatch, n_ctx), block_size) + 1);
  }
  if (window.total() >= n_blocks) return n_blocks;
  const int64_t ub = ceil_div(std::min(n_ubatch, n_ctx), block_size) + 1;
  return std::min(window.total() + ub, n_blocks) + kSpareWindowSlots;
}

std::string TierLayout::capacity_detail() const {
  if (drops()) {
    return fmt::format("(sliding window {} tokens, context {} tokens)", span_tokens, n_ctx);
  }
  std::string s = fmt::format("(window {} tokens", window.total() * block_size);
  if (host_budget_blocks < 0) {
    s += ", host unlimited";
  } else {
    s += fmt::format(", host {} = {} blocks", format_size(host_budget), host_budget_blocks);
  }
  if (disk_budget == 0) {
    s += ", no disk budget";
  } else {
    s += fmt::format(", disk {} = {} blocks", format_size(disk_budget), disk_budget_blocks);
  }
  if (max_tokens == n_ctx) s += fmt::format(", context {} tokens", n_ctx);
  return s + ")";
}

Expected<TierLayout> plan_tiers(const TierConfig& c) {
  if (c.n_layer <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.head_dim_v <= 0) {
    return make_error(
        "invalid KV cache shape: n_layer {}, n_kv_heads {}, head_dim {}, head_dim_v {} (all must "
        "be > 0)",
        c.n_layer, c.n_kv_heads, c.head_dim, c.head_dim_v);
  }
  if (c.n_ctx <= 0) return make_error("a context of {} tokens: it holds at least 1", c.n_ctx);
  if (c.n_ctx > kMaxContextTokens) {
    return make_error("context of {} tokens is too large (at most {})", c.n_ctx, kMaxContextTokens);
  }
  if (c.span_tokens < 0) {
    return make_error("a sliding window of {} tokens: it holds at least 1", c.span_tokens);
  }
  if (Status st = check_paging(c.block_size, c.n_sinks, c.window_tokens); !st) return st.error();
  if (c.disk_budget < 0) return make_error("--disk-budget {} must not be negative", c.disk_budget);
  auto rk = kv_row_bytes(c.type_k, c.head_dim, "head_dim");
  if (!rk) return rk.error();
  auto rv = kv_row_bytes(c.type_v, c.head_dim_v, "head_dim_v");
  if (!rv) return rv.error();

  TierLayout t;
  t.n_ctx = c.n_ctx;
  t.block_size = std::min(c.block_size, c.n_ctx);
  t.n_sinks = std::min(c.n_sinks, c.n_ctx);
  t.window_tokens = std::min(c.window_tokens, c.n_ctx);
  t.host_budget = c.host_budget;
  t.disk_budget = c.disk_budget;
  const int64_t bs = t.block_size;
  t.row_k = *rk;
  t.row_v = *rv;
  t.layer_k_bytes = c.n_kv_heads * bs * t.row_k;
  t.layer_bytes = t.layer_k_bytes + c.n_kv_heads * bs * t.row_v;
  t.block_bytes = c.n_layer * t.layer_bytes;
  t.kv_bytes_per_token = c.n_layer * c.n_kv_heads * (t.row_k + t.row_v);
  t.window = WindowRule{bs, ceil_div(t.n_sinks, bs), ceil_div(t.window_tokens, bs)};
  t.n_blocks = ceil_div(t.n_ctx, bs);
  t.window_blocks = std::min(t.window.total(), t.n_blocks);
  t.cold_blocks = t.n_blocks - t.window_blocks;
  t.host_budget_blocks = c.host_budget < 0 ? -1 : c.host_budget / t.block_bytes;
  t.disk_budget_blocks = c.disk_budget / t.block_bytes;
  t.host_slots =
      t.host_budget_blocks < 0 ? t.cold_blocks : std::min(t.host_budget_blocks, t.cold_blocks);
  t.disk_slots = std::min(t.disk_budget_blocks, t.cold_blocks - t.host_slots);
  t.max_tokens = std::min(t.n_ctx, (t.window.total() + t.host_slots + t.disk_slots) * bs);
  if (c.span_tokens > 0) {  // sliding layers: the span's blocks, nothing cold, no budgets
    t.span_tokens = std::min(c.span_tokens, t.n_ctx);
    t.n_sinks = 0;
    t.window_tokens = t.span_tokens;
    t.host_budget = -1;
    t.disk_budget = 0;
    t.window = WindowRule{bs, 0, ceil_div(t.span_tokens - 1, bs) + 1, t.span_tokens};
    t.window_blocks = std::min(t.window.total(), t.n_blocks);
    t.cold_blocks = t.n_blocks - t.window_blocks;
    t.host_budget_blocks = -1;
    t.disk_budget_blocks = 0;
    t.host_slots = t.disk_slots = 0;
    t.max_tokens = t.n_ctx;
  }
  return t;
}

int64_t fit_recent_blocks(int64_t slots, int64_t fixed, const WindowRule& w) {
  return std::max<int64_t>(0, slots - fixed - w.sink_blocks);
}

// ---- The default context ----------------------------------------------------------------------

int64_t default_kv_ram_budget(const MachineMemory& m, int64_t weights_bytes) {
  int64_t room = -1;
  const int64_t available = m.available_bytes > 0 ? m.available_bytes : m.physical_bytes;
  if (available > 0) room = std::max<int64_t>(0, available - std::max<int64_t>(0, weights_bytes));
  // The address space left already excludes the mapped weights (it is measured after the load).
  if (m.address_space_left >= 0)
    room = room < 0 ? m.address_space_left : std::min(room, m.address_space_left);
  return room < 0 ? -1 : room / 2;
}

namespace {

// What decided default_kv_ram_budget(), for the note.
std::string_view ram_budget_basis(const MachineMemory& m, int64_t weights_bytes) {
  const int64_t available = m.available_bytes > 0 ? m.available_bytes : m.physical_bytes;
  const int64_t room = std::max<int64_t>(0, available - std::max<int64_t>(0, weights_bytes));
  if (m.address_space_left >= 0 && (available <= 0 || m.address_space_left < room))
    return "half the address space the ulimit leaves";
  return m.available_bytes > 0 ? "half the available memory less the weights"
                               : "half the installed memory less the weights";
}

}  // namespace

std::string group_thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

Expected<TierLayout> fit_ram_budget(TierConfig c, int64_t ram_budget) {
  c.host_budget = -1;
  auto whole = plan_tiers(c);
  if (!whole) return whole;
  // The cold blocks get what the window leaves of the budget; the disk tier holds the rest.
  c.host_budget = std::max<int64_t>(0, ram_budget - whole->window_blocks * whole->block_bytes);
  return plan_tiers(c);
}

Expected<ContextChoice> choose_context(const ContextRequest& r) {
  ContextChoice out;
  out.kv = r.kv;
  // A file may claim more context than a cache can hold (context_length 4294967295): plan for
  // the most a cache holds, so -c (or the budgets) still choose a context that runs.
  const int64_t trained = std::min(r.n_ctx_train, kMaxContextTokens);
  out.n_ctx = r.n_ctx > 0 ? r.n_ctx : trained;
  TierConfig tc = tier_config(r.kv, WindowHome::Ram, trained);
  tc.n_layer = r.shape.n_layer;
  tc.n_kv_heads = r.shape.n_kv_heads;
  tc.head_dim = r.shape.head_dim;
  tc.head_dim_v = r.shape.head_dim_v;
  tc.type_k = r.shape.type_k;
  tc.type_v = r.shape.type_v;
  tc.host_budget = -1;
  // Sliding layers: their window at its fullest, whatever the context (one group per span).
  int64_t sliding_bytes = 0;
  std::vector<int64_t> spans;
  for (const int64_t s : r.layer_span) {
    if (s > 0 && std::find(spans.begin(), spans.end(), s) == spans.end()) spans.push_back(s);
  }
  for (const int64_t s : spans) {
    TierConfig sc = tc;
    sc.n_layer = std::count(r.layer_span.begin(), r.layer_span.end(), s);
    sc.span_tokens = s;
    auto t = plan_tiers(sc);
    if (!t) return t.error();
    sliding_bytes += std::min(t->n_blocks, t->pool_slots(r.n_ubatch)) * t->block_bytes;
  }
  if (!r.layer_span.empty()) {
    tc.n_layer = std::count(r.layer_span.begin(), r.layer_span.end(), int64_t{0});
  }
  out.ram_budget = default_kv_ram_budget(r.machine, r.weights_bytes);
  if (tc.n_layer == 0) {  // every layer slides: the context costs nothing beyond the windows
    out.trained_kv_bytes = sliding_bytes;
    return out;
  }
  auto whole = plan_tiers(tc);
  if (!whole) return whole.error();
  out.trained_kv_bytes = whole->n_blocks * whole->block_bytes + sliding_bytes;
  if (r.n_ctx > 0 || r.kv.host_budget >= 0 || out.ram_budget < 0) return out;
  if (out.trained_kv_bytes <= out.ram_budget) return out;  // all of it fits in RAM

  out.chosen = true;
  const int64_t room = std::max<int64_t>(0, out.ram_budget - sliding_bytes);
  auto fitted = fit_ram_budget(tc, room);
  if (!fitted) return fitted.error();
  out.kv.host_budget = fitted->host_budget;
  out.n_ctx = fitted->max_tokens;
  // The window lives in RAM too: a budget below it holds a context of the blocks it has room for
  // (all of them then in the window), and one without room for a single block is an error.
  if (fitted->window_blocks * fitted->block_bytes > room) {
    const int64_t blocks = room / fitted->block_bytes;
    if (blocks < 1) {
      return Error{fmt::format(
          "no room for the KV cache: a block of {} tokens needs {}{}, the RAM budget is {} ({}); "
          "free memory, or give -c and --host-budget (or --mem-available) to plan with",
          fitted->block_size, format_size(fitted->block_bytes),
          sliding_bytes > 0
              ? fmt::format(" after the sliding layers' windows ({})", format_size(sliding_bytes))
              : std::string(),
          format_size(out.ram_budget), ram_budget_basis(r.machine, r.weights_bytes))};
    }
    out.n_ctx = blocks * fitted->block_size;
    out.kv.host_budget = 0;
  }
  if (out.n_ctx < r.n_ctx_train) {
    out.note = fmt::format(
        "context {} of {} trained: KV {}needs {}, RAM budget {} ({}){}; -c or Settings to change",
        group_thousands(out.n_ctx), group_thousands(r.n_ctx_train),
        trained < r.n_ctx_train
            ? fmt::format("of the {} tokens a cache holds ", group_thousands(trained))
            : std::string(),
        format_size(out.trained_kv_bytes), format_size(out.ram_budget),
        ram_budget_basis(r.machine, r.weights_bytes),
        r.kv.disk_budget > 0 ? fmt::format(" + disk budget {}", format_size(r.kv.disk_budget))
                             : std::string());
  }
  return out;
}

}  // namespace spw::kv
