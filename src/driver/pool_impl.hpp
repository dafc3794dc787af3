// The driver's side of a pool: the class that runs the loop, over these files (each member's
// declaration below says which holds it):
//   pool.cpp           the public calls, start, the communication thread (loop, receive, handle) and stop
//   pool_dispatch.cpp  work to workers: the inbox taken into the scheduler, dispatch, stealing, cancel
//   pool_spawn.cpp     spawning (plan, spawn, register, send setups), slots, failed spawns, resize
//   pool_liveness.cpp  hellos, the liveness sweep's verdicts, a worker declared lost, goodbye
//   pool_elastic.cpp   Pool::adapt and joined workers (elastic.cpp decides, this applies)
//   pool_lanes.cpp     the lanes to the executors on the driver's host
//   pool_objects.cpp   stored objects sent to agents, fetched from peers, freed
//   pool_results.cpp   what comes back: results, failed attempts, retries and their messages
//   pool_requests.cpp  what tasks ask of the pool: nested submits, actor calls, calls on channels
//   pool_actors.cpp    actors' placement, calls and deaths
// and the parts that own their state, each in its own header with its own tests: Scheduler (the
// chunks), SubmitInbox (calls submitted, not yet queued), ReplyQueue (answers to executors),
// CallRings (calls on channels through lanes), WorkerCounts (workers by state), SpawnPlanner (the
// next agents' sizes, GPUs, hosts) and SpawnBackoff (failed spawns), Liveness (who is silent,
// gone, owed a heartbeat), AgentObjects and FreedObjects (stored objects' copies on agents),
// JoinedWorkers (agents that joined, and when they leave), CancelRequests (fibra::cancel's for
// the communication thread), PoolEvents (its entries in the event
// log), PoolRegistry (the process's pools). The records: Worker (worker.hpp), ActorState (actor_state.hpp).
// All MPI traffic of a pool runs on its one communication thread, except in start(): the user's
// thread spawns the first workers, reading their hellos and sending them heartbeats in between,
// before that thread exists.
//
// Threads and locks. A pool's state is touched by two kinds of thread: the user's threads (the
// public calls: submit, size, stats, close, join, terminate, resize) and the pool's one
// communication thread (loop(), and start() on the user's thread before loop() runs, which counts
// as the communication thread). Two locks:
//  - mpi::lock(), process-wide (recursive): every MPI call of every pool is made under it (MPI is
//    initialised MPI_THREAD_SERIALIZED). The communication thread holds it for a pass of loop(),
//    start() per spawn, say_goodbye() per step; a user's thread never takes it.
//  - mu_, one per pool: guards what both kinds of thread touch. Taken inside mpi::lock(), never
//    the other way round, and never held across an MPI call or a wait for mpi::lock().
// Who writes what:
//  - workers_ and each Worker: the communication thread is the only writer, except that
//    fail_all() (terminate(), on a user's thread) clears every Worker::batches. It appends to
//    workers_ (and erases only the workers it planned for a spawn that failed, before any other thread
//    used them) and writes Worker::state, batches, host and pid under mu_, because
//    user threads read them under mu_ (ready_count(), live_count()); it reads them without mu_.
//    Worker::batches are read and written under mu_ only. The other fields of a Worker (comm,
//    last_heard, last_sent, holds_slot, ...) are the communication thread's alone: no lock.
//  - sched_ (the chunk table) and stats_: under mu_ only, from both kinds of thread.
//  - inbox_ (SubmitInbox): its own lock for the appends (taken after mu_, never before it):
//    submit() appends there without mu_; takers (the communication thread, fibra::cancel) take
//    under mu_ (take_inbox()).
//  - replies_ (ReplyQueue): its own lock; pushed from any thread, taken by the communication thread.
//  - rings_ (CallRings): the communication thread's; each ring's answers under its reply_mu.
//  - counts_ (WorkerCounts): as Worker::state, which it counts.
//  - cancels_ (CancelRequests): under mu_.
//  - joined_ (JoinedWorkers): under mu_, but for its look's timer (the communication thread's)
//    and its waiting flag (atomic: take_joins looks without the lock).
//  - target_: written by resize() (a user's thread) under mu_, read under mu_ (the communication
//    thread through target_now() or a copy taken in adjust_size()); only start() reads it bare,
//    before the communication thread exists and before resize() can be called.
//  - closed_, closed_reason_, broken_, stopping_, stopped_, kicked_, backoff_ (SpawnBackoff):
//    under mu_ only.
//  - sends_, liveness_, hot_, groups_, next_worker_id_: the communication thread's
//    alone, no lock (they are used with mpi::lock() held).
//  - freed_ (FreedObjects): a lock of its own (objects are freed on any thread, some of them
//    holding mu_); Worker::objects (AgentObjects): the communication thread's alone.
//  - planner_ (SpawnPlanner): no state of its own; it reads s_ and, on the communication thread
//    (or start()), workers_.
//  - A call's outcomes go to its JobState, which has its own mutex; g_agents_in_slots is atomic.
//  - events_ (the event log's part, pool_events.hpp): set by start() before the pool is handed
//    out, then only read. What it keeps (a call's number, the tasks' chunk ids, what a task waits
//    on) is under a lock of its own, and the log has one too: both taken inside mu_ where the
//    caller holds it, and never around a call into the pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "transport/lane.hpp"
#include "transport/mpi.hpp"
#include "driver/elastic.hpp"
#include "driver/dashboard.hpp"
#include "driver/event_log.hpp"
#include "driver/pool_events.hpp"
#include "driver/joins.hpp"
#include "driver/objects.hpp"
#include "driver/liveness.hpp"
#include "driver/joined_workers.hpp"
#include "driver/scheduler.hpp"
#include "driver/spawn_planner.hpp"
#include "driver/actor_state.hpp"
#include "driver/call_rings.hpp"
#include "driver/cancel_requests.hpp"
#include "driver/reply_queue.hpp"
#include "driver/submit_inbox.hpp"
#include "driver/worker.hpp"
#include "common/trace.hpp"
#include "transport/wire.hpp"
#include "common/process.hpp"
#include "common/unique_fd.hpp"

