// What a pool's workers send back, on the driver: results of the attempt in flight are delivered,
// late ones dropped; a failed attempt (raised, crashed, timed out, lost) is counted against the
// chunk's retries, and when they run out the call gets the error with every attempt's history.
#include <algorithm>
#include <string>

#include "common/log.hpp"
#include "fibra/error.hpp"
#include "driver/pool_impl.hpp"

namespace fibra::detail {

namespace {
// The pool's initializer threw in the executor given chunk `c` (wire::Status::init_failed): that
// worker runs no task, so the call fails at once, naming the initializer and what it threw.
std::exception_ptr initializer_error(const std::string& init, const Chunk& c, const ItemFailure& f, RemoteSite site,
                                     const std::string& where) {
  const std::string items = c.count == 1
                                ? "item " + std::to_string(c.first)
                                : "items " + std::to_string(c.first) + ".." + std::to_string(c.first + c.count - 1);
  std::string what = "fibra: the pool's initializer " + init + " raised " + f.type + ": " + f.message + " (" + where +
                     "), so " + c.job->name() + " did not run on " + items +
                     "; each task given that worker fails so: fix the initializer (PoolOptions::initializer)";
  if (auto registered = make_registered_exception(f.type, what, f.message, site)) return registered;
  return std::make_exception_ptr(RemoteError(std::move(what), f.type, f.message, std::move(site)));
}
}  // namespace

void PoolImpl::on_results(Worker& w, std::string_view message, std::string* owned,
                          const std::shared_ptr<HeldFrame>& keep) {
  const wire::ResultBatch b = wire::parse_results(message);
  // A message of one result gives it its bytes, or the slot they lie in (no copy of a large payload).
  const bool lone = b.results.size() == 1;
  std::string* whole = lone ? owned : nullptr;
  const std::shared_ptr<HeldFrame> held = lone ? keep : nullptr;
  std::unique_lock lk(mu_);
  for (const auto& r : b.results) {
    const auto& h = r.header;
    if (h.chunk & actor_chunk_bit) {
      on_actor_result(w, r, b.executor_pid, whole, held);
      continue;
    }
    w.batches.done(h.chunk);
    trace::mark(trace::driver_received, h.chunk);
    if (events_) events_->ran(w.id, r, b.executor_pid);
    switch (h.status) {
      case wire::Status::not_run: requeue_or_cancel(h.chunk, h.attempt); break;
      case wire::Status::ok: accept_result(h, r.payload, {}, whole, held); break;
      case wire::Status::kept: on_kept(w, h, r.payload, b.executor_pid); break;
      case wire::Status::partial: on_partial(w, h, r.payload, b.executor_pid); break;
      default: on_failed_attempt(w, r, b.executor_pid); break;
    }
  }
  if (sched_.idle()) state_cv_.notify_all();
  lk.unlock();
  if (!to_store_.empty()) store_late();
}

// A result for the attempt in flight is delivered; any other is a late duplicate and dropped.
void PoolImpl::accept_result(const wire::ResultHeader& h, std::string_view payload,
                             std::vector<ItemOutcomeError> errors, std::string* message,
                             const std::shared_ptr<HeldFrame>& keep, std::shared_ptr<const StoredObject> object) {
  auto c = sched_.accept(h.chunk, h.attempt);
  if (!c) {
    ++stats_.late_results_dropped;
    if (events_) events_->outcome("late", h.chunk, h.attempt);
    return;
  }
  ++stats_.chunks_done;
  if (events_) events_->outcome(c->cancelled ? "cancelled" : "done", h.chunk, h.attempt);
  if (c->cancelled) {  // it finished before its agent could stop it: cancelled all the same, as promised
    c->job->deliver({c->first, c->count, {}, cancelled_error(*c->job, "(with force, as it ran)"), {}});
    return;
  }
  c->job->note_run(c->count, h.run_ns);
  seconds_per_item_of_[c->job->fn().id] = double(h.run_ns) * 1e-9 / double(std::max<std::uint32_t>(c->count, 1));
  for (auto& e : c->item_errors) errors.push_back(std::move(e));
  std::sort(errors.begin(), errors.end(), [](auto& x, auto& y) { return x.offset < y.offset; });
  ChunkOutcome o{c->first, c->count, {}, {}, std::move(errors)};
  const bool store = !object && late_keep(*c, payload);
  if (object) {  // a kept result: get() decodes it where it lies, and tasks given the Future read it there
    o.keep_at(object, object->bytes);
    c->job->set_object(std::move(object));
  } else if (keep) {
    keep->job = c->job;
    o.keep_at(keep, payload);
  } else if (message) {
    o.take_message(std::move(*message), payload);
  } else {
    o.payload.assign(payload);
  }
  trace::mark(trace::delivered, h.chunk);
  if (store) {  // tasks wait for it: stored once in shared memory, outside the lock (store_late)
    to_store_.push_back({c->job, std::move(o)});
    return;
  }
  c->job->deliver(std::move(o));
}

// The results late_keep chose, stored once in the driver's shared memory and delivered viewing
// it. After on_results lets go of mu_: a copy of 100 MB takes some 30 ms, which no caller of the
// pool should wait for. The communication thread's.
void PoolImpl::store_late() {
  for (auto& [job, o] : std::exchange(to_store_, {})) {
    try {
      auto object = store_bytes(o.bytes(), "fibra: a result that tasks take");
      std::string().swap(o.payload);
      o.keep_at(object, object->bytes);  // (a lane's slot the result lay in is let go here)
      job->set_object(std::move(object));
      std::lock_guard lk(mu_);
      ++stats_.results_stored_on_arrival;
    } catch (...) {  // no shared memory (or memory) to be had: delivered by value, as before, never lost
    }
    job->deliver(std::move(o));
  }
}

// A task's result kept in shared memory on this host (wire::Kept): the driver opens the memfd its
// agent holds, and the Future views it (docs/architecture.md, "The object store"). A late one is
// not opened; one the agent does not have (or the driver cannot open) costs no attempt: the chunk
// runs again, sending its result as any other. Either way the agent is told to let it go.
void PoolImpl::on_kept(Worker& w, const wire::ResultHeader& h, std::string_view payload, std::int64_t exec_pid) {
  wire::Kept k;
  try {
    k = wire::decode_whole<wire::Kept>(payload);
  } catch (const wire::Malformed&) {
  }
  if (k.id != 0) w.objects.hold_handed(k.id);  // until told it is freed (free_objects)
  // Kept on another host: the copy its agent sent first.
  std::shared_ptr<const StoredObject> copy;
  if (auto it = kept_copies_.find({exec_pid, k.id}); it != kept_copies_.end()) {
    copy = std::move(it->second.first);
    kept_copies_.erase(it);
  }
  Chunk* c = sched_.find(h.chunk, h.attempt);
  if (!c || k.id == 0 || k.id != c->keep_id) {  // late (or not what it was asked to keep): dropped
    if (k.id != 0) freed_.note(k.id);
    if (!c) {
      ++stats_.late_results_dropped;
      if (events_) events_->outcome("late", h.chunk, h.attempt);
      return;
    }
    RemoteSite site{c->job->name(), c->first, w.slot, w.host, static_cast<long>(exec_pid)};
    const std::string why = "it named a kept result that is not its own";
    return attempt_failed(
        h.chunk, h.attempt, FailKind::crashed,
        std::make_exception_ptr(ExecutorCrashed(
            "fibra: " + c->job->name() + ": " + why + " (" + where(w, exec_pid) + ")", "malformed result", why, site)),
        std::nullopt);
  }
  std::string why;
  auto object = copy ? std::move(copy) : take_kept_result(w.pid, exec_pid, k.id, k.size, why);
  if (!object || object->bytes.size() != k.size) {
    freed_.note(k.id);
    c->no_keep = true;
    ++stats_.kept_results_lost;
    requeue_or_cancel(h.chunk, h.attempt);
    return;
  }
  ++stats_.results_kept;
  accept_result(h, {}, {}, nullptr, nullptr, std::move(object));
}

// An agent on another host keeps a task's result (its peers copy it from there) and sends the
// driver a copy first, which the result's Kept (next from it: MPI keeps them in order) takes. Its
// bytes are stored here as they lie in the message.
void PoolImpl::on_kept_copy(Worker& w, std::string_view message) {
  wire::ObjectHead h;
  const std::string_view bytes = wire::object_bytes(message, h);
  try {
    kept_copies_[{h.origin, h.id}] = {store_kept_copy(h.origin, h.id, bytes), w.id};
  } catch (const Error& e) {  // no shared memory here: the task runs again, sending its result
    log::warning("fibra: worker {}'s kept result {} could not be stored here: {}", w.slot, h.id, e.what());
  }
}

// A large result of a task that tasks were given after it was sent to its worker (so it was not
// kept there, TaskHeader::keep_from): stored in the driver's shared memory, one copy, rather than
// decoded and encoded again for each task that takes it (store_late). Under mu_.
bool PoolImpl::late_keep(const Chunk& c, std::string_view payload) const {
  return s_.keep_results_from > 0 && payload.size() >= s_.keep_results_from && c.job->is_task() && c.count == 1 &&
         c.job->has_dependents() && c.item_errors.empty();
}

// A keep_going chunk came back with some items failed or skipped.
void PoolImpl::on_partial(const Worker& w, const wire::ResultHeader& h, std::string_view payload,
                          std::int64_t exec_pid) {
  auto p = wire::decode_partial(payload);
  const Chunk* c = sched_.find(h.chunk, h.attempt);
  if (!c) {
    ++stats_.late_results_dropped;
    if (events_) events_->outcome("late", h.chunk, h.attempt);
    return;
  }
  std::vector<ItemOutcomeError> errors;
  std::string first_error;
  for (const auto& f : p.failures) {
    if (f.type == "skipped") continue;  // its error is already in the chunk's item_errors
    auto e = raised_error(w, *c, f, exec_pid);
    if (first_error.empty()) first_error = error_text(e);
    errors.push_back({f.offset, e});
  }
  if (!errors.empty() && c->job->policy().retry_exceptions && c->failures.size() < c->job->policy().retries) {
    std::unique_ptr<Chunk> out;
    const std::string what = std::to_string(errors.size()) + " items raised, first: " + first_error;
    const Failed f = sched_.fail(h.chunk, h.attempt, what, errors.front().error, true, out);
    if (f != Failed::stale && events_)
      events_->failed(h.chunk, h.attempt, name_of(FailKind::raised), f == Failed::retried, what);
    ++stats_.attempts_failed;
    stats_.last_failure_seen = std::chrono::steady_clock::now();
    return;
  }
  accept_result(h, p.results, std::move(errors));
}

// A chunk's attempt failed: it raised, crashed, ran out of time or met an unknown function.
void PoolImpl::on_failed_attempt(const Worker& w, const wire::ResultView& r, std::int64_t exec_pid) {
  const Chunk* c = sched_.find(r.header.chunk, r.header.attempt);
  if (!c) {  // an attempt already given up on
    ++stats_.late_results_dropped;
    if (events_) events_->outcome("late", r.header.chunk, r.header.attempt);
    return;
  }
  const auto& fn = c->job->name();
  if (r.header.status == wire::Status::unknown_fn) {
    auto e = std::make_exception_ptr(
        ConfigError("fibra: " + where(w, exec_pid) + " cannot run '" + fn + "': " + std::string(r.payload)));
    return attempt_failed(r.header.chunk, r.header.attempt, FailKind::config, e, std::nullopt);
  }
  ItemFailure f = wire::decode<ItemFailure>(r.payload);
  if (r.header.status == wire::Status::init_failed) {  // not retried: it would fail so again
    const std::string init = s_.initializer.name();
    auto e = initializer_error(init, *c, f, {init, c->first, w.slot, w.host, static_cast<long>(exec_pid)},
                               where(w, exec_pid));
    return attempt_failed(r.header.chunk, r.header.attempt, FailKind::config, e, std::nullopt);
  }
  if (r.header.status == wire::Status::raised)
    return attempt_failed(r.header.chunk, r.header.attempt, FailKind::raised, raised_error(w, *c, f, exec_pid),
                          f.offset);
  // The agent says which item the executor was on, or wire::unknown_item if it died outside one.
  const bool known = f.offset < c->count;
  RemoteSite site{fn, c->first + (known ? f.offset : 0), w.slot, w.host, static_cast<long>(exec_pid)};
  const std::string item = known ? "item " + std::to_string(site.item)
                                 : "items " + std::to_string(c->first) + ".." + std::to_string(c->first + c->count - 1);
  std::exception_ptr e;
  if (r.header.status == wire::Status::timed_out) {
    e = std::make_exception_ptr(TaskTimeout(
        "fibra: " + fn + " on " + item + " " + f.message + " (" + where(w, exec_pid) + ")", f.type, f.message, site));
  } else {
    e = std::make_exception_ptr(ExecutorCrashed(
        "fibra: the executor running " + fn + " on " + item + " " + f.message + " (" + where(w, exec_pid) + ")", f.type,
        f.message, site));
  }
  attempt_failed(r.header.chunk, r.header.attempt,
                 r.header.status == wire::Status::timed_out ? FailKind::timed_out : FailKind::crashed, e,
                 known ? std::optional<std::uint32_t>(f.offset) : std::nullopt);
}

std::exception_ptr PoolImpl::raised_error(const Worker& w, const Chunk& c, const ItemFailure& f,
                                          std::int64_t exec_pid) {
  const std::string& fn = c.job->name();
  RemoteSite site{fn, c.first + f.offset, w.slot, w.host, static_cast<long>(exec_pid)};
  std::string what = "fibra: " + fn + " raised " + f.type + " on item " + std::to_string(site.item) + ": " + f.message +
                     " (" + where(w, exec_pid) + ")";
  if (auto registered = make_registered_exception(f.type, what, f.message, site)) return registered;  // FIBRA_EXCEPTION
  return std::make_exception_ptr(RemoteError(std::move(what), f.type, f.message, site));
}

// Counts a failed attempt against the chunk's retries. When they are used up the call gets the
// error with the history of every attempt; a keep_going call instead gets that error for the
// failing item (all items if it is unknown) and the chunk runs again without it.
void PoolImpl::attempt_failed(std::uint64_t id, std::uint32_t attempt, FailKind kind, std::exception_ptr e,
                              std::optional<std::uint32_t> item) {
  const Chunk* c0 = sched_.find(id, attempt);
  if (!c0) return;
  if (c0->cancelled) {  // its executor was killed for fibra::cancel (or died anyway): not retried
    std::unique_ptr<Chunk> c;
    if (sched_.fail(id, attempt, "cancelled", nullptr, false, c) != Failed::exhausted || !c) return;
    if (events_) events_->outcome("cancelled", id, attempt);
    ++stats_.chunks_done;
    c->job->deliver({c->first, c->count, {}, cancelled_error(*c->job, "(with force, as it ran)"), {}});
    return;
  }
  const RetryPolicy& policy = c0->job->policy();
  const bool retryable = kind == FailKind::crashed || kind == FailKind::timed_out || kind == FailKind::lost ||
                         (kind == FailKind::raised && policy.retry_exceptions);
  std::unique_ptr<Chunk> c;
  const Failed f = sched_.fail(id, attempt, error_text(e), e, retryable, c);
  if (f == Failed::stale) return;
  if (events_) events_->failed(id, attempt, name_of(kind), f == Failed::retried, error_text(e));
  ++stats_.attempts_failed;
  stats_.last_failure_seen = std::chrono::steady_clock::now();
  if (f != Failed::exhausted) return;
  ++stats_.chunks_done;
  auto final_error = with_history(*c);
  if (!policy.keep_going || kind == FailKind::config) {
    c->job->deliver({c->first, c->count, {}, final_error, {}});
    return;
  }
  if (kind == FailKind::raised && item) {  // keep_going chunks only stop at undecodable input
    c->job->deliver({c->first, c->count, {}, final_error, {}});
    return;
  }
  // The failing item gets the error and the chunk runs again without it. When the item is not
  // known, or already skipped, every item not yet skipped gets it; when every item is skipped
  // and the chunk still fails (its executor dies before any task), the chunk itself fails.
  if (c->skip.size() >= c->count) {
    c->job->deliver({c->first, c->count, {}, final_error, {}});
    return;
  }
  const bool one_item = item && *item < c->count && !std::binary_search(c->skip.begin(), c->skip.end(), *item);
  for (std::uint32_t k = 0; k < c->count; ++k) {
    if ((one_item && k != *item) || std::binary_search(c->skip.begin(), c->skip.end(), k)) continue;
    c->skip.insert(std::upper_bound(c->skip.begin(), c->skip.end(), k), k);
    c->item_errors.push_back({k, final_error});
  }
  sched_.readd(std::move(c));
}

// The error a call sees when a chunk used up its retries: the last attempt's error, its text
// extended with every attempt's.
std::exception_ptr PoolImpl::with_history(const Chunk& c) const {
  if (c.failures.size() <= 1) return c.last_error;
  const std::string items = c.count == 1
                                ? "item " + std::to_string(c.first)
                                : "items " + std::to_string(c.first) + ".." + std::to_string(c.first + c.count - 1);
  std::string msg = "fibra: " + c.job->name() + " failed " + std::to_string(c.failures.size()) + " times on " + items +
                    "; no retries left (retries = " + std::to_string(c.job->policy().retries) + ")";
  for (std::size_t i = 0; i < c.failures.size(); ++i)
    msg += "\n  attempt " + std::to_string(i + 1) + ": " + c.failures[i];
  msg +=
      "\nAn item that fails every time is a bug or a poison input: fix the function or leave the item out"
      " (MapOptions::errors collects such failures instead of throwing).";
  try {
    std::rethrow_exception(c.last_error);
  } catch (const RemoteOrigin& e) {  // a registered type: still that type, with the history as its context
    auto again = make_registered_exception(e.type_name(), msg, e.remote_message(), e.site());
    return again ? again : c.last_error;
  } catch (const TaskTimeout& e) {
    return std::make_exception_ptr(TaskTimeout(msg, e.type_name(), e.remote_message(), e.site()));
  } catch (const ExecutorCrashed& e) {
    return std::make_exception_ptr(ExecutorCrashed(msg, e.type_name(), e.remote_message(), e.site()));
  } catch (const RemoteError& e) {
    return std::make_exception_ptr(RemoteError(msg, e.type_name(), e.remote_message(), e.site()));
  } catch (const WorkerLost&) {
    return std::make_exception_ptr(WorkerLost(msg));
  } catch (...) {
    return c.last_error;
  }
}

std::string PoolImpl::error_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    std::string s = x.what();
    return s.rfind("fibra: ", 0) == 0 ? s.substr(7) : s;
  } catch (...) {
    return "unknown error";
  }
}

std::string PoolImpl::where(const Worker& w, long pid) const {
  return name(w) + " on " + w.host + ", pid " + std::to_string(pid);
}

// "worker 3 of 4", or for an agent that runs several: "a worker of agent 2 (4 of the pool's 16)".
std::string PoolImpl::name(const Worker& w) const {
  if (w.joined)  // outside the pool's own count
    return (w.executors == 1 ? "worker " + std::to_string(w.slot) : "a worker of agent " + std::to_string(w.slot)) +
           " (joined from " + w.joined_from + ")";
  if (w.executors == 1) return "worker " + std::to_string(w.slot) + " of " + std::to_string(target_);
  return "a worker of agent " + std::to_string(w.slot) + " (" + std::to_string(w.executors) + " of the pool's " +
         std::to_string(target_) + ")";
}

}  // namespace fibra::detail
