// src/agent/held_objects.hpp: the stored objects an agent holds for its executors (copies the driver
// or a peer sent, results and values its executors handed over), served to peer agents, and how many
// times each was handed over since the driver last let it go.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "transport/object_memory.hpp"

namespace fibra::detail {

class ObjectServer;

class HeldObjects {
 public:
  /// `server` (null when the agent serves no peers) must outlive this.
  explicit HeldObjects(ObjectServer* server) : server_(server) {}

  /// Holds object `id`'s memfd, made by process `origin` (executors find it by its name,
  /// object_memfd_name(origin, id)), and serves it to peers under that name.
  void hold(std::uint64_t id, std::int64_t origin, std::uint64_t size, std::shared_ptr<const ObjectMemory> memory);
  /// As hold(), for a memfd an executor handed over, counting the handover: the driver's free says
  /// how many it had heard of (wire::ObjectFree::handed).
  void hold_handed(std::uint64_t id, std::int64_t origin, std::uint64_t size,
                   std::shared_ptr<const ObjectMemory> memory);
  /// The driver let object `id` go after `handed` handovers it had heard of (0: a copy it sent).
  /// Handed over more times than that (a task handed it over again meanwhile, and the driver will
  /// hear of it and read it), it is kept and only those handovers are forgotten; otherwise it is
  /// dropped and no longer served. Returns whether it was dropped.
  bool free(std::uint64_t id, std::uint64_t handed);

  bool holds(std::uint64_t id) const { return objects_.count(id) != 0; }
  /// Handovers counted since the driver last let `id` go.
  std::uint64_t handed(std::uint64_t id) const;

 private:
  ObjectServer* server_;
  std::map<std::uint64_t, std::shared_ptr<const ObjectMemory>> objects_;
  std::map<std::uint64_t, std::uint64_t> handed_;
  std::map<std::uint64_t, std::string> offered_;  // names its server offers them under
};

}  // namespace fibra::detail
