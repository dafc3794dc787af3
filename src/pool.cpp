// The driver's side of a pool: spawning agents, the communication thread that feeds them batches
// and collects results, and stopping them. All MPI traffic of a pool runs on its one thread.
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "fibra/pool.hpp"
#include "fibra/runtime.hpp"
#include "mpi.hpp"
#include "roles.hpp"
#include "scheduler.hpp"
#include "wire.hpp"

namespace fibra::detail {
namespace {

constexpr std::size_t batches_per_worker = 2;  // one running, one waiting: no gap between batches

struct Worker {
  // starting: spawned, no hello yet; ready: takes work; retiring: finishes its batches, then is
  // told to leave; leaving: told, waiting for its bye; gone: said bye (disconnected at the end);
  // lost: declared dead; never sent to or read from again.
  enum class State { starting, ready, retiring, leaving, gone, lost };
  int id = 0;    // unique for the pool's life: who holds which chunk
  int slot = 0;  // what messages call it ("worker 3 of 4"): a replacement takes the number of the lost one
  MPI_Comm comm = MPI_COMM_NULL;  // an intercommunicator of its own
  std::string host;
  long pid = 0;
  State state = State::starting;
  std::deque<std::uint32_t> batches;  // per batch sent: chunks without a result yet
  double spawned_at = 0, last_heard = 0, last_sent = 0, lost_at = 0;
  bool holds_slot = true;  // counted in g_agents_in_slots until its process is surely gone
  bool alive() const { return state != State::gone && state != State::lost; }
};

// How an attempt failed, for retry decisions and messages.
enum class FailKind { raised, crashed, timed_out, lost, config };

class PoolImpl;
std::mutex g_pools_mu;
std::vector<std::weak_ptr<PoolImpl>> g_pools;
// Agents of every pool that hold an MPI slot (spawned, not yet gone or lost): with the driver,
// what a new spawn must fit beside when oversubscription is off.
std::atomic<int> g_agents_in_slots{0};

// MPI's universe size (the slots of the allocation), or 0 if MPI does not say.
int universe_size() {
  int* size = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &size, &flag) != MPI_SUCCESS || !flag || !size) return 0;
  return *size;
}

class PoolImpl final : public PoolCore, public std::enable_shared_from_this<PoolImpl> {
 public:
  explicit PoolImpl(const PoolSettings& s) : s_(s), target_(s.workers) {}
  ~PoolImpl() override { terminate(); }

  void start() {
    std::exception_ptr spawn_failed;
    try {
      std::lock_guard ml(mpi::lock());
      spawn(target_);
    } catch (...) {
      spawn_failed = std::current_exception();
    }
    thread_ = std::thread([this] { loop(); });
    if (spawn_failed) {  // the workers that did start are told to leave before the error goes up
      terminate();
      std::rethrow_exception(spawn_failed);
    }
    std::unique_lock lk(mu_);
    const bool ok = state_cv_.wait_for(lk, std::chrono::duration<double>(s_.start_timeout_s),
                                       [&] { return broken_ || ready_count() >= target_; });
    if (broken_) {
      auto e = broken_;
      lk.unlock();
      terminate();
      std::rethrow_exception(e);
    }
    if (!ok) {
      const int ready = ready_count();
      lk.unlock();
      terminate();
      throw WorkerLost("fibra: only " + std::to_string(ready) + " of " + std::to_string(target_) +
                       " workers started within " + std::to_string(int(s_.start_timeout_s)) +
                       " s; check that the machine has room for them (PoolOptions::start_timeout_s)");
    }
  }

  void submit(const std::shared_ptr<JobState>& job, std::uint64_t first, std::uint32_t count,
              std::string payload) override {
    std::lock_guard lk(mu_);
    if (broken_) std::rethrow_exception(broken_);
    if (closed_) throw PoolClosed("fibra: work was submitted to a pool that was closed or terminated");
    sched_.add(job, first, count, std::move(payload));
    kick();
  }

  int size() const override {
    std::lock_guard lk(mu_);
    return target_;
  }

