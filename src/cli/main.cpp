// The `fibra` command.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "fibra/version.hpp"
#include "inspect.hpp"
#include "observe.hpp"
#include "slurm.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fibra: run many tasks over MPI, from a workstation to a Slurm cluster"};
  app.set_version_flag("--version", std::string("fibra ") + fibra::version);
  app.require_subcommand(0);
  fibra::cli::add_inspect_command(app);
  fibra::cli::add_slurm_commands(app);
  fibra::cli::add_observe_commands(app);
  CLI11_PARSE(app, argc, argv);
  if (argc == 1) std::fputs(app.help().c_str(), stdout);
  return 0;
}
