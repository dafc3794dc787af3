// src/driver/liveness.hpp: whether a pool's agents are alive, judged from what the communication
// thread last heard of them: an agent silent too long, one that did not start in time, one whose
// process is gone from this host; when a quiet agent is owed a heartbeat; when a lost agent's MPI
// slot is free again. It judges; the pool acts on its verdicts (PoolImpl::watch_workers).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/worker.hpp"

namespace fibra::detail {

/// "2.5 s": how messages state durations.
std::string seconds_text(double s);

class Liveness {
 public:
  struct Rules {
    double heartbeat_s = 0;       // PoolOptions::heartbeat_s
    double worker_silence_s = 0;  // an agent silent this long is lost
    double driver_silence_s = 0;  // an agent's orphan guard: it ends after this long without the driver
    double start_timeout_s = 0;   // an agent with no hello after this long is lost
  };
  Liveness(Rules rules, std::string my_host) : r_(rules), my_host_(std::move(my_host)) {}

  enum class Verdict {
    lost,       // declare it lost, saying `why`
    heartbeat,  // send it a heartbeat: nothing else went to it for a heartbeat's time
    free_slot,  // lost, and its process surely gone: its MPI slot is free
  };
  using Act = std::function<void(Worker&, Verdict, const std::string& why)>;

  /// receive() read every agent at `now`: silence is judged only right after such a pass (a pass
  /// delayed by a long spawn has not read what the agents sent meanwhile).
  void read_all_at(double now) { last_read_ = now; }
  /// A sweep at `now`, if one is due: every 10 ms, over a tenth of the agents (64 at least), so
  /// that each is looked at every 100 ms where the bounds are seconds (a sweep over each of the
  /// scale simulation's 10,000 agents at every pass was most of an idle driver's time). `act` is
  /// called for each verdict as it is reached, in order; it may change the agent's state.
  void sweep(double now, const std::vector<std::unique_ptr<Worker>>& workers, const Act& act);
  /// A lost agent may still be alive (stopped, then continued; cut off, then back): what it sends
  /// until its orphan guard ends it is still read, never answered, and its results count as late
  /// (their attempts were given up on). Once its process is seen gone from this host (by the
  /// sweep, not a kill(pid, 0) at every pass: 100 agents lost at once made each pass 100 system
  /// calls), nothing more comes from it.
  bool still_heard(const Worker& w, double now) const {
    return w.state == Worker::State::lost && w.read_after_loss &&
           now - w.lost_at < r_.driver_silence_s + 2 * r_.heartbeat_s;
  }
  /// The agent runs on this host and its process no longer exists.
  bool process_gone_here(const Worker& w) const;

 private:
  Rules r_;
  std::string my_host_;
  double next_sweep_ = 0;
  std::size_t next_ = 0;  // the index in the workers the next sweep starts at
  double last_read_ = 0;
};

}  // namespace fibra::detail
