// src/driver/elastic.hpp: Pool::adapt, a pool that grows with Slurm worker jobs while work waits
// and lets joined workers go once idle (docs/elastic.md). A thread of its own submits, follows
// and cancels the worker jobs (sbatch, squeue and scancel take tens of milliseconds each, which
// the communication thread cannot spare); the communication thread lets idle joined workers go
// (PoolImpl::adjust_size), since it alone changes workers' states.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/elastic_env.hpp"
#include "fibra/options.hpp"

namespace fibra::detail {

/// Pool::adapt's bounds and options from a job spec's [elastic] (FIBRA_ELASTIC_*, set by the
/// script `fibra slurm render` writes: ElasticEnv). A call that finds FIBRA_ELASTIC_MAX_JOBS set
/// returns them, once until give_back_spec_adapt() (one pool at a time adapts: the first to start,
/// then the next after it stops); other calls return nothing. ConfigError naming a malformed variable.
std::optional<ElasticEnv> adapt_from_environment();
void give_back_spec_adapt();

class Elastic {
 public:
  /// What the pool says of itself at each look (under its lock).
  struct View {
    int workers = 0;               ///< workers starting or ready, its own and joined ones
    std::size_t waiting = 0;       ///< chunks queued, when one of the first is one a worker job could run
    std::size_t unfit = 0;         ///< chunks queued, when none of the first is one a worker job could run
    std::string unfit_example;     ///< what a worker job's worker offers, when unfit > 0
    std::set<std::string> joined;  ///< Slurm job ids whose worker joined (alive or not)
  };
  /// Checks the options (ConfigError naming what is wrong) and starts following the pool.
  /// `pool`: the pool's uid, which its worker jobs name in their hello (the pool they join);
  /// `cpus_per_worker`: what each of its workers offers (a worker job asks for that many a worker).
  Elastic(int min_workers, int max_workers, AdaptOptions options, std::uint64_t pool, double cpus_per_worker,
          std::function<View()> view);
  /// Submits nothing more (its thread ends). Idempotent.
  void halt();
  /// After halt(): cancels its worker jobs still pending or running (scancel), those whose worker
  /// joined too or not; `why` ends the log line that names them.
  void cancel(bool joined_too, const std::string& why);
  ~Elastic();  // halt()
  Elastic(const Elastic&) = delete;
  Elastic& operator=(const Elastic&) = delete;

  int min_workers() const;
  double idle_timeout_s() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::detail
