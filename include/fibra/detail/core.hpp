// fibra/detail/core.hpp: the narrow, non-template interface between the public templates (Pool,
// Future) and the driver's runtime in src/. Templates encode items and decode results in the
// user's thread; the runtime moves bytes and knows nothing of types.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fibra/detail/registry.hpp"
#include "fibra/options.hpp"
#include "fibra/resources.hpp"
#include "fibra/stats.hpp"

namespace fibra::detail {

/// How one call's chunks are retried and watched (from MapOptions, else the pool's PoolOptions).
struct RetryPolicy {
  std::uint32_t retries = 3;      ///< failed attempts of a chunk that are tried again
  bool retry_exceptions = false;  ///< exceptions are usually deterministic: not retried by default
  double task_timeout_s = 0;      ///< one item may run this long before its executor is killed; 0: no limit
  bool keep_going = false;        ///< item failures are collected (MapOptions::errors), not thrown
  Resources need;                 ///< what a worker must offer to run its chunks (Resources)
};

/// Whether a worker that offers `has` can run what asks for `need` (a worker's memory of 0 is not
/// known, and not checked).
inline bool fits(const Resources& need, const Resources& has) {
  return need.cpus <= has.cpus + 1e-9 && need.gpus <= has.gpus &&
         (need.memory_mb <= 0 || has.memory_mb <= 0 || need.memory_mb <= has.memory_mb);
}

/// One failed item of a chunk, when the call collects errors instead of throwing.
struct ItemOutcomeError {
  std::uint32_t offset = 0;  ///< item within the chunk
  std::exception_ptr error;
};

/// What few outcomes carry (ChunkOutcome::extra): the items that failed in a keep_going call, and
/// where a large result lies. Allocated only for those, so that a small result's outcome stays small
/// (a done Future holds one until get()); copies copy it.
class OutcomeExtra {
 public:
  struct Data {
    std::vector<ItemOutcomeError> item_errors;  ///< keep_going calls: failed items (their results are R{})
    /// A large result left where it came (the lane's slot on the driver's host, a stored object)
    /// rather than copied into `payload`: `shared` views it, and `keep` holds it until the outcome
    /// is dropped.
    std::shared_ptr<const void> keep;
    std::string_view shared;
    /// Where the results start in `payload`: a large result keeps the message it came in, whose
    /// headers come first, rather than being copied out of it.
    std::size_t offset = 0;
  };
  OutcomeExtra() = default;
  OutcomeExtra(std::vector<ItemOutcomeError> errors) {  // NOLINT: {first, count, payload, error, errors}
    if (!errors.empty()) data().item_errors = std::move(errors);
  }
  OutcomeExtra(const OutcomeExtra& o) : d_(o.d_ ? std::make_unique<Data>(*o.d_) : nullptr) {}
  OutcomeExtra(OutcomeExtra&&) noexcept = default;
  OutcomeExtra& operator=(const OutcomeExtra& o) {
    if (this != &o) d_ = o.d_ ? std::make_unique<Data>(*o.d_) : nullptr;
    return *this;
  }
  OutcomeExtra& operator=(OutcomeExtra&&) noexcept = default;
  explicit operator bool() const { return d_ != nullptr; }
  const Data* get() const { return d_.get(); }
  Data& data() {
    if (!d_) d_ = std::make_unique<Data>();
    return *d_;
  }
  void reset() { d_.reset(); }

 private:
  std::unique_ptr<Data> d_;
};

/// The outcome of one chunk: its encoded results, or the error that ended it. 64 bytes: what is
/// rare (item errors, a large result's place) is in `extra`.
struct ChunkOutcome {
  std::uint64_t first = 0;   ///< index of the chunk's first item in its call
  std::uint32_t count = 0;   ///< items in the chunk
  std::string payload;       ///< encoded results when `error` is empty
  std::exception_ptr error;  ///< a fibra::Error subclass when the chunk failed
  OutcomeExtra extra;        ///< item errors and a large result's place (item_errors(), kept(), ...)

