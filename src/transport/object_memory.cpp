// src/transport/object_memory.cpp: see object_memory.hpp.
#include "transport/object_memory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {

namespace {

// A mapping of at least one byte: mmap refuses an empty one, and an empty value encodes to
// nothing only for an empty tuple, which has nothing to read.
std::size_t map_size(std::size_t n) { return n == 0 ? 1 : n; }

// What /proc's link of a memfd named `name` reads.
std::string proc_link(const std::string& name) { return "/memfd:" + name + " (deleted)"; }

std::string read_link(const std::string& path) {
  char buf[512];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
  return n <= 0 ? std::string() : std::string(buf, std::size_t(n));
}

}  // namespace

std::string object_memfd_name(std::int64_t origin, std::uint64_t id) {
  return "fibra-object-" + std::to_string(origin) + "-" + std::to_string(id);
}

std::unique_ptr<ObjectMemory> ObjectMemory::create(const std::string& name, std::string_view bytes, const char* who) {
  auto fail = [&](const char* what) {
    return Error(std::string(who) + ": cannot keep a stored object of " + std::to_string(bytes.size()) +
                 " bytes in shared memory (" + what + ": " + std::strerror(errno) +
                 "); /dev/shm or memory may be full");
  };
  UniqueFd fd = new_memfd(name);
  if (!fd) throw fail("memfd_create");
  if (::ftruncate(fd.get(), off_t(map_size(bytes.size()))) != 0) throw fail("ftruncate");
  if (!write_at(fd.get(), bytes, 0)) throw fail("write");
  seal(fd.get());  // executors read it as it is
  void* r = ::mmap(nullptr, map_size(bytes.size()), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (r == MAP_FAILED) throw fail("mmap");
  return std::unique_ptr<ObjectMemory>(new ObjectMemory(std::move(fd), r, bytes.size()));
}

UniqueFd ObjectMemory::new_memfd(const std::string& name) {
  return UniqueFd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
}

// Written, not copied through a mapping: a full /dev/shm is then an error (ENOSPC) rather than a
// SIGBUS, and the kernel fills each page as it allocates it (no zeroing first, no page faults).
bool ObjectMemory::write_at(int fd, std::string_view bytes, std::size_t offset) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t k = ::pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(offset + done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += std::size_t(k);
  }
  return true;
}

void ObjectMemory::seal(int fd) {
  (void)::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
}

std::unique_ptr<ObjectMemory> ObjectMemory::open(const std::string& path, const std::string& name, std::uint64_t size,
                                                 bool keep_fd) {
  if (read_link(path) != proc_link(name)) return nullptr;  // a descriptor number reused for something else
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || std::uint64_t(st.st_size) != map_size(size)) return nullptr;
  // An executor's populated at once: its task reads it all, and one pass in the kernel costs less
  // than a page fault for each page (100 MB: 25,600 of them). The driver's (keep_fd) may never be
  // read there: tasks given it read it.
  void* r = ::mmap(nullptr, map_size(size), PROT_READ, MAP_SHARED | (keep_fd ? 0 : MAP_POPULATE), fd.get(), 0);
  if (r == MAP_FAILED) return nullptr;
  // Without keep_fd the mapping is enough.
  return std::unique_ptr<ObjectMemory>(new ObjectMemory(keep_fd ? std::move(fd) : UniqueFd(), r, size));
}

std::unique_ptr<ObjectMemory> ObjectMemory::adopt(UniqueFd fd, const std::string& name, std::uint64_t size) {
  struct stat st {};
  if (!fd || read_link("/proc/self/fd/" + std::to_string(fd.get())) != proc_link(name) || ::fstat(fd.get(), &st) != 0 ||
      std::uint64_t(st.st_size) != map_size(size))
    return nullptr;
  return std::unique_ptr<ObjectMemory>(new ObjectMemory(std::move(fd), nullptr, size));
}

std::string ObjectMemory::find(std::int64_t pid, const std::string& name) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return {};
  const std::string want = proc_link(name);
  std::string found;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = dir + "/" + e->d_name;
    if (read_link(path) == want) {
      found = path;
      break;
    }
  }
  ::closedir(d);
  return found;
}

ObjectMemory::~ObjectMemory() {
  if (base_) ::munmap(base_, map_size(size_));
}

}  // namespace fibra::detail
