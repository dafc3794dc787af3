// The driver's side of a pool, one class over these files (each member's declaration below says
// which holds it):
//   pool.cpp           the public calls, start, the communication thread (loop, receive, handle) and stop
//   pool_dispatch.cpp  work to workers: the inbox of submitted calls, dispatch, stealing, cancel
//   pool_spawn.cpp     spawning (sizing, placement, GPU sharing, slots, failed spawns) and resize
//   pool_liveness.cpp  hellos, heartbeats and processes watched, a worker declared lost, goodbye
//   pool_elastic.cpp   Pool::adapt and joined workers (elastic.cpp decides, this applies)
//   pool_lanes.cpp     the lanes to the executors on the driver's host
//   pool_objects.cpp   stored objects sent to agents, fetched from peers, freed
//   pool_results.cpp   what comes back: results, failed attempts, retries and their messages
//   pool_requests.cpp  what tasks ask of the pool: nested submits, actor calls, calls on channels
//   pool_actors.cpp    actors' placement, calls and deaths
// and one part that owns its state: PoolEvents (pool_events.hpp), its entries in the event log
// (PoolOptions::events; event_log.hpp).
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
//  - inbox_, inbox_open_: under inbox_mu_ (taken after mu_, never before it): submit() appends
//    there without mu_, and the communication thread moves them into sched_ (take_inbox()).
//  - target_: written by resize() (a user's thread) under mu_, read under mu_ (the communication
//    thread through target_now() or a copy taken in adjust_size()); only start() reads it bare,
//    before the communication thread exists and before resize() can be called.
//  - closed_, closed_reason_, broken_, stopping_, stopped_, kicked_, spawn_error_, next_spawn_,
//    spawn_failures_: under mu_ only.
//  - sends_, next_watch_, watch_next_, hot_, groups_, last_receive_pass_, next_worker_id_: the communication thread's
//    alone, no lock (they are used with mpi::lock() held).
//  - freed_objects_: under freed_mu_ (a lock of its own: objects are freed on any thread, some of
//    them holding mu_); Worker::objects: the communication thread's alone.
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
#include "driver/scheduler.hpp"
#include "common/trace.hpp"
#include "transport/wire.hpp"
#include "common/process.hpp"
#include "common/unique_fd.hpp"

namespace fibra::detail {

// A chunk's payload and its batch's headers must fit in one MPI message (an int count of bytes).
constexpr std::size_t max_chunk_bytes = std::size_t(INT32_MAX) - 4096;
constexpr std::size_t batches_per_worker = 2;  // one running, one waiting: no gap between batches
constexpr double prefetch_limit_s = 0.05;      // ... for chunks expected to run shorter than this
constexpr int auto_agents = 4;  // PoolOptions::workers_per_agent = 0: workers spread over at most this many agents

// Batches sent to a worker and not all back. Its executors run side by side, so results come back
// in any order: each chunk remembers its batch.
class BatchesInFlight {
 public:
  void add(const std::vector<Chunk*>& chunks) {
    const std::uint32_t b = next_++;
    for (const Chunk* c : chunks) batch_of_[c->id] = b;
    left_[b] = chunks.size();
  }
  void done(std::uint64_t chunk) {
    auto it = batch_of_.find(chunk);
    if (it == batch_of_.end()) return;
    auto l = left_.find(it->second);
    if (l != left_.end() && --l->second == 0) left_.erase(l);
    batch_of_.erase(it);
  }
  std::size_t size() const { return left_.size(); }
  bool empty() const { return left_.empty(); }
  void clear() {
    batch_of_.clear();
    left_.clear();
  }

