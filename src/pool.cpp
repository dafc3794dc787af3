// The driver's side of a pool: spawning agents, the communication thread that feeds them batches
// and collects results, and stopping them. All MPI traffic of a pool runs on its one thread.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
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
  enum class State { starting, ready, retiring, leaving, gone };
  int id = 0;
  MPI_Comm comm = MPI_COMM_NULL;  // an intercommunicator of its own
  std::string host;
  long pid = 0;
  State state = State::starting;
  std::deque<std::uint32_t> batches;  // per batch sent: chunks without a result yet
  double last_heard = 0, last_sent = 0;
};

class PoolImpl;
std::mutex g_pools_mu;
std::vector<std::weak_ptr<PoolImpl>> g_pools;

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
    kick();
    state_cv_.wait(lk, [&] { return broken_ || ready_count() == target_; });
    if (broken_) std::rethrow_exception(broken_);
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
      MPI_Comm inter = MPI_COMM_NULL;
      int err = MPI_SUCCESS;
      int rc = MPI_Comm_spawn(exe.c_str(), argv, 1, info, 0, MPI_COMM_SELF, &inter, &err);
      if (rc != MPI_SUCCESS || err != MPI_SUCCESS) {
        throw MpiError("fibra: MPI_Comm_spawn could not start worker " + std::to_string(workers_.size() + 1) +
                       " of " + std::to_string(target_) + ": " + mpi::error_text(rc != MPI_SUCCESS ? rc : err) +
                       ". If there are too few slots: ask the allocation for more, or set FIBRA_OVERSUBSCRIBE=1 "
                       "to run more processes than slots (the default outside batch jobs)");
      }
      MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
      auto w = std::make_unique<Worker>();
      w->id = next_worker_id_++;
      w->comm = inter;
      w->last_heard = w->last_sent = mpi::now_s();
      std::lock_guard lk(mu_);
      workers_.push_back(std::move(w));
    }
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
        heartbeats();
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

  int ready_count() const {
    return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                          [](auto& w) { return w->state == Worker::State::ready; }));
  }

  bool receive() {
    bool got = false;
    mpi::Message m;
    for (auto& w : workers_) {
      if (w->state == Worker::State::gone) continue;
      for (int k = 0; k < 64 && mpi::try_recv(w->comm, m); ++k) {
        got |= m.tag != wire::tag_heartbeat;  // a heartbeat is no reason to stay awake
        w->last_heard = mpi::now_s();
        handle(*w, m);
      }
    }
    return got;
  }

  void handle(Worker& w, const mpi::Message& m) {
    switch (m.tag) {
      case wire::tag_hello: return on_hello(w, wire::decode_hello(m.data));
      case wire::tag_results: return on_results(w, wire::parse_results(m.data));
      case wire::tag_bye: {
        std::lock_guard lk(mu_);
        w.state = Worker::State::gone;
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
      throw ConfigError("fibra: worker " + std::to_string(w.id) + " on " + h.host + " (pid " + std::to_string(h.pid) +
                        ") has " + std::to_string(h.functions) + " remote functions registered, this driver has " +
                        std::to_string(registry_size()) +
                        " or others: driver and workers must run the same build of the program");
    }
    w.state = Worker::State::ready;
    state_cv_.notify_all();
  }

  void on_results(Worker& w, const wire::ResultBatch& b) {
    std::lock_guard lk(mu_);
    for (const auto& r : b.results) {
      if (!w.batches.empty() && --w.batches.front() == 0) w.batches.pop_front();
      if (r.header.status == wire::Status::not_run) {
        sched_.requeue(r.header.chunk, r.header.attempt);
        continue;
      }
      auto c = sched_.accept(r.header.chunk, r.header.attempt);
      if (!c) continue;  // an attempt already given up on: dropped, never counted twice
      ChunkOutcome o{c->first, c->count, {}, {}};
      if (r.header.status == wire::Status::ok) o.payload.assign(r.payload);
      else o.error = failure(w, *c, r, b.executor_pid);
      c->job->deliver(std::move(o));
    }
    if (sched_.idle()) state_cv_.notify_all();
  }

  std::string where(const Worker& w, long pid) const {
    return "worker " + std::to_string(w.id) + " of " + std::to_string(target_) + " on " + w.host + ", pid " +
           std::to_string(pid);
  }

  std::exception_ptr failure(const Worker& w, const Chunk& c, const wire::ResultView& r, std::int64_t exec_pid) {
    const std::string fn = c.job->fn().name;
    if (r.header.status == wire::Status::unknown_fn) {
      return std::make_exception_ptr(ConfigError("fibra: " + where(w, exec_pid) + " cannot run '" + fn + "': " +
                                                 std::string(r.payload)));
    }
    ItemFailure f = wire::decode_failure(r.payload);
    RemoteSite site{fn, c.first + f.offset, w.id, w.host, static_cast<long>(exec_pid)};
    const std::string item = "item " + std::to_string(site.item);
    if (r.header.status == wire::Status::crashed) {
      return std::make_exception_ptr(ExecutorCrashed(
          "fibra: the executor running " + fn + " on " + item + " " + f.message + " (" + where(w, exec_pid) +
              "); the worker carries on with a new executor",
          f.type, f.message, site));
    }
    return std::make_exception_ptr(RemoteError("fibra: " + fn + " raised " + f.type + " on " + item + ": " +
                                                   f.message + " (" + where(w, exec_pid) + ")",
                                               f.type, f.message, site));
  }

  // Gives each ready worker with room a batch of pending chunks.
  bool dispatch() {
    std::vector<std::pair<Worker*, std::vector<Chunk*>>> out;
    {
      std::lock_guard lk(mu_);
      if (sched_.pending() == 0) return false;
      const int ready = ready_count();
      for (auto& w : workers_) {
        if (w->state != Worker::State::ready || w->batches.size() >= batches_per_worker) continue;
        auto batch = sched_.take_batch(w->id, ready);
        if (batch.empty()) break;
        w->batches.push_back(static_cast<std::uint32_t>(batch.size()));
        out.emplace_back(w.get(), std::move(batch));
      }
    }
    // Chunks in flight are only touched by this thread, so the batches are built unlocked.
    for (auto& [w, chunks] : out) {
      std::size_t bytes = sizeof(std::uint32_t);
      for (Chunk* c : chunks) bytes += 64 + c->payload.size();
      std::string batch = wire::begin_batch();
      batch.reserve(bytes);
      for (Chunk* c : chunks) {
        wire::TaskHeader h{c->id, c->attempt, c->job->fn().id, c->job->mode(), c->first, c->count};
        wire::append_task(batch, h, c->payload);
      }
      wire::set_count(batch, static_cast<std::uint32_t>(chunks.size()));
      send(*w, wire::tag_tasks, std::move(batch));
    }
    return !out.empty();
  }

  void send(Worker& w, int tag, std::string data) {
    sends_.send(w.comm, 0, tag, std::move(data));
    w.last_sent = mpi::now_s();
  }

  void heartbeats() {
    const double now = mpi::now_s();
    for (auto& w : workers_)
      if (w->state == Worker::State::ready && now - w->last_sent > s_.heartbeat_s) send(*w, wire::tag_heartbeat, {});
  }

  // Spawns or retires workers until the pool has its target size.
  bool adjust_size() {
    int ready, target, live;
    {
      std::lock_guard lk(mu_);
      ready = ready_count();
      target = target_;
      live = static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [](auto& w) {
        return w->state == Worker::State::ready || w->state == Worker::State::starting;
      }));
    }
    if (live < target) {
      spawn(target - live);
      return true;
    }
    bool changed = false;
    for (auto it = workers_.rbegin(); it != workers_.rend() && live > target; ++it) {
      auto& w = **it;
      if (w.state == Worker::State::ready) {  // stop taking work; leave once its batches are done
        std::lock_guard lk(mu_);
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
    if (changed || ready != ready_count()) {
      std::lock_guard lk(mu_);
      state_cv_.notify_all();
    }
    return changed;
  }

  // ---- driver_stop ----------------------------------------------------------------------------
  // Every chunk still queued or running fails with `e`.
  void fail_all(const std::exception_ptr& e) {
    for (auto& c : sched_.take_all()) c->job->deliver({c->first, c->count, {}, e});
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
          if (w->state == Worker::State::gone) continue;
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
  s.heartbeat_s = options.heartbeat_s;
  s.driver_silence_s = options.driver_silence_s;
  s.start_timeout_s = options.start_timeout_s;
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
