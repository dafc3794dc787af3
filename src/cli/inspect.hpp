// src/cli/inspect.hpp: `fibra inspect <file>`, what a checkpoint holds.
#pragma once

#include <CLI/CLI.hpp>

namespace fibra::cli {

/// @brief Adds the `inspect` subcommand to `app`: it prints the run, progress and timestamps of a
///        checkpoint, or an error and exit status 1 for a file that is not a usable checkpoint.
void add_inspect_command(CLI::App& app);

}  // namespace fibra::cli
