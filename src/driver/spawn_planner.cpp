// What a pool's next agents are (spawn_planner.hpp).
#include "driver/spawn_planner.hpp"

#include <algorithm>
#include <cstddef>

#include "driver/resources.hpp"

namespace fibra::detail {

bool same_host(const std::string& a, const std::string& b) {
  return a.substr(0, a.find('.')) == b.substr(0, b.find('.'));
}

int SpawnPlanner::agent_size(int target) const {
  if (s_.workers_per_agent > 0) return s_.workers_per_agent;
  if (!s_.gpu_ids.empty() && s_.resources.gpus > 0) return 1;
  const int agents = s_.pack ? auto_agents : std::max(auto_agents, static_cast<int>(s_.hosts.size()));
  return std::max(1, (target + agents - 1) / agents);
}

std::vector<int> SpawnPlanner::next_sizes(int target, int live, int room) const {
  std::vector<int> sizes;
  for (int planned = live; planned < target && static_cast<int>(sizes.size()) < room;) {
    sizes.push_back(std::max(1, std::min(agent_size(target), target - planned)));
    planned += sizes.back();
  }
  if (sizes.empty()) sizes.push_back(std::max(1, std::min(agent_size(target), target - live)));
  return sizes;
}

SpawnPlanner::Gpus SpawnPlanner::share_gpus(const Workers& workers, int executors) const {
  Gpus out;
  out.each = s_.resources.gpus;
  if (s_.gpu_ids.empty()) return out;
  std::vector<bool> held(s_.gpu_ids.size(), false);
  for (const auto& w : workers)
    if (w->holds_slot)
      for (int g : w->gpus) held[static_cast<std::size_t>(g)] = true;
  const std::size_t each = static_cast<std::size_t>(s_.resources.gpus);
  std::size_t next = 0;
  const auto free_ids = static_cast<std::size_t>(std::count(held.begin(), held.end(), false));
  if (free_ids < each * static_cast<std::size_t>(executors)) next = held.size();
  for (int e = 0; e < executors; ++e) {
    std::string ids;
    std::size_t got = 0;
    for (; next < held.size() && got < each; ++next) {
      if (held[next]) continue;
      ids += (ids.empty() ? "" : ",") + s_.gpu_ids[next];
      out.held.push_back(static_cast<int>(next));
      ++got;
    }
    out.each = std::min<int>(out.each, static_cast<int>(got));
    out.ids.push_back(ids);
  }
  return out;
}

SpawnPlanner::Place SpawnPlanner::place(const Workers& workers, int executors, int slot) const {
  if (s_.hosts.empty()) return {};
  // Every host is usable: after a loss on another host nothing is spawned at all (spawn_agents).
  const std::size_t n = s_.hosts.size();
  const std::vector<bool> usable(n, true);
  std::vector<HostLoad> load(n);
  for (std::size_t h = 0; h < n; ++h) {
    load[h].processes = load[h].workers = same_host(s_.hosts[h], driver_host_) ? 1 : 0;
    for (const auto& w : workers)
      if (w->planned_host == s_.hosts[h] && w->holds_slot) {
        ++load[h].processes;
        load[h].workers += w->executors;
      }
  }
  const std::size_t h = choose_host(Placement{s_.pack, s_.hosts, s_.host_slots, {}}, usable, load, executors, slot);
  return {s_.hosts[h], s_.host_slots[h] > 0 ? s_.host_slots[h] : load[h].processes + 1};
}

int SpawnPlanner::free_slot_number(const Workers& workers) {
  std::vector<char> used(workers.size() + 2, 0);
  for (const auto& w : workers)
    if (w->alive() && w->slot > 0 && static_cast<std::size_t>(w->slot) < used.size())
      used[static_cast<std::size_t>(w->slot)] = 1;
  int n = 1;
  while (used[static_cast<std::size_t>(n)]) ++n;
  return n;
}

}  // namespace fibra::detail
