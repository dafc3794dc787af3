// src/observe/trace.hpp: a run's event log as a Chrome trace (the JSON format that Perfetto and
// chrome://tracing open), for `fibra trace`.
#pragma once

#include <string>

namespace fibra::observe {

struct EventLogRecord;

/// The Chrome trace of `log`, as JSON text: a process per driver and per agent, a thread per
/// executor, a complete event per attempt, the waits in the queue as async events, a flow from
/// each chunk's submission to each of its runs, and counters (queued chunks, busy executors,
/// results a second).
std::string chrome_trace(const EventLogRecord& log);

}  // namespace fibra::observe
