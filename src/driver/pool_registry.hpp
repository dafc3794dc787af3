// src/driver/pool_registry.hpp: the driver process's pools that are not yet destroyed, oldest
// first, by their uid (PoolCore::uid): what fibra::cancel, actor handles, joined agents, the event
// sinks and the Runtime's end look pools up in. Holds no pool alive.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace fibra::detail {

class PoolImpl;

class PoolRegistry {
 public:
  static PoolRegistry& instance();
  /// A pool started (start_pool); the entries of pools destroyed since are dropped.
  void add(std::uint64_t uid, const std::shared_ptr<PoolImpl>& pool);
  /// The pools not yet destroyed, oldest first. Looked at by the caller once the registry's lock is
  /// released: the last reference to one may go with the copy, and its stop() joins a thread that
  /// may look the registry up.
  std::vector<std::shared_ptr<PoolImpl>> live() const;
  bool any_live() const;
  /// The pool of that uid, or null if it is gone.
  std::shared_ptr<PoolImpl> find(std::uint64_t uid) const;
  /// The pools not yet destroyed, forgotten (the Runtime's end stops them).
  std::vector<std::shared_ptr<PoolImpl>> take_all();

 private:
  struct Entry {
    std::uint64_t uid;
    std::weak_ptr<PoolImpl> pool;
  };
  mutable std::mutex mu_;
  std::vector<Entry> pools_;  // under mu_
};

}  // namespace fibra::detail
