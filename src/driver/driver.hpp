// src/driver/driver.hpp: what the driver process keeps across its pools: the pools themselves, the
// default pool, the hosts lost so far, and whether workers may outnumber MPI's slots.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fibra/detail/core.hpp"
#include "fibra/detail/events.hpp"
#include "driver/channels.hpp"

namespace fibra::detail {

/// In the driver: an agent on another host was lost (silent, its node cut off or dead). Open MPI
/// 4.1 may then hang or abort in MPI_Comm_spawn and MPI_Finalize, so from then on no pool of the
/// process spawns (PoolImpl::spawn) and ~Runtime skips MPI_Finalize (see src/runtime.cpp).
void note_lost_remote_host(const std::string& host);

/// True once note_lost_remote_host was called in this process.
bool remote_host_lost() noexcept;

/// The hosts noted so far, "a, b"; empty: none (MPI_Finalize is safe).
std::string lost_remote_hosts();
/// Why a pool spawns nothing once remote_host_lost() (measured on the virtual cluster,
/// docs/fault-tolerance.md#a-node-lost).
inline constexpr const char* spawn_frozen_reason =
    "with Open MPI 4.1, a spawn after a node fell silent blocks for good if the node is cut off, and aborts the driver "
    "if it is dead";

/// In the driver: an agent that joined from a launch of its own (src/driver/joins.hpp) was lost on
/// another host. Spawning goes on (its node is none of this job's), but ~Runtime skips
/// MPI_Finalize, which may wait for a peer it connected to.
void note_lost_joined_host(const std::string& host);
/// The hosts noted so far, "a, b"; empty: none.
std::string lost_joined_hosts();

/// In the driver: a worker that asked to join (FIBRA_JOIN_FILE) was refused; a `join_refused`
/// event goes to the log of every pool not yet destroyed that keeps one (no pool's lock taken).
/// `from`: its address and port, when the door refused it; `origin`, `host`, `pid`: its hello's,
/// when it said one.
void note_join_refused(const std::string& from, const std::string& origin, const std::string& host, long pid,
                       const std::string& why);
/// In the driver: a Queue or Pipe direction went; a `queue` event with its totals goes where
/// note_join_refused's go (registered with ChannelStore::set_totals_sink by the Runtime).
void note_channel_totals(const ChannelStore::Totals& totals);

class PoolImpl;
/// In the driver: the pools not yet destroyed, oldest first.
std::vector<std::shared_ptr<PoolImpl>> live_pools();

/// In the driver: the pool of that PoolCore::uid, or null if it is gone.
std::shared_ptr<PoolCore> find_pool(std::uint64_t uid) noexcept;
/// The sink of that pool's event log (fibra/detail/events.hpp), or an empty one; the Runtime
/// registers it for pool_event_sink (set_pool_event_sink_finder).
EventSink driver_event_sink(std::uint64_t pool_uid);

/// Terminates every pool still running (the Runtime's destructor calls it before MPI_Finalize).
void stop_all_pools() noexcept;
/// Terminates and drops the default pool (fibra::default_pool); the Runtime's end calls it first.
void drop_default_pool() noexcept;

/// Whether spawned workers may outnumber MPI's slots: yes on a workstation, no inside a batch job
/// (whose slots are what was paid for), unless FIBRA_OVERSUBSCRIBE=1 or 0 says otherwise.
bool oversubscribe_allowed();

}  // namespace fibra::detail
