// src/driver/spawn_planner.hpp: what a pool's next agents are, before any MPI call: how many
// executors each runs, which GPUs each executor gets, which host each goes to and the number it
// is known by. Reads the pool's settings and its workers as they stand; changes nothing, so that
// its rules are unit-tested in one process (PoolImpl::spawn_agents does the spawning).
#pragma once

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "fibra/detail/core.hpp"
#include "driver/worker.hpp"

namespace fibra::detail {

constexpr int auto_agents = 4;  // PoolOptions::workers_per_agent = 0: workers spread over at most this many agents

/// "node01" and "node01.cluster.local" are one host (Slurm names nodes short, gethostname may not).
bool same_host(const std::string& a, const std::string& b);

/// Failed spawns: the last one's error (Pool::resize reports it) and when to try again, two
/// seconds later for each failure in a row, at most a minute. Under the pool's mu_.
class SpawnBackoff {
 public:
  /// A spawn failed at `now` with `e`: the seconds until the next try.
  double failed(std::exception_ptr e, double now) {
    error_ = std::move(e);
    ++failures_;
    next_ = now + std::min(60.0, 2.0 * failures_);
    return next_ - now;
  }
  void succeeded() { failures_ = 0; }
  /// Pool::resize asks again: try at once, and report only what fails from now on.
  void reset() {
    error_ = nullptr;
    next_ = 0;
  }
  bool due(double now) const { return now >= next_; }
  const std::exception_ptr& error() const { return error_; }

 private:
  std::exception_ptr error_;
  int failures_ = 0;  // in a row
  double next_ = 0;
};

class SpawnPlanner {
 public:
  using Workers = std::vector<std::unique_ptr<Worker>>;
  /// `settings` must outlive the planner (the pool's own); `driver_host`: where the driver runs.
  SpawnPlanner(const PoolSettings& settings, std::string driver_host)
      : s_(settings), driver_host_(std::move(driver_host)) {}

  /// Executors per agent: PoolOptions::workers_per_agent, else spread over at most auto_agents
  /// agents (or one per host the pool spreads over, if more); one each when GPUs are shared out,
  /// so that each worker's GPUs are its agent's to match.
  int agent_size(int target) const;
  /// The sizes of the next agents to spawn together: what the pool lacks (`target` executors,
  /// `live` of them starting or running), at most `room` agents, and at least one agent, of one
  /// executor or more, even when nothing is lacking or there is no room (a spawn that does not fit
  /// is refused later, naming why).
  std::vector<int> next_sizes(int target, int live, int room) const;

  struct Gpus {
    std::vector<std::string> ids;  // CUDA_VISIBLE_DEVICES of each executor
    std::vector<int> held;         // indices into PoolSettings::gpu_ids the agent takes
    int each = 0;                  // GPUs each executor gets (Worker::has)
  };
  /// GPUs for a new agent of `executors`: PoolSettings::resources.gpus for each, from those no
  /// worker holds (a worker lost but maybe still running keeps its own until its process is surely
  /// gone: Worker::holds_slot). All or none: an agent offers GPUs only if each executor gets its share.
  Gpus share_gpus(const Workers& workers, int executors) const;

  struct Place {
    std::string host;  // "" where MPI places it (no hosts given)
    int slots = 0;     // what its MPI info names the host's slots ("host:slots")
  };
  /// Where a new agent goes. Spread: agent `slot` on host slot mod n (a replacement takes the
  /// slot, and so the host, of the lost one), or the next host with room; pack: the first host
  /// with room (choose_host). Open MPI reads "host" as that host with one slot, which the driver
  /// may fill already. In a Slurm allocation, "host:n" also lowers that node's slots to n for the
  /// rest of the job, never raising them again (orte_util_add_dash_host_nodes, Open MPI 4.1.1 and
  /// later): so the node's own slot count when it is known, which lowers nothing and leaves Open
  /// MPI's check of full nodes in force; else room for one more process than the pool's and the
  /// driver's there.
  Place place(const Workers& workers, int executors, int slot) const;

  /// The smallest worker number (Worker::slot, from 1) that no live worker uses. One pass over the
  /// workers (a pass per number tried took 77% of the driver's time while it started 4,000
  /// simulated agents).
  static int free_slot_number(const Workers& workers);

 private:
  const PoolSettings& s_;
  std::string driver_host_;
};

}  // namespace fibra::detail