namespace fibra::detail {

// A chunk's payload and its batch's headers must fit in one MPI message (an int count of bytes).
constexpr std::size_t max_chunk_bytes = std::size_t(INT32_MAX) - 4096;
constexpr std::size_t batches_per_worker = 2;  // one running, one waiting: no gap between batches
constexpr double prefetch_limit_s = 0.05;      // ... for chunks expected to run shorter than this

// How an attempt failed, for retry decisions and messages.
enum class FailKind { raised, crashed, timed_out, lost, config };
inline const char* name_of(FailKind k) {
  switch (k) {
    case FailKind::raised: return "raised";
    case FailKind::crashed: return "crashed";
    case FailKind::timed_out: return "timed_out";
    case FailKind::lost: return "lost";
    case FailKind::config: return "config";
  }
  return "unknown";
}

/// A large result frame left in its lane's slot (PoolImpl::drain_lanes): the slot is given back
/// when the last outcome that views it is dropped (the call decoded it), from whichever thread that
/// is. `job` is the call its result went to (set by accept_result, under mu_).
class HeldFrame {
 public:
  HeldFrame(std::shared_ptr<LaneRegion> region, std::size_t size) : region_(std::move(region)), size_(size) {}
  HeldFrame(const HeldFrame&) = delete;  // one owner gives the slot back, once
  HeldFrame& operator=(const HeldFrame&) = delete;
  ~HeldFrame() { region_->lane().release_held(size_); }
  std::weak_ptr<JobState> job;

 private:
  std::shared_ptr<LaneRegion> region_;  // keeps the mapping
  std::size_t size_;
};

class PoolImpl final : public PoolCore, public std::enable_shared_from_this<PoolImpl> {
 public:
  explicit PoolImpl(const PoolSettings& s) : s_(s), target_(s.workers) {}
  std::uint64_t uid() const override { return uid_; }
  void note_dependencies(const std::shared_ptr<JobState>& job,
                         const std::vector<std::shared_ptr<JobState>>& deps) override {
    if (events_) events_->dependencies(job, deps);
  }
  /// The event log, or nullptr (set before the pool is handed out, then only read).
  std::shared_ptr<EventLog> event_log() const { return events_ ? events_->log() : nullptr; }
  ~PoolImpl() override {
    freed_.stop();  // (what terminate() frees is no agent's business any more)
    terminate();
  }

