// src/agent/agent.hpp: the worker agent's entry point (src/runtime.cpp calls it in a process
// spawned with the agent flag).
#pragma once

#include <mpi.h>

namespace fibra::detail {

/// Runs the worker agent until the driver says stop or goes silent; returns the exit status. Its
/// settings come from the driver, as the first message (wire::AgentSetup).
int agent_main(MPI_Comm parent);

}  // namespace fibra::detail
