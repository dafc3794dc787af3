// The driver's channels: every Queue, Pipe direction and Event of the program lives here
// (fibra/queue.hpp). The driver's threads call it directly, tasks through requests (PoolImpl::
// on_channel_request). Delivery is pulled: an item leaves a channel only for a get that asked for
// it, and one sent to a task stays owed until the task acknowledges it; if the task's process ends
// first, the item goes back to the front of its channel.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "transport/wire.hpp"

namespace fibra::detail {

/// Who calls: the driver's own threads (pool 0), or the executor or actor process that a pool's
/// worker reaches by `route` (wire::RequestRoute).
struct ChannelHolder {
  std::uint64_t pool = 0;
  std::uint64_t worker = 0;
  std::uint64_t route = 0;
  bool remote() const noexcept { return pool != 0; }
  bool operator==(const ChannelHolder&) const = default;
};

/// A new id for a channel or one of SyncStore's objects: one numbering for all, so that an id
/// names one object whatever its kind.
std::uint64_t new_channel_id();

class ChannelStore {
 public:
  /// Called once per call: with an error, or with the reply.
  using Done = std::function<void(std::exception_ptr, wire::ChannelReply)>;

  /// The driver's one store (made at first use, kept until the process ends).
  static ChannelStore& instance();

  /// Runs `c` for `who`. `done` runs once, at once or when the wait ends (on the thread that ends
  /// it, or the store's timer thread when its time runs out), never under the store's lock.
  /// ChannelOp::ack and ChannelOp::give_back are not answered.
  void call(wire::ChannelCall c, const ChannelHolder& who, Done done);

  /// Sends a ChannelOp::recall to a task of one pool (its holder says which), never under the
  /// store's lock. A task's get may read items ahead (wire::ChannelCall::ahead); when another
  /// get waits on the emptied channel, the store asks for them back through its pool's notifier.
  using Notify = std::function<void(const ChannelHolder&, wire::ChannelCall)>;
  /// Sets `pool`'s notifier (an empty one removes it: the pool ended).
  void set_notifier(std::uint64_t pool, Notify notify);

  /// The processes that `pool`, `worker` (0: all of the pool's) and `route` (none: all of the
  /// worker's) name are gone: their waits are dropped, the items they were sent and did not
  /// acknowledge go back to the front of their channels, and the pipes they sent on are closed.
  /// `taken` (Mailbox::ahead_taken, packed): of the deliveries they read ahead, how many items
  /// they took, which do not come back.
  void forget(std::uint64_t pool, std::uint64_t worker, std::optional<std::uint64_t> route,
              const std::vector<std::uint64_t>& taken = {});

  /// What a Queue or a Pipe direction saw, told when it goes (its last handle in the driver was
  /// dropped; one a task made is kept to the program's end, and never told): items put (and their
  /// encoded bytes), items taken (those sent to a task that had not acknowledged them yet count),
  /// items that came back (sent to a task whose process ended, or read ahead and given back), the
  /// most it held at once, and the items left in it.
  struct Totals {
    std::uint64_t id = 0;
    const char* kind = "";  ///< "queue" or "pipe"
    std::uint64_t put = 0, bytes = 0, taken = 0, came_back = 0, most = 0, left = 0;
  };
  using TotalsSink = std::function<void(const Totals&)>;
  /// Sets what is told of each channel that goes (the driver's event logs), never under the store's lock.
  void set_totals_sink(TotalsSink sink);

  ChannelStore(const ChannelStore&) = delete;
  ChannelStore& operator=(const ChannelStore&) = delete;

 private:
  ChannelStore();
  ~ChannelStore();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fibra::detail
