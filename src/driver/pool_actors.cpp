// Actors on the driver: where each one's process runs, its calls in the order made, and what the
// death of that process does (its calls fail with ActorDied; with restarts left it starts again
// from its constructor). pool_impl.hpp says which lock guards what: everything here is under mu_,
// except dispatch_actors(), which takes it and sends outside it, and open_actor_lane(), which takes
// it for the actor's state and opens a call ring outside it (the communication thread's own).
#include <algorithm>
#include <string>

#include "fibra/error.hpp"
#include "common/log.hpp"
#include "driver/pool_impl.hpp"

namespace fibra::detail {
namespace {

// Calls sent to an actor's process in one message, at most.
constexpr std::size_t actor_batch_calls = 256;
constexpr std::size_t actor_batch_bytes = std::size_t(64) << 20;

std::exception_ptr died(const std::string& text, const std::string& cause = {}) {
  return std::make_exception_ptr(ActorDied(text, cause));
}

}  // namespace

std::uint64_t PoolImpl::start_actor(const FunctionEntry& ctor, std::string args, ActorSettings settings) {
  if (args.size() > max_chunk_bytes)
    throw ConfigError("fibra: the constructor arguments of actor " + settings.class_name + " encode to " +
                      std::to_string(args.size()) + " bytes, over the 2 GiB one MPI message can carry");
  std::lock_guard lk(mu_);
  if (broken_) std::rethrow_exception(broken_);
  if (closed_) throw PoolClosed("fibra: an actor was started on a pool that " + closed_reason_);
  if (!settings.name.empty())
    if (const ActorState* other = live_actor_named(settings.name))
      throw ConfigError("fibra: an actor with key \"" + settings.name + "\" runs on this pool already (a " +
                        other->settings.class_name + "): choose another key, or get that one with Actor<" +
                        other->settings.class_name + ">::get(\"" + settings.name + "\")");
  ActorState a;
  a.id = next_actor_id_++;
  a.ctor = &ctor;
  a.ctor_args = std::make_shared<const std::string>(std::move(args));
  a.handles = settings.owned ? 1 : 0;
  a.settings = std::move(settings);
  a.queue.push_back({actor_chunk_bit | next_actor_chunk_++,
                     std::make_shared<JobState>(ctor, CallMode::tuple, s_.policy), a.ctor_args, true});
  const std::uint64_t id = a.id;
  actors_.emplace(id, std::move(a));
  kick();
  return id;
}

// The live actor (not dead, a handle left) of that key (ActorSettings::name), or nullptr. Under mu_.
ActorState* PoolImpl::live_actor_named(const std::string& name) {
  for (auto& [id, a] : actors_)
    if (a.settings.name == name && a.state != ActorState::State::dead && !a.ended) return &a;
  return nullptr;
}

std::uint64_t PoolImpl::find_actor(const std::string& name, const std::string& class_name, bool counted) {
  std::lock_guard lk(mu_);
  ActorState* a = name.empty() ? nullptr : live_actor_named(name);
  if (!a) {
    std::string names;
    for (const auto& [id, x] : actors_)
      if (!x.settings.name.empty() && x.state != ActorState::State::dead && !x.ended)
        names += (names.empty() ? "" : ", ") + ("\"" + x.settings.name + "\"");
    throw ConfigError("fibra: no live actor has the key \"" + name + "\" on this pool (" +
                      (names.empty() ? std::string("it has no actors with keys") : "keys: " + names) +
                      "); start it with ActorOptions::key, on the pool you look in");
  }
  if (a->settings.class_name != class_name)
    throw ConfigError("fibra: the actor with key \"" + name + "\" is a " + a->settings.class_name + ", not a " +
                      class_name + ": get it as Actor<" + a->settings.class_name + ">");
  if (counted) ++a->handles;
  return a->id;
}

bool PoolImpl::adopt_actor(std::uint64_t id) {
  std::lock_guard lk(mu_);
  auto it = actors_.find(id);
  if (it == actors_.end() || it->second.ended || it->second.state == ActorState::State::dead) return false;
  ++it->second.handles;
  return true;
}

// The errors of a call that cannot be queued: its actor is gone, or its arguments are too large.
ActorDied PoolImpl::actor_gone(const JobState& job) {
  return ActorDied("fibra: " + job.name() + " was called on an actor that is gone");
}
ConfigError PoolImpl::actor_args_too_big(const JobState& job, std::size_t bytes) {
  return ConfigError("fibra: the arguments of " + job.name() + " encode to " + std::to_string(bytes) +
                     " bytes, over the 2 GiB one MPI message can carry");
}

void PoolImpl::call_actor(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload) {
  if (payload.size() > max_chunk_bytes) throw actor_args_too_big(*job, payload.size());
  queue_actor_call(actor, job, share_payload(std::move(payload)));
}

// A call with Future arguments takes its place now, with no payload yet: the calls behind it wait
// for it (next_actor_batch stops there), as Ray runs an actor's calls in the order submitted.
void PoolImpl::reserve_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job) {
  queue_actor_call(actor, job, nullptr);
}

