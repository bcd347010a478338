#include "engine/tokenizer/encode_poll.h"

#include <cassert>
#include <utility>

namespace spw {

namespace {

thread_local EncodePoll* t_poll = nullptr;  // the innermost poll of this thread
thread_local uint32_t t_steps = 0;          // steps since the last poll

}  // namespace

EncodePoll::EncodePoll(std::function<bool()> stop) : stop_(std::move(stop)), outer_(t_poll) {
  t_poll = this;
  t_steps = 0;
}

EncodePoll::~EncodePoll() {
  assert(t_poll == this);
  t_poll = outer_;
}

bool EncodePoll::ask() {
  if (stopped_) return true;
  if (stop_) {
    ++polls_;
    stopped_ = stop_();
  }
  if (!stopped_ && outer_) stopped_ = outer_->ask();
  return stopped_;
}

bool encode_should_stop() {
  EncodePoll* p = t_poll;
  if (!p) return false;
  if (p->stopped_) return true;
  if (++t_steps < kEncodePollEvery) return false;
  t_steps = 0;
  return p->ask();
}

}  // namespace spw
