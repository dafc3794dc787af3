// src/driver/scheduler.hpp: the driver's table of chunks (pending, in flight, done), kept apart from MPI
// so that its rules (batching, attempts, exactly-once acceptance) are unit-tested in one process.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fibra/detail/core.hpp"

namespace fibra::detail {

struct Chunk {
  std::uint64_t id = 0;
  std::shared_ptr<JobState> job;
  std::uint64_t first = 0;
  std::uint32_t count = 0;
  /// Encoded items, kept until the chunk is done (for reruns); shared with sends under way, which
  /// send it from here rather than from a copy.
  std::shared_ptr<const std::string> payload;
  std::uint32_t attempt = 0;                  // how many times it was handed out; a result names the one it is for
  int worker = -1;                            // owner while in flight
  int avoid_worker = -1;                      // where its last attempt failed: a retry goes elsewhere if it can
  std::vector<std::string> failures;          // what went wrong in each failed attempt, in order
  std::exception_ptr last_error;              // the error of the last failed attempt
  std::vector<std::uint32_t> skip;            // poison items (offsets) not to run again (keep_going calls)
  std::vector<ItemOutcomeError> item_errors;  // their errors, delivered with the chunk
  bool cancelled = false;                     // fibra::cancel with force, in flight: its outcome is TaskCancelled
  std::uint64_t keep_id = 0;  // its attempt in flight keeps a large result on its host under this id (0: not)
  bool no_keep = false;       // a result of it kept there was lost: later attempts send theirs
};

/// What became of a failed attempt.
enum class Failed {
  stale,      ///< not the attempt in flight (already given up on): ignored
  retried,    ///< back in the queue for another attempt
  exhausted,  ///< out of retries (or not retryable): the chunk is removed and handed back
};

/// Not thread-safe: the pool guards it with its mutex.
class Scheduler {
 public:
  /// Chunks with at most this many items are batched together (many tiny apply_async calls).
  static constexpr std::uint32_t small_chunk_items = 256;
  static constexpr std::size_t max_batch_chunks = 1024;
  /// ... and their payloads together at most this many bytes (one MPI message carries under 2 GiB).
  static constexpr std::size_t max_batch_bytes = std::size_t(64) << 20;
  /// How many retries a worker passes over (to leave them to other workers) before it takes one.
  static constexpr std::size_t max_passed = 16;

  std::uint64_t add(std::shared_ptr<JobState> job, std::uint64_t first, std::uint32_t count, std::string payload);

  /// Takes the chunks to send to `worker` as one batch, given `workers` ready workers in all:
  /// one chunk, or several small ones up to a fair share of what is pending. Chunks of cancelled
  /// jobs are dropped. Each taken chunk's attempt number goes up by one. A retry that failed on
  /// `worker` is passed over, left for another worker, only if `others_have_room`.
  /// With `has`, only chunks whose job needs no more than it offers are taken (others are passed
  /// over, up to max_unfit of them in a row).
  std::vector<Chunk*> take_batch(int worker, int workers, bool others_have_room = true,
                                 const Resources* has = nullptr) {
    return take_batch(
        worker, workers, [others_have_room] { return others_have_room; }, has);
  }
  /// ... with `others_have_room` asked only when a retry that failed on `worker` comes up (the
  /// driver walks its workers for it: 10,000 of them in the scale simulation), at most once.
  std::vector<Chunk*> take_batch(int worker, int workers, const std::function<bool()>& others_have_room,
                                 const Resources* has);
  static constexpr std::size_t max_unfit = 4096;

  /// Accepts a result for (chunk, attempt) and removes the chunk; returns it, or nullptr if the
  /// chunk is unknown or that attempt was given up on (a late duplicate: dropped, never counted).
  std::unique_ptr<Chunk> accept(std::uint64_t chunk, std::uint32_t attempt);

  /// Puts an in-flight chunk back at the front of the queue (it was never started: no failure is
  /// counted). Returns false if (chunk, attempt) is not in flight.
  bool requeue(std::uint64_t chunk, std::uint32_t attempt);