// Queues a call behind the actor's others, with its payload or (reserved) none yet. A call to a
// dead actor fails at once; a reserved one when fill_actor_call finds no place for it.
void PoolImpl::queue_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job,
                                std::shared_ptr<const std::string> payload) {
  std::lock_guard lk(mu_);
  if (broken_) std::rethrow_exception(broken_);
  if (closed_ && stopping_) throw PoolClosed("fibra: an actor was called on a pool that " + closed_reason_);
  auto it = actors_.find(actor);
  if (it == actors_.end()) throw actor_gone(*job);
  ActorState& a = it->second;
  job->set_pool_uid(uid_);                   // fibra::cancel finds the pool from now on (cancel_actor_call)
  if (a.state == ActorState::State::dead) {  // never queued, never a hang
    if (payload) job->deliver({0, 1, {}, died(a.death), {}});
    return;
  }
  a.queue.push_back({actor_chunk_bit | next_actor_chunk_++, job, std::move(payload), false});
  ++graph_.calls;
  kick();
}

// fibra::cancel of an actor's call, as ray.cancel of an actor task: one still queued in the driver
// (behind a running call of its actor, say) never runs, and its get() throws TaskCancelled; one
// still waiting for its Future arguments is dropped when they come (deps.hpp: the cancel was
// asked); one sent to the actor's process already runs (false). `force` is refused: stopping a
// running call would end the actor's process, and its state with it. nullopt: `job` is no call of
// this pool's actors (a map's call: the chunks' way).
std::optional<bool> PoolImpl::cancel_actor_call(const std::shared_ptr<JobState>& job, bool force) {
  std::lock_guard lk(mu_);
  for (auto& [id, a] : actors_) {
    auto c = std::find_if(a.queue.begin(), a.queue.end(), [&](const ActorCall& q) { return q.job == job; });
    const bool sent = c == a.queue.end() && std::any_of(a.in_flight.begin(), a.in_flight.end(),
                                                        [&](const auto& f) { return f.second.job == job; });
    if (c == a.queue.end() && !sent) continue;
    if (force)
      throw ConfigError("fibra::cancel: " + job->name() +
                        " is an actor's call, which force cannot stop: it would end the actor's process and its "
                        "state; cancel it without force (a call not yet started never runs), or end the actor");
    if (sent || c->ctor) return false;
    if (!c->payload) return true;  // its Future arguments come: WaitingTask::run drops it then
    a.queue.erase(c);
    if (job->claim_cancel_delivery()) job->deliver({0, 1, {}, cancelled_error(*job, "before it started"), {}});
    if (actors_idle()) state_cv_.notify_all();  // a join() may wait for this call
    return true;
  }
  return std::nullopt;
}