  std::string_view bytes() const {
    const OutcomeExtra::Data* d = extra.get();
    if (!d) return payload;
    return d->keep ? d->shared : std::string_view(payload).substr(d->offset);
  }
  /// keep_going calls: the items that failed (their results are R{}).
  const std::vector<ItemOutcomeError>& item_errors() const {
    static const std::vector<ItemOutcomeError> none;
    return extra ? extra.get()->item_errors : none;
  }
  void add_item_error(ItemOutcomeError e) { extra.data().item_errors.push_back(std::move(e)); }
  /// Whether the result is viewed where it lies (a lane's slot, a stored object), not in `payload`.
  bool kept() const { return extra && extra.get()->keep != nullptr; }
  /// The result is `bytes`, where it lies; `keep` holds that place until this outcome is dropped.
  void keep_at(std::shared_ptr<const void> keep, std::string_view bytes) {
    auto& d = extra.data();
    d.keep = std::move(keep);
    d.shared = bytes;
    d.offset = 0;
  }
  /// The result is `result`, the end of `whole` (the message it came in, headers first: everything
  /// from where `result` starts is read), which the outcome takes whole rather than copying it out.
  void take_message(std::string&& whole, std::string_view result) {
    const auto offset = static_cast<std::size_t>(result.data() - whole.data());
    payload = std::move(whole);
    if (offset) extra.data().offset = offset;
  }
  /// Copies a result held in shared memory into `payload` and lets the slot go; if the copy cannot
  /// be made (no memory), the outcome keeps its view.
  void unshare();
};

/// A value fibra::put stored in the driver, or a task's result kept on the driver's host
/// (src/driver/objects.cpp): its encoded bytes in shared memory (a memfd), which executors on the
/// driver's host map, and which an agent on another host is sent once and keeps in a memfd of its
/// own. Freed (and the agents told) when the last shared_ptr to it goes: the Future and every task
/// that takes it hold one.
struct StoredObject {
  std::uint64_t id = 0;     ///< unique in the driver's run, never reused
  std::int64_t pid = 0;     ///< the driver's pid: executors open /proc/<pid>/fd/<fd>
  int fd = -1;              ///< the memfd, named object_memfd_name(origin, id)
  std::int64_t origin = 0;  ///< the process that made it: the driver (put) or an executor (a kept result)
  std::string_view bytes;   ///< the driver's read-only mapping of it
  virtual ~StoredObject() = default;
};
/// Where a stored object goes in a task's encoded arguments: its bytes belong at `at`.
struct ObjectArg {
  std::shared_ptr<const StoredObject> object;
  std::uint64_t at = 0;
};
/// fibra::put: stores `encoded` (the value as Codec<T> encodes it, left empty); throws ConfigError
/// past 2 GiB. In an executor (no store there yet) it returns nullptr and leaves `encoded` as it is.
std::shared_ptr<const StoredObject> store_object(std::string& encoded);

/// What a call is (its function, how items are passed, its retry policy): shared by every call of the
/// same kind, so that a call's state holds a pointer (JobState::kind).
struct CallKind {
  const FunctionEntry* fn = nullptr;
  CallMode mode = CallMode::single;
  RetryPolicy policy;
};

/// One call's chunks (a map, an imap, or one apply_async) and the outcomes that came back.
/// Thread-safe: the driver's communication thread delivers, the user's thread waits.
///
/// Small by design (56 bytes; a Future is this and its pointer): a million outstanding tasks are a
/// million of these. What most calls never use (a name, stored objects, callbacks, item timings) is
/// in `Extras`, made on first use; its lock and condition variable are shared with other calls
/// (a table of them, chosen by address); the outcomes not yet taken are a list.
class JobState {
 public:
  JobState(const FunctionEntry& fn, CallMode mode, RetryPolicy policy = {});
  ~JobState();
  JobState(const JobState&) = delete;
  JobState& operator=(const JobState&) = delete;

