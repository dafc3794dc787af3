// fibra/stats.hpp: fibra::PoolStats, what a pool has been through (Pool::stats()).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fibra {

/// @brief What a pool has been through: its counters of work and failures (Pool::stats()).
///
/// @code
///   fibra::PoolStats s = pool.stats();
///   std::printf("%llu chunks, %llu workers lost\n", (unsigned long long)s.chunks_done,
///               (unsigned long long)s.workers_lost);
/// @endcode
/// See docs/fault-tolerance.md for when each counter moves.
struct PoolStats {
  int workers_ready = 0;                   ///< workers taking work now
  std::uint64_t workers_started = 0;       ///< spawned since the pool started, replacements included
  std::uint64_t workers_lost = 0;          ///< declared lost (silent, or their process gone)
  std::uint64_t chunks_done = 0;           ///< chunks whose outcome was delivered
  std::uint64_t attempts_failed = 0;       ///< crashed, timed out, lost, or raised and retried
  std::uint64_t chunks_resubmitted = 0;    ///< failed attempts that were handed out again
  std::uint64_t late_results_dropped = 0;  ///< results of attempts already given up on
  std::uint64_t batches_sent = 0;          ///< batches of chunks (and of actors' calls) handed to workers
  /// ... of which through shared memory, straight to a worker on the driver's host (the others
  /// went through MPI and the worker's agent: to workers on other hosts, and batches that found
  /// their worker's slots taken)
  std::uint64_t batches_shared_memory = 0;
  /// Batches taken back from a worker busy with a task before it started them, and handed to an
  /// idle one (work stealing; workers on the driver's host only: docs/architecture.md)
  std::uint64_t batches_stolen = 0;
  /// Stored objects (fibra::put) sent to an agent whose executors cannot read the driver's memory
  /// (another host, or no shared memory): once per object and agent, however many tasks take it
  std::uint64_t objects_sent = 0;
  /// Task results kept in shared memory on the worker's host, where the tasks given them read them
  /// (PoolOptions::keep_results_from): not sent through the driver.
  std::uint64_t results_kept = 0;
  /// Task results that tasks were given only after they were sent to a worker: stored once in the
  /// driver's shared memory when they came, where the tasks given them read them.
  std::uint64_t results_stored_on_arrival = 0;
  /// Kept results that the driver could not open (their agent had died, say): their tasks ran
  /// again, sending their results as any other, at no cost of an attempt.
  std::uint64_t kept_results_lost = 0;
  /// Values tasks stored (fibra::put in a task) that calls they made took from where they lie:
  /// one per call and value.
  std::uint64_t objects_from_tasks = 0;
  /// Stored objects an agent on another host copied from a peer agent that held them (a result
  /// kept where it was made, a value another agent had been sent), not from the driver: once per
  /// object and agent. A copy that failed is sent by the driver after all (objects_sent).
  std::uint64_t objects_fetched_from_peers = 0;
  /// Messages of results (one or more chunks' each) that came back through shared memory. A large
  /// one is decoded where it lies by a call waiting for it; one that arrives before anybody waits
  /// is copied out, so that the worker's next large result finds the way free.
  std::uint64_t results_shared_memory = 0;
  /// ... of which the worker wrote in place: a large result's blocks encoded straight into the
  /// shared memory the driver reads them from (docs/architecture.md, "Large payloads").
  std::uint64_t results_written_in_place = 0;
  /// When the last failure was seen by the driver, and when a retry was last handed out.
  std::chrono::steady_clock::time_point last_failure_seen{}, last_retry_sent{};
};

/// @brief One agent of a pool and the workers it runs (Pool::workers()): where it runs.
struct WorkerInfo {
  int slot = 0;                ///< its number in the pool ("agent 2")
  std::string host;            ///< the host it runs on (empty until it said hello)
  long pid = 0;                ///< the agent's pid on that host
  int workers = 1;             ///< workers (executors) it runs
  std::string state;           ///< "starting", "ready", "retiring", "leaving", "gone" or "lost"
  bool shared_memory = false;  ///< the driver hands its workers batches in shared memory (same host)
  /// Empty for an agent the pool spawned; for one that joined the running driver from a launch of
  /// its own (`./app --fibra-join`, docs/elastic.md): where it came from, "Slurm job 812" or
  /// "mpirun, rank 0 of 2" or "a launch of its own".
  std::string joined_from;
};

}  // namespace fibra