void PoolImpl::fill_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload,
                               bool drop) {
  std::exception_ptr refused;  // its outcome, when it is not queued after all
  {
    std::lock_guard lk(mu_);
    auto it = actors_.find(actor);
    if (it == actors_.end()) {
      refused = std::make_exception_ptr(actor_gone(*job));
    } else if (auto c = std::find_if(it->second.queue.begin(), it->second.queue.end(),
                                     [&](const ActorCall& q) { return q.job == job; });
               c == it->second.queue.end()) {
      refused = died(it->second.death);  // it died meanwhile (its calls failed then) or was dead already
    } else if (drop) {
      it->second.queue.erase(c);
    } else if (payload.size() > max_chunk_bytes) {
      it->second.queue.erase(c);
      refused = std::make_exception_ptr(actor_args_too_big(*job, payload.size()));
    } else {
      c->payload = share_payload(std::move(payload));
    }
    kick();
  }
  // Said once: a call that failed with its actor, or was dropped by its caller, has its outcome.
  if (refused && !drop && job->delivered() == 0) job->deliver({0, 1, {}, refused, {}});
}

bool PoolImpl::actors_idle() const {
  for (const auto& [id, a] : actors_)
    if (!a.queue.empty() || !a.in_flight.empty()) return false;
  return true;
}

// Its resources were checked when it was submitted (Pool::submit, check_need).
void PoolImpl::submit_dependent(const std::shared_ptr<JobState>& job, std::string payload) {
  std::lock_guard lk(mu_);
  if (broken_) std::rethrow_exception(broken_);
  // After close() it still runs: it was submitted before, and only waited for its arguments.
  if (stopping_)
    throw PoolClosed("fibra: the pool " + closed_reason_ + " before " + job->name() +
                     " could run (it waited for its Future arguments)");
  take_inbox();  // what was submitted before goes first
  if (!queue_unless_cancelled(job)) return;
  const std::uint64_t id = sched_.add(job, 0, 1, std::move(payload));
  trace::mark(trace::submitted, id);
  if (events_) events_->queued(id, job, 0, 1, 0, events_->after(job));
  kick();
}

void PoolImpl::signal_actor(std::uint64_t actor, int sig) {
  std::lock_guard lk(mu_);
  actor_signals_.emplace_back(actor, sig);
  kick();
}

void PoolImpl::end_actor(std::uint64_t actor) noexcept {
  std::lock_guard lk(mu_);
  if (auto it = actors_.find(actor); it != actors_.end() && --it->second.handles <= 0) it->second.ended = true;
  kick();
}

std::string PoolImpl::actor_name(const ActorState& a) const {
  return "actor " + a.settings.class_name + " #" + std::to_string(a.id);
}