  /// Records that attempt `attempt` of `chunk` failed (`what` says how, `error` is the exception a
  /// caller would see). The chunk goes back to the front of the queue while it has retries left and
  /// `retryable`; otherwise it is removed and returned in `out`.
  Failed fail(std::uint64_t chunk, std::uint32_t attempt, std::string what, std::exception_ptr error, bool retryable,
              std::unique_ptr<Chunk>& out);

  /// Puts an exhausted chunk back (keep_going calls): it runs again, skipping its poison items,
  /// with its failure count reset.
  void readd(std::unique_ptr<Chunk> c);

  /// The chunk if `attempt` of it is in flight, else nullptr.
  const Chunk* find(std::uint64_t chunk, std::uint32_t attempt) const;
  Chunk* find(std::uint64_t chunk, std::uint32_t attempt) {
    return const_cast<Chunk*>(std::as_const(*this).find(chunk, attempt));
  }

  /// (chunk, attempt) of every chunk in flight at `worker`.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> owned_by(int worker) const;
  /// Removes and returns the pending chunks of `job` (fibra::cancel).
  std::vector<std::unique_ptr<Chunk>> take_pending_of(const JobState* job);
  /// Chunks of tasks (JobState::is_task) queued and in flight, for the progress of task graphs.
  void count_tasks(std::uint64_t& queued, std::uint64_t& in_flight) const;
  /// The chunks of `job` in flight.
  std::vector<Chunk*> in_flight_of(const JobState* job);
  /// Removes and returns every chunk (pending and in flight).
  std::vector<std::unique_ptr<Chunk>> take_all();

  /// The chunks take_batch dropped since the last call (their calls were cancelled), each with
  /// the attempt it would have been.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> take_dropped() { return std::exchange(dropped_, {}); }

  std::size_t pending() const { return pending_.size(); }
  /// Whether one of the first `look_at` pending chunks (of jobs not cancelled) is one that a worker
  /// offering `has` could run (Pool::adapt submits worker jobs only for those). Stops at the first.
  bool pending_fits(const Resources& has, std::size_t look_at) const;
  /// The call and item count of the chunk at the front of the queue (false when it is empty).
  bool front(const JobState*& job, std::uint32_t& count) const;
  std::size_t in_flight() const { return chunks_.size() - parked_; }
  bool idle() const { return chunks_.empty() && pending_.empty(); }

 private:
  // A chunk in the queue. One never handed out waits here whole, with no Chunk made for it (a
  // million queued tasks are a million of these, 72 bytes each, not a Chunk and a map entry);
  // it becomes one in chunks_ when it is taken or passed over. One that is in chunks_ (a retry,
  // one put back) waits here by its id alone, with `job` empty.
  struct Queued {
    std::uint64_t id = 0;
    std::shared_ptr<JobState> job;
    std::string payload;
    std::uint64_t first = 0;
    std::uint32_t count = 0;
  };
  // The Chunk of `q`: chunks_'s, or made there now from `q` (which then holds its id alone).
  Chunk& chunk_of(Queued& q);
  // The Chunk of an entry that stands by its id (a retry, one put back); nullptr for one never handed out.
  Chunk* parked(const Queued& q) const { return q.job ? nullptr : chunks_.at(q.id).get(); }
  const JobState& job_of(const Queued& q) const { return q.job ? *q.job : *parked(q)->job; }
  // Puts the chunk `id` (in chunks_) at the front of the queue.
  void push_front_id(std::uint64_t id) {
    pending_.push_front(Queued{id, nullptr, {}, 0, 0});
    ++parked_;
  }
  // Takes the front of the queue off it.
  Queued pop_front() {
    Queued q = std::move(pending_.front());
    pending_.pop_front();
    if (!q.job) --parked_;
    return q;
  }
  // A queued chunk never handed out, as a Chunk of its own (not in chunks_).
  static std::unique_ptr<Chunk> make_chunk(Queued& q);

  std::uint64_t next_id_ = 1;
  std::deque<Queued> pending_;
  std::size_t parked_ = 0;                                            // entries of pending_ whose chunk is in chunks_
  std::unordered_map<std::uint64_t, std::unique_ptr<Chunk>> chunks_;  // in flight, and queued again
  std::vector<std::pair<std::uint64_t, std::uint32_t>> dropped_;      // take_dropped()
};

}  // namespace fibra::detail
