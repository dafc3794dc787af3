// The lanes between the driver and the executors on its host (src/transport/lane.hpp): opened at a
// worker's hello, batches posted into them, and what the executors wrote there drained.
#include <memory>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "common/log.hpp"
#include "driver/pool_impl.hpp"

namespace fibra::detail {

// A batch for an agent on this host goes into the lane of its least busy executor, if one has a
// free slot (a large batch: its large slot); false: it goes through MPI to the agent.
bool PoolImpl::post_to_lane(Worker& w, const mpi::Pieces& batch, std::uint32_t chunks) {
  if (w.lanes.empty() || !w.alive()) return false;
  const std::size_t size = batch.size();
  std::vector<std::pair<std::size_t, Lane*>> by_load;
  for (auto& r : w.lanes) by_load.emplace_back(r->lane().busy(), &r->lane());
  std::stable_sort(by_load.begin(), by_load.end(), [](auto& a, auto& b) { return a.first < b.first; });
  const auto fill = [&](char* out) { batch.write_to(out); };
  for (auto& [load, l] : by_load)
    if (load < lane::down_slots && l->post(size, chunks, fill))
      return true;  // not a heartbeat: the agent hears nothing
  return false;
}

// Result frames its executors put in their lanes, handled as if the agent had sent them. A large
// one is not copied out: its result is decoded where it lies (ChunkOutcome::keep) by a thread that
// waits for it. One that nobody waits for yet is copied out, here, outside mu_, so that the slot
// is free for the executor's next large result; its call is ready only after that (a waiter that
// comes meanwhile gets the copy).
bool PoolImpl::drain_lanes(Worker& w) {
  bool got = false;
  for (auto& r : w.lanes) got |= drain_lane(w, r);
  // Actors' lanes given a batch: a few, where thousands of actors may have one (each pass looked at
  // every one, which doubled the time 2,000 actors took to start). A lane none of whose down slots
  // (the large one too) holds a batch has posted its last results (before it freed the slot):
  // drained once more, it leaves the list. A copy: a result may end its actor, which lets its lane go.
  if (!w.actor_lanes_in_use.empty()) {
    const std::vector<std::uint64_t> keys(w.actor_lanes_in_use.begin(), w.actor_lanes_in_use.end());
    for (const std::uint64_t key : keys) {
      auto l = w.actor_lanes.find(key);
      if (l == w.actor_lanes.end()) {
        w.actor_lanes_in_use.erase(key);
        continue;
      }
      const std::shared_ptr<LaneRegion> r = l->second;
      const bool answered = r->lane().chunks_held() == 0;
      got |= drain_lane(w, r);
      if (answered) w.actor_lanes_in_use.erase(key);
    }
  }
  return got;
}

bool PoolImpl::drain_lane(Worker& w, const std::shared_ptr<LaneRegion>& r) {
  bool got = false;
  {
    std::string frame;
    std::string_view held;
    for (;;) {
      bool in_place = false;
      const Lane::Took took = r->lane().take_result(frame, held, &in_place);
      if (took == Lane::Took::none) break;
      got = true;
      {
        std::lock_guard lk(mu_);  // counted before it is delivered: stats() after get() sees it
        ++stats_.results_shared_memory;
        stats_.results_written_in_place += in_place;
      }
      if (took == Lane::Took::held) {
        // Released when the last outcome viewing it goes, or here if none does (an error, a late result).
        std::shared_ptr<HeldFrame> keep;
        try {
          keep = std::make_shared<HeldFrame>(r, held.size());
        } catch (...) {
          r->lane().release_held(held.size());
          throw;
        }
        // Its call counts it delivered only after unshare_held (JobState::deliver): always called.
        const auto unshare = [&keep] {
          if (const auto job = keep->job.lock()) job->unshare_held();
        };
        try {
          on_results(w, held, nullptr, keep);
        } catch (...) {
          unshare();
          throw;
        }
        unshare();
      } else {
        on_results(w, frame);
        frame = std::string();
      }
    }
  }
  return got;
}

// An agent on this host: its executors' lanes are mapped, all or none (FIBRA_LANES=0: none).
bool PoolImpl::lanes_on() {
  static const bool enabled = env::flag("FIBRA_LANES").value_or(true);
  return enabled;
}

std::vector<std::shared_ptr<LaneRegion>> PoolImpl::open_lanes(const Worker& w, const wire::Hello& h) {
  if (!lanes_on() || h.lane_fds.size() != std::size_t(w.executors) || !same_host(h.host, my_host_)) return {};
  std::vector<std::shared_ptr<LaneRegion>> lanes;
  for (const auto fd : h.lane_fds) {
    std::string why;
    auto r = LaneRegion::open("/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(fd), lane_nonce_, h.pid, why);
    if (!r) {
      log::debug("fibra: worker {}'s executors are reached through their agent, not shared memory: {}", w.slot, why);
      return {};
    }
    lanes.push_back(std::move(r));
  }
  for (auto& r : lanes) r->lane().mark_in_use();  // only now: executors watch a lane in use
  return lanes;
}

}  // namespace fibra::detail