// Places actors that wait for a process (on the ready agent hosting the fewest), sends each placed
// actor its queued calls in order, and forgets actors whose handles are gone once their calls are done.
bool PoolImpl::dispatch_actors() {
  struct Out {
    Worker* w;
    mpi::Pieces batch;
    std::vector<std::shared_ptr<const StoredObject>> objects;  // stored objects its calls take
    std::shared_ptr<LaneRegion> lane;                          // where it goes, if not through MPI
    std::uint32_t calls = 0;
    std::uint64_t key = 0;  // of the actor's process
  };
  std::vector<Out> batches;
  std::vector<std::pair<Worker*, std::string>> ends;
  {
    std::lock_guard lk(mu_);
    if (actors_.empty()) {
      actor_signals_.clear();
      return false;
    }
    std::unordered_map<int, int> hosted;  // worker id -> actors placed there
    for (auto& [id, a] : actors_)
      if (a.state == ActorState::State::placed) ++hosted[a.worker];
    for (auto it = actors_.begin(); it != actors_.end();) {
      ActorState& a = it->second;
      const bool idle = a.queue.empty() && a.in_flight.empty();
      if (idle && a.key != 0 && !a.end_sent && (a.ended || a.state == ActorState::State::dead)) {
        if (Worker* w = worker_by_id(a.worker); w && w->alive())
          ends.emplace_back(w, wire::encode(wire::ActorEnd{a.key}));
        a.end_sent = true;
      }
      if (idle && a.ended) {
        if (Worker* w = worker_by_id(a.worker)) w->actor_lanes.erase(a.key);
        actor_by_key_.erase(a.key);
        it = actors_.erase(it);
        continue;
      }
      if (a.state == ActorState::State::placing && !a.queue.empty()) place_actor(a, hosted);
      Worker* w = a.state == ActorState::State::placed ? worker_by_id(a.worker) : nullptr;
      if (w && (w->state == Worker::State::ready || w->state == Worker::State::retiring) && !a.queue.empty() &&
          a.queue.front().payload) {
        // Its lane once the calls sent through MPI are back, one batch at a time (the executor
        // reads its socket before its lane: a batch in each could run out of order). An actor
        // that runs calls at once takes them through its agent, batch after batch, as they come:
        // one batch at a time would keep all but its first call waiting.
        if (a.lane && !a.lane_active && a.in_flight.empty() && a.settings.max_concurrency == 1) a.lane_active = true;
        if (!a.lane_active || a.lane->lane().chunks_held() == 0) {  // its small slots and its large one
          std::vector<std::shared_ptr<const StoredObject>> objects;
          const std::size_t before = a.in_flight.size();
          mpi::Pieces batch = next_actor_batch(a, objects);
          batches.push_back({w, std::move(batch), std::move(objects), a.lane_active ? a.lane : nullptr,
                             static_cast<std::uint32_t>(a.in_flight.size() - before), a.key});
        }
      }
      ++it;
    }
    // Signals go once the actor's process has its first batch (sent above, or before): after it,
    // as MPI keeps the order. One still being placed keeps its signal; one that is gone drops it.
    std::erase_if(actor_signals_, [&](const std::pair<std::uint64_t, int>& s) {
      auto a = actors_.find(s.first);
      if (a == actors_.end() || a->second.state == ActorState::State::dead) return true;
      if (a->second.state != ActorState::State::placed || a->second.key == 0) return false;
      if (a->second.in_flight.empty() && !a->second.queue.empty()) return false;  // its first batch waits
      if (Worker* w = worker_by_id(a->second.worker); w && w->alive())
        ends.emplace_back(w, wire::encode(wire::ActorEnd{a->second.key, s.second}));
      return true;
    });
  }
  std::uint64_t shared = 0;
  for (auto& [w, batch, objects, lane, calls, key] : batches) {
    if (lane) {
      // Its only slot in use: the post fails only if the lane was closed (the process died), and
      // then the death fails these calls.
      const auto fill = [&](char* out) { batch.write_to(out); };
      if (lane->lane().post(batch.size(), calls, fill)) {
        ++shared;
        w->actor_lanes_in_use.insert(key);  // drained until answered (drain_lanes)
        mark_hot(*w);                       // (a batch through a lane is no send)
      }
      continue;
    }
    send_objects(*w, objects);  // before the batch, as for tasks
    send(*w, wire::tag_tasks, std::move(batch));
  }
  for (auto& [w, end] : ends) send(*w, wire::tag_actor_end, std::move(end));
  if (!batches.empty()) {
    std::lock_guard lk(mu_);
    stats_.batches_sent += batches.size();
    stats_.batches_shared_memory += shared;
  }
  return !batches.empty() || !ends.empty();
}

// The worker of that id, or null (under mu_).
Worker* PoolImpl::worker_by_id(int id) const {
  for (auto& w : workers_)
    if (w->id == id) return w.get();
  return nullptr;
}

// Gives an actor waiting for a process the ready worker that fits it and hosts the fewest actors
// (`hosted`, counted up), under a new key; none ready: it waits on (under mu_).
void PoolImpl::place_actor(ActorState& a, std::unordered_map<int, int>& hosted) {
  Worker* best = nullptr;
  for (auto& w : workers_)
    if (w->state == Worker::State::ready && fits(a.settings.need, w->has) &&
        (!best || hosted[w->id] < hosted[best->id]))
      best = w.get();
  if (!best) return;
  a.state = ActorState::State::placed;
  a.worker = best->id;
  a.key = next_actor_key_++;
  a.end_sent = false;
  actor_by_key_[a.key] = a.id;
  ++hosted[best->id];
}

