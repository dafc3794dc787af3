// src/freed_memory.hpp: an executor keeps the memory its tasks freed for the next task.
//
// glibc gives a block of 32 MiB or more straight back to the system when it is freed (it was an
// mmap of its own), so a task that takes a 64 MiB vector faults 64 MiB in again each time it
// runs: about 8 ms here, more than copying the bytes (docs/architecture.md, "Warm buffers"). An
// executor runs the same kind of task over and over, so it keeps such memory instead, within a
// bound: large blocks come from the heap, freed memory stays there, and the executor gives it
// back to the system (malloc_trim) when more than `keep_bytes` lie free (checked at most once a
// second) and when it has been idle for a second. The driver does the same for what its caller
// frees (the result vectors of the last calls), from its communication threads.
#pragma once

#include <chrono>
#include <cstddef>

namespace fibra::detail {

class FreedMemory {
 public:
  /// Sets the C library's allocator up for this process; `keep_bytes` 0 leaves it as it is (every
  /// call then does nothing).
  explicit FreedMemory(std::size_t keep_bytes);
  /// After a batch: gives freed memory back if more than the bound lies free.
  void ran();
  /// After a wait that brought no batch: gives freed memory back once the executor was idle a second.
  void waited();

 private:
  using Clock = std::chrono::steady_clock;
  std::size_t keep_;
  Clock::time_point last_batch_ = Clock::now();
  Clock::time_point last_check_ = Clock::now();
  bool given_back_ = true;  // nothing freed since the last give-back
};

/// The driver's: the first pool that keeps freed memory sets the process up (later pools' bounds
/// are not looked at); the pools' communication threads then call driver_heap_turn each turn, with
/// `busy` for a turn that did something.
void driver_keeps_freed(std::size_t keep_bytes);
void driver_heap_turn(bool busy) noexcept;

/// The bound an executor was started with: FIBRA_KEEP_FREED (bytes, from PoolOptions::keep_freed_mib
/// through its agent), else 256 MiB.
std::size_t keep_freed_bytes_from_env();

}  // namespace fibra::detail
