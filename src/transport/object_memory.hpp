// src/transport/object_memory.hpp: the shared memory of one stored object (fibra::put): a sealed
// memfd holding the value's encoded bytes. The driver makes one per put; an agent on another host
// makes its own copy when the driver sends it the object; an executor maps whichever is on its
// host, found by the memfd's name under /proc (docs/architecture.md, "The object store").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/unique_fd.hpp"

namespace fibra::detail {

/// The name of a stored object's memfd, in the driver and in agents: executors find it by that
/// ("fibra-object-<driver pid>-<id>"; /proc shows it as "/memfd:<name> (deleted)").
std::string object_memfd_name(std::int64_t driver_pid, std::uint64_t id);

class ObjectMemory {
 public:
  /// A memfd named `name` holding `bytes`, sealed against writes, mapped read-only (driver, agent).
  /// Throws Error naming `who` and the system's reason.
  static std::unique_ptr<ObjectMemory> create(const std::string& name, std::string_view bytes, const char* who);
  /// Maps `path` ("/proc/<pid>/fd/<n>") if it is the memfd named `name` of `size` bytes; nullptr
  /// otherwise (executor).
  static std::unique_ptr<ObjectMemory> open(const std::string& path, const std::string& name, std::uint64_t size);
  /// Looks for the memfd named `name` among the open descriptors of process `pid`; "" if none.
  static std::string find(std::int64_t pid, const std::string& name);
  ~ObjectMemory();
  ObjectMemory(const ObjectMemory&) = delete;
  ObjectMemory& operator=(const ObjectMemory&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(base_), size_}; }
  int fd() const { return fd_.get(); }

 private:
  ObjectMemory(UniqueFd fd, void* base, std::size_t size) : fd_(std::move(fd)), base_(base), size_(size) {}
  UniqueFd fd_;  // open in the driver and agents (executors find it by it); closed in executors
  void* base_;
  std::size_t size_;
};

}  // namespace fibra::detail
