// src/driver/object_copies.hpp: the copies of stored objects (fibra::put, results kept where they
// were made) that a pool's agents hold: per agent, what it holds, what its executors handed it,
// what it copies from a peer (AgentObjects); per pool, the objects freed since the communication
// thread last told the agents (FreedObjects). pool_objects.cpp sends, fetches and frees with them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fibra/detail/core.hpp"

namespace fibra::detail {

/// One agent's copies. The communication thread's alone.
class AgentObjects {
 public:
  /// The object is sent to (or fetched by) the agent, which keeps a copy until told it is freed:
  /// false if it holds one already (nothing to send).
  bool add(std::uint64_t id) { return held_.insert(id).second; }
  /// Its executors handed it object `id` (a kept result, a value a task stored): counted, since the
  /// agent drops its copy only when told of every handing (wire::ObjectFree::handed).
  void hold_handed(std::uint64_t id) {
    held_.insert(id);
    ++handed_[id];
  }
  bool holds(std::uint64_t id) const { return held_.count(id) > 0; }
  /// It was told to copy `o` from the agent `peer` (Worker::id).
  void fetching(const std::shared_ptr<const StoredObject>& o, int peer) { fetching_[o->id] = {o, peer}; }
  /// Its copy of `id` from a peer failed: that peer is not asked of it again. The object, if it was
  /// being fetched and is still stored (the driver sends it then); `was_fetching` says whether it was.
  std::shared_ptr<const StoredObject> fetch_failed(std::uint64_t id, bool& was_fetching);
  bool unreachable(int peer) const { return unreachable_.count(peer) > 0; }
  /// Object `id` was freed: nothing if the agent held no copy, else how many times its executors
  /// handed it (the agent is told to drop it).
  std::optional<std::uint64_t> drop(std::uint64_t id);

 private:
  std::unordered_set<std::uint64_t> held_;
  std::unordered_map<std::uint64_t, std::uint64_t> handed_;
  std::unordered_map<std::uint64_t, std::pair<std::weak_ptr<const StoredObject>, int>> fetching_;
  std::unordered_set<int> unreachable_;
};

/// The ids of stored objects freed anywhere in the process since the last take(), from the moment
/// it is made until stop() (or its end). Objects are freed on any thread, some holding a pool's
/// mu_: hence a lock of its own.
class FreedObjects {
 public:
  FreedObjects();
  ~FreedObjects() { stop(); }
  FreedObjects(const FreedObjects&) = delete;
  FreedObjects& operator=(const FreedObjects&) = delete;
  std::vector<std::uint64_t> take();
  /// Object `id` is to be dropped by the agents that hold it, as if freed (a task's stored value
  /// the driver could not take: the copies its agent was counted as holding).
  void note(std::uint64_t id) {
    std::lock_guard lk(mu_);
    ids_.push_back(id);
  }
  /// Frees from now on are not noted (waits for a note under way).
  void stop() noexcept;

 private:
  std::mutex mu_;
  std::vector<std::uint64_t> ids_;  // under mu_
  std::uint64_t token_ = 0;         // on_object_freed's; 0 once stopped
};

}  // namespace fibra::detail