  const FunctionEntry& fn() const { return *kind_->fn; }
  /// What messages call it: TaskOptions::name, else its function's name.
  const std::string& name() const {
    const Extras* e = extras_.load(std::memory_order_acquire);
    return e && !e->name.empty() ? e->name : kind_->fn->name;
  }
  /// Set before the call is queued (TaskOptions::name).
  void set_name(std::string name) {
    if (!name.empty()) extras().name = std::move(name);
  }
  /// A task (submit, apply_async), not a map's call: the progress of task graphs counts it.
  bool is_task() const { return has(task_bit, std::memory_order_relaxed); }
  void set_task() { flags_.fetch_or(task_bit, std::memory_order_relaxed); }
  /// A task was given this call's Future as an argument (submit_after): its result, if large, is
  /// then kept where it is made (PoolOptions::keep_results_from) rather than sent to the driver.
  void note_dependent() { flags_.fetch_or(dependents_bit, std::memory_order_relaxed); }
  bool has_dependents() const { return has(dependents_bit, std::memory_order_relaxed); }
  CallMode mode() const { return kind_->mode; }
  const RetryPolicy& policy() const { return kind_->policy; }

  void deliver(ChunkOutcome o);
  /// If an outcome that views a lane's slot (not a stored object) was delivered while no thread
  /// waited for one (in wait_until), copies the outcomes not yet taken out of shared memory
  /// (unshare()). The deliverer must call it after deliver(), outside its own locks: such an
  /// outcome is counted delivered (ready(), waits, on_delivered) only then, so that whoever sees
  /// it ready finds its slot free for the executor's next large result.
  void unshare_held();
  /// Takes the next outcome, waiting for it; returns false if `timeout` passed first.
  bool wait_next(ChunkOutcome& out, std::optional<std::chrono::nanoseconds> timeout = std::nullopt);
  /// Waits until an outcome is there without taking it.
  bool wait_ready(std::optional<std::chrono::nanoseconds> timeout);
  bool ready() const {  // (fewer than 2^32 outcomes are ever waiting to be taken: taken_ counts modulo that)
    return std::uint32_t(delivered_.load(std::memory_order_acquire)) != taken_.load(std::memory_order_acquire);
  }
  /// Waits until `n` outcomes were delivered in all, taken or not (a Future shared by threads).
  bool wait_delivered(std::uint64_t n, std::optional<std::chrono::nanoseconds> timeout);
  std::uint64_t delivered() const { return delivered_.load(std::memory_order_acquire); }

  /// Runs `f` once, at the first delivery, or at once on this thread if there was one already.
  /// It runs on the delivering thread (a pool's communication thread, holding the pool's locks;
  /// for a large result nobody waited for, the same thread in unshare_held, without them), so
  /// it must only hand work on (detail::run_later), never call into a pool or wait.
  /// Returns a token for forget_on_delivered (0 when `f` already ran).
  std::uint64_t on_delivered(std::function<void()> f);
  /// Drops a callback that has not run (fibra::wait's, once it returned).
  void forget_on_delivered(std::uint64_t token);

  /// The call's items are timed (seconds_per_item): a map's, whose later chunks are paced by it.
  /// Set before it is queued; other calls (a task is one chunk) are not timed.
  void time_items() { extras().timed = true; }
  /// Records that an executor ran `items` items of this call in `ns` nanoseconds (timed calls).
  void note_run(std::uint32_t items, std::uint64_t ns) {
    if (Extras* e = extras_.load(std::memory_order_acquire); e && e->timed) {
      e->run_ns.fetch_add(ns, std::memory_order_relaxed);
      e->run_items.fetch_add(items, std::memory_order_release);
    }
  }
  /// Seconds an item of this call took to run so far, on average; 0 before the first result, and
  /// for calls not timed.
  double seconds_per_item() const {
    const Extras* e = extras_.load(std::memory_order_acquire);
    const auto items = e ? e->run_items.load(std::memory_order_acquire) : 0;
    return items ? double(e->run_ns.load(std::memory_order_relaxed)) * 1e-9 / double(items) : 0.0;
  }

