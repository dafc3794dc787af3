// The worker agent: an MPI process spawned by the driver. It supervises one or more executors
// (plain child processes that run user code, src/agent/supervised_executor.cpp), gives each batch the
// driver sends to its least busy executor, relays results back, and turns an executor's death into
// an ordinary message. It never runs user code, so user crashes never touch MPI state.
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <utility>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <sys/mman.h>
#include <utility>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "agent/held_objects.hpp"
#include "agent/supervised_executor.hpp"
#include "fibra/error.hpp"
#include "common/log.hpp"
#include "transport/mpi.hpp"
#include "common/trace.hpp"
#include "transport/object_memory.hpp"
#include "transport/object_server.hpp"
#include "transport/wire.hpp"
#include "agent/agent.hpp"
#include "agent/simulated_agents.hpp"
#include "common/process.hpp"
#include "common/env.hpp"

namespace fibra::detail {
namespace {

// An executor that holds work but is in no task for this long is stuck (in start-up, say).
constexpr double executor_stuck_s = 60;

// How long an agent waiting to copy a stored object waits for its peer to hold it (the peer may
// be copying it itself) before it asks the driver for it.
constexpr double peer_wait_s = 10;

// How long an agent waits for its setup (the driver's first message) before it gives up.
constexpr double setup_wait_s = 120;

// The driver's first message; nullopt if it did not come in time.
std::optional<wire::AgentSetup> receive_setup(MPI_Comm parent) {
  mpi::Napper napper;
  const double give_up = mpi::now_s() + setup_wait_s;
  mpi::Message m;
  while (mpi::now_s() < give_up) {
    if (mpi::try_recv(parent, m)) {
      if (m.tag == wire::tag_setup) return wire::decode<wire::AgentSetup>(m.data);
      if (m.tag == wire::tag_shutdown) return std::nullopt;
      continue;  // a heartbeat before the setup
    }
    std::this_thread::sleep_for(std::max(napper.next(), std::chrono::microseconds(100)));
  }
  return std::nullopt;
}

class Agent {
 public:
  Agent(MPI_Comm parent, const wire::AgentSetup& cfg) : parent_(parent), cfg_(cfg) {
    const int n = std::max(1, int(cfg.executors));
    for (int i = 0; i < n; ++i) {
      // "(worker 3" or "(agent 2 worker 1"; the executor adds " pid 1234) " (LineRelay)
      std::string prefix;
      if (cfg.prefix_output) {
        prefix = n == 1 ? "(worker " + std::to_string(cfg.slot)
                        : "(agent " + std::to_string(cfg.slot) + " worker " + std::to_string(i + 1);
      }
      executors_.push_back(std::make_unique<SupervisedExecutor>(i + 1, std::move(prefix), false, cfg.lane_nonce));
      executors_.back()->set_env(worker_env_for(i));
    }
    // It serves the objects it holds to its peers (agents on other hosts copy them from it). Where
    // the driver cannot open them (another host), the results it keeps are copied to the driver too.
    copies_to_driver_ = !shares_driver_host() || env::flag("FIBRA_OBJECTS_AS_REMOTE").value_or(false);  // tests
    try {
      // No secret given (FIBRA_PEER_OBJECTS=0, or none the driver could keep): objects come from it.
      secret_ = joined_secret();
      if (!secret_ && !cfg.secret_file.empty()) secret_ = auth::Secret::from_file(cfg.secret_file);
      if (secret_) {
        server_ = std::make_unique<ObjectServer>(*secret_, cfg.lane_nonce, cfg.encrypt_objects);
        held_objects_ = HeldObjects(server_.get());
      }
    } catch (const Error& e) {
      log::warning("fibra agent pid {} on {}: {}; stored objects reach it through the driver", ::getpid(), host_name(),
                   e.what());
    }
  }