  void resize(int n) override {
    if (n < 1) throw ConfigError("fibra: Pool::resize(" + std::to_string(n) + "): a pool needs at least 1 worker");
    std::unique_lock lk(mu_);
    if (closed_) throw PoolClosed("fibra: resize() on a pool that was closed");
    target_ = n;
    spawn_error_ = nullptr;
    next_spawn_ = 0;
    kick();
    const bool ok = state_cv_.wait_for(lk, std::chrono::duration<double>(s_.start_timeout_s),
                                       [&] { return broken_ || stopped_ || spawn_error_ || ready_count() == target_; });
    if (broken_) std::rethrow_exception(broken_);
    if (stopped_) throw PoolClosed("fibra: the pool was terminated while resize() waited for its workers");
    if (spawn_error_) {
      const int live = live_count();
      target_ = std::max(1, live);
      throw MpiError("fibra: Pool::resize(" + std::to_string(n) + ") could not start every new worker (" +
                     error_text(spawn_error_) + "); the pool carries on with " + std::to_string(live) + " worker(s)");
    }
    if (!ok) {
      throw WorkerLost("fibra: Pool::resize(" + std::to_string(n) + "): only " + std::to_string(ready_count()) +
                       " workers were ready after " + seconds(s_.start_timeout_s) +
                       " (PoolOptions::start_timeout_s); the others may still come");
    }
  }

  RetryPolicy default_policy() const override { return s_.policy; }

  PoolStats stats() const override {
    std::lock_guard lk(mu_);
    PoolStats s = stats_;
    s.workers_ready = ready_count();
    return s;
  }

  void close() override {
    std::lock_guard lk(mu_);
    closed_ = true;
  }

  bool closed() const override {
    std::lock_guard lk(mu_);
    return closed_;
  }

  void join() override {
    std::unique_lock lk(mu_);
    if (!closed_) throw ConfigError("fibra: Pool::join() before Pool::close(): close the pool first");
    state_cv_.wait(lk, [&] { return broken_ || sched_.idle() || stopped_; });
    lk.unlock();
    stop();
  }

  void terminate() override {
    {
      std::lock_guard lk(mu_);
      closed_ = true;
      fail_all(std::make_exception_ptr(PoolClosed("fibra: the pool was terminated before this task finished")));
    }
    stop();
  }

 private:
  // ---- driver_start: spawning ---------------------------------------------------------------
  void spawn(int n) {
    const std::string exe = self_exe();
    const std::string hb = "--fibra-heartbeat=" + std::to_string(s_.heartbeat_s);
    const std::string silence = "--fibra-silence=" + std::to_string(s_.driver_silence_s);
    char* argv[] = {const_cast<char*>(agent_flag), const_cast<char*>(hb.c_str()),
                    const_cast<char*>(silence.c_str()), nullptr};
    MPI_Info info = MPI_INFO_NULL;
    if (oversubscribe_allowed()) {
      MPI_Info_create(&info);
      MPI_Info_set(info, "map_by", ":OVERSUBSCRIBE");
    }
    struct InfoGuard {
      MPI_Info& i;
      ~InfoGuard() {
        if (i != MPI_INFO_NULL) MPI_Info_free(&i);
      }
    } guard{info};
    for (int i = 0; i < n; ++i) {
      check_slots();
      MPI_Comm inter = MPI_COMM_NULL;
      int err = MPI_SUCCESS;
      int rc = MPI_Comm_spawn(exe.c_str(), argv, 1, info, 0, MPI_COMM_SELF, &inter, &err);
      if (rc != MPI_SUCCESS || err != MPI_SUCCESS) {
        throw MpiError("fibra: MPI_Comm_spawn could not start worker " + std::to_string(live_count() + 1) +
                       " of " + std::to_string(target_) + ": " + mpi::error_text(rc != MPI_SUCCESS ? rc : err) +
                       ". If there are too few slots: ask the allocation for more, or set FIBRA_OVERSUBSCRIBE=1 "
                       "to run more processes than slots (the default outside batch jobs)");
      }
      MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
      g_agents_in_slots.fetch_add(1);
      {
        std::lock_guard lk(mu_);
        ++stats_.workers_started;
      }
      auto w = std::make_unique<Worker>();
      w->id = next_worker_id_++;
      w->slot = free_slot_number();
      w->comm = inter;
      w->spawned_at = w->last_heard = w->last_sent = mpi::now_s();
      std::lock_guard lk(mu_);
      workers_.push_back(std::move(w));
      spawn_failures_ = 0;
    }
  }

