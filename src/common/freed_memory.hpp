// src/common/freed_memory.hpp: a process keeps the memory it freed for its next large buffer, within a
// bound.
//
// glibc gives a block of 32 MiB or more straight back to the system when it is freed (it was an
// mmap of its own), so a task that takes a 64 MiB vector faults 64 MiB in again each time it runs,
// and so does the caller that decodes its 64 MiB result: about 8 ms each here, more than copying
// the bytes (docs/architecture.md, "Freed memory kept"). Executors, and the driver once a pool
// starts, take large blocks from the heap instead and keep what is freed there, and a thread that
// looks once a second gives freed memory back to the system (malloc_trim) when more than the bound
// came free since its last give-back, and once when the process turns idle. Needs glibc 2.33 or
// later (mallinfo2); elsewhere the allocator is left as it is.
#pragma once

#include <cstddef>
#include <string>

namespace fibra::detail {

/// Sets this process's allocator to keep up to `keep_bytes` of freed memory and starts the thread
/// that holds it to that. 0 leaves the allocator as it is; the first call with a bound above 0
/// decides, and later ones change nothing. False: not kept (0, a C library without these
/// controls, no thread to be had, or mallopt refused).
/// `sleep_when_idle` (an executor, which frees nothing between batches): the thread does not wake
/// while the process is idle.
bool keep_freed_memory(std::size_t keep_bytes, bool sleep_when_idle);

/// Marks the process busy now (the driver: a turn of a communication thread that did something):
/// freed memory is given back after idle_seconds without a mark and without a batch running.
void freed_memory_busy() noexcept;

/// A batch running in an executor, from construction to destruction: no idle give-back meanwhile.
class RunningBatch {
 public:
  RunningBatch() noexcept;
  ~RunningBatch();
  RunningBatch(const RunningBatch&) = delete;
  RunningBatch& operator=(const RunningBatch&) = delete;
};

/// Idle this long, a process gives back what it freed since its last give-back.
inline constexpr int freed_memory_idle_seconds = 2;

/// Buffers a thread keeps for its next message of about the same size. The driver's allocator is
/// left as glibc sets it (PoolOptions::driver_keep_freed_mib is 0 by default), and glibc gives the
/// top of a thread's heap back to the system (madvise) at each free of a block of 64 KiB or more
/// while that top is over 128 KiB, then faults it in again at the next: answers to gets of 64-128
/// KiB, made and freed at each call, spent half the communication thread's time so
/// (docs/architecture.md, "A batch is one block").
/// An empty buffer with room for `n` bytes: one this thread kept, if one is large enough.
std::string scratch_buffer(std::size_t n);
/// Keeps `s`'s memory for this thread's next scratch_buffer (four buffers at most, of 1 MiB at most:
/// a thread keeps 4 MiB at most).
void keep_scratch(std::string&& s) noexcept;

/// The bound an executor was started with: FIBRA_KEEP_FREED (bytes, from PoolOptions::keep_freed_mib
/// through its agent), else PoolOptions' default.
std::size_t keep_freed_bytes_from_env();

}  // namespace fibra::detail