// The next calls of a placed actor, in order, as one batch (at most actor_batch_calls, and
// actor_batch_bytes unless the first alone is larger); they are in flight from now (under mu_).
// The constructor of an actor that runs calls at once goes alone: its process runs that batch
// itself, and gives the later ones to its threads.
mpi::Pieces PoolImpl::next_actor_batch(ActorState& a, std::vector<std::shared_ptr<const StoredObject>>& objects) {
  mpi::Pieces batch;
  batch.heads = wire::begin_batch();
  std::uint32_t n = 0;
  std::size_t bytes = 0;
  // A call still waiting for its Future arguments (no payload) holds up the calls behind it.
  while (!a.queue.empty() && a.queue.front().payload && n < actor_batch_calls &&
         (n == 0 || bytes + a.queue.front().payload->size() <= actor_batch_bytes)) {
    ActorCall c = std::move(a.queue.front());
    a.queue.pop_front();
    wire::TaskHeader h;
    h.chunk = c.chunk;
    h.attempt = 1;
    h.fn = c.job->fn().id;
    h.mode = c.job->mode();
    h.count = 1;
    h.timeout_s = c.job->policy().task_timeout_s;
    h.actor = a.key;
    h.concurrency = static_cast<std::uint32_t>(a.settings.max_concurrency);
    add_objects(*c.job, h, objects);
    wire::append_task_head(batch.heads, h, c.payload->size(), bytes);
    batch.ends.push_back(batch.heads.size());
    batch.bodies.push_back(c.payload);
    bytes += c.payload->size();
    ++n;
    actor_of_[c.chunk] = a.id;
    const bool alone = c.ctor && a.settings.max_concurrency > 1;
    a.in_flight.emplace(c.chunk, std::move(c));
    if (alone) break;
  }
  wire::set_count(batch.heads, n);
  return batch;
}

// The call in flight that a result of `chunk` answers, taken out of its actor's calls in flight;
// null when it is not in flight any more (a call of a process already given up on).
ActorState* PoolImpl::take_actor_call(std::uint64_t chunk, ActorCall& call) {
  auto f = actor_of_.find(chunk);
  if (f == actor_of_.end()) {
    ++stats_.late_results_dropped;
    return nullptr;
  }
  auto ait = actors_.find(f->second);
  actor_of_.erase(f);
  if (ait == actors_.end()) return nullptr;
  ActorState& a = ait->second;
  auto cit = a.in_flight.find(chunk);
  if (cit == a.in_flight.end()) return nullptr;
  call = std::move(cit->second);
  a.in_flight.erase(cit);
  if (a.in_flight.empty() && a.queue.empty()) state_cv_.notify_all();  // join() may wait for it
  return &a;
}

// An actor that cannot go on (its constructor failed): it is dead, and every call to it fails with `why`.
void PoolImpl::actor_gone_for_good(ActorState& a, const std::string& why) {
  a.state = ActorState::State::dead;
  a.death = why;
  for (auto& [chunk, c] : a.in_flight) {
    actor_of_.erase(chunk);
    c.job->deliver({0, 1, {}, died(why), {}});
  }
  a.in_flight.clear();
  for (auto& c : a.queue) c.job->deliver({0, 1, {}, died(why), {}});
  a.queue.clear();
  state_cv_.notify_all();
}

