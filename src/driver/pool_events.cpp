// A pool's entries in the event log (PoolOptions::events): each note_* writes one event, named and
// with the fields docs/observability.md lists. Their callers test events_ first, so that a pool
// without a log formats nothing.
#include <fmt/format.h>

#include "driver/driver.hpp"
#include "driver/pool_impl.hpp"

namespace fibra::detail {

namespace {
const char* status_name(wire::Status s) {
  switch (s) {
    case wire::Status::ok: return "ok";
    case wire::Status::raised: return "raised";
    case wire::Status::crashed: return "crashed";
    case wire::Status::not_run: return "not_run";
    case wire::Status::unknown_fn: return "unknown_fn";
    case wire::Status::timed_out: return "timed_out";
    case wire::Status::partial: return "partial";
    case wire::Status::kept: return "kept";
    case wire::Status::init_failed: return "init_failed";
  }
  return "unknown";
}

// One event: its fields formatted into a buffer kept by the thread (no allocation once warm).
template <class... A>
void emit(EventLog& log, std::string_view ev, fmt::format_string<A...> f, A&&... a) {
  thread_local std::string fields;
  fields.clear();
  fmt::format_to(std::back_inserter(fields), f, std::forward<A>(a)...);
  log.add(ev, fields);
}

const char* kind_name(FailKind k) {
  switch (k) {
    case FailKind::raised: return "raised";
    case FailKind::crashed: return "crashed";
    case FailKind::timed_out: return "timed_out";
    case FailKind::lost: return "lost";
    case FailKind::config: return "config";
  }
  return "unknown";
}
}  // namespace

// A call's number: the id of the first of its chunks the log sees (a task's one chunk). A map's
// chunks come one after another, so the last map's is remembered; other maps are looked up in a
// map that holds them weakly, swept of the gone whenever it has doubled. Under mu_.
std::uint64_t PoolImpl::call_id(const std::shared_ptr<JobState>& job, std::uint64_t chunk) {
  if (job->is_task()) return chunk;
  if (job == last_call_.first.lock()) return last_call_.second;
  auto [it, added] = call_ids_.try_emplace(job.get());
  if (added || it->second.first.expired()) it->second = {job, chunk};  // new, or new where a gone one lived
  const std::uint64_t id = it->second.second;
  if (call_ids_.size() > 2 * call_ids_swept_at_ + 64) {
    std::erase_if(call_ids_, [](const auto& e) { return e.second.first.expired(); });
    call_ids_swept_at_ = call_ids_.size();
  }
  last_call_ = {job, id};
  return id;
}

void PoolImpl::note_pool() {
  emit(*events_, "pool", R"(,"pool":{},"workers":{},"host":{})", uid_, target_, EventLog::quoted(my_host_));
}

void PoolImpl::note_queued(std::uint64_t chunk, const std::shared_ptr<JobState>& job, std::uint64_t first,
                           std::uint32_t count, std::int64_t submitted_us, std::string_view extra) {
  thread_local std::string fn;  // the name, quoted: one allocation less an event
  fn.clear();
  EventLog::append_quoted(fn, job->name());
  if (job->is_task()) {  // (a task submitted later may wait on it)
    task_ids_[job.get()] = {job, chunk};
    if (task_ids_.size() > 2 * task_ids_swept_at_ + 1024) {  // the gone swept whenever it has doubled
      std::erase_if(task_ids_, [](const auto& e) { return e.second.first.expired(); });
      std::erase_if(waits_for_, [](const auto& e) { return e.second.first.expired(); });
      task_ids_swept_at_ = task_ids_.size();
    }
  }
  if (submitted_us)
    emit(*events_, "queued",
         R"(,"pool":{},"chunk":{},"call":{},"fn":{},"first":{},"count":{},"task":{},"submitted":{}{})", uid_, chunk,
         call_id(job, chunk), fn, first, count, job->is_task(), submitted_us, extra);
  else
    emit(*events_, "queued", R"(,"pool":{},"chunk":{},"call":{},"fn":{},"first":{},"count":{},"task":{}{})", uid_,
         chunk, call_id(job, chunk), fn, first, count, job->is_task(), extra);
}

// Called as the task is submitted, before it waits (fibra/detail/deps.hpp): its dependencies are
// kept until it is queued; each of them that is a task of this pool has its chunk id in task_ids_
// from its own `queued` event on.
void PoolImpl::note_dependencies(const std::shared_ptr<JobState>& job,
                                 const std::vector<std::shared_ptr<JobState>>& deps) {
  if (!events_) return;
  std::vector<std::weak_ptr<JobState>> weak(deps.begin(), deps.end());
  std::lock_guard lk(mu_);
  waits_for_[job.get()] = {job, std::move(weak)};
}

// The `after` field of a task that waited on others: the chunk ids of those that were tasks of
// this pool (a fibra::put value, or another pool's task, has none here).
std::string PoolImpl::dependencies_text(const std::shared_ptr<JobState>& job) {
  const auto it = waits_for_.find(job.get());
  if (it == waits_for_.end()) return {};
  std::string text;
  if (it->second.first.lock() == job) {
    for (const auto& d : it->second.second) {
      const auto dep = d.lock();
      const auto t = dep ? task_ids_.find(dep.get()) : task_ids_.end();
      if (t == task_ids_.end() || t->second.first.lock() != dep) continue;
      text += (text.empty() ? ",\"after\":[" : ",") + std::to_string(t->second.second);
    }
    if (!text.empty()) text += "]";
  }
  waits_for_.erase(it);
  return text;
}

void PoolImpl::note_sent(const Chunk& c, const Worker& w) {
  emit(*events_, "sent", R"(,"pool":{},"chunk":{},"attempt":{},"worker":{})", uid_, c.id, c.attempt, w.id);
}

void PoolImpl::note_ran(const Worker& w, const wire::ResultView& r, std::int64_t exec_pid) {
  const auto& h = r.header;
  emit(*events_, "ran", R"(,"pool":{},"chunk":{},"attempt":{},"worker":{},"exec":{},"start":{},"run":{},"status":"{}")",
       uid_, h.chunk, h.attempt, w.id, exec_pid, h.start_us, h.run_ns / 1000, status_name(h.status));
}

void PoolImpl::note_outcome(std::string_view ev, std::uint64_t chunk, std::uint32_t attempt) {
  emit(*events_, ev, R"(,"pool":{},"chunk":{},"attempt":{})", uid_, chunk, attempt);
}

void PoolImpl::note_failed(std::uint64_t chunk, std::uint32_t attempt, FailKind kind, bool retried,
                           const std::string& error) {
  emit(*events_, "failed", R"(,"pool":{},"chunk":{},"attempt":{},"kind":"{}","retried":{},"error":{})", uid_, chunk,
       attempt, kind_name(kind), retried, EventLog::quoted(error));
}

void PoolImpl::note_worker(const Worker& w) {
  emit(*events_, "worker",
       R"(,"pool":{},"worker":{},"slot":{},"host":{},"pid":{},"executors":{},"joined":{},"objects":{})", uid_, w.id,
       w.slot, EventLog::quoted(w.host), w.pid, w.executors, w.joined,
       EventLog::quoted(w.object_port == 0 ? std::string() : w.object_host + ":" + std::to_string(w.object_port)));
}

// An MPI_Comm_spawn of agents that started: when it began (planning included) and how long it took,
// the communication thread's time, in which no result is read.
void PoolImpl::note_spawn(const std::vector<Worker*>& added, std::int64_t began_us) {
  int executors = 0;
  for (const Worker* w : added) executors += w->executors;
  emit(*events_, "spawn", R"(,"pool":{},"agents":{},"executors":{},"start":{},"took":{})", uid_, added.size(),
       executors, began_us, event_time_us() - began_us);
}

// An actor's call (its constructor included) as its process reported it.
void PoolImpl::note_actor_call(const ActorState& a, const ActorCall& call, const Worker& w, const wire::ResultView& r,
                               std::int64_t exec_pid) {
  const auto& h = r.header;
  thread_local std::string fn;
  fn.clear();
  EventLog::append_quoted(fn, call.job->name());
  emit(*events_, "actor_call",
       R"(,"pool":{},"actor":{},"fn":{},"ctor":{},"worker":{},"exec":{},"start":{},"run":{},"status":"{}")", uid_, a.id,
       fn, call.ctor, w.id, exec_pid, h.start_us, h.run_ns / 1000, status_name(h.status));
}

void PoolImpl::note_left(const Worker& w) { emit(*events_, "left", R"(,"pool":{},"worker":{})", uid_, w.id); }

// The pool has stopped: its last event, written now, since a program may end by _Exit after it.
void PoolImpl::note_pool_end() {
  emit(*events_, "pool_end", R"(,"pool":{})", uid_);
  events_->flush();
}

void PoolImpl::note_lost(const Worker& w, const std::string& why) {
  emit(*events_, "lost", R"(,"pool":{},"worker":{},"why":{})", uid_, w.id, EventLog::quoted(why));
}

// How pool_event_sink (calls/events.cpp, fibra/detail/events.hpp) finds a pool's log in the
// driver (its Runtime registers it): the pools find_pool knows are PoolImpls.
EventSink driver_event_sink(std::uint64_t pool_uid) {
  const auto core = find_pool(pool_uid);
  if (!core) return {};
  std::shared_ptr<EventLog> log = std::static_pointer_cast<PoolImpl>(core)->event_log();
  if (!log) return {};
  return [log = std::move(log), pool = fmt::format(R"(,"pool":{})", pool_uid)](std::string_view ev,
                                                                               std::string_view fields) {
    std::string all = pool;
    all += fields;
    log->add(ev, all);
  };
}

}  // namespace fibra::detail
