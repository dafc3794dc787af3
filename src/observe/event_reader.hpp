// src/observe/event_reader.hpp: a run's event log (events.jsonl, src/driver/event_log.hpp) read back
// into chunks, their attempts, and workers, for `fibra trace`, `report`, `status`, `top` and the live page.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace fibra::observe {

/// One attempt of a chunk: where it was sent, where and when it ran, and how it ended.
struct AttemptRecord {
  std::uint32_t attempt = 0;
  int worker = -1;                  ///< the worker (agent) it was sent to
  std::int64_t exec = 0;            ///< the executor's pid that reported it (0: none did)
  std::int64_t ready = 0;           ///< when it could be sent: queued, or when the attempt before ended
  std::int64_t sent = 0;            ///< microseconds since the Unix epoch, as every time here
  std::int64_t start = 0, run = 0;  ///< on the executor's clock (0: not reported)
  std::int64_t wait = 0;            ///< of run, what its tasks waited on Futures, queues and pipes
  std::int64_t reported = 0;        ///< when its result (or its agent's report) reached the driver
  std::int64_t ended = 0;           ///< when the driver settled it (done, failed, ...); 0: never
  std::string status;               ///< what the executor or agent reported ("ok", "crashed", ...)
  std::string outcome;              ///< done, failed, requeued, late, cancelled, abandoned; "": unfinished
  std::string kind, error;          ///< of a failed attempt
  bool retried = false;             ///< a failed attempt that was tried again
  /// Whether it reached a worker: sent, and not taken back before it ran.
  bool reached_a_worker() const { return sent != 0 && outcome != "requeued"; }
};

struct ChunkRecord {
  int segment = 0;  ///< which process wrote it (the log's `log` events, in order)
  std::uint64_t pool = 0, chunk = 0, call = 0, first = 0;
  std::uint32_t count = 0;
  std::string fn;
  bool task = false;
  std::int64_t queued = 0;           ///< when it was submitted (else queued)
  std::vector<std::uint64_t> after;  ///< the chunks (tasks) whose outcomes it waited for as arguments
  int asked_by_worker = -1;          ///< a task's call: the worker whose task asked for it (-1: the driver)
  std::uint64_t asked_by_route = 0;  ///< ... and its route there (wire::RequestRoute)
  std::vector<AttemptRecord> attempts;
  /// Its items as messages name them: "7", or "10..19".
  std::string items() const {
    return count == 1 ? std::to_string(first) : std::to_string(first) + ".." + std::to_string(first + count - 1);
  }
};

struct WorkerRecord {
  int segment = 0;
  std::uint64_t pool = 0;
  int worker = 0, slot = 0, executors = 0;
  std::string host;
  std::int64_t pid = 0;
  std::int64_t started = 0, lost = 0;  ///< 0: not lost
  std::int64_t left = 0;               ///< when it said goodbye (retired, or the pool's end); 0: it did not
  std::string why;                     ///< why it was lost
};

/// An MPI_Comm_spawn of agents: the driver's communication thread read no result meanwhile.
struct SpawnRecord {
  int segment = 0;
  std::uint64_t pool = 0;
  int agents = 0, executors = 0;
  std::int64_t start = 0, took = 0;
};

/// An actor's call (or its constructor), as its process reported it.
struct ActorCallRecord {
  int segment = 0;
  std::uint64_t pool = 0, actor = 0;
  std::string fn, status;
  bool ctor = false;
  int worker = 0;
  std::int64_t exec = 0, start = 0, run = 0;  ///< start and run on the executor's clock (0: not reported)
  std::int64_t reported = 0;
};

/// The workers (agents) of one process's pools, by state: alive (neither lost nor gone), lost,
/// left (retired, or said goodbye at the pool's end); the executors of the alive ones, by host.
struct WorkerCounts {
  int alive = 0, lost = 0, left = 0, executors = 0;
  std::map<std::string, int> executors_by_host;
};

/// A map's checkpoint made durable (`flush`) or folded into its .h5 file (`fold`).
struct CheckpointRecord {
  int segment = 0;
  std::uint64_t pool = 0;
  std::int64_t t = 0;
  std::string path, how;
  std::uint64_t done = 0, of = 0;  ///< items done, of the call's inputs
};

/// A fibra::tune experiment on one of the process's pools (its `tune` event).
struct TuneRecord {
  int segment = 0;
  std::uint64_t pool = 0;
  std::uint64_t experiment = 0;                    ///< its number among the process's experiments
  std::string trainable, metric, mode, scheduler;  ///< mode: "max" or "min"
  std::size_t trials = 0;
  std::int64_t started = 0;
};

