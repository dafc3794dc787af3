// src/driver/objects.hpp: the driver's side of the object store (fibra::put, and tasks' results
// kept on the driver's host): who is told when a stored object is freed. Pools listen, and tell
// the agents that hold it (tag_object_free).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "fibra/detail/core.hpp"

namespace fibra::detail {

/// Calls `f(id)` whenever a stored object is freed, from the thread that dropped its last
/// reference (a user's thread, the task thread or a communication thread, which may hold a pool's
/// `mu_`: `f` must take no pool's lock but one of its own). Returns a token for forget_object_frees.
std::uint64_t on_object_freed(std::function<void(std::uint64_t)> f);
void forget_object_frees(std::uint64_t token) noexcept;

/// A new object id, unique in the driver's run (fibra::put's, results kept on their host).
std::uint64_t next_object_id();

/// A copy of `bytes` stored as fibra::put stores a value (a task's result that tasks wait for,
/// which came through the driver after all). Throws Error naming `who` without shared memory.
std::shared_ptr<const StoredObject> store_bytes(std::string_view bytes, const char* who);

/// A task's result that executor `origin` kept in a memfd (wire::Kept), or a value a task stored
/// (fibra::put in a task), which its agent `holder` holds: opened here through /proc, so that the
/// driver holds it too; one StoredObject per (origin, id) while it lives. nullptr, with `why` set,
/// if the agent has no such memfd open (it died, or /proc does not let the driver read it).
std::shared_ptr<const StoredObject> take_kept_result(std::int64_t holder, std::int64_t origin, std::uint64_t id,
                                                     std::uint64_t size, std::string& why);

/// A copy of a task's result that an agent on another host keeps (wire::tag_kept_copy), stored
/// here under the same name as there, so that take_kept_result finds it while it lives.
std::shared_ptr<const StoredObject> store_kept_copy(std::int64_t origin, std::uint64_t id, std::string_view bytes);

}  // namespace fibra::detail