void PoolImpl::on_actor_result(const Worker& w, const wire::ResultView& r, std::int64_t exec_pid, std::string* whole,
                               const std::shared_ptr<HeldFrame>& keep) {
  const auto& h = r.header;
  ActorCall call;
  ActorState* found = take_actor_call(h.chunk, call);
  if (!found) return;
  ActorState& a = *found;
  const std::string& fn = call.job->name();
  if (events_) events_->actor_call(a.id, call.job->name(), call.ctor, w.id, r, exec_pid);
  const std::string at = actor_name(a) + ", " + where(w, static_cast<long>(exec_pid));
  switch (h.status) {
    case wire::Status::ok: {
      ++stats_.chunks_done;
      if (call.ctor) return;
      call.job->note_run(1, h.run_ns);
      ChunkOutcome o{0, 1, {}, {}, {}};
      if (keep) {  // left in its lane's large slot: decoded there by a caller waiting for it
        keep->job = call.job;
        o.keep_at(keep, r.payload);
      } else if (whole) {
        o.take_message(std::move(*whole), r.payload);
      } else {
        o.payload.assign(r.payload);
      }
      call.job->deliver(std::move(o));
      return;
    }
    case wire::Status::raised: {
      const ItemFailure fl = wire::decode<ItemFailure>(r.payload);
      if (call.ctor) {
        call.job->deliver({0, 1, {}, died("constructor raised"), {}});
        return actor_gone_for_good(a, "fibra: " + actor_name(a) + " could not start: its constructor " + fn +
                                          " raised " + fl.type + ": " + fl.message + " (" + at + "); calls to it fail");
      }
      RemoteSite site{fn, 0, w.slot, w.host, static_cast<long>(exec_pid)};
      std::string what = "fibra: " + fn + " raised " + fl.type + ": " + fl.message + " (" + at + ")";
      // A registered type (FIBRA_EXCEPTION, fibra's own) comes back as itself, as from a task.
      std::exception_ptr e = make_registered_exception(fl.type, what, fl.message, site);
      if (!e) e = std::make_exception_ptr(RemoteError(std::move(what), fl.type, fl.message, site));
      call.job->deliver({0, 1, {}, std::move(e), {}});
      return;
    }
    case wire::Status::unknown_fn: {
      const std::string text =
          "fibra: " + where(w, static_cast<long>(exec_pid)) + " cannot run '" + fn + "': " + std::string(r.payload);
      call.job->deliver({0, 1, {}, std::make_exception_ptr(ConfigError(text)), {}});
      if (call.ctor) actor_gone_for_good(a, "fibra: " + actor_name(a) + " could not start: " + text);
      return;
    }
    default:  // a report of its calls after a death: agents send ActorDeath instead, but to be sure
      a.in_flight.emplace(call.chunk, std::move(call));
      actor_of_[h.chunk] = a.id;
      actor_died(a, "its process ended (" + where(w, static_cast<long>(exec_pid)) + ")", h.chunk, true);
      return;
  }
}

// The agent on this host started an actor's process: its lane is mapped, and the actor's calls go
// there once those sent through MPI are back (dispatch_actors); its results are drained with the
// worker's own lanes (receive).
void PoolImpl::open_actor_lane(Worker& w, const wire::ActorLane& m) {
  if (w.lanes.empty()) return;  // another host, or lanes off: through MPI as before
  std::string why;
  auto r = LaneRegion::open("/proc/" + std::to_string(w.pid) + "/fd/" + std::to_string(m.fd), lane_nonce_, w.pid, why);
  if (!r) {
    log::debug("fibra: an actor's process on worker {} is reached through its agent: {}", w.slot, why);
    return;
  }
  r->lane().mark_in_use();
  std::shared_ptr<LaneRegion> lane = std::move(r);
  {
    std::lock_guard lk(mu_);
    auto k = actor_by_key_.find(m.actor);
    if (k == actor_by_key_.end()) return;  // gone already
    auto it = actors_.find(k->second);
    if (it == actors_.end() || it->second.key != m.actor) return;
    it->second.lane = lane;
    w.actor_lanes[m.actor] = lane;
  }
  // A process that calls channels (a Process, as it starts) has its ring of calls read from now on,
  // and says so in its lane: its first call need not ask through its socket (Lane::reads_calls).
  if (lane->lane().mailbox().wants_lane.load(std::memory_order_relaxed) != 0 &&
      open_call_ring(w, m.actor | wire::route_actor_bit))
    lane->lane().mark_reads_calls();
}

