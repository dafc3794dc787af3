// src/observe/report.hpp: a run's event log as one self-contained HTML page (no network: its data,
// styles and script are inside it), for `fibra report` and the live page.
#pragma once

#include <string>

namespace fibra::observe {

struct EventLogRecord;

/// The report of `log`: a summary, a timeline with a row per executor, busy executors over time, a
/// histogram of run times, the slowest chunks, and the failed attempts and lost workers with their
/// items, workers, hosts and errors.
std::string html_report(const EventLogRecord& log);

}  // namespace fibra::observe
