// src/driver/cancel_requests.hpp: fibra::cancel's requests that only the communication thread can
// carry out, from the caller's thread to the next dispatch: chunks in flight whose agents are told
// to kill them (with force), and calls whose batches not yet started are to be taken back from the
// lanes, the caller waiting for the verdict (without force). Under the pool's mu_.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "fibra/detail/core.hpp"

namespace fibra::detail {

class CancelRequests {
 public:
  using Kill = std::pair<int, std::uint64_t>;  // (Worker::id, chunk)

  /// The agent `worker` is to kill `chunk`'s executor (tag_cancel).
  void kill(int worker, std::uint64_t chunk) { kills_.emplace_back(worker, chunk); }
  /// `job`'s batches not yet started are to be taken back; nobody waits for the verdict.
  void take_back(std::shared_ptr<JobState> job) { take_backs_.push_back({std::move(job), {}}); }
  /// The same, and the caller waits for the verdict: whether any of its chunks was cancelled.
  std::future<bool> take_back_and_tell(std::shared_ptr<JobState> job) {
    take_backs_.push_back({std::move(job), {}});
    return take_backs_.back().verdict.get_future();
  }
  /// The caller gave up waiting (the communication thread was inside a long MPI call): true if its
  /// request was still unanswered, and is now withdrawn (nothing is cancelled after it said no).
  bool withdraw(const std::shared_ptr<JobState>& job) {
    for (auto it = take_backs_.begin(); it != take_backs_.end(); ++it)
      if (it->job == job) {
        take_backs_.erase(it);
        return true;
      }
    return false;
  }

  // ---- the communication thread, at a dispatch ----
  std::vector<Kill> take_kills() {
    std::vector<Kill> out;
    out.swap(kills_);
    return out;
  }
  /// Carries out every take-back: `verdict(job)` takes the batches back and says whether any of
  /// the job's chunks was cancelled; a waiting caller is told. Each is carried out once: if
  /// `verdict` throws, its caller's wait ends with that (a broken promise), the rest stay queued.
  template <class F>
  void answer_take_backs(F&& verdict) {
    while (!take_backs_.empty()) {
      TakeBack t = std::move(take_backs_.front());
      take_backs_.erase(take_backs_.begin());
      t.verdict.set_value(verdict(t.job));
    }
  }

 private:
  struct TakeBack {
    std::shared_ptr<JobState> job;
    std::promise<bool> verdict;
  };
  std::vector<Kill> kills_;
  std::vector<TakeBack> take_backs_;
};

}  // namespace fibra::detail
