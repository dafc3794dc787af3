// src/cli/observe.hpp: the `fibra` commands that read a run's event log (PoolOptions::events):
// `trace`, `report`, `status` and `top` (src/observe/ makes what they print).
#pragma once

#include <CLI/CLI.hpp>

namespace fibra::cli {

/// @brief Adds the `trace`, `report`, `status` and `top` subcommands to `app`.
void add_observe_commands(CLI::App& app);

}  // namespace fibra::cli
