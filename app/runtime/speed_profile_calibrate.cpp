// The speed profile's calibration (what is timed, in which order) and the fit of its timings to
// the two curves (speed_profile.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <vector>

#include <fmt/format.h>

#include "app/runtime/speed_profile.h"
#include "engine/backend/cpu/cpu_session.h"
#include "engine/common/machine.h"
#include "engine/kv/snapshot.h"

namespace spw::app {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Least squares of s_per_token = a + b * depth, weighted by tokens; b < 0 (noise) gives a flat
// line at the weighted mean, and so does a line that would be 0 or less at depth 0.
void fit_line(std::span<const TimedTokens> v, double& a, double& b) {
  double w = 0, x = 0, y = 0;
  for (const TimedTokens& s : v) {
    w += s.tokens;
    x += s.tokens * s.depth;
    y += s.tokens * s.s_per_token;
  }
  const double mx = x / w, my = y / w;
  double sxx = 0, sxy = 0;
  for (const TimedTokens& s : v) {
    sxx += s.tokens * (s.depth - mx) * (s.depth - mx);
    sxy += s.tokens * (s.depth - mx) * (s.s_per_token - my);
  }
  b = sxx > 0 ? sxy / sxx : 0;
  if (b < 0) b = 0;
  a = my - b * mx;
  if (a <= 0) {
    b = 0;
    a = my;
  }
}

// The tokens-weighted mean depth and seconds per token of some stretches.
TimedTokens mean_of(std::span<const TimedTokens> v) {
  TimedTokens m{0, 0, 0};
  for (const TimedTokens& s : v) {
    m.depth += s.tokens * s.depth;
    m.s_per_token += s.tokens * s.s_per_token;
    m.tokens += s.tokens;
  }
  if (m.tokens > 0) {
    m.depth /= m.tokens;
    m.s_per_token /= m.tokens;
  }
  return m;
}

}  // namespace

double typical_step_s(std::span<const double> step_s) {
  if (step_s.empty()) return 0;
  std::vector<double> v(step_s.begin(), step_s.end());
  std::sort(v.begin(), v.end());
  const double limit = 4 * v[v.size() / 2];
  double sum = 0;
  size_t n = 0;
  for (const double s : v) {
    if (s > limit) break;
    sum += s;
    ++n;
  }
  return sum / static_cast<double>(n);
}

DepthCost fit_prefill_cost(const CalibrationTimings& t) {
  std::vector<TimedTokens> ub = t.ubatches;
  if (ub.size() >= 3) ub.erase(ub.begin());
  DepthCost c;
  if (ub.empty()) return c;
  double b = 0;
  fit_line(ub, c.a, b);
  // The line holds up to the anchor chunks (right after the prefill); the deeper knots are the
  // probe chunks' growth over them.
  const TimedTokens anchor =
      t.anchor_chunks.empty() ? TimedTokens{ub.back().depth, 0, 0} : mean_of(t.anchor_chunks);
  if (!(anchor.depth > 0)) return c;
  c.knots.push_back({anchor.depth, b * anchor.depth});
  if (t.anchor_chunks.empty()) return c;
  std::vector<TimedTokens> probes = t.probe_chunks;
  std::sort(probes.begin(), probes.end(),
            [](const TimedTokens& x, const TimedTokens& y) { return x.depth < y.depth; });
  for (const TimedTokens& p : probes) {
    if (!(p.depth > c.knots.back().depth)) continue;
    const double g = b * anchor.depth + (p.s_per_token - anchor.s_per_token);
    c.knots.push_back({p.depth, std::max(g, c.knots.back().g)});
  }
  return c;
}

DepthCost fit_decode_cost(std::span<const TimedSteps> groups) {
  std::vector<std::pair<double, double>> points;  // (mean position of the steps, s per step)
  for (const TimedSteps& g : groups) {
    if (g.step_s.empty()) continue;
    points.emplace_back(
        static_cast<double>(g.depth) + 0.5 * static_cast<double>(g.step_s.size() - 1),
        typical_step_s(g.step_s));
  }
  std::sort(points.begin(), points.end());
  DepthCost c;
  if (points.empty()) return c;
  const auto [d0, t0] = points[0];
  c.a = t0;
  if (points.size() == 1) return c;
  const auto [d1, t1] = points[1];
  if (d1 > d0) c.a = std::clamp((t0 * d1 - t1 * d0) / (d1 - d0), 0.5 * t0, t0);
  for (size_t i = 1; i < points.size(); ++i) {
    const double last_depth = c.knots.empty() ? 0 : c.knots.back().depth;
    const double last_g = c.knots.empty() ? 0 : c.knots.back().g;
    if (!(points[i].first > last_depth)) continue;
    c.knots.push_back({points[i].first, std::max(points[i].second - c.a, last_g)});
  }
  return c;
}

