// src/agent/simulated_agents.hpp: the agents' side of the scale simulation (wire::Simulation,
// docs/architecture.md "The scale simulation"): one spawned process speaks the wire protocol for
// thousands of agents of one worker each, so that the driver's real code (its communication loop,
// scheduler, heartbeats and loss detection) meets 10,000 agents on a 2-core machine.
#pragma once

#include <mpi.h>

#include "transport/wire.hpp"

namespace fibra::detail {

/// Speaks for `first.simulation.agents` agents until each said bye (or fell silent, as the
/// simulation asks) or the driver went silent; returns the exit status. `first` is agent 0's
/// setup; the others' come next. Their tasks run here, one after another, through the registry
/// (plain tasks only: an actor's call or a stored object fails its call, naming the simulation).
int simulated_agents_main(MPI_Comm parent, const wire::AgentSetup& first);

}  // namespace fibra::detail