  // pool.cpp
  void start();
  void submit(const std::shared_ptr<JobState>& job, std::uint64_t first, std::uint32_t count,
              std::string payload) override {
    check_fits(job->policy().need, job->name());
    // Refused here, in the caller's thread, so that the pool stays usable: MPI cannot send it.
    if (payload.size() + 4 * std::size_t(count) > max_chunk_bytes)  // room for its skip list too
      throw ConfigError("fibra: a chunk of " + std::to_string(count) + " item(s) encodes to " +
                        std::to_string(payload.size()) + " bytes, over the " + std::to_string(max_chunk_bytes) +
                        " that one MPI message can carry (2 GiB); use a smaller chunksize, or smaller items");
    // Into the inbox, without mu_ (SubmitInbox): the communication thread queues it at its next
    // pass, and is woken only if it naps and this is the first item since it last looked.
    const auto put = inbox_.put(uid_, {job, first, count, std::move(payload), events_ ? event_time_us() : 0});
    if (put == SubmitInbox::Put::refused) {  // the inbox is closed: say why
      std::lock_guard lk(mu_);
      if (broken_) std::rethrow_exception(broken_);
      throw PoolClosed("fibra: work was submitted to a pool that " + closed_reason_);
    }
    if (put == SubmitInbox::Put::first && napping_.load()) {
      std::lock_guard lk(mu_);
      kick();
    }
  }

  // Names this pool in the job (fibra::cancel finds it so); false, with TaskCancelled delivered,
  // if a cancel came first. Under mu_.
  bool queue_unless_cancelled(const std::shared_ptr<JobState>& job) {
    job->set_pool_uid(uid_);
    if (!job->cancel_requested()) {
      graph_.tasks += job->is_task();
      return true;
    }
    if (job->claim_cancel_delivery()) job->deliver({0, 1, {}, cancelled_error(*job, "before it was queued"), {}});
    return false;
  }
  static std::exception_ptr cancelled_error(const JobState& job, const std::string& when) {
    return std::make_exception_ptr(TaskCancelled("fibra: " + job.name() + " was cancelled (fibra::cancel) " + when));
  }
  bool cancel(const std::shared_ptr<JobState>& job, bool force) override;                   // (pool_dispatch.cpp)
  std::optional<bool> cancel_actor_call(const std::shared_ptr<JobState>& job, bool force);  // (pool_actors.cpp)

  int size() const override {
    std::lock_guard lk(mu_);
    return target_ + counts_.joined_live();
  }

  PoolStats stats() const override {
    std::lock_guard lk(mu_);
    PoolStats s = stats_;
    s.workers_ready = ready_count() + counts_.joined_ready();
    return s;
  }

  void close() override {
    std::lock_guard lk(mu_);
    if (!closed_) closed_reason_ = "was closed (Pool::close())";
    closed_ = true;
    close_inbox();  // what it holds still runs
  }

  std::string closed_reason() const override {
    std::lock_guard lk(mu_);
    return closed_reason_;
  }

  bool closed() const override {
    std::lock_guard lk(mu_);
    return closed_;
  }