 private:
  std::uint32_t next_ = 0;
  std::unordered_map<std::uint64_t, std::uint32_t> batch_of_;
  std::unordered_map<std::uint32_t, std::size_t> left_;
};

// Agents started by one MPI_Comm_spawn_multiple: one intercommunicator (each agent a rank of its
// remote group) and one MPI job. The communication thread's alone.
struct Worker;
struct AgentGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<Worker*> members;  // by rank (a spawned worker is never erased from PoolImpl::workers_)
  int open = 0;                  // members neither lost nor done with the communicator (release_comm)
  // receive() probes the communicator once for all its members (any source), when one of them has
  // work out or is starting or leaving, or once its gap is over (as an idle agent's, Worker).
  double last_busy = 0, next_probe = 0;
  std::uint64_t urgent_pass = 0;  // the last receive() pass in which a member was hot (PoolImpl::hot_)
  bool split = false;             // MPI failed on a probe of any source: its members are probed one by one
  // Agents each of its processes speaks for: 1, or wire::Simulation::agents (the scale simulation,
  // where members[rank * per_rank + k] is agent k of process `rank`, its tags in block k).
  int per_rank = 1;
};

// One agent: an MPI process supervising `executors` executors (the pool's workers).
struct Worker {
  // starting: spawned, no hello yet; ready: takes work; retiring: finishes its batches, then is
  // told to leave; leaving: told, waiting for its bye; gone: said bye (disconnected at the end);
  // lost: declared dead; never sent to or read from again.
  enum class State { starting, ready, retiring, leaving, gone, lost };
  int id = 0;    // unique for the pool's life: who holds which chunk
  int slot = 0;  // what messages call it ("worker 3 of 4"): a replacement takes the number of the lost one
  MPI_Comm comm = MPI_COMM_NULL;  // its group's intercommunicator (MPI_COMM_NULL once released)
  int rank = 0;                   // its rank there
  int sub = 0;  // which of the agents its process speaks for (AgentGroup::per_rank; 0 for a real agent)
  // Its tags: `tag` in its block (wire::tags_per_agent).
  int tag_of(int tag) const { return tag + sub * wire::tags_per_agent; }
  std::shared_ptr<AgentGroup> group;
  std::string host;
  std::string planned_host;  // where it was spawned (PoolOptions::placement), before its hello says
  long pid = 0;
  State state = State::starting;
  int executors = 1;      // workers it runs: batches_per_worker batches each may be in flight
  int blocked = 0;        // its tasks that wait for what they requested: each makes room for a batch more
  Resources has;          // what each of its executors offers (the least of them)
  std::vector<int> gpus;  // indexes into PoolSettings::gpu_ids that its executors hold
  BatchesInFlight batches;
  // Its executors' lanes (src/transport/lane.hpp), mapped when it runs on the driver's host: batches that fit
  // go there, not through MPI and the agent. Empty elsewhere, or where they could not be opened.
  // The communication thread's alone (no lock); `shared_memory` says the same to user threads (mu_).
  std::vector<std::shared_ptr<LaneRegion>> lanes;  // shared: a result left in one holds it (drain_lanes)
  bool shared_memory = false;
  // On this host, with its lanes (or with lanes turned off): its tasks' large results that other
  // tasks take stay there (TaskHeader::keep_from), since the driver can open its memfds.
  bool keeps_results = false;
  // Its agent's ObjectServer (Hello::object_port; 0: none, or FIBRA_PEER_OBJECTS=0): peers copy
  // the objects it holds from there, and it copies from them (send_objects).
  std::uint32_t object_port = 0;
  std::string object_host;  // the address its ObjectServer listens on (Hello::object_host)
  // Objects it was told to copy from a peer (tag_object_fetch), and from which (Worker::id), in
  // case the copy fails (tag_object_missing): then the driver sends them, and that peer is not
  // asked of this worker again (a firewall, say). The communication thread's alone.
  std::unordered_map<std::uint64_t, std::pair<std::weak_ptr<const StoredObject>, int>> fetching;
  std::unordered_set<int> unreachable_peers;
  // Stored objects (fibra::put) sent to it: its agent keeps a copy until told they are freed.
  // The communication thread's alone.
  std::unordered_set<std::uint64_t> objects;
  // Of those, the ones its executors handed it (kept results, values tasks stored): how many times
  // since the last ObjectFree of each (wire::ObjectFree::handed).
  std::unordered_map<std::uint64_t, std::uint64_t> handed;
  // Its agent holds object `id`, handed over by one of its executors, until told it is freed.
  void hold_handed(std::uint64_t id) {
    objects.insert(id);
    ++handed[id];
  }
  // The lanes of the actors' processes it hosts, by key (ActorState::lane): drained with its own.
  // The communication thread's alone.
  std::map<std::uint64_t, std::shared_ptr<LaneRegion>> actor_lanes;
  std::set<std::uint64_t> actor_lanes_in_use;  // keys of those given a batch not yet answered: drained
  double spawned_at = 0, last_heard = 0, last_sent = 0, lost_at = 0;
  double pid_checked = 0;  // when watch_workers last looked for its process on this host
  // When something other than a heartbeat last went to or came from it, and when receive() next
  // probes its communicator if it has no batch out: an idle worker is probed less often the
  // longer it has been idle (up to every 10 ms), so that a pass of the communication thread costs
  // the workers at work, not all of them (issue 29).
  double last_busy = 0, next_probe = 0;
  bool hot = false;             // listed in PoolImpl::hot_: probed at every pass (PoolImpl::urgent)
  bool holds_slot = true;       // counted in g_agents_in_slots until its process is surely gone
  bool read_after_loss = true;  // lost, but what it still sends is read (late results)
  // A batch taken back from one of its lanes did not decode (its executor scribbled over it):
  // why, until the next pass over the lanes declares the worker lost (its batches retried).
  std::string lane_damage;
  // It joined from a launch of its own (src/driver/joins.hpp), not spawned: outside the pool's
  // target (Pool::resize), holding none of the allocation's slots, never replaced when lost.
  bool joined = false;
  std::string joined_from;  // where it came from ("Slurm job 812"), for WorkerInfo
  double idle_since = 0;    // joined: since when it has had no batch (Pool::adapt lets it go after a while)
  double job_ends_at = 0;   // joined from a Slurm job: when its time limit comes (mpi::now_s); 0: not known
  int joined_ranks = 1;     // processes of its launch: with more than one, retiring it alone would end the others
  bool alive() const { return state != State::gone && state != State::lost; }
};

