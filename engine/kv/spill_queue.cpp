#include "engine/kv/spill_queue.h"

#include <utility>

namespace spw::kv {

SpillQueue::SpillQueue(std::function<Status(const SpillJob&)> copy)
    : copy_(std::move(copy)), thread_([this] { run(); }) {}

SpillQueue::~SpillQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void SpillQueue::push(const SpillJob& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    ++in_flight_;
  }
  work_cv_.notify_one();
}

int64_t SpillQueue::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void SpillQueue::take_landed(std::vector<SpillDone>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (SpillDone& d : landed_) out.push_back(std::move(d));
  landed_.clear();
}

void SpillQueue::wait_one() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return !landed_.empty() || in_flight_ == 0; });
}

void SpillQueue::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return in_flight_ == 0; });
}

void SpillQueue::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    const SpillJob job = queue_.front();
    queue_.pop_front();
    lock.unlock();
    Status status = copy_(job);  // the copy itself runs unlocked
    lock.lock();
    landed_.push_back(SpillDone{job, std::move(status)});
    --in_flight_;
    done_cv_.notify_all();
  }
}

}  // namespace spw::kv
