// Items handed over in a memfd (shared_items.hpp).
#include "transport/shared_items.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "fibra/error.hpp"
#include "transport/object_memory.hpp"

namespace fibra::detail {

std::optional<SharedItemsOut> share_items(const ChannelItems& items) {
  static std::atomic<std::uint64_t> next{1};
  SharedItemsOut out;
  out.ref.pid = ::getpid();
  out.ref.name = "fibra-items-" + std::to_string(out.ref.pid) + "-" + std::to_string(next++);
  out.ref.size = items.bytes().size();
  out.ref.count = items.size();
  out.ref.stride = items.stride();
  out.fd = ObjectMemory::new_memfd(out.ref.name);
  if (!out.fd || !ObjectMemory::write_at(out.fd.get(), items.bytes(), 0)) return std::nullopt;
  ObjectMemory::seal(out.fd.get());
  return out;
}

ChannelItems take_shared_items(const wire::SharedItems& ref) {
  const std::string path = ObjectMemory::find(ref.pid, ref.name);
  UniqueFd fd(path.empty() ? -1 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  // Read, not mapped: the bytes come out of the memfd's pages in one pass, without a fault per page
  // of a mapping (the buffer itself is a large one, with huge pages: resize_large).
  std::string bytes;
  resize_large(bytes, ref.size);
  std::size_t got = 0;
  while (fd && got < ref.size) {
    const ssize_t n = ::pread(fd.get(), bytes.data() + got, ref.size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got != ref.size)
    throw Error("fibra: the " + std::to_string(ref.size) + " bytes of items that process " + std::to_string(ref.pid) +
                " handed over in its memfd " + ref.name + " are gone (the process ended, or is not on this host)");
  return ChannelItems(std::move(bytes), ref.count, ref.stride);
}

}  // namespace fibra::detail