// Actor calls are chunks of one item with ids of their own (this bit set), kept out of the
// scheduler: they go to one process in the order made, and are never retried elsewhere.
constexpr std::uint64_t actor_chunk_bit = std::uint64_t(1) << 63;

struct ActorCall {
  std::uint64_t chunk = 0;
  std::shared_ptr<JobState> job;
  std::shared_ptr<const std::string> payload;
  bool ctor = false;  // the constructor, which starts (and restarts) the actor
};

// One actor, on the driver (src/driver/pool_actors.cpp). Each start of it has a key of its own (the
// agent's name for its process), so that what the previous process sent is told apart.
struct ActorState {
  enum class State { placing, placed, dead };
  std::uint64_t id = 0;
  std::uint64_t key = 0;  // of the current start; 0 while placing
  const FunctionEntry* ctor = nullptr;
  std::shared_ptr<const std::string> ctor_args;
  ActorSettings settings;
  State state = State::placing;
  int worker = -1;  // Worker::id of its host while placed
  int restarts = 0;
  int handles = 1;                               // the driver's handles (start, and each Actor<T>::get)
  bool ended = false;                            // its last handle was dropped
  bool end_sent = false;                         // ... and its agent was told
  std::deque<ActorCall> queue;                   // not sent yet, in order
  std::map<std::uint64_t, ActorCall> in_flight;  // sent to the current process, by chunk id (= order)
  // The current process's lane, when its agent is on the driver's host (wire::ActorLane): once the
  // calls sent through MPI are back (`lane_active`), every batch goes there, one at a time, so
  // that none overtakes another.
  std::shared_ptr<LaneRegion> lane;
  bool lane_active = false;
  std::string death;  // why it is gone for good
};

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
    forget_object_frees(object_frees_token_);
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
    // Into the inbox, without mu_ (see Submitted): the communication thread queues it at its next
    // pass, and is woken only if it naps and this is the first item since it last looked.
    bool queued = false, first_in = false;
    {
      std::lock_guard il(inbox_mu_);
      if (inbox_open_) {
        job->set_pool_uid(uid_);  // fibra::cancel finds the pool from now on (cancel() takes the inbox first)
        first_in = inbox_.empty();
        inbox_.push_back({job, first, count, std::move(payload), events_ ? event_time_us() : 0});
        if (first_in) inbox_waiting_.store(true);
        queued = true;
      }
    }
    if (!queued) {  // the inbox is closed: say why
      std::lock_guard lk(mu_);
      if (broken_) std::rethrow_exception(broken_);
      throw PoolClosed("fibra: work was submitted to a pool that " + closed_reason_);
    }
    if (first_in && napping_.load()) {
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
    return target_ + joined_live_;
  }

  PoolStats stats() const override {
    std::lock_guard lk(mu_);
    PoolStats s = stats_;
    s.workers_ready = ready_count() + joined_ready_;
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
  bool still_heard(const Worker& w, double now) const;
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
  struct AgentGpus {
    std::vector<std::string> ids;  // CUDA_VISIBLE_DEVICES of each executor
    std::vector<int> held;         // indices into gpu_ids it takes
    int each = 0;                  // GPUs each executor gets (Worker::has)
  };
  AgentGpus share_gpus(int executors) const;
  std::string place_agent(int executors, int slot, mpi::Info& info) const;
  MPI_Comm spawn_processes(const std::vector<const mpi::Info*>& infos, int first);
  void check_slots(int n, int first) const;
  int free_slots() const;
  void free_slot(Worker& w);
  int free_slot_number() const;
  bool adjust_size();
  void on_spawn_failed(const Error& e);

  // ---- pool_liveness.cpp: hello, watch, loss, goodbye ------------------------------------------
  void on_hello(Worker& w, const wire::Hello& h);
  void watch_workers();
  bool process_gone_here(const Worker& w) const;
  static std::string seconds(double s);
  void declare_lost(Worker& w, const std::string& why);
  void release_comm(Worker& w);
  void group_member_lost(Worker& w);
  bool gpus_still_held() const;
  void say_goodbye();

  // Workers (executors) of agents that are starting or ready, and of ready ones: counted as states
  // change (set_state), not by a walk over every agent (issue 29). Under mu_, or on the
  // communication thread, which alone changes states.
  int live_count() const { return live_executors_; }
  int ready_count() const { return ready_executors_; }
  // Every change of a Worker's state goes through here (under mu_), to keep the counts above.
  void set_state(Worker& w, Worker::State s) {
    count_state(w, -1);
    w.state = s;
    count_state(w, +1);
  }
  void count_state(const Worker& w, int sign) {
    const bool ready = w.state == Worker::State::ready;
    if (ready || w.state == Worker::State::starting) (w.joined ? joined_live_ : live_executors_) += sign * w.executors;
    if (ready) (w.joined ? joined_ready_ : ready_executors_) += sign * w.executors;
    if (w.state == Worker::State::retiring) retiring_agents_ += sign;
  }
  int live_executors_ = 0, ready_executors_ = 0, retiring_agents_ = 0;
  // The same for workers that joined (Worker::joined), which the pool's target does not count.
  int joined_live_ = 0, joined_ready_ = 0;
  std::set<std::string> joined_jobs_;  // Slurm jobs whose agent joined (for Pool::adapt), under mu_
  int next_agent_size() const;         // (pool_spawn.cpp, as are the three below)
  std::vector<int> next_agent_sizes(int most) const;
  static constexpr int grow_together = 16;  // agents spawned together at most when the pool grows
  int agent_size(int target) const;
  static bool same_host(const std::string& a, const std::string& b);
  // target_ for the communication thread, which reads it outside mu_ elsewhere: resize() writes it.
  int target_now() const {
    std::lock_guard lk(mu_);
    return target_;
  }

  // ---- pool_requests.cpp: what tasks ask of the pool (nested submits, actor calls) -------------
  struct PendingReply {
    int worker;                     // Worker::id of the agent whose executor asked
    std::uint64_t route;            // which of its executors
    std::uint64_t id;               // the executor's number for the request
    std::shared_ptr<JobState> job;  // delivered: its outcome is the reply
    std::string notice;             // no job: a reply of id 0 that nothing asked for (a queue's recall)
    std::string encoded;            // no job: a whole Reply (an answer that did not fit in its ring)
  };
  // A process on this host whose calls on channels come through its lane's ring (ChannelOp::ring):
  // read at every pass of the communication thread, whether its worker is busy or not, until its
  // process ends (its route is gone, its actor died, its worker said bye or was lost), when what is
  // left in it is read first: a put that returned in the process is never lost with it.
  struct CallRing {
    Worker* worker = nullptr;
    int worker_id = 0;
    std::uint64_t route = 0;
    std::shared_ptr<LaneRegion> region;  // keeps the mapping while an answer may still be written
    std::string partial;                 // the first fragments of a call (the communication thread's)
    bool closing = false;                // let go of (the communication thread's): a bad call loses no worker now
    std::mutex reply_mu;                 // answers are written by whichever thread gives them
    bool closed = false;                 // under reply_mu: its process ended; answers still due are dropped (another
                                         // process may write this lane by now, under a CallRing of its own)
    std::map<std::uint64_t, UniqueFd> shared;  // under reply_mu: items handed over in memfds, by delivery
                                               // token, until the process acknowledges them
  };
  bool open_call_ring(Worker& w, std::uint64_t route);
  bool read_call_rings();
  bool read_call_ring(const std::shared_ptr<CallRing>& ring);
  void on_ring_call(const std::shared_ptr<CallRing>& ring, const std::string& bytes);
  /// Reads what is left in the rings of `w`'s processes (`route`: one of them) and lets them go.
  void close_call_rings(const Worker& w, std::optional<std::uint64_t> route, bool read_first = true);
  void read_call_ring_of(const Worker& w, std::uint64_t route);
  std::vector<std::shared_ptr<CallRing>> call_rings_;  // the communication thread's
  void on_request(Worker& w, const std::string& data);
  void queue_reply(PendingReply r);
  bool send_replies();  // the communication thread
  static std::uint64_t next_uid();
  std::mutex replies_mu_;
  std::vector<PendingReply> replies_;  // under replies_mu_
  std::atomic<bool> replies_waiting_{false};
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
  std::vector<JoinedAgent> joins_;  // under mu_: agents that joined, for the communication thread to take (take_joins)
  std::atomic<bool> joins_waiting_{false};  // set with joins_, so that take_joins looks without the lock
  // Pool::adapt: its worker jobs (set and dropped on users' threads under elastic_mu_, never under
  // mu_: its thread takes mu_; elastic_closed_: the pool stopped, no adapt() may start one), and,
  // under mu_, what the communication thread needs to let joined workers go (let_joined_go).
  std::unique_ptr<Elastic> elastic_;
  std::mutex elastic_mu_;
  bool elastic_closed_ = false;
  int adapt_min_ = 0;
  double adapt_idle_s_ = 0;                                // 0: no adapt
  double drain_before_s_ = AdaptOptions{}.drain_before_s;  // a joined worker leaves this long before its job's limit
  double next_joined_look_ = 0;                            // the communication thread's: when let_joined_go looks again
  std::uint64_t receive_passes_ = 0;
  double next_steal_look_ = 0;  // steal_for_idle looks at most once a millisecond (communication thread)
  // Under mu_: (worker id, chunk) to tell its agent (tag_cancel: fibra::cancel with force).
  std::vector<std::pair<int, std::uint64_t>> cancels_;
  // Under mu_: fibra::cancel of a task handed to a worker, which the communication thread takes
  // back if it has not started (take_back_unstarted); the verdict goes to the waiting caller.
  struct UnstartedCancel {
    std::shared_ptr<JobState> job;
    std::promise<bool> verdict;
  };
  std::vector<UnstartedCancel> unstarted_cancels_;
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
  const std::uint64_t lane_nonce_ = std::random_device{}() ^ (std::uint64_t(std::random_device{}()) << 32);
  double next_watch_ = 0;           // watch_workers' next sweep (communication thread)
  std::size_t watch_next_ = 0;      // ... and the index in workers_ it starts at
  double last_receive_pass_ = 0;    // when receive() last read every worker
  double next_spawn_ = 0;           // after a failed spawn, when to try again (guarded by mu_)
  int spawn_failures_ = 0;          // in a row (guarded by mu_)
  std::exception_ptr spawn_error_;  // the last failed spawn (resize() reports it)
  PoolStats stats_;                 // guarded by mu_
  bool kicked_ = false, closed_ = false, stopping_ = false, stopped_ = false;
  // Calls submitted and not yet queued (issue 29, item 4): apply_async's caller appends to the
  // inbox under a lock of its own, not mu_, which the communication thread holds through its
  // passes; the communication thread moves them all into sched_ at once (take_inbox()). Lock order:
  // mu_, then inbox_mu_. Closed (inbox_open_ false) wherever closed_ is set, before what is queued
  // is failed, so that nothing lands in it afterwards.
  struct Submitted {
    std::shared_ptr<JobState> job;
    std::uint64_t first;
    std::uint32_t count;
    std::string payload;
    std::int64_t at_us;  // when it was submitted, for the event log (0 with the log off)
  };
  std::mutex inbox_mu_;
  std::vector<Submitted> inbox_;        // under inbox_mu_
  std::vector<Submitted> inbox_taken_;  // under mu_ (swapped with inbox_ under both): being queued
  bool inbox_open_ = true;              // under inbox_mu_
  // Something waits in the inbox; the communication thread naps (set before it looks at its wake
  // conditions, which include inbox_waiting_: one of the two sides always sees the other).
  std::atomic<bool> inbox_waiting_{false}, napping_{false};
  std::size_t inbox_next_ = 0;  // under mu_: inbox_taken_'s first entry not yet in sched_
  bool take_inbox();            // under mu_ (pool_dispatch.cpp, as the next)
  void fail_inbox(const std::exception_ptr& e);
  bool inbox_empty() {  // under mu_: neither in the inbox nor left in inbox_taken_ by a throw
    std::lock_guard il(inbox_mu_);
    return inbox_.empty() && inbox_next_ == inbox_taken_.size();
  }
  void close_inbox() {  // under mu_
    std::lock_guard il(inbox_mu_);
    inbox_open_ = false;
  }
  std::string closed_reason_ = "was closed";  // "was closed (Pool::close())", ...: said by later calls
  std::exception_ptr broken_;
  // Stored objects freed since the last dispatch (fibra::put, driver/objects.hpp): the agents that
  // hold copies are told. Under freed_mu_.
  std::mutex freed_mu_;
  std::vector<std::uint64_t> freed_objects_;
  std::uint64_t object_frees_token_ = on_object_freed([this](std::uint64_t id) { queue_object_free(id); });
  // The agents that hold object `id` (Worker::objects) are told to drop it at the next dispatch.
  void queue_object_free(std::uint64_t id) {
    std::lock_guard lk(freed_mu_);
    freed_objects_.push_back(id);
  }

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
