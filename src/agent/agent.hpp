// src/agent/agent.hpp: the worker agent's entry point (src/runtime.cpp calls it in a process
// spawned with the agent flag).
#pragma once

#include <mpi.h>

namespace fibra::detail {

/// Runs the worker agent until the driver says stop or goes silent; returns the exit status. Its
/// settings come from the driver, as the first message (wire::AgentSetup).
/// `retired`: it was told to leave before the pool's other agents (Pool::resize).
int agent_main(MPI_Comm parent, bool& retired);

}  // namespace fibra::detail