  /// The pool it was queued on (PoolCore::uid), for fibra::cancel; 0 before (waiting for its
  /// Future arguments) and in executors.
  /// (Sequentially consistent, with the flag below: a cancel that finds no pool yet is seen by the
  /// submit that sets it, and one that comes after the submit finds the pool.)
  std::uint64_t pool_uid() const {
    const std::uint32_t uid = pool_uid_.load();
    return uid == UINT32_MAX ? ~std::uint64_t(0) : uid;  // (waiting_for_arguments)
  }
  /// Pools are counted from 1 in the driver's process (PoolImpl::next_uid): 32 bits are plenty.
  void set_pool_uid(std::uint64_t uid) { pool_uid_.store(uid >= UINT32_MAX ? UINT32_MAX : std::uint32_t(uid)); }
  /// fibra::cancel was called: a task still waiting for its Future arguments is not queued.
  void request_cancel() { flags_.fetch_or(cancel_requested_bit); }
  bool cancel_requested() const { return has(cancel_requested_bit, std::memory_order_seq_cst); }
  /// True for the first caller only: of fibra::cancel and the queueing that saw its request, one
  /// delivers the TaskCancelled of a task that had not been queued.
  bool claim_cancel_delivery() { return !(flags_.fetch_or(cancel_delivered_bit) & cancel_delivered_bit); }

  /// The value in shared memory: fibra::put's, or a task's result kept there (nullptr otherwise).
  /// Set once: by fibra::put before the Future is handed out, or at the delivery of a result kept
  /// in shared memory (before deliver(), so every reader, which reads after the delivery, sees it).
  const std::shared_ptr<const StoredObject>& object() const {
    static const std::shared_ptr<const StoredObject> none;
    const Extras* e = extras_.load(std::memory_order_acquire);
    return e ? e->object : none;
  }
  void set_object(std::shared_ptr<const StoredObject> o) { extras().object = std::move(o); }
  /// The stored objects a task takes as arguments, set before it is queued; they are held until
  /// its outcome is delivered. A copy (the communication thread reads it while delivery may clear it).
  std::vector<ObjectArg> objects() const;
  bool has_objects() const { return has(objects_bit, std::memory_order_acquire); }
  void set_objects(std::vector<ObjectArg> objects);

  /// The caller no longer wants outcomes: chunks not yet started are dropped.
  void cancel() { flags_.fetch_or(cancelled_bit, std::memory_order_release); }
  bool cancelled() const { return has(cancelled_bit, std::memory_order_acquire); }

  /// What a Future made of the outcome (its decoded value or error), once, at its first get().
  struct Settled {
    virtual ~Settled() = default;
  };
  /// The settled outcome, or nullptr before the first get().
  Settled* settled() const { return settled_.load(std::memory_order_acquire); }
  /// Waits for the first outcome; the first caller takes it and has `fill` make `box` of it (fill
  /// must not throw: a failed decode is the box's error), the others wait for that and get the
  /// same. `box` is dropped when another caller settled first.
  Settled& settle(std::unique_ptr<Settled> box, void (*fill)(Settled&, ChunkOutcome&) noexcept);
  /// Futures that refer to this call (a result moves out of the last one read, Future::get() &&).
  void add_future() { futures_.fetch_add(1, std::memory_order_relaxed); }
  void drop_future() { futures_.fetch_sub(1, std::memory_order_acq_rel); }
  std::uint32_t futures() const { return futures_.load(std::memory_order_acquire); }

 private:
  struct Extras {
    std::string name;
    std::shared_ptr<const StoredObject> object;
    std::vector<ObjectArg> objects;  // under the lock
    std::vector<std::pair<std::uint64_t, std::function<void()>>>
        on_delivered;                                    // under the lock; run at the first delivery
    std::uint64_t next_token = 1;                        // under the lock
    bool timed = false;                                  // time_items()
    std::atomic<std::uint64_t> run_ns{0}, run_items{0};  // measured by the executors (note_run)
    std::unique_ptr<CallKind> kind;                      // this call's kind when the shared table of kinds is full
  };
  struct Node;  // an outcome not taken yet

  Extras& extras();  // made on first use (then never moved or freed before the call's state)
  std::mutex& mu() const;
  std::condition_variable& cv() const;
  // Spins briefly, then waits on cv() until `pred` holds (delivered_ and taken_ change under mu()).
  template <class Pred>
  bool wait_until(Pred pred, std::optional<std::chrono::nanoseconds> timeout);

