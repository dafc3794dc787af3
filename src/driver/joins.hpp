// src/driver/joins.hpp: the driver's side of workers that join it from a launch of their own
// (another mpirun, another Slurm job): FIBRA_JOIN_FILE=<path> makes the driver listen, and
// `./app --fibra-join <path>` starts such a worker (transport/join.hpp says how they meet).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/wire.hpp"

namespace fibra::detail {

/// A worker's agent that joined: its intercommunicator (it is rank 0 there) and its hello.
struct JoinedAgent {
  MPI_Comm comm = MPI_COMM_NULL;
  wire::JoinHello hello;
};

/// In pool.cpp: gives `j` to the oldest pool still running; false (nothing taken) if none runs.
bool offer_joined_agent(JoinedAgent& j);
/// Whether a pool runs that would take a joined agent now.
bool pool_running() noexcept;

/// The join file while the driver listens for workers (FIBRA_JOIN_FILE); empty otherwise.
std::string join_file_listening();
/// The environment the driver was started with, before MPI added to it (taken when it began to
/// listen): what the worker jobs Pool::adapt submits get, so that they start MPI afresh.
std::vector<std::string> launch_environment();

/// Listens for workers that join, for as long as it lives (the Runtime holds it).
class JoinListener {
 public:
  /// Before MPI_Init: null unless FIBRA_JOIN_FILE is set. Otherwise it sees to Open MPI's name
  /// server, which MPI_Init must know of: the one mpirun was given (--ompi-server), or, for a
  /// driver started as ./app, an ompi-server it starts itself. ConfigError when it cannot.
  static std::unique_ptr<JoinListener> prepare();
  /// After MPI_Init (which must give MPI_THREAD_MULTIPLE: the accept runs on a thread of its own,
  /// outside the MPI lock): listens for hellos and writes the join file (each joiner told go gets
  /// an MPI port of its own).
  void open();
  /// Stops listening and removes the join file (before MPI_Finalize). False when its thread is
  /// stuck in MPI_Comm_accept (a joiner said hello and never connected): then MPI must not be
  /// finalized.
  bool close() noexcept;
  /// Ends the ompi-server it started (after MPI_Finalize, which may still speak to it).
  ~JoinListener();
  JoinListener(const JoinListener&) = delete;
  JoinListener& operator=(const JoinListener&) = delete;

 private:
  JoinListener();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::detail
