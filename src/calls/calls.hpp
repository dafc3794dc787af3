// src/calls/calls.hpp: code that runs in any process that makes a call (the driver, or a task in an
// executor): a call's state and progress (job.cpp), its checkpoint and a stop on SIGTERM/SIGUSR1
// (checkpoint.cpp), the actor that hosts a Process (process_host.cpp), and the way into a pool's
// event log with its JSON quoting (events.cpp). Both roles link it; it
// includes no role's folder and, compiled like src/executor/, cannot reach <mpi.h>. What the
// driver alone adds to a stop it registers here.
#pragma once

#include <cstdint>

#include "fibra/detail/events.hpp"

namespace fibra::detail {

/// Whether stderr is a terminal: progress lines are redrawn in place there ("\r"); into a file or a
/// pipe each is a whole line of its own, at most every 10 s (job.cpp, src/driver/pool.cpp).
bool stderr_is_terminal();

/// The driver's part of a stop (fibra/detail/checkpoint.hpp's exit_for_stop): its pools stopped,
/// the checkpoints folded, MPI finalized. The driver's Runtime registers it; in a process without
/// one (an executor), a stop folds the checkpoints and ends the process.
using StopTeardown = void (*)() noexcept;
void set_stop_teardown(StopTeardown teardown) noexcept;

/// How pool_event_sink (fibra/detail/events.hpp; events.cpp) finds a pool's event log: the
/// driver's Runtime registers its own; in a process without one, there is no log to find.
void set_pool_event_sink_finder(EventSink (*finder)(std::uint64_t pool_uid)) noexcept;

}  // namespace fibra::detail
