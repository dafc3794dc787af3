// src/cli/trace.hpp: `fibra trace LOG -o trace.json`, a run's event log as a Chrome trace (the
// JSON format that Perfetto and chrome://tracing open).
#pragma once

#include <CLI/CLI.hpp>

namespace fibra::cli {

struct EventLogRecord;

/// @brief Adds the `trace` subcommand to `app`.
void add_trace_command(CLI::App& app);

/// The Chrome trace of `log`, as JSON text: a process per driver and per agent, a thread per
/// executor, a complete event per attempt, the waits in the queue as async events, a flow from
/// each chunk's submission to each of its runs, and counters (queued chunks, busy executors,
/// results a second).
std::string chrome_trace(const EventLogRecord& log);

}  // namespace fibra::cli