Expected<SpeedProfile> calibrate_speed(Session& s, const CalibrationParams& params) {
  if (params.n_ubatch < 1 || params.n_decode < 1 || params.chunk_tokens < 1)
    return Error{"calibration: nothing to time"};
  const int64_t n_decode = params.n_decode, chunk = params.chunk_tokens;
  // After the prefill: two chunks and decode steps; before it, a warm-up step and decode steps.
  const int64_t tail = 2 * chunk + 2 * n_decode + 1;
  const int64_t room = s.n_ctx() - s.n_past() - tail;
  if (s.n_past() != 0 || room < 2 * params.n_ubatch) {
    return make_error(
        "calibration needs an empty session with room for two {}-token ubatches, {} decode "
        "steps and {} chunk tokens; the context holds {} tokens ({} used)",
        params.n_ubatch, 2 * n_decode + 1, 2 * chunk, s.n_ctx(), s.n_past());
  }
  const auto calibration_t0 = Clock::now();
  CalibrationTimings t;
  const int32_t one[1] = {params.token};
  // Decode steps from the session's depth on (8 at least, then until the group's time is up).
  const auto time_steps = [&]() -> Status {
    TimedSteps& g = t.decode.emplace_back();
    g.depth = s.n_past();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < n_decode; ++i) {
      const auto ts = Clock::now();
      if (auto st = s.eval(one, true); !st) return st;
      g.step_s.push_back(seconds_since(ts));
      if (i + 1 >= 8 && seconds_since(t0) > params.max_decode_group_s) break;
    }
    return Status::Ok();
  };
  // A prompt chunk from the session's depth on, into `out`.
  const std::vector<int32_t> chunk_ids(static_cast<size_t>(chunk), params.token);
  const auto time_chunk = [&](std::vector<TimedTokens>& out) -> Status {
    const double depth = static_cast<double>(s.n_past()) + 0.5 * static_cast<double>(chunk - 1);
    const auto t0 = Clock::now();
    if (auto st = s.eval(chunk_ids, false); !st) return st;
    out.push_back(
        {depth, seconds_since(t0) / static_cast<double>(chunk), static_cast<double>(chunk)});
    return Status::Ok();
  };

  // Decode steps near depth 0 (the first eval is a one-token prefill: a warm-up).
  if (auto st = s.eval(one, true); !st) return st.error();
  if (auto st = time_steps(); !st) return st.error();
  // The prefill, whole ubatches only (a short last one costs more per token), timed per ubatch,
  // up to params.depth (rounded up to whole ubatches) within the room left.
  const int64_t want = std::max<int64_t>(0, params.depth - s.n_past());
  const int64_t n_ubatches = std::max<int64_t>(
      2, std::min((want + params.n_ubatch - 1) / params.n_ubatch, room / params.n_ubatch));
  const std::vector<int32_t> tokens(static_cast<size_t>(n_ubatches * params.n_ubatch),
                                    params.token);
  const auto base = static_cast<double>(s.n_past());
  const EvalProgress outer = s.eval_progress();
  auto last_t = Clock::now();
  const auto prefill_t0 = last_t;
  int64_t last_done = 0;
  s.set_eval_progress([&](int64_t done, int64_t) {
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - last_t).count();
    const auto n = static_cast<double>(done - last_done);
    if (n > 0)
      t.ubatches.push_back({base + static_cast<double>(last_done) + (n - 1) / 2, dt / n, n});
    last_t = now;
    last_done = done;
    // Past the time budget: stop after this ubatch (eval() then says "cancelled").
    return t.ubatches.size() < 2 ||
           std::chrono::duration<double>(now - prefill_t0).count() < params.max_prefill_s;
  });
  last_t = Clock::now();
  Status st = s.eval(tokens, false);
  s.set_eval_progress(outer);
  if (!st && st.error().message != "cancelled") return st.error();
  const int64_t prefill_end = s.n_past();
  // Two chunks and decode steps where the prefill ended.
  for (int i = 0; i < 2; ++i) {
    if (auto c = time_chunk(t.anchor_chunks); !c) return c.error();
  }
  if (auto c = time_steps(); !c) return c.error();

  // Deeper, through copies of the blocks computed so far: at the window's edge (the last depth
  // with no cold position) and at the probe depth (a block boundary, so its first decode step
  // spills a block), while the estimated time of the deep steps fits max_probe_s.
  auto* cpu = dynamic_cast<cpu::CpuSession*>(&s);
  int64_t window = 0;
  if (cpu != nullptr && params.probe_depth > 0) {
    const kv::TierLayout& layout = cpu->cache().layout();
    const int64_t bs = layout.block_size;
    window = layout.window_tokens;
    const DepthCost pre = fit_prefill_cost(t), dec = fit_decode_cost(t.decode);
    const auto estimate = [&](int64_t d) {
      const auto dd = static_cast<double>(d);
      return static_cast<double>(chunk) * pre.token_s(dd) +
             std::min(static_cast<double>(n_decode) * dec.token_s(dd), params.max_decode_group_s);
    };
    int64_t deep = std::min(params.probe_depth, s.n_ctx() - n_decode - chunk) / bs * bs;
    while (deep > s.n_past() && estimate(deep) > params.max_probe_s) deep = deep / 2 / bs * bs;
    std::vector<int64_t> depths;
    const int64_t edge = window / bs * bs;
    if (edge > s.n_past() && edge < deep) depths.push_back(edge);
    if (deep > s.n_past()) depths.push_back(deep);
    for (const int64_t d : depths) {
      if (auto r = cpu->repeat_kv(d); !r) return r.error();
      if (auto c = time_steps(); !c) return c.error();
      if (auto c = time_chunk(t.probe_chunks); !c) return c.error();
    }
  }

  SpeedProfile p;
  p.calibrated_at = static_cast<int64_t>(std::time(nullptr));
  p.prefill_depth = prefill_end;
  p.calibration_depth = t.decode.back().depth;
  p.window_tokens = window;
  p.calibration_s = seconds_since(calibration_t0);
  p.machine = machine_name();
  p.prefill = fit_prefill_cost(t);
  p.decode = fit_decode_cost(t.decode);
  if (!(p.prefill.a > 0) || !(p.decode.a > 0))
    return Error{"calibration: the clock measured no time for the prefill or the decode steps"};
  return p;
}

