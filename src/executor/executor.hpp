// src/executor/executor.hpp: the executor's entry point, and what code that may run inside a task
// (fibra::submit, actors' handles) asks of it. Never includes MPI: an executor has no MPI state.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "fibra/detail/core.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

/// In an executor (executor_main registers a TaskSide, src/task_side.hpp, that forwards the code both
/// roles run to this and the next): the core through which its tasks submit work and call actors (uid 0: the pool that
/// runs it; else the pool of an actor).
std::shared_ptr<PoolCore> executor_core(std::uint64_t uid);

/// In an executor: a Queue's, Pipe's or Event's call, sent to the driver (whose channels hold
/// them) and waited for as any call of a task. Items received are acknowledged before they are
/// returned, so that the driver puts them back only if this process ended without them.
wire::ChannelReply executor_channel_call(wire::ChannelCall call);

/// In an executor: this process will call channels (it runs a Process). Its agent tells the driver
/// of its lane now rather than at its first call, and the driver then reads its calls from the
/// lane's ring at once (Lane::reads_calls): its first call goes there.
void executor_wants_lane() noexcept;

/// In an executor on the driver's host (lanes on): waits, at most `most`, until the driver reads
/// this process's calls on channels from its lane's ring (Lane::reads_calls), so that a Process's
/// function sends its first calls there rather than through its agent.
void executor_await_ring(std::chrono::milliseconds most) noexcept;

/// The codec's spill_large in an executor (src/executor/results.cpp; TaskSide::spill_large).
bool executor_spill_large(std::string& out, const void* p, std::size_t n);

/// Runs the executor on a socket and a mailbox (file descriptors) until the socket closes.
[[noreturn]] void executor_main(int sock, int mailbox_fd, pid_t parent);

}  // namespace fibra::detail
