// src/driver/reply_queue.hpp: answers to what executors asked of a pool (a nested submit, an actor
// call, a call on a channel), given on whichever thread delivers them and sent to their agents by
// the communication thread (PoolImpl::send_replies).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fibra/detail/core.hpp"

namespace fibra::detail {

struct PendingReply {
  int worker = 0;                 // Worker::id of the agent whose executor asked
  std::uint64_t route = 0;        // which of its executors
  std::uint64_t id = 0;           // the executor's number for the request
  std::shared_ptr<JobState> job;  // delivered: its outcome is the reply
  std::string notice;             // no job: a reply of id 0 that nothing asked for (a queue's recall)
  std::string encoded;            // no job: a whole Reply (an answer that did not fit in its ring)
};

class ReplyQueue {
 public:
  /// Any thread; the caller wakes the communication thread.
  void push(PendingReply r) {
    {
      std::lock_guard lk(mu_);
      replies_.push_back(std::move(r));
    }
    waiting_.store(true, std::memory_order_release);
  }
  /// Without the lock: something was pushed since the last take() (the communication thread's
  /// condition for ending a nap).
  bool waiting() const { return waiting_.load(std::memory_order_relaxed); }
  /// The communication thread: every reply pushed since the last take, in order.
  std::vector<PendingReply> take() {
    std::vector<PendingReply> out;
    if (!waiting_.exchange(false, std::memory_order_acq_rel)) return out;
    std::lock_guard lk(mu_);
    out.swap(replies_);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<PendingReply> replies_;  // under mu_
  std::atomic<bool> waiting_{false};
};

}  // namespace fibra::detail