  // Refuses a spawn that cannot fit in the allocation's slots when oversubscription is off. Open
  // MPI would refuse it too, but after a failed MPI_Comm_spawn mpirun never exits on its own.
  void check_slots() const {
    if (oversubscribe_allowed()) return;
    const int slots = universe_size();
    const int used = 1 + g_agents_in_slots.load();
    if (slots <= 0 || used < slots) return;
    throw MpiError("fibra: MPI_Comm_spawn could not start worker " + std::to_string(live_count() + 1) + " of " +
                   std::to_string(target_) + ": all " + std::to_string(slots) +
                   " MPI slots are in use (the driver and " + std::to_string(used - 1) +
                   " worker(s)). If there are too few slots: ask the allocation for more, or set FIBRA_OVERSUBSCRIBE=1 "
                   "to run more processes than slots (the default outside batch jobs)");
  }

  // A worker no longer holds its MPI slot: it said bye, or it was lost and its process is gone.
  static void free_slot(Worker& w) {
    if (!w.holds_slot) return;
    w.holds_slot = false;
    g_agents_in_slots.fetch_sub(1);
  }

  // ---- driver_run: the communication thread -------------------------------------------------
  void loop() {
    mpi::Napper napper;
    mpi::precise_sleeps();
    for (;;) {
      bool busy = false;
      try {
        std::lock_guard ml(mpi::lock());
        busy |= receive();
        busy |= dispatch();
        busy |= adjust_size();
        sends_.progress();
        watch_workers();
      } catch (...) {
        std::lock_guard lk(mu_);
        broken_ = std::current_exception();
        closed_ = true;
        fail_all(broken_);
        state_cv_.notify_all();
      }
      std::unique_lock lk(mu_);
      if (stopping_) break;
      if (busy || kicked_) napper.busy();
      else if (auto nap = napper.next(); nap.count() > 0) wake_.wait_for(lk, nap, [&] { return kicked_; });
      kicked_ = false;
    }
    say_goodbye();
  }

  void kick() {
    kicked_ = true;
    wake_.notify_one();
  }

  // The smallest worker number no live worker uses.
  int free_slot_number() const {
    for (int n = 1;; ++n) {
      const bool used = std::any_of(workers_.begin(), workers_.end(), [&](auto& w) {
        return w->slot == n && w->state != Worker::State::gone && w->state != Worker::State::lost;
      });
      if (!used) return n;
    }
  }