  const CallKind* kind_;
  Node* tail_ = nullptr;  // under mu(): the outcomes not taken, a ring; tail_->next is the oldest
  std::atomic<std::uint64_t> delivered_{0};
  std::atomic<Extras*> extras_{nullptr};
  std::atomic<Settled*> settled_{nullptr};
  std::atomic<std::uint32_t> taken_{0};     // written under mu(); modulo 2^32 (ready())
  std::atomic<std::uint32_t> pool_uid_{0};  // UINT32_MAX: waiting_for_arguments
  std::atomic<std::uint32_t> futures_{0};
  std::atomic<std::uint16_t> waiters_{0};  // threads in wait_until: one will take a delivery soon
  std::uint8_t uncounted_ = 0;             // under mu(): outcomes unshare_held() copies, then counts
  // One byte of flags: what is set once (a task, dependents, cancelled, ...) and the settling.
  static constexpr std::uint8_t task_bit = 1, dependents_bit = 2, objects_bit = 4, cancelled_bit = 8,
                                cancel_requested_bit = 16, cancel_delivered_bit = 32;
  static constexpr std::uint8_t settling_bit = 64, settled_bit = 128;  // settle(): taken by one, done
  std::atomic<std::uint8_t> flags_{0};
  bool has(std::uint8_t bit, std::memory_order order) const { return (flags_.load(order) & bit) != 0; }
};

/// Runs `f` soon on fibra's task thread (one per driver process), in the order given: what a
/// delivery must not do on the communication thread (submit the tasks that waited for it).
void run_later(std::function<void()> f);
/// JobState::pool_uid of a task that waits for its Future arguments (submit_after).
inline constexpr std::uint64_t waiting_for_arguments = ~std::uint64_t(0);
/// fibra::cancel (src/driver/tasks.cpp).
bool cancel_job(const std::shared_ptr<JobState>& job, bool force);
/// Future::then: `f` on the task thread once `job` has its first outcome (src/driver/tasks.cpp).
void when_delivered(const std::shared_ptr<JobState>& job, std::function<void()> f);
/// Runs what run_later queued and ends the task thread (the Runtime's end, after the pools stop).
void stop_task_thread() noexcept;
/// Runs `f` on a thread of its own (map_async's and starmap_async's: the call reads its input,
/// collects its results and runs its callbacks there): never the caller's thread, nor a pool's
/// communication thread. What `f` throws is logged. Throws ConfigError inside a task, PoolClosed
/// after the Runtime's end.
void run_async_call(std::function<void()> f);
/// Waits (at most 10 s, then says so) until the threads of run_async_call have ended; later ones
/// are refused. The Runtime's end, after the pools stop (their calls then fail with PoolClosed).
void stop_async_calls() noexcept;

/// How an actor is kept (ActorOptions, sent to the pool's core).
struct ActorSettings {
  std::string class_name;  ///< demangled, for messages
  int max_restarts = 0;    ///< starts again from its constructor after a death, this many times
  Resources need;          ///< placed only on a worker that offers this much
  std::string name;        ///< ActorOptions::key: Actor<T>::get finds it by that ("": none)
  /// The driver holds its first handle. False for an actor started inside a task: no handle owns
  /// it until one reaches the driver (adopt_actor); it lives until the pool ends, or until the
  /// driver's handles to it are gone.
  bool owned = true;
  int max_concurrency = 1;  ///< its calls that may run at once (ActorOptions::max_concurrency)
};
/// The most threads an actor's process runs calls on (ActorOptions::max_concurrency).
inline constexpr int max_actor_concurrency = 1024;

/// Settings of a pool, fixed when it starts.
/// No defaults of its own: Pool() fills every field from PoolOptions, the one place they are set.
struct PoolSettings {
  int workers;
  double heartbeat_s;       ///< how often each side says it is alive when otherwise silent
  double worker_silence_s;  ///< a worker silent this long is declared lost
  double driver_silence_s;  ///< an agent whose driver is silent this long exits (orphan guard)
  double start_timeout_s;   ///< how long Pool() waits for its workers to say hello
  int workers_per_agent;    ///< executors per agent process; 0: automatic
  std::uint64_t keep_freed_bytes =
      0;  ///< memory an executor keeps after its tasks free it (PoolOptions::keep_freed_mib)
  std::uint64_t driver_keep_freed_bytes = 0;  ///< the same for the driver (PoolOptions::driver_keep_freed_mib)
  std::uint64_t keep_results_from = 0;        ///< PoolOptions::keep_results_from
  int spare_processes = 0;                    ///< PoolOptions::spare_processes
  RetryPolicy policy;                         ///< the default for calls that do not set their own
  Resources resources;                        ///< what each worker offers, resolved (resolve_resources)
  std::vector<std::string> gpu_ids;           ///< shared out among workers, `resources.gpus` each
  std::vector<std::string> hosts;             ///< agents placed on these (empty: MPI places them)
  std::vector<int> host_slots;                ///< processes each of `hosts` takes; 0: not known
  bool pack = false;                          ///< fill hosts in order ("pack"), else one after another ("spread")
  Initializer initializer;                    ///< PoolOptions::initializer (checked: its arguments fit)
  std::uint32_t max_tasks_per_child = 0;      ///< PoolOptions::max_tasks_per_child; 0: no limit
  std::string events;                         ///< PoolOptions::events, else FIBRA_EVENTS; empty: no event log
  std::string dashboard;                      ///< PoolOptions::dashboard, else FIBRA_DASHBOARD; empty: no live page
  bool encrypt_objects = false;               ///< PoolOptions::encrypt_objects
};

/// A pool's worker processes and queue, owned by the driver's runtime.
class PoolCore {
 public:
  virtual ~PoolCore() = default;
  /// Queues a chunk of encoded items; its outcome goes to `job`.
  virtual void submit(const std::shared_ptr<JobState>& job, std::uint64_t first, std::uint32_t count,
                      std::string payload) = 0;
  virtual int size() const = 0;
  virtual void resize(int workers) = 0;
  /// Pool::adapt (src/driver/elastic.hpp).
  virtual void adapt(int min_workers, int max_workers, const AdaptOptions& options);
  virtual void close() = 0;      ///< no more submissions
  virtual void join() = 0;       ///< after close(): wait for queued work, then stop the workers
  virtual void terminate() = 0;  ///< stop the workers now; unfinished work fails with PoolClosed
  virtual bool closed() const = 0;
  /// Why it no longer takes work, as the end of a sentence ("was closed (Pool::close())").
  virtual std::string closed_reason() const { return "was closed"; }
  /// The retry policy of calls that do not set their own.
  virtual RetryPolicy default_policy() const { return {}; }
  virtual PoolStats stats() const { return {}; }
  /// Its agents, with their hosts (Pool::workers()).
  virtual std::vector<WorkerInfo> workers() const { return {}; }