  RetryPolicy default_policy() const override { return s_.policy; }
  std::vector<WorkerInfo> workers() const override {
    static const char* names[] = {"starting", "ready", "retiring", "leaving", "gone", "lost"};
    std::lock_guard lk(mu_);
    std::vector<WorkerInfo> out;
    for (auto& w : workers_)
      out.push_back({w->slot, w->host, w->pid, w->executors, names[static_cast<int>(w->state)], w->shared_memory,
                     w->joined_from});
    return out;
  }
  // pool_actors.cpp
  std::uint64_t start_actor(const FunctionEntry& ctor, std::string args, ActorSettings s) override;
  void call_actor(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload) override;
  void reserve_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job) override;
  void queue_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job,
                        std::shared_ptr<const std::string> payload);
  static ActorDied actor_gone(const JobState& job);
  static ConfigError actor_args_too_big(const JobState& job, std::size_t bytes);
  void fill_actor_call(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload,
                       bool drop) override;
  void end_actor(std::uint64_t actor) noexcept override;
  std::uint64_t find_actor(const std::string& name, const std::string& class_name, bool counted = true) override;
  bool adopt_actor(std::uint64_t id) override;
  void signal_actor(std::uint64_t actor, int sig) override;
  void on_actor_request(Worker& w, std::uint64_t route, wire::Request& r);  // (pool_requests.cpp, as the next)
  void take_task_objects(Worker& w, const FunctionEntry& fn, const wire::Request& r, JobState& job);
  /// A task's call on a Queue, Pipe or Event (pool_requests.cpp; the channels are channels.cpp's).
  void on_channel_request(Worker& w, std::uint64_t route, wire::Request& r);
  /// The JobState of a request, answered to its executor once delivered (pool_requests.cpp).
  std::shared_ptr<JobState> answered_job(const FunctionEntry& fn, const Worker& w, std::uint64_t route,
                                         const wire::Request& r);
  ActorState* live_actor_named(const std::string& name);
  void join() override;  // (pool.cpp, as the next)
  void terminate() override;
  // pool_spawn.cpp
  void resize(int n) override;
  // pool_elastic.cpp
  /// From the join listener's thread: takes a worker that joined (its setup is sent from the
  /// communication thread); false if the pool no longer runs.
  bool adopt_join(JoinedAgent& j);
  void adapt(int min_workers, int max_workers, const AdaptOptions& options) override;
  Resources joined_offer() const;        // what each executor of a joined agent offers
  void adapt_as_the_spec_says(int own);  // (pool.cpp)
  std::atomic<bool> spec_adapt_{false};  // this pool took the spec's [elastic] (gives it back at stop)  //
                                         // FIBRA_ELASTIC_* (a job spec's [elastic]), at start

 private:
  // ---- pool.cpp: run (loop(), the communication thread) and stop ------------------------------
  void loop();
  bool receive();
  bool probe(Worker& w, bool lost);
  bool urgent(const Worker& w, double now) const;
  void mark_hot(Worker& w);
  void handle(Worker& w, mpi::Message& m);
  enum class Taken { more, done };
  Taken take_message(Worker& w, mpi::Message& m, bool lost);
  bool receive_group(AgentGroup& g, double now, bool urgent);
  void send(Worker& w, int tag, std::string data);
  void send(Worker& w, int tag, mpi::Pieces data);
  bool progress_sends();
  void fail_all(const std::exception_ptr& e);
  void stop();
  void kick() {
    kicked_ = true;
    wake_.notify_one();
  }

  // ---- pool_dispatch.cpp: work to workers ------------------------------------------------------
  bool dispatch(std::size_t batches_each = batches_per_worker);
  bool prefetch_pays() const;
  // What a chunk of each function took last, a second per item, by FunctionEntry::id (under mu_):
  // prefetch_pays' guess for a call not timed yet.
  std::unordered_map<std::uint64_t, double> seconds_per_item_of_;
  bool steal_for_idle();
  std::vector<wire::TaskView> parse_withdrawn(Worker& w, const std::string& batch);  // (pool_dispatch.cpp)
  static mpi::Pieces encode_batch(const std::vector<Chunk*>& chunks,
                                  std::vector<std::shared_ptr<const StoredObject>>& objects, std::uint64_t keep_from);

  // ---- pool_objects.cpp: stored objects --------------------------------------------------------
  static void add_objects(const JobState& job, wire::TaskHeader& h,
                          std::vector<std::shared_ptr<const StoredObject>>& objects);
  void send_objects(Worker& w, const std::vector<std::shared_ptr<const StoredObject>>& objects);
  void free_objects();
  static bool peer_objects_on();  // FIBRA_PEER_OBJECTS is not "0"

  // ---- pool_lanes.cpp: the lanes to executors on the driver's host -----------------------------
  bool post_to_lane(Worker& w, const mpi::Pieces& batch, std::uint32_t chunks);
  bool drain_lanes(Worker& w);
  std::vector<std::shared_ptr<LaneRegion>> open_lanes(const Worker& w, const wire::Hello& h);
  static bool lanes_on();  // FIBRA_LANES is not "0"

  // ---- pool_elastic.cpp: workers that joined, and Pool::adapt's view ----------------------------
  bool take_joins();
  Elastic::View elastic_view() const;
  bool let_joined_go(int live);

  // ---- pool_spawn.cpp: spawning (for start() and later growth), slots, sizes --------------------
  void spawn_agents(const std::vector<int>& executors);
  static wire::Simulation simulation_wanted();  // the scale simulation asked for (FIBRA_SIMULATED_AGENTS)
  wire::AgentSetup agent_setup(int executors) const;
  // The agents of one spawn, planned (plan_agents), spawned (spawn_planned), then registered
  // (register_group). What SpawnPlanner decides (sizes, GPUs, hosts, numbers) it is asked.
  struct AgentPlan {
    std::vector<wire::AgentSetup> setups;           // each agent's first message
    std::vector<std::unique_ptr<mpi::Info>> infos;  // one a process
    std::vector<Worker*> added;                     // the workers standing for them, each once in workers_
    std::vector<std::string> remote;                // the other hosts it starts agents on
    int per_rank = 1;                               // agents a process (AgentGroup::per_rank)
  };
  void plan_agents(const std::vector<int>& executors, AgentPlan& plan);
  MPI_Comm spawn_planned(const AgentPlan& plan);
  void register_group(const AgentPlan& plan, MPI_Comm inter);
  MPI_Comm spawn_processes(const std::vector<const mpi::Info*>& infos, int first);
  void check_slots(int n, int first) const;
  int free_slots() const;
  void free_slot(Worker& w);
  bool adjust_size();
  void on_spawn_failed(const Error& e);

  // ---- pool_liveness.cpp: hello, watch, loss, goodbye ------------------------------------------
  void on_hello(Worker& w, const wire::Hello& h);
  void watch_workers();
  void declare_lost(Worker& w, const std::string& why);
  void release_comm(Worker& w);
  void group_member_lost(Worker& w);
  bool gpus_still_held() const;
  void say_goodbye();

  // The workers by state (WorkerCounts): under mu_, or on the communication thread, which alone
  // changes states, each change through set_state.
  int live_count() const { return counts_.live(); }
  int ready_count() const { return counts_.ready(); }
  void set_state(Worker& w, Worker::State s) { counts_.change(w, s); }
  WorkerCounts counts_;
  int next_agent_size() const;  // (pool_spawn.cpp, as is the next)
  std::vector<int> next_agent_sizes(int most) const;
  static constexpr int grow_together = 16;  // agents spawned together at most when the pool grows
  // target_ for the communication thread, which reads it outside mu_ elsewhere: resize() writes it.
  int target_now() const {
    std::lock_guard lk(mu_);
    return target_;
  }

  // ---- pool_requests.cpp: what tasks ask of the pool (nested submits, actor calls) -------------
  /// The process at `route` of `w` asks to send its calls on channels through its lane: yes if the
  /// driver maps that lane (w's executors, or an actor's process whose lane it was told of).
  bool open_call_ring(Worker& w, std::uint64_t route);
  void on_ring_call(const std::shared_ptr<CallRing>& ring, const std::string& bytes);
  CallRings rings_{
      [this](const std::shared_ptr<CallRing>& ring, const std::string& bytes) { on_ring_call(ring, bytes); },
      [this](Worker& w, const std::string& why) {
        if (w.alive()) declare_lost(w, "its executor wrote a call that does not decode (" + why + ")");
      }};
  void on_request(Worker& w, const std::string& data);
  void queue_reply(PendingReply r);
  bool send_replies();  // the communication thread
  static std::uint64_t next_uid();
  ReplyQueue replies_;
  const std::uint64_t uid_ = next_uid();

  // What a worker of this pool can offer at best; a request beyond it can never run: ConfigError.
  void check_fits(const Resources& need, const std::string& what) const;  // (pool.cpp)

 public:
  void check_need(const Resources& need, const std::string& what) const override { check_fits(need, what); }
  void hold_dependent(int delta) override {
    std::lock_guard lk(mu_);
    dependents_ += delta;
    if (dependents_ == 0) state_cv_.notify_all();
  }
  void submit_dependent(const std::shared_ptr<JobState>& job, std::string payload) override;  // (pool_actors.cpp)

 private:
  // ---- pool_actors.cpp: actors' placement, calls and deaths (under mu_ unless said) ------------
  static void write_output(const wire::Output& o);  // (pool.cpp)
  bool dispatch_actors();                           // the communication thread, without mu_
  Worker* worker_by_id(int id) const;
  void place_actor(ActorState& a, std::unordered_map<int, int>& hosted);
  mpi::Pieces next_actor_batch(ActorState& a, std::vector<std::shared_ptr<const StoredObject>>& objects);
  ActorState* take_actor_call(std::uint64_t chunk, ActorCall& call);
  void actor_gone_for_good(ActorState& a, const std::string& why);
  void on_actor_result(const Worker& w, const wire::ResultView& r, std::int64_t exec_pid, std::string* whole,
                       const std::shared_ptr<HeldFrame>& keep);
  void open_actor_lane(Worker& w, const wire::ActorLane& m);
  bool drain_lane(Worker& w, const std::shared_ptr<LaneRegion>& r);  // (pool_lanes.cpp)
  void on_actor_death(const Worker& w, const wire::ActorDeath& d);
  void actor_died(ActorState& a, const std::string& why, std::uint64_t running_chunk, bool counts);
  void actors_leave(const Worker& w, const std::string& why, bool counts);
  void fail_actors(const std::exception_ptr& e);
  std::string actor_name(const ActorState& a) const;
  bool actors_idle() const;                                    // no actor call queued or in flight
  int dependents_ = 0;                                         // tasks waiting for their Future arguments (under mu_)
  std::map<std::uint64_t, ActorState> actors_;                 // by id; under mu_
  std::vector<std::pair<std::uint64_t, int>> actor_signals_;   // signal_actor's, until sent; under mu_
  std::unordered_map<std::uint64_t, std::uint64_t> actor_of_;  // call chunk -> actor id, while in flight
  std::unordered_map<std::uint64_t, std::uint64_t> actor_by_key_;  // key of a start -> actor id
  std::uint64_t next_actor_id_ = 1, next_actor_key_ = 1, next_actor_chunk_ = 1;

  // ---- pool_results.cpp: results and failed attempts -----------------------------------------
  void on_results(Worker& w, std::string& message) { on_results(w, message, &message, nullptr); }
  /// A message of results: `owned` (the message itself, given to a lone result) or `keep` (what
  /// holds the lane slot it lies in, shared with a lone result) or neither (results are copied).
  void on_results(Worker& w, std::string_view message, std::string* owned, const std::shared_ptr<HeldFrame>& keep);
  void accept_result(const wire::ResultHeader& h, std::string_view payload, std::vector<ItemOutcomeError> errors,
                     std::string* message = nullptr, const std::shared_ptr<HeldFrame>& keep = nullptr,
                     std::shared_ptr<const StoredObject> object = nullptr);
  void on_kept(Worker& w, const wire::ResultHeader& h, std::string_view payload, std::int64_t exec_pid);
  void on_kept_copy(Worker& w, std::string_view message);
  // (pool_objects.cpp, the three below)
  void on_object_missing(Worker& w, std::uint64_t id);
  void send_object_bytes(Worker& w, const std::shared_ptr<const StoredObject>& o);
  const Worker* object_peer(const Worker& w, std::uint64_t id) const;
  // Copies of results kept on other hosts (tag_kept_copy), by (executor pid, id), with the
  // Worker::id that sent them, until their kept result comes (on_kept) or that worker is lost.
  // The communication thread's.
  std::map<std::pair<std::int64_t, std::uint64_t>, std::pair<std::shared_ptr<const StoredObject>, int>> kept_copies_;
  bool late_keep(const Chunk& c, std::string_view payload) const;
  void store_late();
  // Outcomes late_keep chose, stored and delivered once on_results lets go of mu_ (store_late).
  // The communication thread's.
  std::vector<std::pair<std::shared_ptr<JobState>, ChunkOutcome>> to_store_;
  void on_partial(const Worker& w, const wire::ResultHeader& h, std::string_view payload, std::int64_t exec_pid);
  void on_failed_attempt(const Worker& w, const wire::ResultView& r, std::int64_t exec_pid);
  std::exception_ptr raised_error(const Worker& w, const Chunk& c, const ItemFailure& f, std::int64_t exec_pid);
  void attempt_failed(std::uint64_t id, std::uint32_t attempt, FailKind kind, std::exception_ptr e,
                      std::optional<std::uint32_t> item);
  std::exception_ptr with_history(const Chunk& c) const;
  static std::string error_text(const std::exception_ptr& e);
  std::string where(const Worker& w, long pid) const;
  std::string name(const Worker& w) const;

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
  // The communication thread's: the workers probed at every pass (mark_hot), a copy of them for
  // one pass, and every group of agents spawned together (AgentGroup), probed once per pass.
  std::vector<Worker*> hot_, probing_;
  std::vector<std::shared_ptr<AgentGroup>> groups_;
  // Pool::adapt: its worker jobs (set and dropped on users' threads under elastic_mu_, never under
  // mu_: its thread takes mu_; elastic_closed_: the pool stopped, no adapt() may start one), and
  // the workers that joined (JoinedWorkers: under mu_, but for what its comments give the
  // communication thread alone).
  std::unique_ptr<Elastic> elastic_;
  std::mutex elastic_mu_;
  bool elastic_closed_ = false;
  JoinedWorkers joined_;
  std::uint64_t receive_passes_ = 0;
  double next_steal_look_ = 0;  // steal_for_idle looks at most once a millisecond (communication thread)
  // fibra::cancel's requests for the communication thread (CancelRequests): kills to send, batches
  // to take back from the lanes (take_back_unstarted). Under mu_.
  CancelRequests cancels_;
  bool take_back_unstarted(const std::shared_ptr<JobState>& job);  // (pool_dispatch.cpp, as the next two)
  bool cancel_pending(const std::shared_ptr<JobState>& job);
  void requeue_or_cancel(std::uint64_t chunk, std::uint32_t attempt);
  std::map<const Lane*, std::uint64_t> stolen_while_;  // steal_for_idle: the chunk a lane ran at its last steal
  // The progress line of task graphs (issue 28, item 15; docs/tasks.md): counts under mu_, the
  // rest the communication thread's (draw_graph_progress).
  struct GraphProgress {
    bool on = progress_wanted();
    std::uint64_t tasks = 0, calls = 0;  // queued since the pool started (under mu_)
    double last_look = 0, busy_since = -1;
    double last_line = -1e9;      // when the last line was drawn (into a file: every 10 s at most)
    bool drawing = false;         // a line is drawn and not yet ended
    std::size_t last_length = 0;  // of that line
  } graph_;
  void draw_graph_progress();  // (pool.cpp)
  std::string my_host_ = host_name();
  SpawnPlanner planner_{s_, my_host_};  // (after s_ and my_host_, which it reads)
  Liveness liveness_{{s_.heartbeat_s, s_.worker_silence_s, s_.driver_silence_s, s_.start_timeout_s}, my_host_};
  const std::uint64_t lane_nonce_ = std::random_device{}() ^ (std::uint64_t(std::random_device{}()) << 32);
  SpawnBackoff backoff_;  // failed spawns (under mu_)
  PoolStats stats_;       // guarded by mu_
  bool kicked_ = false, closed_ = false, stopping_ = false, stopped_ = false;
  // Calls submitted and not yet queued (issue 29, item 4; SubmitInbox). Taken under mu_. Closed
  // wherever closed_ is set, before what is queued is failed, so that nothing lands in it afterwards.
  SubmitInbox inbox_;
  // The communication thread naps (set before it looks at its wake conditions, which include
  // inbox_.waiting(): one of the two sides always sees the other).
  std::atomic<bool> napping_{false};
  bool take_inbox();  // under mu_ (pool_dispatch.cpp, as the next)
  void fail_inbox(const std::exception_ptr& e) { inbox_.fail(e); }
  bool inbox_empty() { return inbox_.empty(); }  // under mu_
  void close_inbox() { inbox_.close(); }         // under mu_
  std::string closed_reason_ = "was closed";     // "was closed (Pool::close())", ...: said by later calls
  std::exception_ptr broken_;
  // Stored objects freed since the last dispatch (fibra::put, driver/objects.hpp): the agents that
  // hold copies (Worker::objects) are told (free_objects).
  FreedObjects freed_;

  // The event log's part (PoolOptions::events; src/driver/pool_events.hpp), or null: with it off,
  // each event costs one branch. Set by start() before the pool is handed out, then only read.
  std::unique_ptr<PoolEvents> events_;
  std::shared_ptr<Dashboard> dashboard_;  // the live page (PoolOptions::dashboard), or nullptr; set as events_
  // `ev` for a chunk that is ended while queued (the attempt it would have been) or in flight.
  void note_unsent_or_in_flight(std::string_view ev, const Chunk& c) {
    events_->outcome(ev, c.id, c.worker >= 0 ? c.attempt : c.attempt + 1);
  }
};

}  // namespace fibra::detail
