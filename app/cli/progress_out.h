// Progress on the command line (ask, generate, jobs run-due): the events of
// app/runtime/progress.h drawn as one stderr line and, with --progress-json FILE, written as one
// JSON object per line and event (progress_json), flushed per line.
//
// On a terminal (isatty(2)) the line is redrawn in place ("\r", the line, clear to the end of
// the line) and ended by a newline when the run is done; otherwise a line is printed at most
// every 10 s, plus the last one. The map-reduce part and the job's document stay on the line in
// front of the prompt's prefill or decode: "part 3/12 (25%) ... ETA 1h02m | prefill ...".
// While generated text streams to the terminal, decode events are not drawn there (the text is
// its own progress).
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "app/runtime/progress.h"
#include "engine/common/expected.h"

namespace spw::cli {

class ProgressOutput {
 public:
  /// Seconds between two lines when stderr is not a terminal.
  static constexpr double kPlainIntervalS = 10.0;

  /// stderr, drawn as isatty(2) says; `json_path` (empty: none) is created or truncated.
  /// Errors: "--progress-json FILE: cannot open it: <reason>".
  static Expected<std::unique_ptr<ProgressOutput>> open(const std::string& json_path);
  /// `err`: where lines go; `json`: JSON lines (may be null; not closed here); `clock` seconds.
  ProgressOutput(FILE* err, bool tty, FILE* json, std::function<double()> clock);
  ~ProgressOutput();
  ProgressOutput(const ProgressOutput&) = delete;
  ProgressOutput& operator=(const ProgressOutput&) = delete;

  void event(const app::ProgressEvent& e);
  /// A sink calling event() (this object must outlive it).
  app::ProgressSink sink();
  /// Before other text goes to the terminal: erases the drawn line.
  void interrupt();
  /// Text went to the terminal after interrupt(); `ends_line`: it ended with a newline. Streamed
  /// generated text (`generated`) stops the drawing of decode events until the next prompt.
  void wrote(bool ends_line, bool generated = false);
  /// The run is done: the last line (if not shown yet), and on a terminal its newline.
  void finish();

 private:
  std::string compose(const app::ProgressEvent& e) const;
  void draw(const std::string& line);

  FILE* err_;
  bool tty_;
  FILE* json_;
  bool own_json_ = false;
  std::function<double()> clock_;
  std::optional<app::ProgressEvent> part_, document_;
  std::string pending_;  // the newest line, not shown yet
  bool drawn_ = false;   // a line is on the terminal now (TTY)
  bool mid_line_ = false;
  bool streaming_ = false;
  std::optional<double> last_shown_s_;
};

}  // namespace spw::cli