  int live_count() const {
    return static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [](auto& w) {
      return w->state == Worker::State::ready || w->state == Worker::State::starting;
    }));
  }

  int ready_count() const {
    return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                          [](auto& w) { return w->state == Worker::State::ready; }));
  }

  bool receive() {
    bool got = false;
    mpi::Message m;
    for (auto& w : workers_) {
      if (!w->alive()) continue;
      for (int k = 0; k < 64 && w->alive() && mpi::try_recv(w->comm, m); ++k) {
        got |= m.tag != wire::tag_heartbeat;  // a heartbeat is no reason to stay awake
        w->last_heard = mpi::now_s();
        handle(*w, m);
      }
    }
    last_receive_pass_ = mpi::now_s();
    return got;
  }

  void handle(Worker& w, const mpi::Message& m) {
    switch (m.tag) {
      case wire::tag_hello: return on_hello(w, wire::decode_hello(m.data));
      case wire::tag_results: return on_results(w, wire::parse_results(m.data));
      case wire::tag_bye: {
        std::lock_guard lk(mu_);
        w.state = Worker::State::gone;
        free_slot(w);
        return;
      }
      default: return;  // heartbeat
    }
  }

  void on_hello(Worker& w, const wire::Hello& h) {
    std::lock_guard lk(mu_);
    w.host = h.host;
    w.pid = static_cast<long>(h.pid);
    if (h.fingerprint != registry_fingerprint()) {
      throw ConfigError("fibra: worker " + std::to_string(w.slot) + " on " + h.host + " (pid " + std::to_string(h.pid) +
                        ") has " + std::to_string(h.functions) + " remote functions registered, this driver has " +
                        std::to_string(registry_size()) +
                        " or others: driver and workers must run the same build of the program");
    }
    if (w.state == Worker::State::starting) w.state = Worker::State::ready;
    state_cv_.notify_all();
  }

  void on_results(Worker& w, const wire::ResultBatch& b) {
    std::lock_guard lk(mu_);
    for (const auto& r : b.results) {
      if (!w.batches.empty() && --w.batches.front() == 0) w.batches.pop_front();
      const auto& h = r.header;
      switch (h.status) {
        case wire::Status::not_run: sched_.requeue(h.chunk, h.attempt); break;
        case wire::Status::ok: accept_result(h, r.payload, {}); break;
        case wire::Status::partial: on_partial(w, h, r.payload, b.executor_pid); break;
        default: on_failed_attempt(w, r, b.executor_pid); break;
      }
    }
    if (sched_.idle()) state_cv_.notify_all();
  }

  // A result for the attempt in flight is delivered; any other is a late duplicate and dropped.
  void accept_result(const wire::ResultHeader& h, std::string_view payload, std::vector<ItemOutcomeError> errors) {
    auto c = sched_.accept(h.chunk, h.attempt);
    if (!c) {
      ++stats_.late_results_dropped;
      return;
    }
    ++stats_.chunks_done;
    for (auto& e : c->item_errors) errors.push_back(std::move(e));
    std::sort(errors.begin(), errors.end(), [](auto& x, auto& y) { return x.offset < y.offset; });
    c->job->deliver({c->first, c->count, std::string(payload), {}, std::move(errors)});
  }

  // A keep_going chunk came back with some items failed or skipped.
  void on_partial(const Worker& w, const wire::ResultHeader& h, std::string_view payload, std::int64_t exec_pid) {
    auto p = wire::decode_partial(payload);
    const Chunk* c = sched_.find(h.chunk, h.attempt);
    if (!c) {
      ++stats_.late_results_dropped;
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
      sched_.fail(h.chunk, h.attempt, std::to_string(errors.size()) + " items raised, first: " + first_error,
                  errors.front().error, true, out);
      ++stats_.attempts_failed;
      stats_.last_failure_seen = std::chrono::steady_clock::now();
      return;
    }
    accept_result(h, p.results, std::move(errors));
  }

  // A chunk's attempt failed: it raised, crashed, ran out of time or met an unknown function.
  void on_failed_attempt(const Worker& w, const wire::ResultView& r, std::int64_t exec_pid) {
    const Chunk* c = sched_.find(r.header.chunk, r.header.attempt);
    if (!c) {  // an attempt already given up on
      ++stats_.late_results_dropped;
      return;
    }
    const auto& fn = c->job->fn().name;
    if (r.header.status == wire::Status::unknown_fn) {
      auto e = std::make_exception_ptr(ConfigError("fibra: " + where(w, exec_pid) + " cannot run '" + fn +
                                                   "': " + std::string(r.payload)));
      return attempt_failed(r.header.chunk, r.header.attempt, FailKind::config, e, std::nullopt);
    }
    ItemFailure f = wire::decode_failure(r.payload);
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
      e = std::make_exception_ptr(TaskTimeout("fibra: " + fn + " on " + item + " " + f.message + " (" +
                                                  where(w, exec_pid) + ")",
                                              f.type, f.message, site));
    } else {
      e = std::make_exception_ptr(ExecutorCrashed(
          "fibra: the executor running " + fn + " on " + item + " " + f.message + " (" + where(w, exec_pid) + ")",
          f.type, f.message, site));
    }
    attempt_failed(r.header.chunk, r.header.attempt,
                   r.header.status == wire::Status::timed_out ? FailKind::timed_out : FailKind::crashed, e,
                   known ? std::optional<std::uint32_t>(f.offset) : std::nullopt);
  }

  std::exception_ptr raised_error(const Worker& w, const Chunk& c, const ItemFailure& f, std::int64_t exec_pid) {
    const std::string& fn = c.job->fn().name;
    RemoteSite site{fn, c.first + f.offset, w.slot, w.host, static_cast<long>(exec_pid)};
    return std::make_exception_ptr(RemoteError("fibra: " + fn + " raised " + f.type + " on item " +
                                                   std::to_string(site.item) + ": " + f.message + " (" +
                                                   where(w, exec_pid) + ")",
                                               f.type, f.message, site));
  }

  // Counts a failed attempt against the chunk's retries. When they are used up the call gets the
  // error with the history of every attempt; a keep_going call instead gets that error for the
  // failing item (all items if it is unknown) and the chunk runs again without it.
  void attempt_failed(std::uint64_t id, std::uint32_t attempt, FailKind kind, std::exception_ptr e,
                      std::optional<std::uint32_t> item) {
    const Chunk* c0 = sched_.find(id, attempt);
    if (!c0) return;
    const RetryPolicy& policy = c0->job->policy();
    const bool retryable =
        kind == FailKind::crashed || kind == FailKind::timed_out || kind == FailKind::lost ||
        (kind == FailKind::raised && policy.retry_exceptions);
    std::unique_ptr<Chunk> c;
    const Failed f = sched_.fail(id, attempt, error_text(e), e, retryable, c);
    if (f == Failed::stale) return;
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
  std::exception_ptr with_history(const Chunk& c) const {
    if (c.failures.size() <= 1) return c.last_error;
    const std::string items = c.count == 1 ? "item " + std::to_string(c.first)
                                           : "items " + std::to_string(c.first) + ".." +
                                                 std::to_string(c.first + c.count - 1);
    std::string msg = "fibra: " + c.job->fn().name + " failed " + std::to_string(c.failures.size()) +
                      " times on " + items + "; no retries left (retries = " +
                      std::to_string(c.job->policy().retries) + ")";
    for (std::size_t i = 0; i < c.failures.size(); ++i)
      msg += "\n  attempt " + std::to_string(i + 1) + ": " + c.failures[i];
    msg += "\nAn item that fails every time is a bug or a poison input: fix the function or leave the item out"
           " (MapOptions::errors collects such failures instead of throwing).";
    try {
      std::rethrow_exception(c.last_error);
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

  static std::string error_text(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::string s = x.what();
      return s.rfind("fibra: ", 0) == 0 ? s.substr(7) : s;
    } catch (...) {
      return "unknown error";
    }
  }

  std::string where(const Worker& w, long pid) const {
    return "worker " + std::to_string(w.slot) + " of " + std::to_string(target_) + " on " + w.host + ", pid " +
           std::to_string(pid);
  }

  // Gives each ready worker with room a batch of pending chunks.
  bool dispatch(std::size_t batches_each = batches_per_worker) {
    // Batches are encoded under mu_: terminate() on a user thread may fail (and free) every chunk.
    std::vector<std::pair<Worker*, std::string>> out;
    {
      std::lock_guard lk(mu_);
      if (sched_.pending() == 0) return false;
      const int ready = ready_count();
      for (auto& w : workers_) {
        if (w->state != Worker::State::ready || w->batches.size() >= batches_each) continue;
        const bool others_have_room = std::any_of(workers_.begin(), workers_.end(), [&](auto& o) {
          return o.get() != w.get() && o->state == Worker::State::ready && o->batches.size() < batches_each;
        });
        auto batch = sched_.take_batch(w->id, ready, others_have_room);
        if (batch.empty()) {
          if (sched_.pending() == 0) break;
          continue;  // it passed over retries meant for other workers
        }
        w->batches.push_back(static_cast<std::uint32_t>(batch.size()));
        for (const Chunk* c : batch) {
          if (c->failures.empty()) continue;
          ++stats_.chunks_resubmitted;
          stats_.last_retry_sent = std::chrono::steady_clock::now();
        }
        out.emplace_back(w.get(), encode_batch(batch));
      }
      // Chunks of cancelled calls are dropped by take_batch: join() may be waiting for that.
      if (sched_.idle()) state_cv_.notify_all();
    }
    for (auto& [w, batch] : out) send(*w, wire::tag_tasks, std::move(batch));
    return !out.empty();
  }

  static std::string encode_batch(const std::vector<Chunk*>& chunks) {
    std::size_t bytes = sizeof(std::uint32_t);
    for (const Chunk* c : chunks) bytes += 64 + 4 * c->skip.size() + c->payload.size();
    std::string batch = wire::begin_batch();
    batch.reserve(bytes);
    for (const Chunk* c : chunks) {
      const RetryPolicy& policy = c->job->policy();
      wire::TaskHeader h;
      h.chunk = c->id;
      h.attempt = c->attempt;
      h.fn = c->job->fn().id;
      h.mode = c->job->mode();
      h.first = c->first;
      h.count = c->count;
      h.timeout_ms = static_cast<std::uint32_t>(std::min(policy.task_timeout_s * 1000, 4e9));
      h.keep_going = policy.keep_going;
      h.skip = c->skip;
      wire::append_task(batch, h, c->payload);
    }
    wire::set_count(batch, static_cast<std::uint32_t>(chunks.size()));
    return batch;
  }

  void send(Worker& w, int tag, std::string data) {
    if (!w.alive()) return;  // never to a worker that is gone or lost: a send to a dead peer can wedge MPI
    sends_.send(w.comm, 0, tag, std::move(data));
    w.last_sent = mpi::now_s();
  }

  // Heartbeats to quiet workers, and the liveness check of every worker: a worker that has been
  // silent too long (or whose process is gone, for workers on this host) is declared lost.
  void watch_workers() {
    const double now = mpi::now_s();
    const bool check_pids = now - last_pid_check_ > 0.05;
    if (check_pids) last_pid_check_ = now;
    for (auto& w : workers_) {
      if (w->state == Worker::State::lost && w->holds_slot && check_pids) {
        // Its slot is free once its process is: gone from this host, or past the orphan guard.
        if (process_gone_here(*w) || now - w->lost_at > s_.driver_silence_s + 2 * s_.heartbeat_s) free_slot(*w);
      }
      if (!w->alive()) continue;
      if (w->state == Worker::State::starting) {
        if (now - w->spawned_at > s_.start_timeout_s)
          declare_lost(*w, "it did not start within " + seconds(s_.start_timeout_s) + " (PoolOptions::start_timeout_s)");
        continue;
      }
      // Silence is judged only right after a receive pass: a pass delayed by a long spawn has not
      // read what the workers sent meanwhile.
      if (now - last_receive_pass_ < 0.5 * s_.heartbeat_s && now - w->last_heard > s_.worker_silence_s) {
        declare_lost(*w, "it has been silent for " + seconds(now - w->last_heard) +
                             " (PoolOptions::worker_silence_s = " + seconds(s_.worker_silence_s) + ")");
        continue;
      }
      if (check_pids && process_gone_here(*w)) {
        declare_lost(*w, "its process is gone");
        continue;
      }
      const bool working = w->state == Worker::State::ready || w->state == Worker::State::retiring;
      if (working && now - w->last_sent > s_.heartbeat_s) send(*w, wire::tag_heartbeat, {});
    }
  }

  // True when the worker runs on this host and its process no longer exists.
  bool process_gone_here(const Worker& w) const {
    return w.pid > 0 && w.host == my_host_ && ::kill(static_cast<pid_t>(w.pid), 0) != 0 && errno == ESRCH;
  }

  static std::string seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", s);
    return b;
  }

  // The worker is dead to the pool: nothing is sent to it or read from it again, and the chunks it
  // held are failed attempts (retried elsewhere while they have retries left).
  void declare_lost(Worker& w, const std::string& why) {
    std::lock_guard lk(mu_);
    const bool was_leaving = w.state == Worker::State::leaving;
    w.state = Worker::State::lost;
    w.lost_at = mpi::now_s();
    sends_.abandon(w.comm);
    w.batches.clear();
    const auto held = sched_.owned_by(w.id);
    const std::string who = "worker " + std::to_string(w.slot) + " of " + std::to_string(target_) + " on " +
                            (w.host.empty() ? "?" : w.host) + " (pid " + std::to_string(w.pid) + ")";
    if (!was_leaving) {
      const bool replaced = live_count() < target_ && !closed_;
      std::fprintf(stderr, "fibra: %s was lost: %s; the %zu chunk(s) it held count a failed attempt%s\n", who.c_str(),
                   why.c_str(), held.size(), replaced ? "; a replacement is being started" : "");
    }
    ++stats_.workers_lost;
    for (const auto& [id, attempt] : held) {
      const Chunk* c = sched_.find(id, attempt);
      if (!c) continue;
      auto e = std::make_exception_ptr(WorkerLost("fibra: " + who + " was lost while it ran " + c->job->fn().name +
                                                  " on items " + std::to_string(c->first) + ".." +
                                                  std::to_string(c->first + c->count - 1) + ": " + why));
      attempt_failed(id, attempt, FailKind::lost, e, std::nullopt);
    }
    state_cv_.notify_all();
  }

  // Spawns or retires workers until the pool has its target size. A spawn that fails is reported
  // and tried again later; the pool carries on with the workers it has.
  bool adjust_size() {
    int target, live;
    {
      std::lock_guard lk(mu_);
      target = target_;
      live = live_count();
    }
    if (live < target && mpi::now_s() >= next_spawn_) {
      // MPI_Comm_spawn blocks this thread for a few hundred ms: give the workers enough to do
      // meanwhile (retries first: they are at the front of the queue).
      dispatch(batches_per_worker + 2);
      sends_.progress();
      try {
        spawn(1);  // one per pass: traffic with the other workers flows between spawns
      } catch (const Error& e) {
        on_spawn_failed(e);
      }
      return true;
    }
    bool changed = false;
    for (auto it = workers_.rbegin(); it != workers_.rend() && live > target; ++it) {
      auto& w = **it;
      if (w.state == Worker::State::ready || w.state == Worker::State::starting) {
        std::lock_guard lk(mu_);  // stop taking work; leave once its batches are done
        w.state = Worker::State::retiring;
        --live;
        changed = true;
      }
    }
    for (auto& w : workers_) {
      if (w->state == Worker::State::retiring && w->batches.empty()) {
        send(*w, wire::tag_shutdown, {});
        w->state = Worker::State::leaving;
        changed = true;
      }
    }
    if (changed) {
      std::lock_guard lk(mu_);
      state_cv_.notify_all();
    }
    return changed;
  }

  void on_spawn_failed(const Error& e) {
    std::lock_guard lk(mu_);
    spawn_error_ = std::current_exception();
    ++spawn_failures_;
    next_spawn_ = mpi::now_s() + std::min(60.0, 2.0 * spawn_failures_);
    const int live = live_count();
    std::fprintf(stderr, "fibra: %s\nfibra: the pool carries on with %d worker(s); it tries again in %.0f s\n",
                 e.what(), live, next_spawn_ - mpi::now_s());
    if (live == 0) {  // nobody left to run anything: every waiting call fails now, nothing hangs
      fail_all(std::make_exception_ptr(WorkerLost(std::string("fibra: the pool has no workers left and cannot start new ones: ") +
                                                  e.what())));
    }
    state_cv_.notify_all();
  }

  // ---- driver_stop ----------------------------------------------------------------------------
  // Every chunk still queued or running fails with `e`.
  void fail_all(const std::exception_ptr& e) {
    for (auto& c : sched_.take_all()) c->job->deliver({c->first, c->count, {}, e, {}});
    for (auto& w : workers_) w->batches.clear();
    state_cv_.notify_all();
  }

  void stop() {
    {
      std::lock_guard lk(mu_);
      if (stopped_) return;
      stopped_ = true;
      stopping_ = true;
      closed_ = true;
      kick();
    }
    if (thread_.joinable()) thread_.join();
    std::lock_guard lk(mu_);
    state_cv_.notify_all();
  }

  // Asks every agent to leave, waits (bounded) for their goodbyes, and disconnects from those that
  // said it. An agent that never answers is not waited for again.
  // The MPI lock is taken per step, never across the wait: other pools keep their heartbeats.
  void say_goodbye() {
    try {
      {
        std::lock_guard ml(mpi::lock());
        for (auto& w : workers_) {
          if (!w->alive()) continue;
          send(*w, wire::tag_shutdown, {});
          w->state = Worker::State::leaving;
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
          sends_.progress();
        }
        if (!got) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      std::lock_guard ml(mpi::lock());
      sends_.drain(1.0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fibra: while stopping the pool's workers: %s\n", e.what());
    }
    std::lock_guard ml(mpi::lock());
    for (auto& w : workers_) {
      if (w->state == Worker::State::gone && w->comm != MPI_COMM_NULL) MPI_Comm_disconnect(&w->comm);
      free_slot(*w);  // best effort for the ones that did not say bye: they leave by the orphan guard
    }
    sends_.abandon();
  }

  PoolSettings s_;
  mutable std::mutex mu_;
  std::condition_variable wake_;      // the communication thread naps here
  std::condition_variable state_cv_;  // users wait here for workers and for work to finish
  Scheduler sched_;
  std::vector<std::unique_ptr<Worker>> workers_;
  mpi::SendQueue sends_;
  std::thread thread_;
  int target_ = 0;
  int next_worker_id_ = 1;
  std::string my_host_ = host_name();
  double last_pid_check_ = 0;
  double last_receive_pass_ = 0;  // when receive() last read every worker
  double next_spawn_ = 0;          // after a failed spawn, when to try again
  int spawn_failures_ = 0;         // in a row
  std::exception_ptr spawn_error_;  // the last failed spawn (resize() reports it)
  PoolStats stats_;  // guarded by mu_
  bool kicked_ = false, closed_ = false, stopping_ = false, stopped_ = false;
  std::exception_ptr broken_;
};

}  // namespace

std::shared_ptr<PoolCore> start_pool(const PoolSettings& settings) {
  if (!Runtime::active())
    throw ConfigError("fibra: a Pool was created before fibra::Runtime: make `fibra::Runtime rt(argc, argv);` the first line of main");
  if (settings.workers < 1) throw ConfigError("fibra: a pool needs at least 1 worker (asked for " + std::to_string(settings.workers) + ")");
  auto p = std::make_shared<PoolImpl>(settings);
  p->start();
  std::lock_guard lk(g_pools_mu);
  g_pools.push_back(p);
  return p;
}

void stop_all_pools() noexcept {
  std::vector<std::shared_ptr<PoolImpl>> live;
  {
    std::lock_guard lk(g_pools_mu);
    for (auto& w : g_pools)
      if (auto p = w.lock()) live.push_back(std::move(p));
    g_pools.clear();
  }
  for (auto& p : live) {
    try {
      p->terminate();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fibra: stopping a pool: %s\n", e.what());
    }
  }
}

}  // namespace fibra::detail

