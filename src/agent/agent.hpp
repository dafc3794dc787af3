// src/agent/agent.hpp: the worker agent's entry point (src/runtime.cpp calls it in a process
// spawned with the agent flag).
#pragma once

#include <mpi.h>

#include <optional>

#include "transport/auth.hpp"

namespace fibra::detail {

/// Runs the worker agent until the driver says stop or goes silent; returns the exit status. Its
/// settings come from the driver, as the first message (wire::AgentSetup).
/// `retired`: it was told to leave before the pool's other agents (Pool::resize).
int agent_main(MPI_Comm parent, bool& retired);

}  // namespace fibra::detail

namespace fibra::detail {

/// A worker started apart (`./app --fibra-join <file>`, src/agent/join.cpp): starts MPI with the
/// driver's name server, says hello to the driver the join file names, and connects once it says
/// go. Returns the intercommunicator to the driver (which is rank 0 there), for agent_main; on
/// any failure it says why and ends the process.
MPI_Comm join_driver(int& argc, char**& argv, const char* file);
/// `./app --fibra-join-standin <port>` (src/roles.hpp): connects to the driver's MPI port in the
/// place of a joiner that never did, says bye (tag_bye, no bytes), disconnects and exits 0; exits
/// 3 when that takes longer than 30 s.
[[noreturn]] void stand_in_for_joiner(int& argc, char**& argv, const char* port);
/// The run's secret as a joined worker read it from the join file (set by join_driver); empty in
/// a spawned agent, which reads it from AgentSetup::secret_file.
std::optional<auth::Secret>& joined_secret();

}  // namespace fibra::detail
