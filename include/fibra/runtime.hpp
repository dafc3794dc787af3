// fibra/runtime.hpp: fibra::Runtime, the first line of every fibra program's main.
#pragma once

namespace fibra {

/// @brief Starts fibra in this process. Create it first thing in main, before anything else runs:
/// the same binary is started again as worker agent and as executor, and in those processes the
/// constructor runs the worker's loop and ends the process without returning.
///
/// In the driver (the process the user started, as `./app` or `mpirun -n 1 ./app`) it initialises
/// MPI with the Open MPI settings fault handling needs (unless the user set them) and checks the
/// registry of remote functions. Its destructor stops any pools still running and finalizes MPI.
///
/// @code
///   int main(int argc, char** argv) {
///     fibra::Runtime rt(argc, argv);
///     fibra::Pool pool(4);
///     ...
///   }
/// @endcode
/// @throws ConfigError on a misuse (two Runtimes, two functions under one name, more than one
///         MPI rank), MpiError if MPI cannot start.
class Runtime {
 public:
  Runtime(int& argc, char**& argv);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// @brief Whether a Runtime is alive in this process.
  static bool active() noexcept;
  /// @brief This machine's host name, as workers report theirs.
  static const char* host() noexcept;
};

}  // namespace fibra
