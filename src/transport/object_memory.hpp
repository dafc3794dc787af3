// src/transport/object_memory.hpp: the shared memory of one stored object (fibra::put, or a task's
// result kept on its host): a sealed memfd holding the value's encoded bytes. The driver makes one
// per put; an executor makes one per result it keeps, and hands it to its agent; an agent on
// another host makes its own copy when the driver sends it the object; an executor maps whichever
// is on its host, found by the memfd's name under /proc (docs/architecture.md, "The object store").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/unique_fd.hpp"

namespace fibra::detail {

/// The name of a stored object's memfd, in the driver and in agents: executors find it by that
/// ("fibra-object-<pid of the process that made it>-<id>"; /proc shows it as "/memfd:<name> (deleted)").
std::string object_memfd_name(std::int64_t origin, std::uint64_t id);

class ObjectMemory {
 public:
  /// A memfd named `name` holding `bytes`, sealed against writes, mapped read-only (driver, agent).
  /// Throws Error naming `who` and the system's reason.
  static std::unique_ptr<ObjectMemory> create(const std::string& name, std::string_view bytes, const char* who);
  /// Maps `path` ("/proc/<pid>/fd/<n>") if it is the memfd named `name` of `size` bytes; nullptr
  /// otherwise. With `keep_fd` (the driver, which others open it through) its descriptor stays
  /// open; else the mapping alone holds it (executor).
  static std::unique_ptr<ObjectMemory> open(const std::string& path, const std::string& name, std::uint64_t size,
                                            bool keep_fd = false);
  /// Takes `fd` (a memfd received from an executor) if it is the one named `name` of `size` bytes;
  /// nullptr otherwise. Holds the descriptor without mapping it (agent).
  static std::unique_ptr<ObjectMemory> adopt(UniqueFd fd, const std::string& name, std::uint64_t size);
  /// The pieces of create(), for a memfd written as it is made (an executor's kept result): a new
  /// memfd named `name`, sealable (invalid on failure, errno set); `bytes` written at `offset`
  /// (false on failure, errno set: a full /dev/shm is ENOSPC here, not a SIGBUS later); and its
  /// seals, after which nobody changes it.
  static UniqueFd new_memfd(const std::string& name);
  static bool write_at(int fd, std::string_view bytes, std::size_t offset);
  static void seal(int fd);
  /// Looks for the memfd named `name` among the open descriptors of process `pid`; "" if none.
  static std::string find(std::int64_t pid, const std::string& name);
  ~ObjectMemory();
  ObjectMemory(const ObjectMemory&) = delete;
  ObjectMemory& operator=(const ObjectMemory&) = delete;

  /// Its bytes where it is mapped (empty when adopted: not mapped).
  std::string_view bytes() const {
    return base_ ? std::string_view(static_cast<const char*>(base_), size_) : std::string_view();
  }
  int fd() const { return fd_.get(); }

 private:
  ObjectMemory(UniqueFd fd, void* base, std::size_t size) : fd_(std::move(fd)), base_(base), size_(size) {}
  UniqueFd fd_;  // open in the driver and agents (executors find it by it); closed in executors
  void* base_;   // nullptr: not mapped (adopt)
  std::size_t size_;
};

}  // namespace fibra::detail
