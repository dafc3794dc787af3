// Work to workers: the calls submitted (the inbox), batches dispatched to the workers that have room,
// an idle worker's steal, a chunk queued again, and cancel.
#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fibra/error.hpp"
#include "common/trace.hpp"
#include "driver/pool_impl.hpp"

namespace fibra::detail {

// fibra::cancel (issue 28, item 11). Chunks still queued are removed and get TaskCancelled at
// once. One handed to a worker on this host but not started (a batch waiting in a lane behind
// the running one) is taken back by the communication thread, which owns the lanes, and
// cancelled likewise; the caller waits for that verdict. With `force`, chunks in flight are
// marked, so that whatever comes back for them (a result, or the death of the executor their
// agent kills, tag_cancel) is delivered as TaskCancelled and never retried. Without force, a
// chunk that runs (or was sent to an agent on another host) runs on: false.
bool PoolImpl::cancel(const std::shared_ptr<JobState>& job, bool force) {
  if (!job->is_task())
    if (const auto actor_call = cancel_actor_call(job, force)) return *actor_call;
  std::future<bool> verdict;
  {
    std::lock_guard lk(mu_);
    if (take_inbox()) kick();  // it may wait there (and the others taken with it, for the next dispatch)
    bool any = cancel_pending(job);
    const auto in_flight = sched_.in_flight_of(job.get());
    if (force) {
      for (Chunk* c : in_flight) {
        if (!c->cancelled) cancels_.kill(c->worker, c->id);
        c->cancelled = true;
        any = true;
      }
      // What is not started yet is taken back from its lane too, rather than run and then killed.
      if (!in_flight.empty()) cancels_.take_back(job);
    }
    if (sched_.idle()) state_cv_.notify_all();
    if (any || in_flight.empty()) {
      if (any) kick();
      return any;
    }
    verdict = cancels_.take_back_and_tell(job);
    kick();
  }
  // The communication thread answers within a turn, unless it is inside a long MPI call (a spawn):
  // then the request is withdrawn, so that nothing is cancelled after this said it was not.
  if (verdict.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    std::lock_guard lk(mu_);
    if (cancels_.withdraw(job)) return false;
  }
  return verdict.get();  // answered meanwhile
}

// The communication thread's half of a cancel without force: every batch not yet started in the
// lanes of the workers that hold `job`'s chunks is taken back (Lane::withdraw) and requeued, at no
// cost of an attempt, and then `job`'s chunks among them are cancelled. Under mu_.
bool PoolImpl::take_back_unstarted(const std::shared_ptr<JobState>& job) {
  for (Chunk* c : sched_.in_flight_of(job.get())) {
    Worker* w = worker_by_id(c->worker);
    if (!w || !w->alive()) continue;
    for (auto& r : w->lanes) {
      std::string batch;
      while (w->lane_damage.empty() && r->lane().withdraw(batch)) {
        const auto tasks = parse_withdrawn(*w, batch);
        for (auto t = tasks.rbegin(); t != tasks.rend(); ++t) {
          w->batches.done(t->header.chunk);
          requeue_or_cancel(t->header.chunk, t->header.attempt);
        }
      }
    }
  }
  return cancel_pending(job);
}

// The chunks of `job` still queued get their TaskCancelled; whether there were any. Under mu_.
bool PoolImpl::cancel_pending(const std::shared_ptr<JobState>& job) {
  bool any = false;
  for (auto& c : sched_.take_pending_of(job.get())) {
    if (events_) note_unsent_or_in_flight("cancelled", *c);
    c->job->deliver({c->first, c->count, {}, cancelled_error(*c->job, "before it started"), {}});
    any = true;
  }
  return any;
}

// What was submitted since the last look goes into the scheduler, in the order it came; true if
// anything did. Under mu_. (FIBRA_TRACE's `submitted` is stamped here, as the chunk gets its id:
// the moments in the inbox count as the caller's.)
bool PoolImpl::take_inbox() {
  // Not queue_unless_cancelled: submit() named the pool, and a cancel since then finds the call in
  // the scheduler (cancel() takes the inbox first) and says it cancelled it. If add() throws (no
  // memory), this call fails with that, and the rest stay for the next look (or fail_inbox).
  return inbox_.take([&](SubmitInbox::Entry& t) {
    try {
      const std::uint64_t id = sched_.add(t.job, t.first, t.count, std::move(t.payload));
      trace::mark(trace::submitted, id);
      if (events_) events_->queued(id, t.job, t.first, t.count, t.at_us);
    } catch (...) {
      t.job->deliver({t.first, t.count, {}, std::current_exception(), {}});
      throw;
    }
    graph_.tasks += t.job->is_task();
  });
}

// Gives each ready worker with room a batch of pending chunks.
bool PoolImpl::dispatch(std::size_t batches_each) {
  std::vector<CancelRequests::Kill> cancels;
  {
    std::lock_guard lk(mu_);
    cancels = cancels_.take_kills();
    cancels_.answer_take_backs([&](const std::shared_ptr<JobState>& job) { return take_back_unstarted(job); });
  }
  for (auto& [worker, chunk] : cancels)
    if (Worker* w = worker_by_id(worker); w && w->alive())
      send(*w, wire::tag_cancel, wire::encode(wire::Cancel{chunk}));
  free_objects();
  // Batches are encoded under mu_: terminate() on a user thread may fail (and free) every chunk.
  struct Out {
    Worker* w;
    mpi::Pieces batch;
    std::uint32_t chunks;
    std::vector<std::shared_ptr<const StoredObject>> objects;  // stored objects its tasks take
  };
  std::vector<Out> out;
  std::vector<std::uint64_t> traced;  // chunk ids, for FIBRA_TRACE
  {
    std::lock_guard lk(mu_);
    take_inbox();
    if (sched_.pending() == 0 && !steal_for_idle()) return false;
    const int ready = ready_count() + counts_.joined_ready();
    // Least loaded first: every idle executor gets a batch before a busy one gets a second, and a
    // second batch waits on a busy executor only while chunks are short (prefetch_pays). An agent
    // gives each batch to its least busy executor.
    auto room = [&](const Worker& w, std::size_t depth) {
      return w.state == Worker::State::ready && w.batches.size() < (depth + 1) * std::size_t(w.executors + w.blocked);
    };
    for (std::size_t depth = 0; depth < batches_each && sched_.pending() > 0; ++depth) {
      if (depth > 0 && !prefetch_pays()) break;
      for (auto& w : workers_) {
        if (sched_.pending() == 0) break;
        while (room(*w, depth) && sched_.pending() > 0) {  // one batch per executor with room
          // Whether a retry that failed here may be left to another worker: a walk over the
          // workers only when take_batch meets one.
          const auto others_have_room = [&] {
            return std::any_of(workers_.begin(), workers_.end(),
                               [&](auto& o) { return o.get() != w.get() && room(*o, batches_each - 1); });
          };
          auto batch = sched_.take_batch(w->id, ready, others_have_room, &w->has);
          if (batch.empty()) break;  // it passed over retries meant for other workers
          w->batches.add(batch);
          mark_hot(*w);  // (a batch through its lane is no send)
          for (const Chunk* c : batch) {
            if (events_) events_->sent(c->id, c->attempt, w->id);
            if (c->failures.empty()) continue;
            ++stats_.chunks_resubmitted;
            stats_.last_retry_sent = std::chrono::steady_clock::now();
          }
          std::vector<std::shared_ptr<const StoredObject>> objects;
          // A worker on this host keeps large results of tasks there (wire::Kept).
          const std::uint64_t keep_from = w->keeps_results ? s_.keep_results_from : 0;
          mpi::Pieces pieces = encode_batch(batch, objects, keep_from);
          out.push_back({w.get(), std::move(pieces), static_cast<std::uint32_t>(batch.size()), std::move(objects)});
          if (trace::detail::on)
            for (const Chunk* c : batch) traced.push_back(c->id);
        }
      }
    }
    // Chunks of cancelled calls are dropped by take_batch: join() may be waiting for that.
    for (const auto& [id, attempt] : sched_.take_dropped())
      if (events_) events_->outcome("cancelled", id, attempt);
    if (sched_.idle()) state_cv_.notify_all();
  }
  std::uint64_t shared = 0;
  for (auto& [w, batch, chunks, objects] : out) {
    if (post_to_lane(*w, batch, chunks)) {
      ++shared;
    } else {
      send_objects(*w, objects);  // before the batch: the agent has them when its executor looks
      send(*w, wire::tag_tasks, std::move(batch));
    }
  }
  if (!out.empty()) {
    std::lock_guard lk(mu_);
    stats_.batches_sent += out.size();
    stats_.batches_shared_memory += shared;
  }
  for (auto id : traced) trace::mark(trace::dispatched, id);
  return !out.empty();
}

// Work stealing (issue 28, item 9). A second batch waits behind a running one on each executor
// when prefetch_pays judges it short, by what its call or its function took last: `apply_async` of
// tasks of 1,500, 40 and 1,200 ms on 2 workers queued the 1,200 ms one behind the 1,500 ms one
// while the other worker idled (2.71 s instead of 1.50). So when nothing is pending and some
// worker has an executor with nothing to do, a batch waiting in the lane of an executor that is in
// a task is taken back before it starts (Lane::withdraw) and requeued, at no cost of an attempt;
// the dispatch that follows hands it to the idle one. Lanes only: a batch sent through MPI to an
// agent on another host stays there (docs/architecture.md, "Work stealing"). Under mu_.
bool PoolImpl::steal_for_idle() {
  const double now = mpi::now_s();
  if (now < next_steal_look_) return false;
  next_steal_look_ = now + 0.001;
  const bool someone_idle = std::any_of(workers_.begin(), workers_.end(), [](auto& w) {
    return w->state == Worker::State::ready && w->batches.size() < std::size_t(w->executors + w->blocked);
  });
  if (!someone_idle) return false;
  for (Worker* w : hot_) {  // a batch waits in a lane only at a worker with batches out: a hot one
    if (!w->alive()) continue;
    for (auto& r : w->lanes) {
      Lane& l = r->lane();
      // Once per task a lane runs: a batch the idle worker cannot take (a retry meant for another
      // worker, needs it lacks) comes back to this lane, and is not taken back again and again.
      const std::uint64_t running = l.running_chunk();
      if (running == 0 || stolen_while_[&l] == running) continue;
      std::string batch;
      if (!w->lane_damage.empty() || !l.withdraw(batch)) continue;
      stolen_while_[&l] = running;
      const auto tasks = parse_withdrawn(*w, batch);
      for (auto t = tasks.rbegin(); t != tasks.rend(); ++t) {  // each to the queue's front: in their order
        w->batches.done(t->header.chunk);
        requeue_or_cancel(t->header.chunk, t->header.attempt);
      }
      ++stats_.batches_stolen;
      return true;  // one at a time: the dispatch that follows places it
    }
  }
  return false;
}

// A batch taken back from `w`'s lane, as its tasks; none if it does not decode (its executor
// scribbled over it): the worker is then marked, and the next pass over the lanes declares it lost,
// which retries its batches (this one's chunks among them). Under mu_.
std::vector<wire::TaskView> PoolImpl::parse_withdrawn(Worker& w, const std::string& batch) {
  try {
    return wire::parse_tasks(batch);
  } catch (const wire::Malformed& e) {
    w.lane_damage = e.what();
    return {};
  }
}

// A chunk taken back before it started goes back to the queue, or, cancelled with force
// meanwhile, gets its TaskCancelled instead of running. Under mu_.
void PoolImpl::requeue_or_cancel(std::uint64_t chunk, std::uint32_t attempt) {
  const Chunk* c = sched_.find(chunk, attempt);
  if (!c || !c->cancelled) {
    if (sched_.requeue(chunk, attempt) && events_) events_->outcome("requeued", chunk, attempt);
    return;
  }
  std::unique_ptr<Chunk> out;
  if (sched_.fail(chunk, attempt, "cancelled", nullptr, false, out) == Failed::exhausted && out) {
    if (events_) events_->outcome("cancelled", chunk, attempt);
    out->job->deliver({out->first, out->count, {}, cancelled_error(*out->job, "before it started"), {}});
  }
}

// Whether the next chunk is short enough that queueing it behind a running batch pays: it hides
// the round trip between batches, but a long chunk queued on a busy worker may wait there while
// another worker frees, and then a newer task runs before it (issue 46, case 4). A call not timed
// yet is judged by what its function took last (a task submitted alone is a call of its own); a
// function never timed is not queued behind a running task: the first results time it, and the
// round trip that costs is a fraction of a millisecond.
bool PoolImpl::prefetch_pays() const {
  const JobState* job = nullptr;
  std::uint32_t count = 0;
  if (!sched_.front(job, count)) return false;
  double per_item = job->seconds_per_item();
  if (per_item <= 0) {
    const auto it = seconds_per_item_of_.find(job->fn().id);
    if (it == seconds_per_item_of_.end()) return false;
    per_item = it->second;
  }
  return double(count) * per_item < prefetch_limit_s;
}

// The batch's headers, with each chunk's payload sent from the chunk (mpi::Pieces), not copied.
mpi::Pieces PoolImpl::encode_batch(const std::vector<Chunk*>& chunks,
                                   std::vector<std::shared_ptr<const StoredObject>>& objects, std::uint64_t keep_from) {
  mpi::Pieces batch;
  batch.heads = wire::begin_batch();
  batch.heads.reserve(sizeof(std::uint32_t) + chunks.size() * 80);
  std::size_t bodies = 0;
  for (Chunk* c : chunks) {
    const RetryPolicy& policy = c->job->policy();
    wire::TaskHeader h;
    h.chunk = c->id;
    h.attempt = c->attempt;
    h.fn = c->job->fn().id;
    h.mode = c->job->mode();
    h.first = c->first;
    h.count = c->count;
    h.timeout_s = policy.task_timeout_s;
    h.keep_going = policy.keep_going;
    h.skip = c->skip;
    // A task that tasks take: its large result stays where it is made (Status::kept).
    c->keep_id = 0;
    if (keep_from > 0 && c->job->is_task() && c->count == 1 && c->job->has_dependents() && !c->no_keep) {
      c->keep_id = next_object_id();
      h.keep_from = keep_from;
      h.keep_id = c->keep_id;
    }
    add_objects(*c->job, h, objects);
    wire::append_task_head(batch.heads, h, c->payload->size(), bodies);
    batch.ends.push_back(batch.heads.size());
    bodies += c->payload->size();
    batch.bodies.push_back(c->payload);
  }
  wire::set_count(batch.heads, static_cast<std::uint32_t>(chunks.size()));
  return batch;
}

}  // namespace fibra::detail