void PoolImpl::on_actor_death(const Worker& w, const wire::ActorDeath& d) {
  auto k = actor_by_key_.find(d.actor);
  if (k == actor_by_key_.end()) return;  // a process already given up on
  auto it = actors_.find(k->second);
  if (it == actors_.end()) return;
  const std::string at = d.pid > 0 ? where(w, static_cast<long>(d.pid)) : name(w) + " on " + w.host;
  actor_died(it->second, d.why + " (" + at + ")", d.chunk, true);
}

// The actor's process is gone: every call sent to it fails with ActorDied (none is run again: a
// call may have changed the actor's state before it died). With restarts left (or when the death
// does not count, as when resize() retires its agent) it starts again from its constructor, and
// the calls not yet sent go to the new process; otherwise it is gone for good.
void PoolImpl::actor_died(ActorState& a, const std::string& why, std::uint64_t running_chunk, bool counts) {
  const int max = a.settings.max_restarts;
  const bool restart = !a.ended && !stopping_ && (!counts || a.restarts < max);
  std::string after;
  if (restart) {
    after =
        "; it is started again from its constructor" +
        (counts ? " (restart " + std::to_string(a.restarts + 1) + " of " + std::to_string(max) + ")" : std::string()) +
        " and later calls go to the new process";
  } else if (!a.ended) {
    after = "; it is not started again (ActorOptions::max_restarts = " + std::to_string(max) +
            (max > 0 ? ", all used" : "") + "): later calls fail";
  }
  for (auto& [chunk, c] : a.in_flight) {
    const std::string& fn = c.job->name();
    const std::string what = c.ctor                   ? "while starting (in its constructor)"
                             : chunk == running_chunk ? "while running this call (" + fn + ")"
                             : a.settings.max_concurrency == 1
                                 ? "before this call (" + fn + ") ran"
                                 : "while this call (" + fn + ") ran or waited to (it runs up to " +
                                       std::to_string(a.settings.max_concurrency) + " calls at once)";
    actor_of_.erase(chunk);
    c.job->deliver({0, 1, {}, died("fibra: " + actor_name(a) + " died " + what + ": " + why + after, why), {}});
  }
  a.in_flight.clear();
  if (Worker* w = worker_by_id(a.worker)) w->actor_lanes.erase(a.key);  // drained before the death was read
  a.lane.reset();
  a.lane_active = false;
  actor_by_key_.erase(a.key);
  a.key = 0;
  a.worker = -1;
  a.end_sent = false;
  if (restart) {
    if (counts) ++a.restarts;
    a.state = ActorState::State::placing;
    a.queue.push_front({actor_chunk_bit | next_actor_chunk_++,
                        std::make_shared<JobState>(*a.ctor, CallMode::tuple, s_.policy), a.ctor_args, true});
    kick();
    return;
  }
  a.state = ActorState::State::dead;
  a.death = "fibra: " + actor_name(a) + " is gone: its process died (" + why + ")" + after;
  for (auto& c : a.queue) c.job->deliver({0, 1, {}, died(a.death), {}});
  a.queue.clear();
  state_cv_.notify_all();
}

void PoolImpl::actors_leave(const Worker& w, const std::string& why, bool counts) {
  for (auto& [id, a] : actors_)
    if (a.state == ActorState::State::placed && a.worker == w.id) actor_died(a, why, 0, counts);
}

void PoolImpl::fail_actors(const std::exception_ptr& e) {
  for (auto& [id, a] : actors_) {
    for (auto& [chunk, c] : a.in_flight) c.job->deliver({0, 1, {}, e, {}});
    for (auto& c : a.queue) c.job->deliver({0, 1, {}, e, {}});
    a.in_flight.clear();
    a.queue.clear();
    a.state = ActorState::State::dead;
    a.death = error_text(e);
  }
  actor_of_.clear();
}

}  // namespace fibra::detail
