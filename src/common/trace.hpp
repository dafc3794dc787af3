// src/common/trace.hpp: where a round trip's microseconds go. With FIBRA_TRACE=<folder> set, every fibra
// process (driver, agents, executors) appends one line per passage of a chunk through a point of
// the data path, "<point> <chunk> <ns>" with CLOCK_MONOTONIC time (one clock for every process of a
// host), to <folder>/trace.<pid>. benchmarks/trace_breakdown.py turns the files into a table.
// Unset, a point costs one load of a flag.
#pragma once

#include <cstdint>

namespace fibra::trace {

/// The points a chunk passes, in order, on a round trip.
enum Point : int {
  submitted = 0,    ///< driver, user thread: queued in the scheduler
  dispatched,       ///< driver, communication thread: its batch handed to MPI
  agent_received,   ///< agent: batch received from the driver
  agent_forwarded,  ///< agent: batch written whole to the executor
  executor_read,    ///< executor: batch read whole
  executor_ran,     ///< executor: chunk ran
  executor_sent,    ///< executor: its result frame written
  agent_read,       ///< agent: result frame read whole
  agent_sent,       ///< agent: result frame handed to MPI
  driver_received,  ///< driver, communication thread: result received
  delivered,        ///< driver, communication thread: outcome handed to the call
  taken,            ///< driver, user thread: outcome taken by the caller (chunk 0: not known there)
};

namespace detail {
extern bool on;
void write(Point p, std::uint64_t chunk) noexcept;
}  // namespace detail

/// Records that `chunk` passed `p` (a no-op unless FIBRA_TRACE is set).
inline void mark(Point p, std::uint64_t chunk) noexcept {
  if (detail::on) detail::write(p, chunk);
}

}  // namespace fibra::trace
