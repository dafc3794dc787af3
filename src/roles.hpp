// src/roles.hpp: the three kinds of fibra process and what they share.
//
//   driver    the user's main; owns pools and their schedulers (pool.cpp)
//   agent     a spawned MPI process; relays batches to its executor, never runs user code (agent.cpp)
//   executor  a plain child of an agent, without MPI; runs user functions (executor.cpp)
#pragma once

#include <mpi.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "fibra/detail/core.hpp"
#include "fibra/detail/registry.hpp"

namespace fibra::detail {

/// argv markers with which fibra starts copies of the user's binary.
inline constexpr const char* agent_flag = "--fibra-agent";
inline constexpr const char* executor_flag = "--fibra-executor";

/// Shared memory between an agent and its executor: which chunk and item the executor is on, so
/// that when it dies the agent can say which item it died on.
struct Mailbox {
  std::atomic<std::uint64_t> chunk{0};  // 0: between chunks
  Cursor item{0};
  std::atomic<double> timeout_s{0};     // of the chunk it is on (its TaskHeader::timeout_s)
  std::atomic<std::uint64_t> results{0};  // result frames it put in its lane (src/transport/lane.hpp)
};

/// Runs the worker agent until the driver says stop or goes silent; returns the exit status. Its
/// settings come from the driver, as the first message (wire::AgentSetup).
int agent_main(MPI_Comm parent);

/// True in an executor (a worker process that runs user functions).
bool in_executor() noexcept;

/// In the driver: an agent on another host was lost (silent, its node cut off or dead). Open MPI
/// 4.1 may then hang or abort in MPI_Comm_spawn and MPI_Finalize, so from then on no pool of the
/// process spawns (PoolImpl::spawn) and ~Runtime skips MPI_Finalize (see runtime.cpp).
void note_lost_remote_host(const std::string& host);

/// True once note_lost_remote_host was called in this process.
bool remote_host_lost() noexcept;

/// The hosts noted so far, "a, b"; empty: none (MPI_Finalize is safe).
std::string lost_remote_hosts();

/// In an executor: the core through which its tasks submit work and call actors (uid 0: the pool
/// that runs it; else the pool of an actor).
std::shared_ptr<PoolCore> executor_core(std::uint64_t uid);

/// In the driver: the pool of that PoolCore::uid, or null if it is gone.
std::shared_ptr<PoolCore> find_pool(std::uint64_t uid) noexcept;

/// Runs the executor on a socket and a mailbox (file descriptors) until the socket closes.
[[noreturn]] void executor_main(int sock, int mailbox_fd, pid_t parent);

/// Terminates every pool still running (the Runtime's destructor calls it before MPI_Finalize).
void stop_all_pools() noexcept;
/// Terminates and drops the default pool (fibra::default_pool); the Runtime's end calls it first.
void drop_default_pool() noexcept;

/// Whether spawned workers may outnumber MPI's slots: yes on a workstation, no inside a batch job
/// (whose slots are what was paid for), unless FIBRA_OVERSUBSCRIBE=1 or 0 says otherwise.
bool oversubscribe_allowed();

/// The path of this process's executable (to start copies of it).
std::string self_exe();
/// This host's name.
std::string host_name();
/// "killed by signal 11 (Segmentation fault)" / "exited with status 3", from a waitpid status.
std::string describe_exit(int wait_status);

}  // namespace fibra::detail
