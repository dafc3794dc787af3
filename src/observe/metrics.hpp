// src/observe/metrics.hpp: a run's state from its event log in Prometheus' text format (version
// 0.0.4), for the live page's /metrics.
#pragma once

#include <string>

namespace fibra::observe {

struct EventLogRecord;

/// The metrics of the log's last process (its last `log` event's): chunks and items by state,
/// attempts failed and retried, workers by state, the queue's depth, a histogram of done attempts'
/// run times, dropped events. Each metric has its HELP and TYPE lines.
std::string prometheus_text(const EventLogRecord& log);

}  // namespace fibra::observe