Expected<SpeedProfile> cached_or_calibrated_profile(const Model& model, SessionParams sp,
                                                    BackendOptions opts, const fs::path& cache_dir,
                                                    CalibrationParams params, bool* calibrated) {
  if (calibrated) *calibrated = false;
  opts.device = DeviceKind::Cpu;
  const ModelConfig& c = model.config();
  const int64_t n_ctx_train = c.n_ctx_train;
  auto margin = [&] { return 2 * params.chunk_tokens + 2 * params.n_decode + 1; };
  if (n_ctx_train < 4 * margin()) {  // a short trained context: fewer steps, shorter chunks
    params.n_decode = std::min(params.n_decode, 8);
    params.chunk_tokens = std::min<int64_t>(params.chunk_tokens, 8);
  }
  params.n_ubatch = opts.n_ubatch;
  params.depth = std::min(params.depth, n_ctx_train - margin());
  if (params.depth < 2 * params.n_ubatch) {  // smaller ubatches
    params.n_ubatch = std::max<int64_t>(1, (n_ctx_train - margin()) / 2);
    params.depth = 2 * params.n_ubatch;
  }
  opts.n_ubatch = params.n_ubatch;
  // The deep probe: within the trained context, its KV at most 1 GiB and a quarter of the RAM
  // available now.
  const auto element_bytes = [](KvType t) {
    return t == KvType::F32 ? 4.0 : t == KvType::F16 ? 2.0 : 34.0 / 32.0;
  };
  const double kv_per_token = static_cast<double>(c.n_layer * c.n_head_kv) *
                              (static_cast<double>(c.head_dim) * element_bytes(sp.kv_type_k) +
                               static_cast<double>(c.head_dim_v) * element_bytes(sp.kv_type_v));
  double kv_cap = 1024.0 * 1024 * 1024;
  if (const MachineMemory mem = read_machine_memory(); mem.available_bytes > 0)
    kv_cap = std::min(kv_cap, static_cast<double>(mem.available_bytes) / 4);
  const int64_t probe_room = params.n_decode + params.chunk_tokens;
  params.probe_depth = std::max<int64_t>(
      0, std::min({params.probe_depth, static_cast<int64_t>(kv_cap / std::max(1.0, kv_per_token)),
                   n_ctx_train - probe_room}));
  sp.n_ctx = std::max(params.depth + margin(), params.probe_depth + probe_room);
  // The calibration's session has the default KV settings: the window in RAM, the positions out
  // of it on the host tier (no budget, no disk tier), as a run with the defaults.
  opts.kv = kv::KvSettings{};
  auto choice = create_session(model, sp, opts);
  if (!choice) return choice.error();
  const uint64_t fingerprint = kv::model_fingerprint(model);
  const std::string machine = machine_name();
  if (auto cached = load_speed_profile(cache_dir, fingerprint, machine, choice->backend))
    return *cached;
  auto p = calibrate_speed(*choice->session, params);
  if (!p) return p.error();
  p->model_fingerprint = fingerprint;
  p->backend = choice->backend;
  if (calibrated) *calibrated = true;
  (void)save_speed_profile(cache_dir, *p);
  return p;
}

}  // namespace spw::app
