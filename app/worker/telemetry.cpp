#include "app/worker/telemetry.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "engine/backend/device.h"
#include "engine/session/session.h"

namespace spw::app {

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string cell(int64_t v) { return v < 0 ? std::string() : std::to_string(v); }
std::string cell(double v) { return fmt::format("{:.3f}", v); }

}  // namespace

int64_t process_rss_bytes() {
  const int64_t rss = spw::process_rss_bytes();  // the engine's reading (0: unreadable)
  return rss > 0 ? rss : -1;
}

int64_t system_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    // "MemAvailable:   12345678 kB"
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = 0;
    if (!(fields >> kib)) return -1;
    return kib * 1024;
  }
  return -1;
}

TelemetrySample idle_sample() {
  TelemetrySample s;
  s.t_ms = now_ms();
  s.rss_bytes = process_rss_bytes();
  s.available_bytes = system_available_bytes();
  return s;
}

TelemetrySample sample_from_usage(const SessionUsage& u, const TelemetrySample* prev,
                                  int64_t vram_free) {
  TelemetrySample s = idle_sample();
  s.running = true;
  s.gpu = u.gpu;
  s.n_past = u.n_past;
  s.n_ctx = u.n_ctx;
  s.window_blocks = u.kv.window_blocks;
  s.host_blocks = u.kv.host_blocks;
  s.disk_blocks = u.kv.disk_blocks;
  s.window_bytes = u.kv.window_bytes;
  s.host_bytes = u.kv.host_bytes;
  s.disk_bytes = u.kv.disk_bytes;
  s.dropped_blocks = u.kv.dropped_blocks;
  s.dropped_bytes = u.kv.dropped_bytes;
  s.moved_bytes = u.kv.window_to_host_bytes + u.kv.window_to_disk_bytes + u.kv.cold_to_window_bytes;
  if (u.gpu) {
    s.vram_weights = u.vram_weights;
    s.vram_window = u.vram_window;
    s.vram_scratch = u.vram_scratch;
    s.vram_free = vram_free;
  }
  s.prefill_tokens_per_s = u.prefill_tokens_per_s();
  s.decode_tokens_per_s = u.decode_tokens_per_s();
  // Tokens computed since the previous sample: prefill and decode alike move KV between tiers.
  // n_past is the session's position; a new session (map-reduce part) starts again from 0, so
  // a fall in n_past means "no previous sample of this session".
  if (prev != nullptr && prev->running && u.n_past > prev->n_past &&
      s.moved_bytes >= prev->moved_bytes) {
    s.moved_bytes_per_token = static_cast<double>(s.moved_bytes - prev->moved_bytes) /
                              static_cast<double>(u.n_past - prev->n_past);
  } else if (u.n_past > 0) {
    s.moved_bytes_per_token = static_cast<double>(s.moved_bytes) / static_cast<double>(u.n_past);
  }
  return s;
}

UsageSampler::UsageSampler(int64_t interval_ms, std::function<void(const TelemetrySample&)> out)
    : throttle_(interval_ms), out_(std::move(out)) {}

void UsageSampler::publish(const SessionUsage& u) {
  const int64_t vram_free = u.gpu ? probe_cuda().free_bytes : -1;
  TelemetrySample s = sample_from_usage(u, have_prev_ ? &prev_ : nullptr, vram_free);
  prev_ = s;
  have_prev_ = true;
  pending_ = false;
  if (out_) out_(s);
}

void UsageSampler::add(const SessionUsage& u) {
  if (!last_) last_ = std::make_shared<SessionUsage>();
  *last_ = u;
  pending_ = true;
  if (throttle_.due(now_ms())) publish(u);
}

void UsageSampler::finish() {
  if (pending_ && last_) publish(*last_);
}

bool TelemetryThrottle::due(int64_t now) {
  if (last_ms_ >= 0 && now - last_ms_ < interval_ms_) return false;
  last_ms_ = now;
  return true;
}

std::string telemetry_csv_header() {
  return "t_ms,running,gpu,n_past,n_ctx,window_blocks,host_blocks,disk_blocks,window_bytes,"
         "host_bytes,disk_bytes,moved_bytes,moved_bytes_per_token,vram_weights,vram_window,"
         "vram_scratch,vram_free,rss_bytes,available_bytes,prefill_tokens_per_s,"
         "decode_tokens_per_s";
}

std::string telemetry_csv_row(const TelemetrySample& s) {
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", s.t_ms,
                     s.running ? 1 : 0, s.gpu ? 1 : 0, s.n_past, s.n_ctx, s.window_blocks,
                     s.host_blocks, s.disk_blocks, s.window_bytes, s.host_bytes, s.disk_bytes,
                     s.moved_bytes, cell(s.moved_bytes_per_token), cell(s.vram_weights),
                     cell(s.vram_window), cell(s.vram_scratch), cell(s.vram_free),
                     cell(s.rss_bytes), cell(s.available_bytes), cell(s.prefill_tokens_per_s),
                     cell(s.decode_tokens_per_s));
}

}  // namespace spw::app
