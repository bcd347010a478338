// A cancellation hook for tokenizing: a prompt of megabytes without spaces takes the SentencePiece
// and BPE merges seconds, and a caller (the server, bounding the time a request may hold its
// engine) must be able to stop that.
//
// The hook is a scope on the calling thread rather than a parameter of Tokenizer::encode, so that
// the callers between the encoder and whoever decides (chat templates, the runtime's completions)
// pass it through unchanged.
#pragma once

#include <cstdint>
#include <functional>

namespace spw {

/// Steps of encoding (merges, pre-tokens, special-token scans) between two polls.
inline constexpr uint32_t kEncodePollEvery = 1024;

/// While alive, Tokenizer::encode and encode_segments on this thread call `stop` every
/// kEncodePollEvery steps; once it returns true the encode ends early, its ids are incomplete and
/// must be discarded, and stopped() is true. Polls nest: the innermost is asked first, then those
/// around it, and a stop of any stops them all. Construct and destroy on the same thread, in
/// nested order.
class EncodePoll {
 public:
  /// An empty `stop` never stops (the scope still tells, through stopped(), whether an outer
  /// poll stopped the encode).
  explicit EncodePoll(std::function<bool()> stop);
  ~EncodePoll();
  EncodePoll(const EncodePoll&) = delete;
  EncodePoll& operator=(const EncodePoll&) = delete;

  /// An encode under this scope was stopped (by this poll or one around it).
  bool stopped() const { return stopped_; }
  /// How many times `stop` was called.
  int64_t polls() const { return polls_; }

 private:
  friend bool encode_should_stop();
  bool ask();

  std::function<bool()> stop_;
  EncodePoll* outer_;
  bool stopped_ = false;
  int64_t polls_ = 0;
};

/// For the encoders: one step of work. True when the encode must end now: the innermost poll of
/// this thread has stopped, or this step is a polled one and a poll says stop. False without a
/// poll in scope (one thread-local read).
bool encode_should_stop();

}  // namespace spw
