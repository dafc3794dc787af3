// src/cli/report.hpp: `fibra report LOG -o report.html`, a run's event log as one self-contained
// HTML page (no network: its data, styles and script are inside it).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace fibra::cli {

struct EventLogRecord;

/// @brief Adds the `report` subcommand to `app`.
void add_report_command(CLI::App& app);

/// The report of `log`: a summary, a timeline with a row per executor, busy executors over time, a
/// histogram of run times, the slowest chunks, and the failed attempts and lost workers with their
/// items, workers, hosts and errors.
std::string html_report(const EventLogRecord& log);

}  // namespace fibra::cli
