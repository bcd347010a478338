// The profile's arithmetic, its JSON file and the refinement by real runs (the calibration and
// the fit of its timings: speed_profile_calibrate.cpp).
#include "app/runtime/speed_profile.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

namespace spw::app {

namespace fs = std::filesystem;

DepthCost DepthCost::line(double a, double b) { return DepthCost{a, {{1.0, b}}}; }

double DepthCost::attention_s(double depth) const {
  if (knots.empty() || depth <= 0) return 0;
  // The segment holding depth: from the origin (0, 0) or a knot, to the next knot; past the
  // last knot, the last segment continued.
  double d0 = 0, g0 = 0;
  size_t i = 0;
  while (i + 1 < knots.size() && knots[i].depth < depth) {
    d0 = knots[i].depth;
    g0 = knots[i].g;
    ++i;
  }
  const double d1 = knots[i].depth, g1 = knots[i].g;
  return d1 > d0 ? g0 + (g1 - g0) * (depth - d0) / (d1 - d0) : g1;
}

double DepthCost::tokens_s(int64_t n_tokens, int64_t depth) const {
  const int64_t n = std::max<int64_t>(0, n_tokens);
  const int64_t p0 = std::max<int64_t>(0, depth), p1 = p0 + n;  // positions [p0, p1)
  double g = 0;
  // Stretches of positions between knots (g linear over each): count x g(mean position).
  int64_t lo = p0;
  for (size_t i = 0; i + 1 < knots.size() && lo < p1; ++i) {
    const int64_t end = std::min(p1, static_cast<int64_t>(std::ceil(knots[i].depth)));
    if (end <= lo) continue;
    g += static_cast<double>(end - lo) * attention_s(0.5 * static_cast<double>(lo + end - 1));
    lo = end;
  }
  if (lo < p1)
    g += static_cast<double>(p1 - lo) * attention_s(0.5 * static_cast<double>(lo + p1 - 1));
  return a * static_cast<double>(n) + g;
}

void DepthCost::scale(double f) {
  a *= f;
  for (Knot& k : knots) k.g *= f;
}

double SpeedProfile::decode_tokens_per_s(int64_t depth) const {
  const double s = decode.token_s(static_cast<double>(std::max<int64_t>(0, depth)));
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

namespace {

nlohmann::json cost_json(const DepthCost& c) {
  nlohmann::json knots = nlohmann::json::array();
  for (const DepthCost::Knot& k : c.knots) knots.push_back({k.depth, k.g});
  return {{"a", c.a}, {"knots", knots}};
}

DepthCost cost_of(const nlohmann::json& j) {
  DepthCost c;
  c.a = j.at("a").get<double>();
  for (const nlohmann::json& k : j.at("knots")) {
    if (!k.is_array() || k.size() != 2) throw std::runtime_error("a knot is not [depth, seconds]");
    c.knots.push_back({k.at(0).get<double>(), k.at(1).get<double>()});
  }
  return c;
}

// a > 0; knots at ascending depths > 0 with g >= 0 (finite).
bool valid(const DepthCost& c) {
  if (!(c.a > 0) || !std::isfinite(c.a)) return false;
  double depth = 0;
  for (const DepthCost::Knot& k : c.knots) {
    if (!(k.depth > depth) || !std::isfinite(k.depth) || !(k.g >= 0) || !std::isfinite(k.g))
      return false;
    depth = k.depth;
  }
  return true;
}

}  // namespace

std::string speed_profile_json(const SpeedProfile& p) {
  nlohmann::json j;
  j["format"] = SpeedProfile::kFormat;
  j["model_fingerprint"] = fmt::format("{:016x}", p.model_fingerprint);
  j["machine"] = p.machine;
  j["backend"] = p.backend;
  j["calibrated_at"] = p.calibrated_at;
  j["calibration_depth"] = p.calibration_depth;
  j["prefill_depth"] = p.prefill_depth;
  j["window_tokens"] = p.window_tokens;
  j["calibration_s"] = p.calibration_s;
  j["runs_refined"] = p.runs_refined;
  // Seconds per token at depth d: a + g(d), g piecewise linear through the knots [depth, g].
  j["prefill_s_per_token"] = cost_json(p.prefill);
  j["decode_s_per_token"] = cost_json(p.decode);
  return j.dump(2);
}

Expected<SpeedProfile> parse_speed_profile(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return Error{"the speed profile is not a JSON object"};
  // Format 1 had no "format" field.
  const int format =
      j.contains("format") && j["format"].is_number_integer() ? j["format"].get<int>() : 1;
  if (format != SpeedProfile::kFormat) {
    return make_error("the speed profile is format {}; this version reads format {}", format,
                      SpeedProfile::kFormat);
  }
  SpeedProfile p;
  try {
    p.model_fingerprint = std::stoull(j.at("model_fingerprint").get<std::string>(), nullptr, 16);
    p.machine = j.at("machine").get<std::string>();
    p.backend = j.at("backend").get<std::string>();
    p.calibrated_at = j.at("calibrated_at").get<int64_t>();
    p.calibration_depth = j.at("calibration_depth").get<int64_t>();
    p.prefill_depth = j.at("prefill_depth").get<int64_t>();
    p.window_tokens = j.at("window_tokens").get<int64_t>();
    p.calibration_s = j.at("calibration_s").get<double>();
    p.runs_refined = j.at("runs_refined").get<int>();
    p.prefill = cost_of(j.at("prefill_s_per_token"));
    p.decode = cost_of(j.at("decode_s_per_token"));
  } catch (const std::exception& e) {
    return make_error("the speed profile lacks a field or has a wrong type: {}", e.what());
  }
  if (!valid(p.prefill) || !valid(p.decode)) {
    return Error{
        "the speed profile's curves are not valid (a > 0; knots at ascending depths, g >= 0)"};
  }
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

void refine_with_run(SpeedProfile& p, int64_t start_depth, int64_t prompt_tokens, double prefill_s,
                     int64_t decode_tokens, double decode_s) {
  bool changed = false;
  if (prompt_tokens > 0 && prefill_s > 0) {
    const double predicted = p.prefill_s(prompt_tokens, start_depth);
    if (predicted > 0) {
      p.prefill.scale(std::sqrt(prefill_s / predicted));
      changed = true;
    }
  }
  if (decode_tokens > 0 && decode_s > 0) {
    const double predicted = p.decode_s(decode_tokens, start_depth + prompt_tokens);
    if (predicted > 0) {
      p.decode.scale(std::sqrt(decode_s / predicted));
      changed = true;
    }
  }
  if (changed) ++p.runs_refined;
}

}  // namespace spw::app
