// The driver process's pools (pool_registry.hpp).
#include "driver/pool_registry.hpp"

#include <algorithm>

namespace fibra::detail {

PoolRegistry& PoolRegistry::instance() {
  // Never destroyed: hooks the Runtime leaves registered (a queue's totals, an event sink) and a
  // signal's stop_all_pools may look pools up during static destruction.
  static auto* registry = new PoolRegistry;
  return *registry;
}

void PoolRegistry::add(std::uint64_t uid, const std::shared_ptr<PoolImpl>& pool) {
  std::lock_guard lk(mu_);
  std::erase_if(pools_, [](const Entry& e) { return e.pool.expired(); });
  pools_.push_back({uid, pool});
}

std::vector<std::shared_ptr<PoolImpl>> PoolRegistry::live() const {
  std::vector<std::shared_ptr<PoolImpl>> out;
  std::lock_guard lk(mu_);
  for (const auto& e : pools_)
    if (auto p = e.pool.lock()) out.push_back(std::move(p));
  return out;
}

bool PoolRegistry::any_live() const {
  std::lock_guard lk(mu_);
  return std::any_of(pools_.begin(), pools_.end(), [](const Entry& e) { return !e.pool.expired(); });
}

std::shared_ptr<PoolImpl> PoolRegistry::find(std::uint64_t uid) const {
  std::lock_guard lk(mu_);
  for (const auto& e : pools_)
    if (e.uid == uid) return e.pool.lock();
  return nullptr;
}

std::vector<std::shared_ptr<PoolImpl>> PoolRegistry::take_all() {
  std::vector<std::shared_ptr<PoolImpl>> out;
  std::lock_guard lk(mu_);
  for (const auto& e : pools_)
    if (auto p = e.pool.lock()) out.push_back(std::move(p));
  pools_.clear();
  return out;
}

}  // namespace fibra::detail
