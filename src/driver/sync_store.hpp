// The driver's locks, conditions, barriers and shared state (fibra/sync.hpp, fibra/shared.hpp).
// They travel as channels do (the same calls, wire::ChannelCall, through the same paths), and
// ChannelStore hands each call of their kinds here. A process that ends gives back what it held:
// the acquires that waited then are told (HolderDied), and a barrier it waited at breaks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "driver/channels.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

class SyncStore {
 public:
  /// The driver's one store (made at first use, kept until the process ends).
  static SyncStore& instance();

  /// Runs `c` (one of is_sync_kind's) for `who`; `done` runs once, never under the store's lock.
  void call(wire::ChannelCall c, const ChannelHolder& who, ChannelStore::Done done);

  /// The processes that `pool`, `worker` (0: all) and `route` (none: all) name are gone
  /// (ChannelStore::forget).
  void forget(std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route);

  SyncStore(const SyncStore&) = delete;
  SyncStore& operator=(const SyncStore&) = delete;

 private:
  SyncStore();
  ~SyncStore();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::detail
