// src/driver/objects.hpp: the driver's side of the object store (fibra::put): who is told when a
// stored object is freed. Pools listen, and tell the agents they sent it to (tag_object_free).
#pragma once

#include <cstdint>
#include <functional>

namespace fibra::detail {

/// Calls `f(id)` whenever a stored object is freed, from the thread that dropped its last
/// reference (a user's thread, the task thread or a communication thread, which may hold a pool's
/// `mu_`: `f` must take no pool's lock but one of its own). Returns a token for forget_object_frees.
std::uint64_t on_object_freed(std::function<void(std::uint64_t)> f);
void forget_object_frees(std::uint64_t token) noexcept;

}  // namespace fibra::detail
