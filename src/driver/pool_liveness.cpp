// Whether a pool's workers live: their hello, the watch on their heartbeats and processes, one
// declared lost (its work queued again), and the goodbye at the end.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "fibra/error.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "driver/channels.hpp"
#include "driver/driver.hpp"
#include "driver/pool_impl.hpp"

namespace fibra::detail {

// A worker's side of its group's communicator is no longer used (it said bye; or the pool ends):
// the communicator is freed with its group's last open member (MPI_Comm_free is local, never a
// wait). Under the MPI lock.
void PoolImpl::release_comm(Worker& w) {
  if (w.comm == MPI_COMM_NULL || w.state == Worker::State::lost) return;
  AgentGroup& g = *w.group;
  w.comm = MPI_COMM_NULL;
  if (--g.open > 0) return;
  for (Worker* m : g.members) m->comm = MPI_COMM_NULL;  // lost ones too: nothing more is read from it
  MPI_Comm_free(&g.comm);
}

// A member of a group was declared lost: it no longer counts among the open ones. Its
// communicator stays, for what it may still send (still_heard); as today for an agent of its own,
// a group whose members were all lost keeps its communicator.
void PoolImpl::group_member_lost(Worker& w) {
  if (w.group && w.comm != MPI_COMM_NULL) --w.group->open;
}

void PoolImpl::on_hello(Worker& w, const wire::Hello& h) {
  auto lanes = open_lanes(w, h);  // outside mu_: it may log, and a log sink may ask for stats()
  std::lock_guard lk(mu_);
  w.host = h.host;
  w.pid = static_cast<long>(h.pid);
  if (h.fingerprint != registry_fingerprint()) {
    throw ConfigError("fibra: worker " + std::to_string(w.slot) + " on " + h.host + " (pid " + std::to_string(h.pid) +
                      ") has " + std::to_string(h.functions) + " remote functions registered, this driver has " +
                      std::to_string(registry_size()) +
                      " or others: driver and workers must run the same build of the program");
  }
  w.shared_memory = !lanes.empty();
  w.object_port = peer_objects_on() ? h.object_port : 0;
  w.object_host = h.object_host;
  // Its tasks' large results that tasks take stay where they are made: on this host the driver
  // opens its memfds; on another, its agent (which serves its objects to peers) sends a copy.
  w.keeps_results =
      w.shared_memory || (!lanes_on() && same_host(h.host, my_host_)) || (w.object_port != 0 && h.copies_kept);
  w.lanes = std::move(lanes);
  if (w.state == Worker::State::starting) set_state(w, Worker::State::ready);
  if (events_)
    events_->worker(w.id, w.slot, w.host, w.pid, w.executors, w.joined,
                    w.object_port == 0 ? std::string() : w.object_host + ":" + std::to_string(w.object_port));
  state_cv_.notify_all();
}

// Heartbeats to quiet workers, and the liveness check of every worker (Liveness judges): a worker
// that has been silent too long (or whose process is gone, for workers on this host) is declared
// lost; a lost one whose process is surely gone frees its slot.
void PoolImpl::watch_workers() {
  const double now = mpi::now_s();
  liveness_.sweep(now, workers_, [&](Worker& w, Liveness::Verdict v, const std::string& why) {
    switch (v) {
      case Liveness::Verdict::lost: return declare_lost(w, why);
      case Liveness::Verdict::heartbeat: return send(w, wire::tag_heartbeat, std::string());
      case Liveness::Verdict::free_slot: return free_slot(w);
    }
  });
  // Groups none of whose members is read again are probed no more.
  std::erase_if(groups_, [&](const auto& g) {
    return std::none_of(g->members.begin(), g->members.end(), [&](const Worker* w) {
      return w->comm != MPI_COMM_NULL && (w->alive() || liveness_.still_heard(*w, now));
    });
  });
}

// The worker is dead to the pool: nothing is sent to it or read from it again, and the chunks it
// held are failed attempts (retried elsewhere while they have retries left).
void PoolImpl::declare_lost(Worker& w, const std::string& why) {
  rings_.close(w, std::nullopt);  // the puts its processes made before are the queues' still
  std::string line;               // written once mu_ is released: a log sink may ask the pool for its stats
  {
    std::lock_guard lk(mu_);
    const bool was_leaving = w.state == Worker::State::leaving;
    set_state(w, Worker::State::lost);
    if (events_) events_->lost(w.id, why);
    mark_hot(w);  // what it still sends is read at every pass while it is heard (still_heard)
    w.lost_at = mpi::now_s();
    // Copies of results it kept whose Kept will not come now (late ones are not taken).
    std::erase_if(kept_copies_, [&](const auto& e) { return e.second.second == w.id; });
    // A lost agent on this host that holds GPUs is ended, so that its replacement gets them soon
    // (stopped, it would keep them until its orphan guard ends it).
    if (!w.gpus.empty() && w.host == my_host_ && w.pid > 0) ::kill(static_cast<pid_t>(w.pid), SIGKILL);
    // What its processes took of the items they read ahead (only processes on this host read ahead):
    // gone with them; the rest come back. Read before free_slot lets go of the lanes.
    std::vector<std::uint64_t> taken;
    for (const auto& r : w.lanes) r->lane().mailbox().take_ahead_taken(taken);
    for (const auto& [key, r] : w.actor_lanes) r->lane().mailbox().take_ahead_taken(taken);
    if (liveness_.process_gone_here(w)) free_slot(w);  // its replacement may take the slot on the next pass
    // A host whose agent fell silent may be cut off or gone: no agent is spawned again, there or
    // anywhere else, by any pool of this process, since every spawn involves every node's Open MPI
    // daemon (see spawn_frozen_reason). Placement "none" plans no host: the host its hello gave counts.
    // (Not one that joined: its node is not of this job, whose daemons a spawn involves.)
    const std::string& lost_host = w.planned_host.empty() ? w.host : w.planned_host;
    if (!lost_host.empty() && !same_host(lost_host, my_host_))
      w.joined ? note_lost_joined_host(lost_host) : note_lost_remote_host(lost_host);
    sends_.abandon(w.comm, w.rank, w.tag_of(0), w.tag_of(wire::tags_per_agent));
    group_member_lost(w);
    ChannelStore::instance().forget(uid_, static_cast<std::uint64_t>(w.id), std::nullopt, taken);
    w.batches.clear();
    const auto held = sched_.owned_by(w.id);
    const std::string who =
        (w.executors == 1 ? name(w)
                          : "agent " + std::to_string(w.slot) + " with " + std::to_string(w.executors) + " workers" +
                                (w.joined ? " (joined from " + w.joined_from + ")" : "")) +
        " on " + (w.host.empty() ? "?" : w.host) + " (pid " + std::to_string(w.pid) + ")";
    if (!was_leaving) {
      const bool replaced = !w.joined && live_count() < target_ && !stopping_;
      line = "fibra: " + who + " was lost: " + why + "; the " + std::to_string(held.size()) +
             " chunk(s) it held count a failed attempt";
      if (replaced && !remote_host_lost()) {
        line += "; a replacement is being started";
      } else if (replaced) {
        line += "; no replacement is started (" + std::string(spawn_frozen_reason) + "): the pool carries on with " +
                std::to_string(live_count()) + " worker(s)";
        if (env::raw("FIBRA_LOST_HOSTS_FILE"))
          line += ", until the batch script relaunches it on the nodes still alive";
      }
    }
    ++stats_.workers_lost;
    actors_leave(w, "its worker was lost: " + why, true);
    for (const auto& [id, attempt] : held) {
      const Chunk* c = sched_.find(id, attempt);
      if (!c) continue;
      auto e = std::make_exception_ptr(WorkerLost("fibra: " + who + " was lost while it ran " + c->job->name() +
                                                  " on items " + std::to_string(c->first) + ".." +
                                                  std::to_string(c->first + c->count - 1) + ": " + why));
      attempt_failed(id, attempt, FailKind::lost, e, std::nullopt);
    }
    state_cv_.notify_all();
  }
  if (!line.empty()) log::warning("{}", line);
}

// True while a replacement would start without its GPUs because a lost agent still holds them:
// it waits for them (its process ending, or its orphan guard) rather than start without.
bool PoolImpl::gpus_still_held() const {
  if (s_.gpu_ids.empty() || s_.resources.gpus <= 0) return false;
  std::size_t held = 0, held_by_lost = 0;
  for (auto& w : workers_) {
    if (!w->holds_slot) continue;
    held += w->gpus.size();
    if (w->state == Worker::State::lost) held_by_lost += w->gpus.size();
  }
  const std::size_t need = static_cast<std::size_t>(s_.resources.gpus) * static_cast<std::size_t>(next_agent_size());
  return held_by_lost > 0 && s_.gpu_ids.size() - held < need;
}

// Asks every agent to leave, waits (bounded) for their goodbyes, and disconnects from those that
// said it. An agent that never answers is not waited for again.
// The MPI lock is taken per step, never across the wait: other pools keep their heartbeats.
void PoolImpl::say_goodbye() {
  try {
    {
      std::lock_guard ml(mpi::lock());
      take_joins();  // agents that joined as the pool stopped: they are told to leave as the others
      for (auto& w : workers_) {
        if (!w->alive()) continue;
        send(*w, wire::tag_shutdown, std::string());
        std::lock_guard lk(mu_);
        if (w->alive()) set_state(*w, Worker::State::leaving);  // the send may have lost it
      }
    }
    const double end = mpi::now_s() + 5.0;
    auto leaving = [&] {
      return std::any_of(workers_.begin(), workers_.end(), [](auto& w) { return w->state == Worker::State::leaving; });
    };
    while (leaving() && mpi::now_s() < end) {
      bool got;
      {
        std::lock_guard ml(mpi::lock());
        got = receive();
        progress_sends();
      }
      if (!got) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::lock_guard ml(mpi::lock());
    sends_.drain(1.0);
  } catch (const std::exception& e) {
    log::error("fibra: while stopping the pool's workers: {}", e.what());
  }
  std::lock_guard ml(mpi::lock());
  for (auto& w : workers_) {
    // Local, never a wait: an agent that said bye frees its side and exits (see handle(), bye).
    if (w->state == Worker::State::gone) release_comm(*w);
    free_slot(*w);  // best effort for the ones that did not say bye: they leave by the orphan guard
  }
  sends_.abandon();
  // Nothing is read from them now: the communicators of agents lost, or that did not say bye, are
  // freed too. One left would make Open MPI 4.1's MPI_Finalize disconnect from its agents (it does
  // so for every dynamic communicator not freed), and for one that is dead it can wait for good:
  // seen in the soak, the driver in MPI_Finalize (ompi_dpm_dyn_finalize) after agents were killed.
  for (auto& w : workers_) {
    if (!w->group || w->group->comm == MPI_COMM_NULL) continue;
    for (Worker* m : w->group->members) m->comm = MPI_COMM_NULL;
    MPI_Comm_free(&w->group->comm);
  }
}

}  // namespace fibra::detail
