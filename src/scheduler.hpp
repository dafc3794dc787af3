// src/scheduler.hpp: the driver's table of chunks (pending, in flight, done), kept apart from MPI
// so that its rules (batching, attempts, exactly-once acceptance) are unit-tested in one process.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "fibra/detail/core.hpp"

namespace fibra::detail {

struct Chunk {
  std::uint64_t id = 0;
  std::shared_ptr<JobState> job;
  std::uint64_t first = 0;
  std::uint32_t count = 0;
  std::string payload;     // encoded items, kept until the chunk is done (for reruns)
  std::uint32_t attempt = 0;
  int worker = -1;         // owner while in flight
};

/// Not thread-safe: the pool guards it with its mutex.
class Scheduler {
 public:
  /// Chunks with at most this many items are batched together (many tiny apply_async calls).
  static constexpr std::uint32_t small_chunk_items = 256;
  static constexpr std::size_t max_batch_chunks = 1024;

  std::uint64_t add(std::shared_ptr<JobState> job, std::uint64_t first, std::uint32_t count, std::string payload);

  /// Takes the chunks to send to `worker` as one batch, given `workers` ready workers in all:
  /// one chunk, or several small ones up to a fair share of what is pending. Chunks of cancelled
  /// jobs are dropped. Each taken chunk's attempt number goes up by one.
  std::vector<Chunk*> take_batch(int worker, int workers);

  /// Accepts a result for (chunk, attempt) and removes the chunk; returns it, or nullptr if the
  /// chunk is unknown or that attempt was given up on (a late duplicate: dropped, never counted).
  std::unique_ptr<Chunk> accept(std::uint64_t chunk, std::uint32_t attempt);

  /// Puts an in-flight chunk back at the front of the queue (it was never started). Returns false
  /// if (chunk, attempt) is not in flight.
  bool requeue(std::uint64_t chunk, std::uint32_t attempt);

  /// Removes and returns every chunk owned by `worker` (in flight there).
  std::vector<std::unique_ptr<Chunk>> take_owned_by(int worker);
  /// Removes and returns every chunk (pending and in flight).
  std::vector<std::unique_ptr<Chunk>> take_all();

  std::size_t pending() const { return pending_.size(); }
  std::size_t in_flight() const { return chunks_.size() - pending_.size(); }
  bool idle() const { return chunks_.empty(); }

 private:
  std::uint64_t next_id_ = 1;
  std::deque<std::uint64_t> pending_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Chunk>> chunks_;
};

}  // namespace fibra::detail
