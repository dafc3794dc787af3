// The rings of calls on channels from processes on the driver's host (call_rings.hpp).
#include "driver/call_rings.hpp"

#include <algorithm>

#include "transport/wire.hpp"

namespace fibra::detail {

void CallRings::open(Worker& w, int worker_id, std::uint64_t route, std::shared_ptr<LaneRegion> region) {
  close(w, route, false);  // (a process before it at that route had its route_gone)
  auto ring = std::make_shared<CallRing>();
  ring->worker = &w;
  ring->worker_id = worker_id;
  ring->route = route;
  ring->region = std::move(region);
  rings_.push_back(std::move(ring));
}

bool CallRings::read_all() {
  if (rings_.empty()) return false;
  bool got = false;
  const auto rings = rings_;  // a copy: a call that does not decode lets its worker's rings go
  for (const auto& ring : rings) got |= read(ring);
  return got;
}

bool CallRings::read(const std::shared_ptr<CallRing>& ring) {
  bool got = false;
  std::string call;
  try {
    // (A ring closed meanwhile is not read: its worker was lost, its calls' holder forgotten.)
    while (!ring->closed && ring->region->lane().take_request(ring->partial, call)) {
      got = true;
      on_call_(ring, call);
    }
  } catch (const wire::Malformed& e) {
    Worker& w = *ring->worker;
    const bool closing = ring->closing;  // (read as its process ends, or as its worker is declared lost)
    close(w, std::nullopt, false);
    if (!closing) on_bad_(w, e.what());
  }
  return got;
}

void CallRings::close(const Worker& w, std::optional<std::uint64_t> route, bool read_first) {
  std::vector<std::shared_ptr<CallRing>> closing;
  std::erase_if(rings_, [&](const std::shared_ptr<CallRing>& ring) {
    if (ring->worker != &w || (route && ring->route != *route)) return false;
    ring->closing = true;
    closing.push_back(ring);
    return true;
  });
  for (const auto& ring : closing) {
    if (read_first) read(ring);
    std::lock_guard lk(ring->reply_mu);
    ring->closed = true;
    ring->shared.clear();  // memfds handed to it and not acknowledged: its process ended
  }
}

void CallRings::read_of(const Worker& w, std::uint64_t route) {
  for (const auto& ring : rings_)
    if (ring->worker == &w && ring->route == route) {
      read(std::shared_ptr<CallRing>(ring));  // (a copy: a call that does not decode lets it go)
      return;
    }
}

}  // namespace fibra::detail
