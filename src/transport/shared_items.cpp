// Items handed over in a memfd (shared_items.hpp).
#include "transport/shared_items.hpp"

#include <fcntl.h>
#include <sys/stat.h>
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
  const auto gone = [&](const char* why) {
    return Error("fibra: the " + std::to_string(ref.size) + " bytes of items that process " + std::to_string(ref.pid) +
                 " handed over in its memfd " + ref.name + " cannot be read here: " + why);
  };
  const std::string path = ObjectMemory::find(ref.pid, ref.name);
  if (path.empty()) throw gone("it is not among the process's descriptors (it ended, or is not on this host)");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) throw gone("it cannot be opened (another user's, or /proc hides it)");
  if (static_cast<std::uint64_t>(st.st_size) != ref.size) throw gone("it does not hold that many bytes");
  // Read, not mapped: the bytes come out of the memfd's pages in one pass, without a fault per page
  // of a mapping (the buffer itself is a large one, with huge pages: resize_large).
  std::string bytes;
  resize_large(bytes, ref.size);
  std::size_t got = 0;
  while (got < ref.size) {
    const ssize_t n = ::pread(fd.get(), bytes.data() + got, ref.size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw gone("a read of it failed");
    got += static_cast<std::size_t>(n);
  }
  return ChannelItems(std::move(bytes), ref.count, ref.stride);
}

}  // namespace fibra::detail