  /// Starts an actor: `ctor` (an ActorClass entry) with its encoded arguments runs first in a
  /// process of its own on one of the pool's agents; returns the actor's id. Calls queued before it
  /// runs wait for it.
  virtual std::uint64_t start_actor(const FunctionEntry& ctor, std::string args, ActorSettings s);
  /// Queues a method call (a one-item chunk of `job`) to the actor; calls run in the order queued.
  /// A call to an actor that is gone for good fails at once with ActorDied.
  virtual void call_actor(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload);
  /// A call with Future arguments: its place among the actor's calls is taken now (the calls
  /// behind it wait for it, so they run in the order made), and fill_actor_call gives its encoded
  /// arguments once the Futures have their outcomes. In an executor (the default) nothing is
  /// reserved: the call is queued when filled.
  virtual void reserve_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job) {
    (void)actor;
    (void)job;
  }
  /// The arguments of a reserved call; `drop`: it will not run (a dependency failed, it was
  /// cancelled: its outcome is delivered by the caller), and its place is given up.
  virtual void fill_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload,
                               bool drop) {
    if (!drop) call_actor(actor, job, std::move(payload));
  }
  /// A handle to the live actor whose key is `name` (ActorOptions::key), whose class is `class_name`:
  /// its id, counted as one more handle (end_actor once it is dropped). Throws ConfigError.
  virtual std::uint64_t find_actor(const std::string& name, const std::string& class_name, bool counted = true);
  /// Whether the handles made here own their actor (the driver's: the last one ends it). A task's
  /// do not (executor_core).
  virtual bool owns_handles() const { return true; }
  /// A handle to actor `id` arrived here in a message (a task's result, say): true if it now owns
  /// the actor as one more handle (the actor is alive and its pool is this driver's).
  virtual bool adopt_actor(std::uint64_t id) {
    (void)id;
    return false;
  }
  /// The last handle was dropped: the actor's process ends once the calls sent to it have run.
  virtual void end_actor(std::uint64_t actor) noexcept { (void)actor; }
  /// Sends signal `sig` to the actor's process (Process::terminate and kill), once it has one;
  /// a SIGTERM is followed by SIGKILL if it still runs 2 s later. Nothing for an actor that is gone.
  virtual void signal_actor(std::uint64_t actor, int sig) {
    (void)actor;
    (void)sig;
  }
  /// Names the pool among the driver's pools (an actor handle sent to a task carries it).
  virtual std::uint64_t uid() const { return 0; }
  /// A task waiting for its Future arguments (+1), or queued or failed once they came (-1): join()
  /// waits for those too.
  virtual void hold_dependent(int delta) { (void)delta; }
  /// `job` waits for the outcomes of `deps` (its Future arguments): the event log says so when it
  /// is queued.
  virtual void note_dependencies(const std::shared_ptr<JobState>& job,
                                 const std::vector<std::shared_ptr<JobState>>& deps) {
    (void)job, (void)deps;
  }
  /// Queues the chunk of a task whose Future arguments came: as submit, but also after close().
  virtual void submit_dependent(const std::shared_ptr<JobState>& job, std::string payload) {
    submit(job, 0, 1, std::move(payload));
  }
  /// fibra::cancel: a chunk of `job` not yet handed out never runs, and with `force` one that runs
  /// is stopped (its executor ended); its outcome is then TaskCancelled. Returns whether it will be.
  virtual bool cancel(const std::shared_ptr<JobState>& job, bool force) {
    (void)job;
    (void)force;
    return false;
  }
  /// Throws ConfigError if no worker of this pool can ever offer `need` (`what` names the call).
  virtual void check_need(const Resources& need, const std::string& what) const {
    (void)need;
    (void)what;
  }
};

