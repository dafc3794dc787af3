// The pool's side of elastic growth (driver/elastic.cpp decides; this applies): Pool::adapt, the view
// the decisions read, workers that joined from a launch of their own taken in, and let go when idle.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "fibra/error.hpp"
#include "common/log.hpp"
#include "driver/pool_impl.hpp"
#include "driver/resources.hpp"

namespace fibra::detail {

bool PoolImpl::adopt_join(JoinedAgent& j) {
  std::lock_guard lk(mu_);
  if (closed_ || stopping_) return false;
  joined_.add(j);
  kick();
  return true;
}

void PoolImpl::adapt(int min_workers, int max_workers, const AdaptOptions& options) {
  {
    std::lock_guard lk(mu_);
    if (closed_) throw PoolClosed("fibra: adapt() on a pool that " + closed_reason_);
    if (min_workers <= max_workers && max_workers < target_)
      throw ConfigError("fibra: Pool::adapt(" + std::to_string(min_workers) + ", " + std::to_string(max_workers) +
                        "): the pool has " + std::to_string(target_) +
                        " workers of its own, more than max_workers; resize() it first, or allow more");
  }
  auto e = std::make_unique<Elastic>(min_workers, max_workers, options, uid_, s_.resources.cpus,
                                     [this] { return elastic_view(); });
  std::unique_ptr<Elastic> old;
  {
    std::lock_guard el(elastic_mu_);
    if (!elastic_closed_) {
      old = std::move(elastic_);
      elastic_ = std::move(e);
    }
  }
  if (e) {  // the pool stopped meanwhile: the new one goes before it submits anything
    e->halt();
    e->cancel(true, "the pool ended");
    throw PoolClosed("fibra: adapt() on a pool that ended while it was called");
  }
  {
    std::lock_guard lk(mu_);
    joined_.adapt(min_workers, options);
    kick();
  }
  if (old) {  // a second adapt() replaces the first: its jobs not joined yet are not wanted now
    old->halt();
    old->cancel(false, "Pool::adapt was called again");
  }
}

// What Pool::adapt's thread looks at: the workers, the chunks waiting, and the Slurm jobs whose
// worker joined (WorkerInfo::joined_from says "Slurm job <id>").
Elastic::View PoolImpl::elastic_view() const {
  std::lock_guard lk(mu_);
  Elastic::View v;
  v.workers = live_count() + counts_.joined_live();
  // Only chunks that a joined worker could run call for a worker job (the first 4096 are enough
  // to tell, and keep the look short while a million wait).
  const std::size_t pending = sched_.pending();
  if (pending > 0 && sched_.pending_fits(joined_offer(), 4096)) {
    v.waiting = pending;
  } else if (pending > 0) {
    v.unfit = pending;
    v.unfit_example = describe(joined_offer());
  }
  v.joined = joined_.slurm_jobs();
  return v;
}

// What each executor of a joined agent offers: the pool's own resources, but no GPUs when the
// pool shares out its GPUs (PoolOptions::gpu_ids are on its own hosts).
Resources PoolImpl::joined_offer() const {
  Resources r = s_.resources;
  if (!s_.gpu_ids.empty()) r.gpus = 0;
  return r;
}

// A joined worker leaves (it is retired as resize() retires one: it finishes what it runs):
// - AdaptOptions::drain_before_s before its Slurm job's time limit, so that no chunk is cut by it;
// - under Pool::adapt, once idle for AdaptOptions::idle_timeout_s, as long as the pool keeps its
//   minimum, unless it hosts actors (they would have to start again elsewhere).
// On the communication thread.
// A walk over the workers, so at most every 50 ms (a pass costs the workers at work, issue 29).
bool PoolImpl::let_joined_go(int live) {
  const double now = mpi::now_s();
  if (!joined_.look_due(now)) return false;
  std::vector<std::string> lines;
  {
    std::lock_guard lk(mu_);
    if (counts_.joined_live() == 0) return false;
    int total = live + counts_.joined_live();
    for (auto& w : workers_) {
      const std::string why = joined_.leave_reason(*w, now, total, [&] {
        return std::any_of(actors_.begin(), actors_.end(), [&](auto& a) {
          return a.second.state == ActorState::State::placed && a.second.worker == w->id;
        });
      });
      if (why.empty()) continue;
      set_state(*w, Worker::State::retiring);
      mark_hot(*w);
      total -= w->executors;
      // (All its workers leave with it: name them all, not "a worker of agent 2".)
      const std::string who = w->executors == 1
                                  ? name(*w)
                                  : "agent " + std::to_string(w->slot) + " with " + std::to_string(w->executors) +
                                        " workers (joined from " + w->joined_from + ")";
      lines.push_back(who + why + ", which keeps " + std::to_string(total) + " worker(s)");
    }
  }
  for (const auto& l : lines) log::info("fibra: {}", l);
  return !lines.empty();
}

// Agents that joined (src/driver/joins.hpp) become workers as a spawned agent does, each a group of
// its own: its setup first, then its hello. They add to the pool's workers without counting
// against its target. Under the MPI lock.
bool PoolImpl::take_joins() {
  // (Every pass comes here: the flag spares it the pool's lock while nobody joins.)
  if (!joined_.any_waiting()) return false;
  std::vector<JoinedAgent> joins;
  {
    std::lock_guard lk(mu_);
    joins = joined_.take();
    if (joins.empty()) return false;
  }
  for (auto& j : joins) {
    auto group = std::make_shared<AgentGroup>();
    group->comm = j.comm;
    group->open = 1;
    groups_.push_back(group);
    wire::AgentSetup setup;
    Worker* w = nullptr;
    {
      std::lock_guard lk(mu_);
      setup = agent_setup(j.hello.executors);
      auto made = std::make_unique<Worker>();
      made->id = next_worker_id_++;
      made->slot = setup.slot;
      made->executors = j.hello.executors;
      made->planned_host = j.hello.host;
      made->has = joined_offer();
      made->holds_slot = false;  // not of this allocation's slots
      made->joined = true;
      made->joined_from = j.hello.origin;
      joined_.note_origin(made->joined_from);
      if (j.hello.time_left_s > 0) made->job_ends_at = mpi::now_s() + j.hello.time_left_s;
      made->joined_ranks = std::max(1, static_cast<int>(j.hello.ranks));
      made->comm = j.comm;
      made->group = group;
      made->spawned_at = made->last_heard = made->last_sent = made->last_busy = made->idle_since = mpi::now_s();
      w = made.get();
      group->members.push_back(w);
      workers_.push_back(std::move(made));
      counts_.count(*w, +1);  // starting (not PoolStats::workers_started, which counts the ones it spawned)
      mark_hot(*w);
    }
    log::info("fibra: agent {} with {} worker(s) joined from {} on {} (pid {})", w->slot, w->executors, j.hello.origin,
              j.hello.host, j.hello.pid);
    send(*w, wire::tag_setup, wire::encode(setup));
  }
  return true;
}

}  // namespace fibra::detail
