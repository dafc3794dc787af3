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
/// writes no event log (or is gone). A sink keeps the log open while it is held.
EventSink pool_event_sink(std::uint64_t pool_uid);

/// `s` as a JSON string, quoted and escaped as the log writes its own strings.
std::string json_quoted(std::string_view s);

}  // namespace fibra::detail