/// The FunctionEntry that a task's Actor<T>::get names (no function runs for it): its request and
/// its reply in the driver (src/calls/job.cpp).
const FunctionEntry& actor_find_entry();
/// The FunctionEntry of a task's call on a Queue, Pipe or Event (fibra/queue.hpp).
const FunctionEntry& channel_entry();

/// The core behind an actor handle that arrived in a message: in the driver the pool named `uid`;
/// in an executor, one that sends the calls to the driver. Throws Error if that pool is gone.
std::shared_ptr<PoolCore> core_for_actor_handle(std::uint64_t uid);

/// In an executor, a wait of the task's own thread runs the batches that arrive meanwhile instead
/// of sleeping (a task waiting for the tasks it submitted must not hold its worker). The hook
/// returns -1 when it does not apply (another thread), else whether `ready` came true in time.
using WaitHook = int (*)(const std::function<bool()>& ready, std::optional<std::chrono::nanoseconds> timeout);
void set_wait_hook(WaitHook hook) noexcept;
/// Waits through the hook when one applies (a task's own thread): -1 when none does, else whether
/// `ready` came true in time (fibra::wait inside a task).
int wait_with_hook(const std::function<bool()>& ready, std::optional<std::chrono::nanoseconds> timeout);

/// Starts `settings.workers` workers and waits until each has said hello (collective with the
/// spawned processes). Throws MpiError or ConfigError naming the fix.
std::shared_ptr<PoolCore> start_pool(const PoolSettings& settings);

/// Whether progress lines are drawn: FIBRA_PROGRESS=1 or 0, else when stderr is a terminal.
bool progress_wanted();
/// Maps' progress lines being drawn now (a task graph's line waits for them: one line at a time).
std::atomic<int>& maps_drawing_progress();

/// Progress on stderr for a long map/imap: "done/total, rate, ETA", redrawn at most twice a second.
class Progress {
 public:
  Progress(std::string label, std::optional<std::uint64_t> total, std::optional<bool> enabled);
  ~Progress();
  void advance(std::uint64_t items);
  void finish();

 private:
  void draw(bool final);
  std::string label_;
  std::optional<std::uint64_t> total_;
  bool on_;
  bool finished_ = false;
  std::uint64_t done_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace fibra::detail
