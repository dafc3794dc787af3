// src/driver/pool_events.hpp: a pool's part that writes its entries in the run's event log
// (PoolOptions::events, FIBRA_EVENTS): each call writes one event, named and with the fields
// docs/observability.md lists. It owns what the log needs to name calls (a call's number, the
// tasks' chunk ids, what a task waits on) under a lock of its own, taken inside the pool's mu_
// where a caller holds it and never around a call into the pool. A pool without a log has none
// of it (PoolImpl::events_ is null), so that an event costs one branch there.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "driver/event_log.hpp"
#include "fibra/detail/core.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

class PoolEvents {
 public:
  PoolEvents(std::shared_ptr<EventLog> log, std::uint64_t pool) : log_(std::move(log)), pool_(pool) {}
  const std::shared_ptr<EventLog>& log() const { return log_; }

  void pool_started(int workers, const std::string& host);
  /// A chunk entered the scheduler; `extra`: fields its event adds (a nested call's asker, a
  /// task's dependencies: after()).
  void queued(std::uint64_t chunk, const std::shared_ptr<JobState>& job, std::uint64_t first, std::uint32_t count,
              std::int64_t submitted_us, std::string_view extra = {});
  /// `job` waits for the outcomes of `deps` (PoolCore::note_dependencies), until it is queued.
  void dependencies(const std::shared_ptr<JobState>& job, const std::vector<std::shared_ptr<JobState>>& deps);
  /// The `after` field of `job`'s queued event (`,"after":[...]`), or "" (forgets what it waited on).
  std::string after(const std::shared_ptr<JobState>& job);
  void sent(std::uint64_t chunk, std::uint32_t attempt, int worker);
  void ran(int worker, const wire::ResultView& r, std::int64_t exec_pid);
  /// done, late, cancelled, abandoned, requeued
  void outcome(std::string_view ev, std::uint64_t chunk, std::uint32_t attempt);
  void failed(std::uint64_t chunk, std::uint32_t attempt, std::string_view kind, bool retried,
              const std::string& error);
  /// An agent said hello; `objects`: its object server's address:port, "" for none.
  void worker(int worker, int slot, const std::string& host, long pid, int executors, bool joined,
              const std::string& objects);
  void lost(int worker, const std::string& why);
  void left(int worker);
  /// An MPI_Comm_spawn of agents that started: when it began (planning included) and how long it
  /// took, the communication thread's time, in which no result is read.
  void spawn(std::size_t agents, int executors, std::int64_t began_us);
  /// An actor's call (its constructor included) as its process reported it.
  void actor_call(std::uint64_t actor, const std::string& fn, bool ctor, int worker, const wire::ResultView& r,
                  std::int64_t exec_pid);
  /// The pool has stopped: its last event, written now (a program may end by _Exit after it).
  void pool_ended();

 private:
  using WeakJob = std::weak_ptr<JobState>;
  std::uint64_t call_id(const std::shared_ptr<JobState>& job, std::uint64_t chunk);  // under mu_

  const std::shared_ptr<EventLog> log_;
  const std::uint64_t pool_;
  std::mutex mu_;  // the members below
  // A call's number: a task's is its chunk's id; a map's that of its first chunk the log saw.
  std::unordered_map<const JobState*, std::pair<WeakJob, std::uint64_t>> call_ids_;
  std::pair<WeakJob, std::uint64_t> last_call_;
  std::size_t call_ids_swept_at_ = 0;
  // A task's chunk id by its state, for the tasks that wait on it; what a task waits on, until it
  // is queued. Each swept of the gone whenever it has doubled.
  std::unordered_map<const JobState*, std::pair<WeakJob, std::uint64_t>> task_ids_;
  std::unordered_map<const JobState*, std::pair<WeakJob, std::vector<WeakJob>>> waits_for_;
  std::size_t task_ids_swept_at_ = 0, waits_swept_at_ = 0;
};

}  // namespace fibra::detail
