// src/driver/submit_inbox.hpp: the calls submitted to a pool and not yet in its scheduler. A
// caller of submit() appends here under the inbox's own lock, not the pool's mu_, which the
// communication thread holds through its passes; the communication thread moves everything that
// waits into the scheduler at once (take()), in the order it came.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fibra/detail/core.hpp"

namespace fibra::detail {

class SubmitInbox {
 public:
  struct Entry {
    std::shared_ptr<JobState> job;
    std::uint64_t first = 0;
    std::uint32_t count = 0;
    std::string payload;
    std::int64_t at_us = 0;  // when it was submitted, for the event log (0 with the log off)
  };
  enum class Put {
    refused,  // the inbox is closed: nothing was appended
    queued,
    first,  // queued into an empty inbox: the communication thread, if it naps, needs waking
  };

  /// Any thread. Names the pool in the call (fibra::cancel finds the pool from then on, and takes
  /// the inbox before it looks) and appends it, unless the inbox is closed.
  Put put(std::uint64_t pool_uid, Entry e);
  /// Nothing is appended from now on; what is in it stays, to be taken or failed.
  void close();
  /// Something was appended since the last take(): read without the lock, by the communication
  /// thread before it naps (an append after it looked sets it again, and the caller kicks).
  bool waiting() const { return waiting_.load(); }

  // The taker's side (the communication thread, or a user's thread in fibra::cancel), under the
  // pool's mu_, which keeps two takers apart:
  /// Nothing waits, and nothing is left over from a take() that threw.
  bool empty();
  /// Hands every call waiting to `queue`, in the order they came; true if any. If `queue` throws,
  /// the call it was given is the caller's to fail, and the rest stay for the next take (or fail).
  template <class F>
  bool take(F&& queue) {
    if (next_ == taken_.size() && !waiting_.load()) return false;  // no lock at this pass
    bool moved = false;
    while (next_ < taken_.size() || refill()) {
      Entry& e = taken_[next_++];
      moved = true;
      queue(e);
    }
    return moved;
  }
  /// Every call still in it gets `e` (the pool's end); the inbox is closed by then.
  void fail(const std::exception_ptr& e);

 private:
  bool refill();  // swaps what waits into taken_; false if nothing waits

  std::mutex mu_;
  std::vector<Entry> in_;  // under mu_
  bool open_ = true;       // under mu_
  std::atomic<bool> waiting_{false};
  std::vector<Entry> taken_;  // the taker's (swapped with in_ under mu_): being queued
  std::size_t next_ = 0;      // the taker's: taken_'s first entry not yet handed out
};

}  // namespace fibra::detail