/// One result of a trial: its iteration, when the driver had it, and the value of the
/// experiment's metric (NaN where the row had none).
struct TrialPoint {
  std::int64_t iteration = 0;
  std::int64_t t = 0;
  double value = 0;
};

struct TrialRecord {
  int segment = 0;
  std::uint64_t pool = 0;
  std::size_t experiment = 0;  ///< its TuneRecord in EventLogRecord::tunes
  std::size_t trial = 0;
  std::string config;
  std::string status;  ///< running, pending (to be retried, or paused at a rung), done, stopped, error
  std::string error;   ///< the last failure, or why it was stopped
  int failures = 0;
  std::int64_t started = 0, ended = 0;  ///< its first start; its end (0: it did not end in the log)
  /// Its results in order; a retry from a checkpoint drops those after it, as the experiment does.
  std::vector<TrialPoint> points;
};

/// A worker that asked to join the run and was refused (`join_refused`): by the join listener's
/// door (`from`: its address and port; its handshake failed), or after its hello (`origin`, `host`,
/// `pid`: what it said).
struct RefusedJoinRecord {
  int segment = 0;
  std::int64_t t = 0;
  std::string from, origin, host;
  std::int64_t pid = 0;
  std::string why;
  /// What its hello said, "origin on host (pid N)"; "" when it said none.
  std::string worker() const;
};

/// A Queue or one direction of a Pipe, as it went (`queue`): what was put in it, taken from it,
/// came back to it (from a task whose process ended, or read ahead and given back), the most it
/// held, and what was left in it.
struct QueueRecord {
  int segment = 0;
  std::int64_t t = 0;
  std::uint64_t id = 0;
  std::string kind;  ///< "queue" or "pipe"
  std::uint64_t put = 0, bytes = 0, taken = 0, came_back = 0, most = 0, left = 0;
};

struct SegmentRecord {  ///< a process that wrote the log
  std::int64_t pid = 0, started = 0;
  std::string host, program;
  bool ended = false;  ///< it wrote its `end` event (a killed driver does not)
};

struct EventLogRecord {
  std::vector<SegmentRecord> segments;
  std::vector<ChunkRecord> chunks;  ///< in the order they were queued
  std::vector<WorkerRecord> workers;
  std::vector<SpawnRecord> spawns;
  std::vector<ActorCallRecord> actor_calls;
  std::vector<CheckpointRecord> checkpoints;
  std::vector<TuneRecord> tunes;
  std::vector<TrialRecord> trials;  ///< in the order they first started
  std::vector<RefusedJoinRecord> refused_joins;
  std::vector<QueueRecord> queues;   ///< in the order they went
  std::int64_t first = 0, last = 0;  ///< the earliest and latest time in it
  std::uint64_t dropped = 0;         ///< events the driver could not keep (its `dropped` events)
  std::size_t unreadable = 0;        ///< lines that did not parse (the last one of a killed driver, cut)
  std::size_t lines = 0;
};

/// Where a chunk stands, by its last attempt: waiting (queued, or to be tried again), running,
/// done, failed (for good), or other (cancelled, abandoned).
enum class ChunkState { waiting, running, done, failed, other };
ChunkState state_of(const ChunkRecord& c);

/// The result of `r` with the best finite value of its experiment's metric (the least for `min`),
/// or null when it has none.
const TrialPoint* best_point(const TrialRecord& r, bool min);

/// The workers that the process of `segment` (the log's `log` events, in order) had, by state.
WorkerCounts count_workers(const EventLogRecord& log, int segment);

/// Reads `path` (an events.jsonl, or the folder that holds one).
/// @throws std::runtime_error naming the file if it cannot be read or holds no event log.
EventLogRecord read_event_log(const std::string& path);

/// A log read as it grows (`fibra top`): each poll() reads the whole lines added since the last.
class EventLogFollower {
 public:
  /// @throws std::runtime_error naming the file if it cannot be opened.
  explicit EventLogFollower(const std::string& path);
  ~EventLogFollower();
  /// Reads what was added; returns whether anything was.
  bool poll();
  const EventLogRecord& log() const;
  const std::string& file() const;
  /// Whether the file ends in a line without its newline (being written, or cut by a killed driver).
  bool ends_mid_line() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::observe
