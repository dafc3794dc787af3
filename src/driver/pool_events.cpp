// A pool's entries in the event log (src/driver/pool_events.hpp).
#include "driver/pool_events.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

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
}  // namespace

// A map's chunks come one after another, so the last map's number is remembered; other maps are
// looked up in a map that holds them weakly, swept of the gone whenever it has doubled.
std::uint64_t PoolEvents::call_id(const std::shared_ptr<JobState>& job, std::uint64_t chunk) {
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

void PoolEvents::pool_started(int workers, const std::string& host) {
  emit(*log_, "pool", R"(,"pool":{},"workers":{},"host":{})", pool_, workers, EventLog::quoted(host));
}

void PoolEvents::queued(std::uint64_t chunk, const std::shared_ptr<JobState>& job, std::uint64_t first,
                        std::uint32_t count, std::int64_t submitted_us, std::string_view extra) {
  thread_local std::string fn;  // the name, quoted: one allocation less an event
  fn.clear();
  EventLog::append_quoted(fn, job->name());
  std::uint64_t call = 0;
  {
    std::lock_guard lk(mu_);
    call = call_id(job, chunk);
    if (job->is_task()) {  // (a task submitted later may wait on it)
      task_ids_[job.get()] = {job, chunk};
      if (task_ids_.size() > 2 * task_ids_swept_at_ + 1024) {
        std::erase_if(task_ids_, [](const auto& e) { return e.second.first.expired(); });
        task_ids_swept_at_ = task_ids_.size();
      }
    }
  }
  if (submitted_us)
    emit(*log_, "queued", R"(,"pool":{},"chunk":{},"call":{},"fn":{},"first":{},"count":{},"task":{},"submitted":{}{})",
         pool_, chunk, call, fn, first, count, job->is_task(), submitted_us, extra);
  else
    emit(*log_, "queued", R"(,"pool":{},"chunk":{},"call":{},"fn":{},"first":{},"count":{},"task":{}{})", pool_, chunk,
         call, fn, first, count, job->is_task(), extra);
}

// Called as the task is submitted, before it waits (fibra/detail/deps.hpp): its dependencies are
// kept until it is queued; each of them that is a task of this pool has its chunk id in task_ids_
// from its own `queued` event on.
// An actor's call is not a task (its queued event has no `after`): not kept. A task that never
// gets queued (cancelled while it waits, a dependency failed, the pool stopped) leaves its entry
// until its state is gone and the map, doubled, is swept.
void PoolEvents::dependencies(const std::shared_ptr<JobState>& job,
                              const std::vector<std::shared_ptr<JobState>>& deps) {
  if (!job->is_task()) return;
  std::vector<WeakJob> weak(deps.begin(), deps.end());
  std::lock_guard lk(mu_);
  waits_for_[job.get()] = {job, std::move(weak)};
  if (waits_for_.size() > 2 * waits_swept_at_ + 1024) {
    std::erase_if(waits_for_, [](const auto& e) { return e.second.first.expired(); });
    waits_swept_at_ = waits_for_.size();
  }
}

// The chunk ids of the tasks `job` waited for that were tasks of this pool (a fibra::put value, or
// another pool's task, has none here).
std::string PoolEvents::after(const std::shared_ptr<JobState>& job) {
  std::lock_guard lk(mu_);
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

void PoolEvents::sent(std::uint64_t chunk, std::uint32_t attempt, int worker) {
  emit(*log_, "sent", R"(,"pool":{},"chunk":{},"attempt":{},"worker":{})", pool_, chunk, attempt, worker);
}

void PoolEvents::ran(int worker, const wire::ResultView& r, std::int64_t exec_pid) {
  const auto& h = r.header;
  emit(*log_, "ran",
       R"(,"pool":{},"chunk":{},"attempt":{},"worker":{},"exec":{},"start":{},"run":{},"wait":{},"status":"{}")", pool_,
       h.chunk, h.attempt, worker, exec_pid, h.start_us, h.run_ns / 1000, h.wait_ns / 1000, status_name(h.status));
}

void PoolEvents::outcome(std::string_view ev, std::uint64_t chunk, std::uint32_t attempt) {
  emit(*log_, ev, R"(,"pool":{},"chunk":{},"attempt":{})", pool_, chunk, attempt);
}

void PoolEvents::failed(std::uint64_t chunk, std::uint32_t attempt, std::string_view kind, bool retried,
                        const std::string& error) {
  emit(*log_, "failed", R"(,"pool":{},"chunk":{},"attempt":{},"kind":"{}","retried":{},"error":{})", pool_, chunk,
       attempt, kind, retried, EventLog::quoted(error));
}

void PoolEvents::worker(int worker, int slot, const std::string& host, long pid, int executors, bool joined,
                        const std::string& objects) {
  emit(*log_, "worker",
       R"(,"pool":{},"worker":{},"slot":{},"host":{},"pid":{},"executors":{},"joined":{},"objects":{})", pool_, worker,
       slot, EventLog::quoted(host), pid, executors, joined, EventLog::quoted(objects));
}

void PoolEvents::lost(int worker, const std::string& why) {
  emit(*log_, "lost", R"(,"pool":{},"worker":{},"why":{})", pool_, worker, EventLog::quoted(why));
}

void PoolEvents::left(int worker) { emit(*log_, "left", R"(,"pool":{},"worker":{})", pool_, worker); }

void PoolEvents::spawn(std::size_t agents, int executors, std::int64_t began_us) {
  emit(*log_, "spawn", R"(,"pool":{},"agents":{},"executors":{},"start":{},"took":{})", pool_, agents, executors,
       began_us, event_time_us() - began_us);
}

void PoolEvents::actor_call(std::uint64_t actor, const std::string& fn, bool ctor, int worker,
                            const wire::ResultView& r, std::int64_t exec_pid) {
  const auto& h = r.header;
  emit(*log_, "actor_call",
       R"(,"pool":{},"actor":{},"fn":{},"ctor":{},"worker":{},"exec":{},"start":{},"run":{},"status":"{}")", pool_,
       actor, EventLog::quoted(fn), ctor, worker, exec_pid, h.start_us, h.run_ns / 1000, status_name(h.status));
}

void PoolEvents::pool_ended() {
  emit(*log_, "pool_end", R"(,"pool":{})", pool_);
  log_->flush();
}

// Into the log of each pool not yet destroyed that keeps one, once per log (pools logging to one
// folder share it): what is the run's, not a pool's. Takes no pool's lock (event_log() is set
// before the pool is handed out): a caller may hold one.
void note_run_event(std::string_view ev, const std::string& fields) {
  std::vector<std::shared_ptr<EventLog>> told;
  for (auto& p : live_pools()) {
    auto log = p->event_log();
    if (!log || std::find(told.begin(), told.end(), log) != told.end()) continue;
    told.push_back(log);
    log->add(ev, fmt::format(R"(,"pool":{})", p->uid()) + fields);
  }
}

void note_join_refused(const std::string& from, const std::string& origin, const std::string& host, long pid,
                       const std::string& why) {
  note_run_event("join_refused", fmt::format(R"(,"from":{},"origin":{},"host":{},"pid":{},"why":{})", json_quoted(from),
                                             json_quoted(origin), json_quoted(host), pid, json_quoted(why)));
}

void note_channel_totals(const ChannelStore::Totals& t) {
  note_run_event(
      "queue", fmt::format(R"(,"id":{},"kind":"{}","put":{},"bytes":{},"taken":{},"came_back":{},"most":{},"left":{})",
                           t.id, t.kind, t.put, t.bytes, t.taken, t.came_back, t.most, t.left));
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
