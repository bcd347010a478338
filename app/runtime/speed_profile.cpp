#include "app/runtime/speed_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "engine/kv/snapshot.h"

namespace spw::app {

namespace fs = std::filesystem;

double SpeedProfile::prefill_s(int64_t n_tokens, int64_t depth) const {
  const auto n = static_cast<double>(std::max<int64_t>(0, n_tokens));
  const auto d = static_cast<double>(std::max<int64_t>(0, depth));
  // The sum over positions d .. d + n - 1 of a + b * position.
  return prefill_a * n + prefill_b * (d * n + n * (n - 1) / 2);
}

double SpeedProfile::decode_s(int64_t n_tokens, int64_t depth) const {
  const auto n = static_cast<double>(std::max<int64_t>(0, n_tokens));
  const auto d = static_cast<double>(std::max<int64_t>(0, depth));
  return decode_a * n + decode_b * (d * n + n * (n - 1) / 2);
}

double SpeedProfile::decode_tokens_per_s(int64_t depth) const {
  const double s = decode_a + decode_b * static_cast<double>(std::max<int64_t>(0, depth));
  return s > 0 ? 1.0 / s : 0;
}

std::string SpeedProfile::basis() const {
  const auto t = static_cast<std::time_t>(calibrated_at);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
  std::string out = fmt::format("measured profile, calibrated {}", date);
  if (runs_refined > 0)
    out += fmt::format(", refined by {} run{}", runs_refined, runs_refined == 1 ? "" : "s");
  return out;
}

std::string speed_profile_json(const SpeedProfile& p) {
  nlohmann::json j;
  j["model_fingerprint"] = fmt::format("{:016x}", p.model_fingerprint);
  j["machine"] = p.machine;
  j["backend"] = p.backend;
  j["calibrated_at"] = p.calibrated_at;
  j["calibration_depth"] = p.calibration_depth;
  j["runs_refined"] = p.runs_refined;
  j["prefill_s_per_token"] = {{"a", p.prefill_a}, {"b_per_depth", p.prefill_b}};
  j["decode_s_per_token"] = {{"a", p.decode_a}, {"b_per_depth", p.decode_b}};
  return j.dump(2);
}

Expected<SpeedProfile> parse_speed_profile(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return Error{"the speed profile is not a JSON object"};
  SpeedProfile p;
  try {
    p.model_fingerprint = std::stoull(j.at("model_fingerprint").get<std::string>(), nullptr, 16);
    p.machine = j.at("machine").get<std::string>();
    p.backend = j.at("backend").get<std::string>();
    p.calibrated_at = j.at("calibrated_at").get<int64_t>();
    p.calibration_depth = j.at("calibration_depth").get<int64_t>();
    p.runs_refined = j.at("runs_refined").get<int>();
    p.prefill_a = j.at("prefill_s_per_token").at("a").get<double>();
    p.prefill_b = j.at("prefill_s_per_token").at("b_per_depth").get<double>();
    p.decode_a = j.at("decode_s_per_token").at("a").get<double>();
    p.decode_b = j.at("decode_s_per_token").at("b_per_depth").get<double>();
  } catch (const std::exception& e) {
    return make_error("the speed profile lacks a field or has a wrong type: {}", e.what());
  }
  if (!(p.prefill_a > 0) || !(p.decode_a > 0) || p.prefill_b < 0 || p.decode_b < 0)
    return Error{"the speed profile's coefficients are not positive"};
  return p;
}

std::string machine_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown CPU";
}

fs::path speed_profile_file(const fs::path& cache_dir, uint64_t model_fingerprint,
                            const std::string& machine, const std::string& backend) {
  uint32_t h = 2166136261u;  // FNV-1a over "machine\nbackend"
  for (const char c : machine + "\n" + backend) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return cache_dir / "profiles" / fmt::format("{:016x}-{:08x}.json", model_fingerprint, h);
}

std::optional<SpeedProfile> load_speed_profile(const fs::path& cache_dir,
                                               uint64_t model_fingerprint,
                                               const std::string& machine,
                                               const std::string& backend) {
  std::ifstream in(speed_profile_file(cache_dir, model_fingerprint, machine, backend));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  auto p = parse_speed_profile(text.str());
  if (!p || p->model_fingerprint != model_fingerprint || p->machine != machine ||
      p->backend != backend)
    return std::nullopt;
  return *p;
}

