// src/executor/channel_calls.hpp: a task's calls on Queues, Pipes and Events (executor_channel_call,
// channel_calls.cpp): its puts in flight, answered before its result goes, and the items its gets
// read ahead (ReadAhead, channel_calls.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>

#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "executor/state.hpp"

namespace fibra::detail::exec {

// A queue's put without a timeout goes out without waiting for its answer, up to `most` at a
// time (the driver answers a put once the queue took it, so a full queue still holds its writer
// back): single puts from a task then cost no round trip each. A failed put (a closed queue) is
// thrown by the task's next call on a queue, and any call but a put first waits for the puts
// before it; a task's puts are all answered before its result is sent, so that the driver sees
// its items in the queue once it sees its result.
class PutsInFlight {
 public:
  static constexpr std::size_t most = 256;
  void add(std::shared_ptr<JobState> job) {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(job));
    empty_.store(false, std::memory_order_release);
  }
  bool full() {
    std::lock_guard lk(mu_);
    return jobs_.size() >= most;
  }
  // Takes the answers that came; throws the first failure among them.
  void reap() {
    if (empty_.load(std::memory_order_acquire)) return;
    std::exception_ptr failed;
    {
      std::lock_guard lk(mu_);
      while (!jobs_.empty() && jobs_.front()->ready()) {
        take(*jobs_.front(), failed);
        jobs_.pop_front();
      }
      empty_.store(jobs_.empty(), std::memory_order_release);
    }
    if (failed) std::rethrow_exception(failed);
  }
  // Waits for the oldest answer (the window is full); throws its failure.
  void wait_oldest() {
    std::shared_ptr<JobState> job;
    {
      std::lock_guard lk(mu_);
      if (jobs_.empty()) return;
      job = jobs_.front();
    }
    std::exception_ptr failed;
    job->wait_ready(std::nullopt);
    {
      std::lock_guard lk(mu_);
      if (!jobs_.empty() && jobs_.front() == job) {
        take(*job, failed);
        jobs_.pop_front();
      }
      empty_.store(jobs_.empty(), std::memory_order_release);
    }
    if (failed) std::rethrow_exception(failed);
  }
  // Waits for every answer; throws the first failure (after all came).
  void drain() {
    std::exception_ptr failed;
    while (!empty_.load(std::memory_order_acquire)) {
      try {
        wait_oldest();
      } catch (...) {
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
  }
  // Waits for every answer (a task returned); a failure is told on stderr, as its task is over.
  void settle() noexcept {
    if (empty_.load(std::memory_order_acquire)) return;
    const QueueWait no_task_on_top;
    while (!empty_.load(std::memory_order_acquire)) {
      try {
        wait_oldest();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fibra: a queue's put made by a task that has returned failed: %s\n", e.what());
      }
    }
  }

 private:
  // A put's failure, told later: as an Error of its own, which a `catch (QueueClosed&)` that reads
  // the end of a stream does not take for one.
  static void take(JobState& job, std::exception_ptr& failed) {
    ChunkOutcome o;
    job.wait_next(o);
    if (!o.error || failed) return;
    std::string why = "an error that is not a std::exception";
    try {
      std::rethrow_exception(o.error);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    failed = std::make_exception_ptr(Error("fibra: an earlier put of this task (sent without waiting) failed: " + why));
  }
  std::mutex mu_;
  std::deque<std::shared_ptr<JobState>> jobs_;
  std::atomic<bool> empty_{true};
};
// This thread's task's puts (with_own_puts gives each chunk its own; a thread a task started has
// its thread's).
extern thread_local PutsInFlight* t_puts;

// Runs `f` (a chunk) with a list of puts of its own, and waits for them before the chunk's result goes.
template <class F>
void with_own_puts(F&& f) {
  PutsInFlight mine;
  const ScopedSet<PutsInFlight*> own(t_puts, &mine);
  f();
  mine.settle();
  give_back_read_ahead();  // what its gets read ahead and did not take is not stranded here
}

// Tells the driver what became of delivery `token` (ack, give_back: `taken` of its items); no answer.
void tell_delivery(ChannelOp op, std::uint64_t token, std::uint64_t taken = 0);

}  // namespace fibra::detail::exec
