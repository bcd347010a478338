#include "app/runtime/progress.h"

#include <cmath>
#include <cstdio>

namespace spw::app {

const char* progress_phase_name(ProgressPhase phase) {
  switch (phase) {
    case ProgressPhase::Prefill:
      return "prefill";
    case ProgressPhase::Part:
      return "part";
    case ProgressPhase::Decode:
      return "decode";
    case ProgressPhase::Document:
      return "document";
  }
  return "?";
}

namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

}  // namespace

std::string format_eta(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(seconds < 0 ? 0 : seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  }
  return buf;
}

std::string progress_json(const ProgressEvent& e) {
  std::string out = "{\"phase\": \"";
  out += progress_phase_name(e.phase);
  out += "\", \"done\": " + std::to_string(e.done) + ", \"total\": " + std::to_string(e.total) +
         ", \"tokens_per_s\": " + number(e.tokens_per_s) +
         ", \"eta_s\": " + (e.eta_s < 0 ? std::string("null") : number(e.eta_s)) + "}";
  return out;
}

std::string progress_line(const ProgressEvent& e) {
  const bool counts_tokens = e.phase == ProgressPhase::Prefill || e.phase == ProgressPhase::Decode;
  std::string out = progress_phase_name(e.phase);
  out += ' ' + with_commas(e.done);
  if (e.total > 0) out += '/' + with_commas(e.total);
  if (counts_tokens) out += " tokens";
  if (e.total > 0) {
    out += " (" +
           std::to_string(static_cast<int>(100.0 * static_cast<double>(e.done) /
                                           static_cast<double>(e.total))) +
           "%)";
  }
  if (e.tokens_per_s > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, e.tokens_per_s < 10 ? " %.1f t/s" : " %.0f t/s", e.tokens_per_s);
    out += buf;
  }
  if (e.eta_s >= 0) out += " ETA " + format_eta(e.eta_s);
  return out;
}

ProgressMeter::ProgressMeter(ProgressPhase phase, int64_t total, double start_s,
                             int64_t done_at_start)
    : phase_(phase), total_(total), start_s_(start_s), done_at_start_(done_at_start) {}

ProgressEvent ProgressMeter::at(int64_t done, double now_s, int64_t tokens) const {
  ProgressEvent e;
  e.phase = phase_;
  e.done = done;
  e.total = total_;
  e.elapsed_s = now_s - start_s_;
  const int64_t new_work = done - done_at_start_;
  const int64_t rate_tokens = tokens >= 0 ? tokens : new_work;
  if (e.elapsed_s > 0 && rate_tokens > 0) {
    e.tokens_per_s = static_cast<double>(rate_tokens) / e.elapsed_s;
  }
  if (total_ > 0 && new_work > 0 && e.elapsed_s > 0) {
    const double per_unit = e.elapsed_s / static_cast<double>(new_work);
    e.eta_s = per_unit * static_cast<double>(total_ - done);
    if (e.eta_s < 0) e.eta_s = 0;
  }
  return e;
}

}  // namespace spw::app
