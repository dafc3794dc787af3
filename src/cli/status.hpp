// src/cli/status.hpp: `fibra status RUN` (a run's state, from its event log) and `fibra top RUN`
// (the same, redrawn until the run ends). RUN is the event log's folder (PoolOptions::events).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace fibra::cli {

struct EventLogRecord;

/// @brief Adds the `status` and `top` subcommands to `app`.
void add_status_commands(CLI::App& app);

/// Whether the process that writes `log` (its last `log` event's) still runs: false once it wrote
/// its `end`, or, on this host, once its pid is gone; true otherwise (another host's is not known).
bool run_is_live(const EventLogRecord& log);

/// What `fibra status` prints: the driver and how long it ran, calls in progress, done and failed,
/// chunks and items done, failed and retried, the rate over the last 10 s and the time left for
/// what is queued, and the workers alive by host. `now_us`: the time to measure "ago" from.
std::string status_text(const EventLogRecord& log, std::int64_t now_us);

}  // namespace fibra::cli
