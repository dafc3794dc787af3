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
// the lane and its mailbox); src/common/ is code every process links (logs, traces, the registry).
#pragma once

namespace fibra::detail {

/// argv markers with which fibra starts copies of the user's binary.
inline constexpr const char* agent_flag = "--fibra-agent";
inline constexpr const char* executor_flag = "--fibra-executor";
/// A worker started apart joins a running driver: `./app --fibra-join <the driver's FIBRA_JOIN_FILE>`.
inline constexpr const char* join_flag = "--fibra-join";

}  // namespace fibra::detail
