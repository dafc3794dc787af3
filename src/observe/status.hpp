// src/observe/status.hpp: a run's state from its event log, as `fibra status`, `fibra top` and the
// live page show it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fibra::observe {

struct EventLogRecord;

/// Whether the process that writes `log` (its last `log` event's) still runs: false once it wrote
/// its `end`, or, on this host, once its pid is gone; true otherwise (another host's is not known).
bool run_is_live(const EventLogRecord& log);

/// What `fibra status` prints: the driver and how long it ran, calls in progress, done and failed,
/// chunks and items done, failed and retried, the rate over the last 10 s and the time left for
/// what is queued, and the workers alive by host. `now_us`: the time to measure "ago" from.
/// `live`: whether the run still runs, where the caller knows better than run_is_live (a Slurm
/// job's state, for a driver on another host).
std::string status_text(const EventLogRecord& log, std::int64_t now_us, std::optional<bool> live = std::nullopt);

}  // namespace fibra::observe
