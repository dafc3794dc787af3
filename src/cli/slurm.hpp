// `fibra slurm ...`: render, submit and follow Slurm batch jobs from a job spec.
#pragma once

#include <CLI/CLI.hpp>

namespace fibra::cli {

/// @brief Adds `slurm render|submit|status` to the `fibra` command.
void add_slurm_commands(CLI::App& app);

}  // namespace fibra::cli