Status save_speed_profile(const fs::path& cache_dir, const SpeedProfile& p) {
  const fs::path file = speed_profile_file(cache_dir, p.model_fingerprint, p.machine, p.backend);
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec) return make_error("cannot create {}: {}", file.parent_path().string(), ec.message());
  const fs::path tmp = file.string() + fmt::format(".tmp-{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << speed_profile_json(p) << "\n";
    if (!out.flush()) return make_error("cannot write {}", tmp.string());
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return make_error("cannot write {}", file.string());
  }
  return Status::Ok();
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Sample {
  double depth = 0;  // the mean position of the tokens timed
  double s_per_token = 0;
  double weight = 1;  // tokens timed
};

// Least squares of s_per_token = a + b * depth, weighted by tokens; b < 0 (noise) gives a flat
// line at the weighted mean.
void fit_line(const std::vector<Sample>& v, double& a, double& b) {
  double w = 0, x = 0, y = 0;
  for (const Sample& s : v) {
    w += s.weight;
    x += s.weight * s.depth;
    y += s.weight * s.s_per_token;
  }
  const double mx = x / w, my = y / w;
  double sxx = 0, sxy = 0;
  for (const Sample& s : v) {
    sxx += s.weight * (s.depth - mx) * (s.depth - mx);
    sxy += s.weight * (s.depth - mx) * (s.s_per_token - my);
  }
  b = sxx > 0 ? sxy / sxx : 0;
  if (b < 0) b = 0;
  a = my - b * mx;
  if (a <= 0) {  // a steep line through noisy points: keep it positive at depth 0
    b = 0;
    a = my;
  }
}

}  // namespace

Expected<SpeedProfile> calibrate_speed(Session& s, const CalibrationParams& params) {
  if (params.n_ubatch < 1 || params.n_decode < 1) return Error{"calibration: nothing to time"};
  const int64_t n_decode = params.n_decode;
  const int64_t room = s.n_ctx() - s.n_past() - 2 * n_decode - 2;
  if (s.n_past() != 0 || room < 2 * params.n_ubatch) {
    return make_error(
        "calibration needs an empty session with room for two {}-token ubatches and {} decode "
        "steps; the context holds {} tokens ({} used)",
        params.n_ubatch, 2 * n_decode + 2, s.n_ctx(), s.n_past());
  }
  const EvalProgress outer = s.eval_progress();
  const int32_t one[1] = {params.token};
  std::vector<Sample> decode_near, decode_deep, prefill;
  // Decode steps near depth 0 (the first eval is a one-token prefill: a warm-up).
  if (auto st = s.eval(one, true); !st) return st.error();
  for (int64_t i = 0; i < n_decode; ++i) {
    const double depth = static_cast<double>(s.n_past());
    const auto t0 = Clock::now();
    if (auto st = s.eval(one, true); !st) return st.error();
    decode_near.push_back({depth, seconds_since(t0), 1});
  }
  // The prefill, whole ubatches only (a short last one costs more per token), timed per ubatch.
  // Up to params.depth (whole ubatches, rounded up), within the room left for the decode steps.
  const int64_t want = std::max<int64_t>(0, params.depth - s.n_past());
  const int64_t n_ubatches = std::max<int64_t>(
      2, std::min((want + params.n_ubatch - 1) / params.n_ubatch, room / params.n_ubatch));
  const int64_t n_prefill = n_ubatches * params.n_ubatch;
  const std::vector<int32_t> tokens(static_cast<size_t>(n_prefill), params.token);
  const auto base = static_cast<double>(s.n_past());
  auto last_t = Clock::now();
  const auto prefill_t0 = last_t;
  int64_t last_done = 0;
  s.set_eval_progress([&](int64_t done, int64_t) {
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - last_t).count();
    const auto n = static_cast<double>(done - last_done);
    if (n > 0) {
      prefill.push_back({base + static_cast<double>(last_done) + (n - 1) / 2, dt / n, n});
    }
    last_t = now;
    last_done = done;
    // Past the time budget: stop after this ubatch (eval() then says "cancelled").
    return prefill.size() < 2 ||
           std::chrono::duration<double>(now - prefill_t0).count() < params.max_prefill_s;
  });
  last_t = Clock::now();
  Status st = s.eval(tokens, false);
  s.set_eval_progress(outer);
  if (!st && st.error().message != "cancelled") return st.error();
  // Decode steps at the calibration's depth.
  if (auto st2 = s.eval(one, true); !st2) return st2.error();
  for (int64_t i = 0; i < n_decode; ++i) {
    const double depth = static_cast<double>(s.n_past());
    const auto t0 = Clock::now();
    if (auto st2 = s.eval(one, true); !st2) return st2.error();
    decode_deep.push_back({depth, seconds_since(t0), 1});
  }
  // The first ubatch warms caches and threads up: left out when three or more were timed.
  if (prefill.size() >= 3) prefill.erase(prefill.begin());

  SpeedProfile p;
  p.calibrated_at = static_cast<int64_t>(std::time(nullptr));
  p.calibration_depth = s.n_past();
  p.machine = machine_name();
  fit_line(prefill, p.prefill_a, p.prefill_b);
  // Decode: the median of each group (one slow step must not tilt the line), then the line
  // through the two.
  const auto median = [](std::vector<Sample> v) {
    std::sort(v.begin(), v.end(),
              [](const Sample& x, const Sample& y) { return x.s_per_token < y.s_per_token; });
    return v[v.size() / 2];
  };
  const Sample near = median(decode_near), deep = median(decode_deep);
  std::vector<Sample> two = {near, deep};
  two[0].depth = decode_near.front().depth;
  two[1].depth = decode_deep.front().depth;
  fit_line(two, p.decode_a, p.decode_b);
  // Each position a token attends to costs the same in a decode step as in a prefill ubatch;
  // the prefill's slope, fitted over many more tokens, is the better measure of it when the
  // few decode steps (fractions of a millisecond on small models) show less.
  if (p.decode_b < p.prefill_b) {
    p.decode_b = p.prefill_b;
    p.decode_a = std::max(near.s_per_token - p.decode_b * two[0].depth, 0.5 * near.s_per_token);
  }
  return p;
}

