// src/driver/joined_workers.hpp: a pool's workers that joined from launches of their own
// (src/driver/joins.hpp): the agents waiting to be taken in by the communication thread, the Slurm
// jobs they came from (what Pool::adapt's thread counts), and the rules by which one leaves
// again: before its Slurm job's time limit, or idle under Pool::adapt while the pool keeps its
// minimum. pool_elastic.cpp applies them.
#pragma once

#include <atomic>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "fibra/options.hpp"
#include "driver/joins.hpp"
#include "driver/worker.hpp"

namespace fibra::detail {

class JoinedWorkers {
 public:
  // ---- under the pool's mu_ ----
  /// An agent that joined, for the communication thread to take (take()).
  void add(const JoinedAgent& j) {
    waiting_.push_back(j);
    any_.store(true, std::memory_order_release);
  }
  /// Pool::adapt's settings (the defaults until it is called: no leaving when idle).
  void adapt(int min_workers, const AdaptOptions& o) {
    min_ = min_workers;
    idle_s_ = o.idle_timeout_s;
    drain_before_s_ = o.drain_before_s;
  }
  /// Its agent came from this Slurm job (an origin of "Slurm job <id>"; others are not noted).
  void note_origin(const std::string& origin);
  const std::set<std::string>& slurm_jobs() const { return jobs_; }
  /// Why the joined worker `w` leaves now (the end of a sentence naming it), or "": it stays.
  /// `total`: the pool's live executors, `w`'s among them; `hosts_actor`: whether an actor runs there
  /// (it would have to start again elsewhere). Marks `w` busy at `now` when it has work out.
  std::string leave_reason(Worker& w, double now, int total, const std::function<bool()>& hosts_actor) const;

  // ---- the communication thread ----
  /// The agents added since the last take, looked for without the lock first: every pass comes
  /// here. `take` runs under the pool's mu_.
  bool any_waiting() const { return any_.load(std::memory_order_acquire); }
  std::vector<JoinedAgent> take() {  // under the pool's mu_
    any_.store(false, std::memory_order_relaxed);
    std::vector<JoinedAgent> out;
    out.swap(waiting_);
    return out;
  }
  /// Whether a look for workers to let go is due (a walk over the workers: every 50 ms at most).
  bool look_due(double now) {
    if (now < next_look_) return false;
    next_look_ = now + 0.05;
    return true;
  }

 private:
  std::vector<JoinedAgent> waiting_;  // under the pool's mu_
  std::atomic<bool> any_{false};      // set with waiting_
  std::set<std::string> jobs_;        // under the pool's mu_
  int min_ = 0;
  double idle_s_ = 0;  // 0: no leaving when idle
  double drain_before_s_ = AdaptOptions{}.drain_before_s;
  double next_look_ = 0;  // the communication thread's
};

}  // namespace fibra::detail