namespace fibra {

Pool::Pool(int workers, PoolOptions options) {
  detail::PoolSettings s;
  if (workers < 0) throw ConfigError("fibra: Pool(" + std::to_string(workers) + "): the number of workers cannot be negative (0 means one per core)");
  s.workers = workers > 0 ? workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!(options.heartbeat_s > 0) || !(options.worker_silence_s >= 2 * options.heartbeat_s) ||
      !(options.driver_silence_s >= 2 * options.heartbeat_s))
    throw ConfigError("fibra: PoolOptions: heartbeat_s must be > 0 and worker_silence_s and driver_silence_s at least "
                      "twice heartbeat_s (got " + std::to_string(options.heartbeat_s) + ", " +
                      std::to_string(options.worker_silence_s) + ", " + std::to_string(options.driver_silence_s) + ")");
  if (!(options.start_timeout_s > 0)) throw ConfigError("fibra: PoolOptions::start_timeout_s must be > 0");
  s.heartbeat_s = options.heartbeat_s;
  s.worker_silence_s = options.worker_silence_s;
  s.driver_silence_s = options.driver_silence_s;
  s.start_timeout_s = options.start_timeout_s;
  s.policy = detail::make_policy({}, options.retries, options.retry_exceptions, options.task_timeout_s);
  core_ = detail::start_pool(s);
}

Pool::~Pool() {
  if (!core_) return;
  try {
    core_->terminate();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fibra: ~Pool: %s\n", e.what());
  }
}

}  // namespace fibra
