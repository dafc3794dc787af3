// src/transport/shared_items.hpp: the items of a call on a channel, or of its answer, too large for
// the lane's rings (a Process's 100 MB put, a pipe's 100 MB answer), handed from one process to
// another on the same host in a memfd instead of in fragments through the ring or through the
// agent: the call or answer carries its name (wire::SharedItems), the receiver finds it among the
// sender's descriptors (/proc/<pid>/fd) and copies the bytes out, and the sender closes it once the
// receiver said it has them (the answer to the call; the task's acknowledgement of the items).
#pragma once

#include <cstddef>
#include <optional>

#include "common/unique_fd.hpp"
#include "fibra/detail/channel.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

/// Items of at least this many bytes go in a memfd (the size of a lane's ring: smaller ones fit).
inline constexpr std::size_t shared_items_from = std::size_t(1) << 20;

/// A memfd holding items, kept open by its sender until the receiver has them.
struct SharedItemsOut {
  UniqueFd fd;
  wire::SharedItems ref;
};

/// `items` in a new sealed memfd of this process; nullopt if one cannot be made or written (the
/// items then take the usual way).
std::optional<SharedItemsOut> share_items(const ChannelItems& items);

/// The items `ref` names, copied out of the sender's memfd. @throws Error naming what is missing.
ChannelItems take_shared_items(const wire::SharedItems& ref);

}  // namespace fibra::detail