  // Executor i's own variables: its GPUs, and its CPUs as OMP_NUM_THREADS unless the user set it.
  std::vector<std::pair<std::string, std::string>> env_for(int i) const {
    std::vector<std::pair<std::string, std::string>> env;
    if (!cfg_.gpus.empty())
      env.emplace_back("CUDA_VISIBLE_DEVICES", cfg_.gpus[std::min<std::size_t>(i, cfg_.gpus.size() - 1)]);
    env.emplace_back(env::Name("FIBRA_POOL_POLICY").c_str(), wire::policy_text(cfg_.policy));
    env.emplace_back(env::Name("FIBRA_KEEP_FREED").c_str(), std::to_string(cfg_.keep_freed_bytes));
    // On the driver's host, what a task stores (fibra::put) stays in its memory: the driver maps it.
    if (shares_driver_host()) env.emplace_back(env::Name("FIBRA_DRIVER_HOST").c_str(), "1");
    if (!std::getenv("OMP_NUM_THREADS"))
      env.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1L, std::lround(cfg_.cpus))));
    return env;
  }

  // A pool worker's: env_for's, with the pool's initializer and task limit (not an actor's).
  std::vector<std::pair<std::string, std::string>> worker_env_for(int i) const {
    auto env = env_for(i);
    if (cfg_.initializer.fn != 0)
      env.emplace_back(env::Name("FIBRA_INITIALIZER").c_str(), wire::initializer_text(cfg_.initializer));
    if (cfg_.max_tasks_per_child > 0)
      env.emplace_back(env::Name("FIBRA_MAX_TASKS").c_str(), std::to_string(cfg_.max_tasks_per_child));
    return env;
  }

  // Same host as the driver, and its processes visible here (same pid namespace, /proc readable):
  // the driver can then map what its executors store.
  bool shares_driver_host() const {
    if (cfg_.driver_host.empty() || cfg_.driver_host != host_name() || cfg_.driver_pid <= 0) return false;
    return ::access(("/proc/" + std::to_string(cfg_.driver_pid) + "/fd").c_str(), R_OK | X_OK) == 0;
  }

  bool retired() const { return retired_; }
  int run() {
    for (auto& e : executors_) e->start();
    // Idle, it naps up to 100 ms (a 40th of its quiet: after 4 s without a message): the driver
    // hands batches on its host to its executors itself, and anything else may wait that long.
    // With 10 ms, 32 idle agents and their executors took 13.5% of a core (issue 29).
    mpi::Napper napper(std::chrono::milliseconds(100));
    mpi::precise_sleeps();
    last_heard_ = mpi::now_s();
    while (!leaving_) {
      bool busy = receive_from_driver();
      busy |= collect_fetches();
      busy |= tend_executors();
      if (!said_hello_ &&
          std::all_of(executors_.begin(), executors_.end(), [](auto& e) { return e->started_or_failed(); })) {
        say_hello();  // the pool counts this agent's workers ready only once they are
        said_hello_ = true;
      }
      send_output();
      const bool sending = sends_.progress() > 0;
      const double now = mpi::now_s();
      keep_alive();
      if (now - last_heard_ > cfg_.driver_silence_s) {
        stop_executors();
        log::warning("fibra agent pid {}: the driver has been silent for {:.0f} s; exiting", ::getpid(),
                     cfg_.driver_silence_s);
        return 3;
      }
      if (busy) {
        napper.busy();
      } else if (awaiting_socket_results() && !sending && !awaiting_replies()) {
        // Its executors run: block on their sockets (a result wakes it at once) rather than spin
        // beside them; what the driver sends meanwhile is only the next batch, read within 1 ms.
        wait_a_little(std::chrono::milliseconds(1));
      } else if (auto nap = napper.next(sending); nap.count() > 0) {
        // A task waits for an answer from the driver: the naps of a busy agent, never over 1 ms.
        if (awaiting_replies() || !pending_.empty())
          nap = std::min<std::chrono::microseconds>(nap, std::chrono::milliseconds(1));
        wait_a_little(nap);
      } else {
        std::this_thread::yield();  // spinning for the driver: give a core to whoever needs one
      }
    }
    stop_executors();
    send_output();  // what they printed last
    send(wire::tag_bye, std::string());
    sends_.drain(5.0);
    return 0;
  }

 private:
  // A heartbeat when nothing went to the driver for heartbeat_s. Called between the steps of long
  // work too (starting thousands of actor processes took longer than worker_silence_s, and every
  // worker was declared lost), so that nothing the agent does starves it.
  void keep_alive() {
    if (mpi::now_s() - last_sent_ > cfg_.heartbeat_s) send(wire::tag_heartbeat, std::string());
  }

  void send(int tag, std::string data) {
    sends_.send(parent_, 0, tag, std::move(data));
    last_sent_ = mpi::now_s();
  }
  void send(int tag, mpi::Pieces data) {
    sends_.send(parent_, 0, tag, std::move(data));
    last_sent_ = mpi::now_s();
  }

  // What its executors printed since the last turn goes to the driver, which writes it out.
  void send_output() {
    AgentOutput& o = agent_output();
    if (!o.out.empty()) send(wire::tag_output, wire::encode(wire::Output{1, std::exchange(o.out, {})}));
    if (!o.err.empty()) send(wire::tag_output, wire::encode(wire::Output{2, std::exchange(o.err, {})}));
  }

  void say_hello() {
    wire::Hello h;
    h.fingerprint = registry_fingerprint();
    h.functions = registry_size();
    h.pid = ::getpid();
    h.host = host_name();
    for (auto& e : executors_) h.lane_fds.push_back(e->lane_fd());
    h.object_port = server_ ? server_->port() : 0;
    h.object_host = server_ ? server_->address() : std::string();
    h.copies_kept = copies_to_driver_;
    send(wire::tag_hello, wire::encode(h));
  }

  bool receive_from_driver() {
    bool got = false;
    mpi::Message m;
    while (!leaving_ && mpi::try_recv(parent_, m)) {
      keep_alive();
      got |= m.tag != wire::tag_heartbeat;  // a heartbeat is no reason to stay awake
      last_heard_ = mpi::now_s();
      if (m.tag == wire::tag_tasks || m.tag == wire::tag_actor_end || m.tag == wire::tag_cancel) {
        // While objects are copied from peers, batches wait, and so do the messages about what
        // batches start (an actor's end or signal, a cancel), to keep their order.
        if (pending_.empty())
          take_in_order(m.tag, std::move(m.data));
        else
          held_.emplace_back(m.tag, std::move(m.data));
      } else if (m.tag == wire::tag_reply) {
        give_reply(std::move(m.data));
      } else if (m.tag == wire::tag_object) {
        keep_object(m.data);
      } else if (m.tag == wire::tag_object_fetch) {
        start_fetch(wire::decode<wire::ObjectFetch>(m.data));
      } else if (m.tag == wire::tag_object_free) {
        const auto f = wire::decode<wire::ObjectFree>(m.data);
        if (pending_.erase(f.id)) release_held();  // no task will take it after all
        held_objects_.free(f.id, f.handed);
      } else if (m.tag == wire::tag_shutdown) {
        leaving_ = true;
        retired_ = m.data == wire::shutdown_retire;
      }
    }
    return got;
  }

  // A stored object (fibra::put) its executors will read: kept in a memfd they find by its name
  // (transport/object_memory.hpp) until the driver says it is freed. The driver sends it before
  // the first batch that takes it, and MPI keeps their order.
  void keep_object(std::string_view message) {
    wire::ObjectHead h;
    const std::string_view bytes = wire::object_bytes(message, h);
    try {
      held_objects_.hold(h.id, h.origin, h.size,
                         ObjectMemory::create(object_memfd_name(h.origin, h.id), bytes, "fibra agent"));
    } catch (const Error& e) {  // the tasks that take it fail, saying the object is not on this host
      log::error("fibra agent pid {} on {}: {}", ::getpid(), host_name(), e.what());
    }
    if (pending_.erase(h.id)) release_held();
  }

  // A memfd an executor handed over (a kept result, a value a task stored), held before the driver
  // looks for it, and counted (ObjectFree::handed). On another host the driver cannot open a kept
  // result: it is sent a copy (tag_kept_copy) before the result's frame, which MPI keeps in order,
  // while tasks on other hosts copy it from here (ObjectServer), not from the driver.
  void hold_handed(SupervisedExecutor::Handed h) {
    if (h.result && copies_to_driver_) send_kept_copy(h);
    held_objects_.hold_handed(h.id, h.origin, h.size, std::move(h.memory));
  }

  void send_kept_copy(const SupervisedExecutor::Handed& h) {
    const std::size_t n = h.size == 0 ? 1 : h.size;
    void* base = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, h.memory->fd(), 0);
    if (base == MAP_FAILED) return;  // the driver finds no copy: the task runs again, sending its result
    std::shared_ptr<const void> mapping(base, [n](const void* p) { ::munmap(const_cast<void*>(p), n); });
    send(wire::tag_kept_copy,
         mpi::Pieces::head_and_body(wire::encode(wire::ObjectHead{h.id, h.origin, h.size}),
                                    std::string_view(static_cast<const char*>(base), h.size), std::move(mapping)));
  }

  // A task batch (to the actor it is for or to its least busy executor), an actor's end or
  // signal, or a cancel.
  void take_in_order(int tag, std::string data) {
    if (tag == wire::tag_tasks) {
      if (const auto key = wire::batch_actor(data))
        give_actor(key, std::move(data));
      else
        least_busy().give(std::move(data));
    } else if (tag == wire::tag_actor_end) {
      const auto end = wire::decode<wire::ActorEnd>(data);
      auto it = actors_.find(end.actor);
      // A signal for one waiting to start: started now, so that it dies of it as any other would.
      if (it != actors_.end() && end.signal != 0 && it->second.waiting && !start_actor(it, false)) it = actors_.end();
      if (it != actors_.end()) {
        if (end.signal == 0) {
          it->second.ending = true;
        } else if (const pid_t pid = it->second.process->pid(); pid > 0) {
          ::kill(pid, end.signal);  // its death is reported as any other
          if (end.signal == SIGTERM && it->second.kill_at == 0) it->second.kill_at = mpi::now_s() + 2.0;
        }
      }
    } else if (tag == wire::tag_cancel) {
      cancelling_[wire::decode<wire::Cancel>(data).chunk] = mpi::now_s() + cancel_watch_s;
    }
  }

  // What came while objects were being copied goes on, in order, once none is.
  void release_held() {
    if (!pending_.empty()) return;
    while (!held_.empty()) {
      auto [tag, data] = std::move(held_.front());
      held_.pop_front();
      take_in_order(tag, std::move(data));
    }
  }

  // A stored object copied from a peer's ObjectServer, on a thread of its own (so that nothing
  // here waits: heartbeats go on); the batches that come meanwhile wait for it (held_).
  void start_fetch(const wire::ObjectFetch& f) {
    if (held_objects_.holds(f.head.id)) return;
    pending_.insert(f.head.id);
    ++fetching_;
    try {
      std::thread([box = fetched_, f, secret = secret_, pool = cfg_.lane_nonce, encrypt = cfg_.encrypt_objects] {
        Fetched done{f.head.id, f.head.origin, f.head.size, nullptr, {}};
        if (secret)
          done.memory =
              fetch_object(f.host, std::uint16_t(f.port), *secret, pool, object_memfd_name(f.head.origin, f.head.id),
                           f.head.size, peer_wait_s, encrypt, done.why);
        else
          done.why = "it holds no run secret to fetch with";
        std::lock_guard lk(box->mu);
        box->done.push_back(std::move(done));
      }).detach();
    } catch (const std::system_error& e) {  // no thread to be had: the driver sends it
      std::lock_guard lk(fetched_->mu);
      fetched_->done.push_back({f.head.id, f.head.origin, f.head.size, nullptr, e.what()});
    }
  }

  // Copies made since the last turn are held; one that failed is asked of the driver
  // (tag_object_missing), which sends the bytes.
  bool collect_fetches() {
    if (fetching_ == 0) return false;
    std::vector<Fetched> done;
    {
      std::lock_guard lk(fetched_->mu);
      done.swap(fetched_->done);
    }
    fetching_ -= int(done.size());
    for (auto& d : done) {
      if (!pending_.count(d.id)) continue;  // freed meanwhile, or the driver's copy came first
      if (!d.memory) {
        log::info("fibra agent pid {} on {}: could not copy stored object {} from a peer ({}); asking the driver",
                  ::getpid(), host_name(), d.id, d.why);
        send(wire::tag_object_missing, wire::encode(wire::ObjectFree{d.id, 0}));
        continue;
      }
      held_objects_.hold(d.id, d.origin, d.size, std::move(d.memory));  // and served on from here
      pending_.erase(d.id);
    }
    release_held();
    return !done.empty();
  }

  // The answer to a request of one of its executors (gone by now, perhaps: then it is dropped).
  void give_reply(std::string reply) {
    const auto r = wire::decode<wire::Reply>(reply);
    const auto route = r.route;
    SupervisedExecutor* e = nullptr;
    if (route & wire::route_actor_bit) {
      if (auto it = actors_.find(route & ~wire::route_actor_bit); it != actors_.end()) e = it->second.process.get();
    } else if (route >= 1 && route <= executors_.size()) {
      e = executors_[route - 1].get();
    }
    // id 0: a notice, not an answer; nor is one to a call the agent did not pass on (it came through the lane's ring)
    if (e && e->running()) e->give_reply(std::move(reply), r.id != 0 && !r.from_ring);
  }

  // What its tasks asked of the pool goes to the driver, marked with the way back (`route`); a
  // change in how many of its tasks wait goes too (the driver gives a waiting worker more work).
  void pass_on_requests(SupervisedExecutor& e, std::uint64_t route) {
    for (auto& r : e.take_requests()) send(wire::tag_request, wire::routed_request(route, r));
    blocked_delta_ += e.take_blocked_delta();
  }

  // The process a route reached ended: the driver drops what it waited for on queues, and puts
  // back the items it was sent and did not acknowledge (after its last requests, sent above).
  void route_gone(std::uint64_t route, const SupervisedExecutor& e) {
    send(wire::tag_route_gone, wire::encode(wire::RouteGone{route, e.take_ahead_taken()}));
  }

  void pass_on_blocked() {
    if (blocked_delta_ == 0) return;
    send(wire::tag_blocked, wire::encode(wire::WaitDelta{blocked_delta_}));
    blocked_delta_ = 0;
  }

  // An actor's calls go to its own process, started with its first batch (its constructor). An
  // actor whose process died takes no more calls here: the driver was told, and starts it again
  // under another key if it may. Processes start a few at a time (max_starting): thousands started
  // at once shared the cores so thinly that none was ready within the stuck-executor limit (5,000
  // actors on 2 workers: 3,541 killed as stuck); the others wait, their calls queued.
  void give_actor(std::uint64_t key, std::string batch) {
    if (dead_actors_.count(key)) return;
    auto it = actors_.find(key);
    if (it == actors_.end()) {
      if (auto spare = take_spare()) {
        it = actors_.emplace(key, ActorProcess{std::move(spare), false, 0, 0, false, 0, false}).first;
        ++actors_starting_;  // until its "started" frame is read (a spare's socket is not read before)
      } else {
        it = actors_.emplace(key, ActorProcess{new_actor_process(), false, 0, 0, false, 0, true}).first;
        if (actors_starting_ < max_starting_ && !start_actor(it)) return;
      }
    }
    it->second.process->give(std::move(batch));  // (queued until its process starts)
    ++it->second.batches;
    tell_actor_lane(*it);
  }

  // A process for an actor, not started. All of them on this agent are alike until their first
  // batch (the same environment, output prefix and lane nonce): a spare can stand in for any.
  std::unique_ptr<SupervisedExecutor> new_actor_process() const {
    std::string prefix;
    if (cfg_.prefix_output) prefix = "(actor on worker " + std::to_string(cfg_.slot);
    auto e = std::make_unique<SupervisedExecutor>(0, std::move(prefix), true, cfg_.lane_nonce);
    e->set_env(env_for(0));
    return e;
  }

  // Spares (PoolOptions::spare_processes): from its first actor on, an agent keeps that many actor
  // processes started ahead of need, loaded and waiting on their sockets; the next actor (a
  // fibra::Process) takes one instead of waiting for its process to be made, loaded and set up.
  // A spare starts only while no actor's process here is starting or running a call (actors_busy),
  // and one that dies unused ends the spares of this agent (a program whose processes die as they
  // start would otherwise be started again and again).
  std::unique_ptr<SupervisedExecutor> take_spare() {
    spares_wanted_ = true;
    while (!spares_.empty()) {
      auto e = std::move(spares_.front());
      spares_.erase(spares_.begin());
      if (!e->exited()) return e;
      spare_died(*e);
    }
    return nullptr;
  }

  void tend_spares() {
    for (auto it = spares_.begin(); it != spares_.end();) {
      (*it)->relay_output();
      if (!(*it)->exited()) {
        ++it;
        continue;
      }
      spare_died(**it);
      it = spares_.erase(it);
    }
    if (!spares_wanted_ || spares_failed_ || leaving_ ||
        spares_.size() >= static_cast<std::size_t>(std::max(0, cfg_.spare_processes)) || actors_busy())
      return;
    auto e = new_actor_process();
    try {
      e->start();
    } catch (const Error& err) {  // out of processes or descriptors, say: actors start as they come
      log::warning("fibra agent pid {} on {}: {}; it keeps no spare process from now on", ::getpid(), host_name(),
                   err.what());
      spares_failed_ = true;
      return;
    }
    spares_.push_back(std::move(e));
  }

  // An actor's process here is starting or holds calls (a Process runs): a spare started now would
  // take CPU from it, and the agent's own time (posix_spawn waits for the exec), just when a start
  // is meant to be quick. Two Processes started together as the agent began a spare for each read
  // their first items 16-45 ms after start() (5-17 ms with spares started once the agent is idle).
  bool actors_busy() const {
    return actors_starting_ > 0 ||
           std::any_of(actors_.begin(), actors_.end(), [](auto& a) { return a.second.process->load() > 0; });
  }

  void spare_died(SupervisedExecutor& e) {
    const pid_t pid = e.pid();
    e.stop(0);  // reaped already: what it printed last is passed on
    log::warning(
        "fibra agent pid {} on {}: its spare process (pid {}) {} before any actor or Process used it; it keeps no "
        "spare from now on, and actors' processes start as they come (PoolOptions::spare_processes)",
        ::getpid(), host_name(), pid, describe_exit(e.exit_status()));
    spares_failed_ = true;
  }

  // How many actor processes may be starting at once (spawned, not yet ready): 8 for each core of
  // its workers (AgentSetup::cpus each), at least 16. From the machine's core count instead, every
  // agent of a 64-core node would start 512 at once.
  int max_starting() const {
    return std::max(16, int(8 * std::lround(std::max(1.0, cfg_.cpus * double(std::max(1, int(cfg_.executors)))))));
  }

  // Starts a waiting actor's process; false (the driver told, the actor gone) if it cannot be.
  // `tell_lane`: false for one started only to be signalled.
  bool start_actor(auto it, bool tell_lane = true) {  // an iterator of actors_
    try {
      it->second.process->start();
    } catch (const Error& err) {
      dead_actors_.insert(it->first);
      send(wire::tag_actor_died, wire::encode(wire::ActorDeath{it->first, 0, 0, err.what()}));
      actors_.erase(it);
      return false;
    }
    it->second.waiting = false;
    ++actors_starting_;
    if (tell_lane) tell_actor_lane(*it);
    return true;
  }

  // From its second batch on, a driver on this host may hand an actor calls through its lane: told
  // then, not at its start (one more message for each of thousands of actors called once made
  // them start 40% slower: 2,000 in 12.5 s, not 8.5), and not before its process runs; or as soon
  // as its process calls a channel, or starts to run a Process (Mailbox::wants_lane), whose calls
  // then take the lane.
  void tell_actor_lane(auto& a) {  // an element of actors_
    if (a.second.lane_told || a.second.waiting || (a.second.batches < 2 && !a.second.process->wants_lane())) return;
    send(wire::tag_actor_lane, wire::encode(wire::ActorLane{a.first, a.second.process->lane_fd()}));
    a.second.lane_told = true;
  }

  // Actors' processes: results go on as any executor's; a death is told to the driver (ActorDeath)
  // instead of a report of the calls, and the process is not started again here.
  bool tend_actors(double now, std::vector<std::string>& frames) {
    bool busy = false;
    int starting = 0, waiting = 0;
    for (auto it = actors_.begin(); it != actors_.end();) {
      keep_alive();              // thousands of actors take a while to tend
      if (it->second.waiting) {  // its process has not started yet (max_starting)
        ++waiting;
        ++it;
        continue;
      }
      SupervisedExecutor& e = *it->second.process;
      e.relay_output();
      tell_actor_lane(*it);
      e.wake_for_lane();
      busy |= e.write();
      bool got = false;
      const bool alive = e.read(frames, got);
      busy |= got;
      for (auto& h : e.take_kept()) hold_handed(std::move(h));
      for (auto& f : frames) forward(std::move(f));
      frames.clear();
      pass_on_requests(e, it->first | wire::route_actor_bit);
      if (it->second.stop_by > 0 && (!alive || now > it->second.stop_by)) {
        e.stop(0.1);  // it exited (or it takes too long: SIGKILL)
        route_gone(it->first | wire::route_actor_bit, e);
        it = actors_.erase(it);
        busy = true;
        continue;
      }
      if (alive && it->second.kill_at > 0 && now > it->second.kill_at && e.pid() > 0) {
        ::kill(e.pid(), SIGKILL);
        it->second.kill_at = 0;
      }
      if (alive && !e.enforce_time_limit(now, executor_stuck_s)) {
        if (it->second.ending && it->second.stop_by == 0 && e.load() == 0 && !e.wants_to_write()) {
          e.begin_stop();  // its calls are done and no handle is left: it exits; reaped on a later pass
          it->second.stop_by = now + 5.0;
        }
        if (!e.ready()) ++starting;  // (as it is after this pass: one that died is gone)
        ++it;
        continue;
      }
      if (!alive) (void)e.report_death();
      blocked_delta_ += e.take_blocked_delta();
      const auto& d = e.last_death();
      send(wire::tag_actor_died, wire::encode(wire::ActorDeath{it->first, d.chunk, d.pid, d.why}));
      route_gone(it->first | wire::route_actor_bit, e);
      dead_actors_.insert(it->first);
      it = actors_.erase(it);
      busy = true;
    }
    // Waiting actors start, in the order they came, as the ones starting become ready.
    actors_starting_ = starting;
    for (auto it = actors_.begin(); waiting > 0 && it != actors_.end() && actors_starting_ < max_starting_;) {
      auto next = std::next(it);
      if (it->second.waiting) {
        keep_alive();
        --waiting;
        if (!start_actor(it)) break;  // out of processes or descriptors, say: the others wait for the next pass
        busy = true;
      }
      it = next;
    }
    return busy;
  }

  // The executor that holds the fewest chunks (a running one before one waiting to restart).
  SupervisedExecutor& least_busy() {
    return **std::min_element(executors_.begin(), executors_.end(), [](auto& a, auto& b) {
      return std::make_pair(!a->running(), a->load()) < std::make_pair(!b->running(), b->load());
    });
  }

  // fibra::cancel with force: an executor in a chunk being cancelled is killed, and its death is
  // reported as any other (the driver delivers TaskCancelled). The driver takes back what has not
  // started from the lanes; a chunk that came through the socket is watched for cancel_watch_s
  // (a chunk that starts later, behind a long task, runs; the driver still delivers TaskCancelled).
  void stop_cancelled(double now) {
    for (auto it = cancelling_.begin(); it != cancelling_.end();) {
      bool stopped = false;
      for (auto& e : executors_)
        if (e->running() && e->current_chunk() == it->first) {
          e->kill_for_cancel(it->first);
          stopped = true;
        }
      it = stopped || now > it->second ? cancelling_.erase(it) : std::next(it);
    }
  }

  // Writes batches, reads results, enforces time limits and restarts dead executors.
  bool tend_executors() {
    bool busy = false;
    const double now = mpi::now_s();
    std::vector<std::string> frames;
    if (!cancelling_.empty()) stop_cancelled(now);
    for (auto& e : executors_) {
      e->start_if_due(now);
      e->wake_for_lane();
      e->relay_output();
      busy |= e->write();
      bool got = false;
      const bool alive = e->read(frames, got);
      busy |= got;
      for (auto& h : e->take_kept()) hold_handed(std::move(h));
      for (auto& f : frames) forward(std::move(f));
      frames.clear();
      const std::uint64_t route = static_cast<std::uint64_t>(&e - executors_.data()) + 1;
      pass_on_requests(*e, route);
      if (!alive) {
        report(e->report_death());
        route_gone(route, *e);
        busy = true;
      } else if (auto r = e->enforce_time_limit(now, executor_stuck_s)) {
        report(std::move(*r));
        route_gone(route, *e);
        busy = true;
      }
    }
    busy |= tend_actors(now, frames);
    tend_spares();
    for (auto& e : executors_) blocked_delta_ += e->take_blocked_delta();  // deaths undo their waits
    pass_on_blocked();
    return busy;
  }

  void forward(std::string frame) {
    std::vector<std::uint64_t> traced;
    if (trace::detail::on)
      for (const auto& r : wire::parse_results(frame).results) traced.push_back(r.header.chunk);
    send(wire::tag_results, std::move(frame));
    for (auto id : traced) trace::mark(trace::agent_sent, id);
  }

  // Results are due through a socket. Work given through a lane alone does not count: its results go
  // to the driver, and a 1 ms block on the sockets then held back the driver's next message (an
  // actor's call behind a task through the lane took 1.1 ms a round trip, not 60 us). The naps
  // below still poll those sockets, so a task's nested request wakes the agent.
  bool awaiting_socket_results() const {
    return std::any_of(executors_.begin(), executors_.end(), [](auto& e) { return e->awaits_socket_results(); }) ||
           std::any_of(actors_.begin(), actors_.end(),
                       [](auto& a) { return a.second.process->awaits_socket_results(); });
  }

  // A task waits for the driver's answer to its request: the driver is read again soon (the naps
  // of a busy agent), not after a block of 1 ms on the sockets (a queue's put took 1.35 ms so).
  bool awaiting_replies() const {
    return std::any_of(executors_.begin(), executors_.end(), [](auto& e) { return e->awaits_replies(); }) ||
           std::any_of(actors_.begin(), actors_.end(), [](auto& a) { return a.second.process->awaits_replies(); });
  }

  void report(std::string results) {
    if (!results.empty()) send(wire::tag_results, std::move(results));
  }

  // All of them at once: each gets the end of its input now, and together they have 2 s to finish
  // the chunk they are on (one after another, 16 busy executors would take 32 s).
  void stop_executors() {
    for (auto& e : executors_) e->begin_stop();
    for (auto& [key, a] : actors_) a.process->begin_stop();
    for (auto& e : spares_) e->begin_stop();
    const double deadline = mpi::now_s() + 2.0;
    for (auto& e : executors_) e->stop(std::max(0.0, deadline - mpi::now_s()));
    for (auto& [key, a] : actors_) a.process->stop(std::max(0.0, deadline - mpi::now_s()));
    for (auto& e : spares_) e->stop(std::max(0.0, deadline - mpi::now_s()));
    actors_.clear();
    spares_.clear();
  }

  // Naps in ppoll on the sockets of executors that hold work (so that results wake it at once),
  // or in nanosleep when none does.
  void wait_a_little(std::chrono::microseconds nap) {
    timespec ts{0, static_cast<long>(nap.count()) * 1000};
    std::vector<pollfd> fds;
    for (auto& e : executors_)
      if (e->holds_work())
        fds.push_back({e->socket(), static_cast<short>(POLLIN | (e->wants_to_write() ? POLLOUT : 0)), 0});
    for (auto& [key, a] : actors_)
      if (a.process->holds_work())
        fds.push_back(
            {a.process->socket(), static_cast<short>(POLLIN | (a.process->wants_to_write() ? POLLOUT : 0)), 0});
    if (fds.empty())
      ::nanosleep(&ts, nullptr);
    else
      ::ppoll(fds.data(), fds.size(), &ts, nullptr);
  }

  MPI_Comm parent_;
  wire::AgentSetup cfg_;
  mpi::SendQueue sends_;
  std::vector<std::unique_ptr<SupervisedExecutor>> executors_;
  struct ActorProcess {
    std::unique_ptr<SupervisedExecutor> process;
    bool ending = false;     // its last handle is gone: it stops once its calls are done
    double stop_by = 0;      // told to stop: reaped once it exits, killed after this time
    int batches = 0;         // given so far (until lane_told)
    bool lane_told = false;  // the driver was sent its lane (wire::ActorLane)
    double kill_at = 0;      // sent SIGTERM (Process::terminate): SIGKILL if it still runs then
    bool waiting = false;    // its process waits to start (max_starting)
  };
  int actors_starting_ = 0;  // actors' processes started and not yet ready (as of the last tend_actors)
  const int max_starting_ = max_starting();
  std::map<std::uint64_t, ActorProcess> actors_;  // by TaskHeader::actor
  std::set<std::uint64_t> dead_actors_;
  std::vector<std::unique_ptr<SupervisedExecutor>> spares_;  // actors' processes started ahead of need (take_spare)
  bool spares_wanted_ = false;                               // an actor came: spares are kept from now on
  bool spares_failed_ = false;                               // one died unused or could not start: no more
  int blocked_delta_ = 0;                       // change in its executors' waiting tasks, not yet told to the driver
  std::map<std::uint64_t, double> cancelling_;  // chunks to stop (tag_cancel), watched until then
  std::optional<auth::Secret> secret_;          // the run's: its object server's and its fetches' (docs/security.md)
  // Serves the objects it holds to peer agents (on another host than the driver's).
  std::unique_ptr<ObjectServer> server_;
  // Stored objects: copies the driver sent (tag_object) or a peer served, results its executors kept.
  HeldObjects held_objects_{nullptr};
  bool copies_to_driver_ = false;  // its executors' kept results, since the driver cannot open them here
  // Objects being copied from peers (tag_object_fetch), and the batches that came meanwhile.
  struct Fetched {
    std::uint64_t id = 0;
    std::int64_t origin = 0;
    std::uint64_t size = 0;
    std::unique_ptr<ObjectMemory> memory;
    std::string why;
  };
  struct FetchBox {
    std::mutex mu;
    std::vector<Fetched> done;
  };
  std::shared_ptr<FetchBox> fetched_ = std::make_shared<FetchBox>();  // shared with the fetching threads
  std::set<std::uint64_t> pending_;
  int fetching_ = 0;  // copies under way, or done and not collected yet
  std::deque<std::pair<int, std::string>> held_;
  static constexpr double cancel_watch_s = 60;
  double last_heard_ = 0, last_sent_ = 0;
  bool leaving_ = false;
  bool retired_ = false;  // told to leave before the pool's other agents (wire::shutdown_retire)
  bool said_hello_ = false;
};

}  // namespace

int agent_main(MPI_Comm parent, bool& retired) {
  ::signal(SIGPIPE, SIG_IGN);
  // mpirun forwards SIGUSR1/SIGUSR2 to every process it started; they are meant for the driver
  // (checkpoint and requeue), whose agents must not die of them.
  ::signal(SIGUSR1, SIG_IGN);
  ::signal(SIGUSR2, SIG_IGN);
  try {
    const auto setup = receive_setup(parent);
    if (!setup) {
      log::error("fibra agent pid {} on {}: no setup from the driver within {:.0f} s; exiting", ::getpid(), host_name(),
                 setup_wait_s);
      return 3;
    }
    if (setup->simulation.agents > 0) return simulated_agents_main(parent, *setup);  // the scale simulation
    Agent a(parent, *setup);
    const int rc = a.run();
    retired = a.retired();
    return rc;
  } catch (const std::exception& e) {
    log::error("fibra agent pid {} on {}: {}", ::getpid(), host_name(), e.what());
    return 2;
  }
}

}  // namespace fibra::detail
