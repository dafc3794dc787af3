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

std::string object_memfd_name(std::int64_t driver_pid, std::uint64_t id) {
  return "fibra-object-" + std::to_string(driver_pid) + "-" + std::to_string(id);
}

std::unique_ptr<ObjectMemory> ObjectMemory::create(const std::string& name, std::string_view bytes, const char* who) {
  auto fail = [&](const char* what) {
    return Error(std::string(who) + ": cannot keep a stored object of " + std::to_string(bytes.size()) +
                 " bytes in shared memory (" + what + ": " + std::strerror(errno) +
                 "); /dev/shm or memory may be full");
  };
  UniqueFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) throw fail("memfd_create");
  if (::ftruncate(fd.get(), off_t(map_size(bytes.size()))) != 0) throw fail("ftruncate");
  // Its pages now, or an error: a write into a full /dev/shm through the mapping is a SIGBUS.
  if (const int e = ::posix_fallocate(fd.get(), 0, off_t(map_size(bytes.size()))); e != 0) {
    errno = e;
    throw fail("posix_fallocate");
  }
  void* w = ::mmap(nullptr, map_size(bytes.size()), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (w == MAP_FAILED) throw fail("mmap");
  advise_large(w, bytes.size());
  if (!bytes.empty()) copy_large(w, bytes.data(), bytes.size());
  ::munmap(w, map_size(bytes.size()));
  // Nobody changes it from now on: executors read it as it is.
  (void)::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  void* r = ::mmap(nullptr, map_size(bytes.size()), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (r == MAP_FAILED) throw fail("mmap");
  return std::unique_ptr<ObjectMemory>(new ObjectMemory(std::move(fd), r, bytes.size()));
}

std::unique_ptr<ObjectMemory> ObjectMemory::open(const std::string& path, const std::string& name, std::uint64_t size) {
  if (read_link(path) != proc_link(name)) return nullptr;  // a descriptor number reused for something else
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || std::uint64_t(st.st_size) != map_size(size)) return nullptr;
  void* r = ::mmap(nullptr, map_size(size), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (r == MAP_FAILED) return nullptr;
  return std::unique_ptr<ObjectMemory>(new ObjectMemory(UniqueFd(), r, size));  // the mapping is enough
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

ObjectMemory::~ObjectMemory() { ::munmap(base_, map_size(size_)); }

}  // namespace fibra::detail
