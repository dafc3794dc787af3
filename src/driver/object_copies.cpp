// The copies of stored objects that a pool's agents hold (object_copies.hpp).
#include "driver/object_copies.hpp"

#include "driver/objects.hpp"

namespace fibra::detail {

std::shared_ptr<const StoredObject> AgentObjects::fetch_failed(std::uint64_t id, bool& was_fetching) {
  auto it = fetching_.find(id);
  was_fetching = it != fetching_.end();
  if (!was_fetching) return nullptr;
  auto o = it->second.first.lock();
  unreachable_.insert(it->second.second);
  fetching_.erase(it);
  return o;
}

std::optional<std::uint64_t> AgentObjects::drop(std::uint64_t id) {
  fetching_.erase(id);
  if (!held_.erase(id)) return std::nullopt;
  std::uint64_t handed = 0;
  if (auto h = handed_.find(id); h != handed_.end()) {
    handed = h->second;
    handed_.erase(h);
  }
  return handed;
}

FreedObjects::FreedObjects() : token_(on_object_freed([this](std::uint64_t id) { note(id); })) {}

std::vector<std::uint64_t> FreedObjects::take() {
  std::vector<std::uint64_t> out;
  std::lock_guard lk(mu_);
  out.swap(ids_);
  return out;
}

void FreedObjects::stop() noexcept {
  if (token_ != 0) forget_object_frees(token_);
  token_ = 0;
}

}  // namespace fibra::detail
