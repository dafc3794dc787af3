// src/roles.hpp: the three kinds of fibra process, and the argv markers that start the two that
// fibra spawns. `fibra::Runtime` (src/runtime.cpp) reads them and becomes one of:
//
//   driver    the user's main; owns pools and their schedulers               (src/driver/)
//   agent     a spawned MPI process; relays batches to its executors and supervises them, never
//             runs user code                                                  (src/agent/)
//             (one exception, for benchmarks and tests only: a process of the scale simulation,
//             src/agent/simulated_agents.hpp, speaks for thousands of agents and runs their
//             plain tasks itself)
//   executor  a plain child of an agent, without MPI; runs user functions     (src/executor/)
//
// What two of them share crosses a process boundary only through src/transport/ (wire messages,
// the lane and its mailbox); src/common/ is code every process links (logs, traces, the registry),
// src/calls/ what any process that makes a call runs (a call's state, its checkpoint).
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace fibra::detail {

/// argv markers with which fibra starts copies of the user's binary.
inline constexpr const char* agent_flag = "--fibra-agent";
inline constexpr const char* executor_flag = "--fibra-executor";
/// A worker started apart joins a running driver: `./app --fibra-join <the driver's FIBRA_JOIN_FILE>`.
inline constexpr const char* join_flag = "--fibra-join";
/// The driver's join listener starts this binary as `<exe> --fibra-join-standin <MPI port>` when a
/// joiner said hello and then never connected: the stand-in connects in its place and leaves, so
/// that the driver's MPI_Comm_accept, which Open MPI cannot call off, returns (src/driver/joins.cpp).
inline constexpr const char* join_standin_flag = "--fibra-join-standin";

/// The exit status of an executor that ran its PoolOptions::max_tasks_per_child tasks and ended
/// between two of them: its agent starts another at once, sends the chunks it had not started
/// back as not run, and says nothing of it (no crash, no crash loop).
inline constexpr int executor_retired_status = 86;

/// How an agent starts an executor, `<exe> --fibra-executor <socket fd> <lane region fd> <agent's
/// pid>`: written by the agent (SupervisedExecutor) and read by fibra::Runtime, both through this.
struct ExecutorArgs {
  int socket_fd = 3;
  int region_fd = 4;
  long parent_pid = 0;

  std::vector<std::string> to_argv(const std::string& exe) const {
    return {exe, executor_flag, std::to_string(socket_fd), std::to_string(region_fd), std::to_string(parent_pid)};
  }
  /// nullopt unless argv is an executor's; an executor's with a field that is no number also
  /// gives nullopt, with `malformed` set.
  static std::optional<ExecutorArgs> parse(int argc, char** argv, bool& malformed) {
    malformed = false;
    if (argc < 2 || std::strcmp(argv[1], executor_flag) != 0) return std::nullopt;
    malformed = true;
    if (argc != 5) return std::nullopt;
    long v[3];
    for (int i = 0; i < 3; ++i) {
      char* end = nullptr;
      errno = 0;
      v[i] = std::strtol(argv[2 + i], &end, 10);
      if (errno != 0 || end == argv[2 + i] || *end != '\0' || v[i] < 0) return std::nullopt;
    }
    malformed = false;
    return ExecutorArgs{int(v[0]), int(v[1]), v[2]};
  }
};

}  // namespace fibra::detail
