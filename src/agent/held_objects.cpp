// src/agent/held_objects.cpp: an agent's stored objects and their handover counts.
#include "agent/held_objects.hpp"

#include "transport/object_server.hpp"

namespace fibra::detail {

void HeldObjects::hold(std::uint64_t id, std::int64_t origin, std::uint64_t size,
                       std::shared_ptr<const ObjectMemory> memory) {
  if (server_) {
    const std::string name = object_memfd_name(origin, id);
    server_->offer(name, memory, size);
    offered_[id] = name;
  }
  objects_[id] = std::move(memory);
}

void HeldObjects::hold_handed(std::uint64_t id, std::int64_t origin, std::uint64_t size,
                              std::shared_ptr<const ObjectMemory> memory) {
  hold(id, origin, size, std::move(memory));
  ++handed_[id];
}

bool HeldObjects::free(std::uint64_t id, std::uint64_t handed) {
  auto h = handed_.find(id);
  if (h != handed_.end() && handed > 0 && h->second > handed) {
    h->second -= handed;
    return false;
  }
  const bool dropped = objects_.erase(id) > 0;
  if (h != handed_.end()) handed_.erase(h);
  if (auto o = offered_.find(id); o != offered_.end()) {
    server_->withdraw(o->second);
    offered_.erase(o);
  }
  return dropped;
}

std::uint64_t HeldObjects::handed(std::uint64_t id) const {
  const auto h = handed_.find(id);
  return h == handed_.end() ? 0 : h->second;
}

}  // namespace fibra::detail
