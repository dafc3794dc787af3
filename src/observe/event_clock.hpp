// src/observe/event_clock.hpp: the event log's clock, one definition for the driver that writes the
// log (driver/event_log.hpp) and the commands that read it against now (`fibra status`, `fibra top`).
#pragma once

#include <chrono>
#include <cstdint>

namespace fibra::observe {

/// Microseconds since the Unix epoch: every `t` in an event log, and "now" beside them.
inline std::int64_t event_time_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace fibra::observe
