#include "app/cli/progress_out.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace spw::cli {

Expected<std::unique_ptr<ProgressOutput>> ProgressOutput::open(const std::string& json_path) {
  FILE* json = nullptr;
  if (!json_path.empty()) {
    json = std::fopen(json_path.c_str(), "w");
    if (json == nullptr) {
      return make_error("--progress-json {}: cannot open it: {}", json_path, std::strerror(errno));
    }
  }
  auto out = std::make_unique<ProgressOutput>(stderr, ::isatty(2) == 1, json, app::steady_seconds);
  out->own_json_ = json != nullptr;
  return out;
}

ProgressOutput::ProgressOutput(FILE* err, bool tty, FILE* json, std::function<double()> clock)
    : err_(err), tty_(tty), json_(json), clock_(std::move(clock)) {}

ProgressOutput::~ProgressOutput() {
  if (tty_ && drawn_) std::fputc('\n', err_);  // an error ends the run: its line stays
  if (own_json_) std::fclose(json_);
}

app::ProgressSink ProgressOutput::sink() {
  return [this](const app::ProgressEvent& e) { event(e); };
}

std::string ProgressOutput::compose(const app::ProgressEvent& e) const {
  std::string line;
  const auto add = [&line](const std::string& part) {
    if (!line.empty()) line += " | ";
    line += part;
  };
  if (document_ && e.phase != app::ProgressPhase::Document) add(app::progress_line(*document_));
  if (part_ && e.phase != app::ProgressPhase::Part && e.phase != app::ProgressPhase::Document)
    add(app::progress_line(*part_));
  add(app::progress_line(e));
  return line;
}

void ProgressOutput::draw(const std::string& line) {
  if (tty_) {
    if (mid_line_) std::fputc('\n', err_);
    std::fprintf(err_, "\r%s\033[K", line.c_str());
    drawn_ = true;
  } else {
    std::fprintf(err_, "%s%s\n", mid_line_ ? "\n" : "", line.c_str());
  }
  mid_line_ = false;
  std::fflush(err_);
  pending_.clear();
  last_shown_s_ = clock_();
}

void ProgressOutput::event(const app::ProgressEvent& e) {
  if (json_ != nullptr) {
    std::fprintf(json_, "%s\n", app::progress_json(e).c_str());
    std::fflush(json_);
  }
  if (e.phase == app::ProgressPhase::Document) {
    document_ = e;
    part_.reset();
  } else if (e.phase == app::ProgressPhase::Part) {
    part_ = e;
  }
  if (e.phase != app::ProgressPhase::Decode) streaming_ = false;
  pending_ = compose(e);
  if (tty_ && streaming_) return;  // the generated text on the terminal is the progress
  // A terminal redraws every event (one short line per ubatch or token); a file or pipe gets
  // a line at most every kPlainIntervalS.
  if (tty_ || !last_shown_s_ || clock_() - *last_shown_s_ >= kPlainIntervalS) draw(pending_);
}

void ProgressOutput::interrupt() {
  if (tty_ && drawn_) {
    std::fputs("\r\033[K", err_);
    std::fflush(err_);
  }
  drawn_ = false;
}

void ProgressOutput::wrote(bool ends_line, bool generated) {
  mid_line_ = !ends_line;
  if (generated) streaming_ = true;
}

void ProgressOutput::finish() {
  if (!pending_.empty()) draw(pending_);
  if (tty_ && drawn_) {
    std::fputc('\n', err_);
    std::fflush(err_);
  }
  drawn_ = false;
}

}  // namespace spw::cli