Expected<SpeedProfile> cached_or_calibrated_profile(const Model& model, SessionParams sp,
                                                    BackendOptions opts, const fs::path& cache_dir,
                                                    CalibrationParams params, bool* calibrated) {
  if (calibrated) *calibrated = false;
  opts.device = DeviceKind::Cpu;
  const int64_t margin = 2 * params.n_decode + 2;
  const int64_t n_ctx_train = model.config().n_ctx_train;
  params.n_ubatch = opts.n_ubatch;
  params.depth = std::min(params.depth, n_ctx_train - margin);
  if (params.depth < 2 * params.n_ubatch) {  // a short trained context: smaller ubatches
    params.n_ubatch = std::max<int64_t>(1, (n_ctx_train - margin) / 2);
    params.depth = 2 * params.n_ubatch;
  }
  opts.n_ubatch = params.n_ubatch;
  sp.n_ctx = params.depth + margin;
  // The calibration's session holds its whole context in RAM: no budgets, no disk tier.
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

void refine_with_run(SpeedProfile& p, int64_t start_depth, int64_t prompt_tokens, double prefill_s,
                     int64_t decode_tokens, double decode_s) {
  bool changed = false;
  if (prompt_tokens > 0 && prefill_s > 0) {
    const double predicted = p.prefill_s(prompt_tokens, start_depth);
    if (predicted > 0) {
      const double f = std::sqrt(prefill_s / predicted);
      p.prefill_a *= f;
      p.prefill_b *= f;
      changed = true;
    }
  }
  if (decode_tokens > 0 && decode_s > 0) {
    const double predicted = p.decode_s(decode_tokens, start_depth + prompt_tokens);
    if (predicted > 0) {
      const double f = std::sqrt(decode_s / predicted);
      p.decode_a *= f;
      p.decode_b *= f;
      changed = true;
    }
  }
  if (changed) ++p.runs_refined;
}

}  // namespace spw::app
