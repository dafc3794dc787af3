// fibra/detail/events.hpp: what a library on fibra (fibra::tune) adds to the event log of the pool
// it runs on (PoolOptions::events, FIBRA_EVENTS; docs/observability.md lists the events). The log
// itself (its thread, its bounds, its one writer) is the driver's: this is only a way in.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fibra::detail {

/// Adds one event: `ev` its name, `fields` JSON members each with its leading comma
/// (`,"trial":3,"config":"lr=0.1"`); `t` and the pool's `pool` are added before them.
using EventSink = std::function<void(std::string_view ev, std::string_view fields)>;

/// The sink of the pool whose uid an actor handle carries, in this process; empty when that pool
/// writes no event log (or is gone), and in a process that holds no pool (an agent, an executor).
/// A sink keeps the log open while it is held.
EventSink pool_event_sink(std::uint64_t pool_uid);

/// `s` as a JSON string: quoted, with quotes, backslashes and control characters escaped, and a
/// byte that is not part of well-formed UTF-8 written as '?' (the log's strings are all written so).
std::string json_quoted(std::string_view s);
/// The same, appended to `out`.
void append_json_quoted(std::string& out, std::string_view s);

}  // namespace fibra::detail
