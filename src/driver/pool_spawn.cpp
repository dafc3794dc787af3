// Spawning a pool's workers on the driver: agents together in one MPI_Comm_spawn_multiple, within
// the allocation's slots, placed on hosts, GPUs shared out; the pool's size kept at its target
// (resize); a failed spawn.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <mutex>
#include <condition_variable>
#include <string>
#include <thread>

#include "fibra/error.hpp"
#include "common/log.hpp"
#include "driver/channels.hpp"
#include "driver/pool_impl.hpp"
#include "driver/spawn_planner.hpp"
#include "driver/run_secret.hpp"
#include "driver/resources.hpp"
#include "common/process.hpp"
#include "driver/driver.hpp"
#include "roles.hpp"
#include "common/env.hpp"

namespace fibra::detail {

std::atomic<int> g_agents_in_slots{0};

namespace {

// An agent retired while its job-mates go on ends without MPI_Finalize (src/runtime.cpp), for which
// Open MPI's daemon, a process of its own, prints "PMIX ERROR: BAD-PARAM in file
// .../pmix_event_notification.c at line 1033" on the driver's stderr. fibra cannot keep that line
// quiet; it says once per process, before it comes, what it means (issue 46, case 11).
void explain_retire_message() {
  static std::once_flag once;
  std::call_once(once, [] {
    log::info(
        "fibra: Pool::resize stops workers whose MPI job-mates go on; Open MPI prints a 'PMIX ERROR: BAD-PARAM' "
        "line for each (pmix_event_notification.c), which is expected and harmless: nothing was lost "
        "(docs/fault-tolerance.md#replacement-and-resize)");
  });
}

// Whether the lines tasks print start with "(worker 3 pid 1234) ": FIBRA_OUTPUT_PREFIX=1 or 0, or
// by default when the driver's stdout is a terminal (as Ray does).
bool prefix_output() {
  if (const auto on = env::flag("FIBRA_OUTPUT_PREFIX")) return *on;
  return ::isatty(STDOUT_FILENO) == 1;
}

// MPI's universe size (the slots of the allocation), or 0 if MPI does not say.
int universe_size() {
  int* size = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &size, &flag) != MPI_SUCCESS || !flag || !size) return 0;
  return *size;
}

// Open MPI cannot be interrupted inside MPI_Comm_spawn, and never returns from one whose daemon
// did not start: a host that resolves but cannot be reached (ssh fails, and ORTE waits for a call
// back that never comes). Past `bound`, the program ends with a message naming the host, rather
// than hang; names that do not resolve were refused before (check_hosts_resolve).
class SpawnWatch {
 public:
  SpawnWatch(std::string what, double bound)
      : thread_([this, what = std::move(what), bound] {
          std::unique_lock lk(mu_);
          if (cv_.wait_for(lk, std::chrono::duration<double>(bound), [&] { return done_; })) return;
          log::error(
              "fibra: {} has not returned after {:.0f} s (PoolOptions::start_timeout_s and {:.0f} s more): "
              "Open MPI could not start its daemon there (what it printed above says why; an unreachable "
              "host, or no ssh to it). A spawn cannot be called off, so the program ends here",
              what, bound, spawn_grace_s);
          std::fflush(nullptr);
          std::_Exit(70);
        }) {}
  ~SpawnWatch() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  SpawnWatch(const SpawnWatch&) = delete;
  SpawnWatch& operator=(const SpawnWatch&) = delete;

  static constexpr double spawn_grace_s = 10;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is there
};

}  // namespace

// The scale simulation, for benchmarks and its tests only (docs/architecture.md, "The scale
// simulation"): FIBRA_SIMULATED_AGENTS=k makes each spawned process speak for k agents of one
// worker each (wire::Simulation), FIBRA_SIMULATED_SILENT_EVERY=n makes every n-th of a pool's
// first agents (not their replacements) fall silent FIBRA_SIMULATED_SILENT_AFTER_S seconds after
// its first batch. Read at each spawn.
wire::Simulation PoolImpl::simulation_wanted() {
  wire::Simulation sim;
  sim.agents = static_cast<std::uint32_t>(env::number("FIBRA_SIMULATED_AGENTS", 0, 0, 1 << 20, true));
  if (sim.agents < 2) return {};  // 1: one agent a process, as a real one
  sim.silent_every = static_cast<std::uint32_t>(env::number("FIBRA_SIMULATED_SILENT_EVERY", 0, 0, 1 << 20, true));
  sim.silent_after_s = env::number("FIBRA_SIMULATED_SILENT_AFTER_S", 0, 0, 1e6);
  return sim;
}

void PoolImpl::resize(int n) {
  if (n < 1) throw ConfigError("fibra: Pool::resize(" + std::to_string(n) + "): a pool needs at least 1 worker");
  std::unique_lock lk(mu_);
  if (closed_) throw PoolClosed("fibra: resize() on a pool that " + closed_reason_);
  if (remote_host_lost() && n > live_count())
    throw MpiError("fibra: Pool::resize(" + std::to_string(n) +
                   "): no new worker can start after an agent on another "
                   "node was lost (" +
                   spawn_frozen_reason + "); the pool carries on with " + std::to_string(live_count()) + " worker(s)");
  target_ = n;
  backoff_.reset();
  kick();
  const bool ok = state_cv_.wait_for(lk, std::chrono::duration<double>(s_.start_timeout_s), [&] {
    return broken_ || stopped_ || backoff_.error() || ready_count() == target_;
  });
  if (broken_) std::rethrow_exception(broken_);
  if (stopped_) throw PoolClosed("fibra: the pool was terminated while resize() waited for its workers");
  if (backoff_.error()) {
    const int live = live_count();
    target_ = std::max(1, live);
    throw MpiError("fibra: Pool::resize(" + std::to_string(n) + ") could not start every new worker (" +
                   error_text(backoff_.error()) + "); the pool carries on with " + std::to_string(live) + " worker(s)");
  }
  if (!ok) {
    throw WorkerLost("fibra: Pool::resize(" + std::to_string(n) + "): only " + std::to_string(ready_count()) +
                     " workers were ready after " + seconds_text(s_.start_timeout_s) +
                     " (PoolOptions::start_timeout_s); the others may still come");
  }
}

// How many executors the next agent runs: PoolOptions::workers_per_agent, or automatically a
// quarter of the pool (at most 4 agents, so that start-up costs at most 4 MPI spawns); never more
// than the pool still lacks.
int PoolImpl::next_agent_size() const { return planner_.next_sizes(target_now(), live_count(), 1).front(); }

// The sizes of the next agents to spawn together (SpawnPlanner::next_sizes), at most `most` and as
// many as the slots hold. Without Open MPI's recovery (a plain `mpirun -n 1 ./app`), one at a time,
// each agent a job of its own: an agent of a larger job that resize() retires could neither end
// without MPI_Finalize (Open MPI would end the whole job, the driver too: seen under plain mpirun)
// nor in it (it waits there for the rest of its job).
std::vector<int> PoolImpl::next_agent_sizes(int most) const {
  // `most` and the slots count processes: a simulated agents' process speaks for k agents.
  const long long k = std::max<long long>(1, simulation_wanted().agents);
  const int room =
      static_cast<int>(std::min<long long>(INT_MAX, k * std::min(mpi::recovery_enabled() ? most : 1, free_slots())));
  return planner_.next_sizes(target_now(), live_count(), room);
}

// Spawns agents together, one running executors[i] workers each (the first of them at least, and
// as many as fit one per host when the pool places them on hosts), in one MPI_Comm_spawn_multiple
// (one Open MPI job: on a cluster their MPI_Init runs in parallel, where one spawn per agent took
// about 0.29 s each, one after the other): planned, spawned, registered as a group, and each told
// its setup first.
void PoolImpl::spawn_agents(const std::vector<int>& executors) {
  const std::int64_t began_us = events_ ? event_time_us() : 0;
  if (remote_host_lost())  // a new pool, or one still starting, after another pool lost a node
    throw MpiError("fibra: MPI_Comm_spawn not tried for worker " + std::to_string(live_count() + 1) + " of " +
                   std::to_string(target_now()) + ": agents on " + lost_remote_hosts() + " were lost, and " +
                   spawn_frozen_reason);
  AgentPlan plan;
  MPI_Comm inter = MPI_COMM_NULL;
  try {
    plan_agents(executors, plan);
    inter = spawn_planned(plan);
  } catch (...) {  // none of them exists: the workers planned for them go
    std::lock_guard lk(mu_);
    for (Worker* w : plan.added) counts_.count(*w, -1);
    std::erase_if(workers_,
                  [&](const auto& w) { return std::count(plan.added.begin(), plan.added.end(), w.get()) > 0; });
    throw;
  }
  if (events_) {
    int n = 0;
    for (const Worker* w : plan.added) n += w->executors;
    events_->spawn(plan.added.size(), n, began_us);
  }
  register_group(plan, inter);
  for (std::size_t i = 0; i < plan.added.size(); ++i)
    send(*plan.added[i], wire::tag_setup, wire::encode(plan.setups[i]));  // before anything else it hears
}

// Plans the agents of one spawn: for each, its first message (setup), the GPUs it gets and where
// it goes, planned in turn (each sees the ones planned before it, as the workers that stand for
// them are added to workers_ first: plan.added).
void PoolImpl::plan_agents(const std::vector<int>& executors, AgentPlan& plan) {
  // Simulated agents (simulation_wanted): `per_rank` of them a process, on this host, one worker each.
  wire::Simulation sim = simulation_wanted();
  plan.per_rank = std::max(1, static_cast<int>(sim.agents));
  const int per_rank = plan.per_rank;
  {
    std::lock_guard lk(mu_);
    if (stats_.workers_started > 0) sim.silent_every = 0;  // only the first agents fall silent, not their replacements
  }
  for (const int n : executors) {
    if (per_rank > 1 && n != 1)
      throw ConfigError(
          "fibra: FIBRA_SIMULATED_AGENTS simulates agents of one worker each: set "
          "PoolOptions::workers_per_agent = 1");
    wire::AgentSetup setup = agent_setup(n);
    setup.simulation = sim;
    SpawnPlanner::Gpus gpus = planner_.share_gpus(workers_, n);
    setup.gpus = std::move(gpus.ids);
    auto info = std::make_unique<mpi::Info>();
    if (oversubscribe_allowed()) info->set("map_by", ":OVERSUBSCRIBE");
    const auto place = per_rank > 1 ? SpawnPlanner::Place{} : planner_.place(workers_, n, setup.slot);
    const std::string& host = place.host;
    // One agent per host in a group: Open MPI maps a job's processes on a host against the slots
    // that host's info names ("host:n"), and refused a second agent of one job there ("All nodes
    // which are allocated for this job are already filled", pack on virtual nodes). The next
    // group takes it.
    if (!host.empty() &&
        std::any_of(plan.added.begin(), plan.added.end(), [&](const Worker* w) { return w->planned_host == host; }))
      break;
    // Each agent with its workers' GPUs, or not in this group: the pool waits for the GPUs of the
    // first one (gpus_still_held), not for the others'.
    if (!plan.added.empty() && !s_.gpu_ids.empty() && s_.resources.gpus > 0 && gpus.each < s_.resources.gpus) break;
    if (!host.empty()) info->set("host", (host + ":" + std::to_string(place.slots)).c_str());
    // An agent is one MPI process but runs several executors: Open MPI's default binding (to one
    // core when a job has at most 2 processes) would pin them all to that core.
    info->set("bind_to", "none");
    if (!host.empty() && !same_host(host, my_host_) && std::count(plan.remote.begin(), plan.remote.end(), host) == 0)
      plan.remote.push_back(host);
    auto w = std::make_unique<Worker>();
    w->id = next_worker_id_++;
    w->slot = setup.slot;
    w->executors = n;
    w->planned_host = host;
    w->has = s_.resources;
    w->has.gpus = gpus.each;
    w->gpus = std::move(gpus.held);
    // holds_slot (as Worker's default): the next agents' GPUs and places count it; counted in
    // g_agents_in_slots once spawned, and erased if the spawn fails.
    if (plan.added.size() % static_cast<std::size_t>(per_rank) == 0)
      plan.infos.push_back(std::move(info));  // a process
    plan.setups.push_back(std::move(setup));
    Worker* planned = w.get();
    {
      std::lock_guard lk(mu_);
      workers_.push_back(std::move(w));
      counts_.count(*planned, +1);  // starting
    }
    plan.added.push_back(planned);  // only once in workers_: the undoing erases what it lists
  }
  // A simulated agents' process hears how many it speaks for: per_rank, or the rest (the last).
  const auto per = static_cast<std::size_t>(per_rank);
  if (per_rank > 1)
    for (std::size_t i = 0; i < plan.setups.size(); ++i)
      plan.setups[i].simulation.agents = static_cast<std::uint32_t>(std::min(plan.added.size() - i / per * per, per));
}

// The planned agents' MPI_Comm_spawn_multiple, watched when it starts agents on other hosts.
MPI_Comm PoolImpl::spawn_planned(const AgentPlan& plan) {
  std::vector<const mpi::Info*> infos;
  for (const auto& i : plan.infos) infos.push_back(i.get());
  int first = live_count() + 1;  // the number of its first worker among the pool's ("worker 5 of 8")
  for (const Worker* w : plan.added) first -= w->executors;
  if (plan.remote.empty()) return spawn_processes(infos, first);
  // Only another host's daemon can fail to start so.
  const std::string who = plan.added.size() == 1 ? "worker " + std::to_string(plan.added[0]->slot)
                                                 : std::to_string(plan.added.size()) + " agents";
  std::string hosts;
  for (const auto& h : plan.remote) hosts += (hosts.empty() ? "" : ", ") + h;
  SpawnWatch watch("MPI_Comm_spawn of " + who + " on host" + (plan.remote.size() > 1 ? "s " : " ") + hosts,
                   s_.start_timeout_s + SpawnWatch::spawn_grace_s);
  return spawn_processes(infos, first);
}

// The spawned agents, one group on `inter`: each its rank (and, simulated, its block of tags), the
// slot it holds, and probed at every pass while it starts.
void PoolImpl::register_group(const AgentPlan& plan, MPI_Comm inter) {
  const int per_rank = plan.per_rank;
  auto group = std::make_shared<AgentGroup>();
  group->comm = inter;
  group->open = static_cast<int>(plan.added.size());
  group->per_rank = per_rank;
  groups_.push_back(group);
  const double now = mpi::now_s();
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < plan.added.size(); ++i) {
    Worker& w = *plan.added[i];
    w.comm = inter;
    w.rank = static_cast<int>(i) / per_rank;
    w.sub = static_cast<int>(i) % per_rank;
    // Its process's slot (g_agents_in_slots counts processes), held by sub-agent 0: if that one
    // leaves before the others, the slot counts as free early (the simulation is for
    // benchmarks and tests, which run oversubscribed).
    w.holds_slot = w.sub == 0;
    w.group = group;
    group->members.push_back(&w);
    w.spawned_at = w.last_heard = w.last_sent = now;
    mark_hot(w);  // starting: probed at every pass
  }
  stats_.workers_started += plan.added.size();
  backoff_.succeeded();
}

// What a new agent is told first: the pool's settings (PoolOptions, resolved), its number.
wire::AgentSetup PoolImpl::agent_setup(int executors) const {
  wire::AgentSetup setup;
  setup.heartbeat_s = s_.heartbeat_s;
  setup.driver_silence_s = s_.driver_silence_s;
  setup.executors = executors;
  setup.slot = SpawnPlanner::free_slot_number(workers_);
  setup.prefix_output = prefix_output();
  setup.cpus = s_.resources.cpus;
  setup.policy = s_.policy;
  setup.lane_nonce = lane_nonce_;
  setup.keep_freed_bytes = s_.keep_freed_bytes;
  setup.spare_processes = s_.spare_processes;
  if (const FunctionEntry* fn = s_.initializer.detail_entry())
    setup.initializer = {fn->id, s_.initializer.detail_mode(), fn->name, s_.initializer.detail_args()};
  setup.max_tasks_per_child = s_.max_tasks_per_child;
  setup.driver_host = my_host_;
  setup.driver_pid = ::getpid();
  if (peer_objects_on()) setup.secret_file = run_secret().file;  // its path: the bytes never travel
  setup.encrypt_objects = s_.encrypt_objects;
  return setup;
}

// One MPI_Comm_spawn_multiple of agents (this binary, with the agent flag; their settings come as
// their first message), each placed by its own info; returns their intercommunicator, where agent
// i is rank i.
MPI_Comm PoolImpl::spawn_processes(const std::vector<const mpi::Info*>& infos, int first) {
  const int n = static_cast<int>(infos.size());
  check_slots(n, first);
  const std::string exe = self_exe();
  char* argv[] = {const_cast<char*>(agent_flag), nullptr};
  std::vector<char*> commands(infos.size(), const_cast<char*>(exe.c_str()));
  std::vector<char**> argvs(infos.size(), argv);
  std::vector<int> one(infos.size(), 1);
  std::vector<MPI_Info> info;
  for (const auto* i : infos) info.push_back(i->get());
  std::vector<int> errs(infos.size(), MPI_SUCCESS);
  MPI_Comm inter = MPI_COMM_NULL;
  const int rc = MPI_Comm_spawn_multiple(n, commands.data(), argvs.data(), one.data(), info.data(), 0, MPI_COMM_SELF,
                                         &inter, errs.data());
  int err = MPI_SUCCESS;
  for (const int e : errs)
    if (e != MPI_SUCCESS) err = e;
  if (rc != MPI_SUCCESS || err != MPI_SUCCESS) {
    if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);  // (some started: they leave by their orphan guard)
    throw MpiError("fibra: MPI_Comm_spawn could not start worker " + std::to_string(first) +
                   (n > 1 ? " and the agents after it" : std::string()) + " of " + std::to_string(target_now()) + ": " +
                   mpi::error_text(rc != MPI_SUCCESS ? rc : err) +
                   ". If there are too few slots: ask the allocation for more, or set FIBRA_OVERSUBSCRIBE=1 "
                   "to run more processes than slots (the default outside batch jobs)");
  }
  g_agents_in_slots.fetch_add(n);  // they run from now, whatever follows
  mpi::check(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return inter;
}

// Refuses a spawn that cannot fit in the allocation's slots when oversubscription is off. Open
// MPI would refuse it too, but after a failed MPI_Comm_spawn mpirun never exits on its own.
void PoolImpl::check_slots(int n, int first) const {
  if (free_slots() >= n) return;
  const int slots = universe_size();
  const int used = 1 + g_agents_in_slots.load();
  throw MpiError("fibra: MPI_Comm_spawn could not start worker " + std::to_string(first) + " of " +
                 std::to_string(target_now()) + ": " +
                 (n == 1 ? "all " + std::to_string(slots) + " MPI slots are in use"
                         : std::to_string(slots) + " MPI slots, " + std::to_string(used) + " in use, and " +
                               std::to_string(n) + " more asked for") +
                 " (the driver and " + std::to_string(used - 1) +
                 " worker(s)). If there are too few slots: ask the allocation for more, or set FIBRA_OVERSUBSCRIBE=1 "
                 "to run more processes than slots (the default outside batch jobs)");
}

// How many more agents fit in the allocation's slots (INT_MAX when oversubscription is allowed,
// or the slots are not known).
int PoolImpl::free_slots() const {
  const int slots = universe_size();
  if (oversubscribe_allowed() || slots <= 0) return INT_MAX;
  return std::max(0, slots - 1 - g_agents_in_slots.load());
}

// A worker no longer holds its MPI slot: it said bye, or it was lost and its process is gone.
void PoolImpl::free_slot(Worker& w) {
  rings_.close(w, std::nullopt, false);  // (read when it said bye or was lost)
  w.lanes.clear();                       // its processes are gone, or no longer heard: nothing more comes that way
  w.actor_lanes.clear();
  w.actor_lanes_in_use.clear();
  if (!w.holds_slot) return;
  w.holds_slot = false;
  g_agents_in_slots.fetch_sub(1);
}

// Spawns or retires workers until the pool has its target size. A spawn that fails is reported
// and tried again later; the pool carries on with the workers it has.
bool PoolImpl::adjust_size() {
  int target, live;
  bool spawn_due, stopping;
  {
    std::lock_guard lk(mu_);  // resize() and terminate() write these from a user's thread
    target = target_;
    live = live_count();
    spawn_due = backoff_.due(mpi::now_s());
    stopping = stopping_;
  }
  if (stopping) return false;  // no new agent only to be told to leave
  if (live < target && !remote_host_lost() && spawn_due && !gpus_still_held()) {
    // MPI_Comm_spawn blocks this thread (a few hundred ms for one agent, 1.5 s for 16 on 2 cores):
    // give the workers enough to do meanwhile (retries first: they are at the front of the queue).
    dispatch(batches_per_worker + 2);
    progress_sends();
    try {
      // Up to grow_together agents in one spawn: traffic with the other workers flows between
      // spawns, and none blocks this thread near PoolOptions::driver_silence_s.
      spawn_agents(next_agent_sizes(grow_together));
    } catch (const Error& e) {
      on_spawn_failed(e);
    }
    return true;
  }
  bool changed = let_joined_go(live);
  for (auto it = workers_.rbegin(); it != workers_.rend() && live > target; ++it) {
    auto& w = **it;
    if (w.joined) continue;  // not of the pool's own count (`live`): let_joined_go lets them go
    if (w.state == Worker::State::ready || w.state == Worker::State::starting) {
      std::lock_guard lk(mu_);  // stop taking work; leave once its batches are done
      set_state(w, Worker::State::retiring);
      mark_hot(w);
      live -= w.executors;  // below the target: the next pass starts a smaller agent
      changed = true;
    }
  }
  for (auto it = workers_.begin(); counts_.retiring() > 0 && it != workers_.end(); ++it) {
    auto& w = *it;
    if (w->state != Worker::State::retiring) continue;  // (states change on this thread only: read without mu_)
    {
      std::lock_guard lk(mu_);  // terminate() may clear batches; stats() reads states
      if (!w->batches.empty()) continue;
      // ... and for the calls its actors are running (they start again elsewhere afterwards)
      if (std::any_of(actors_.begin(), actors_.end(), [&](auto& a) {
            return a.second.state == ActorState::State::placed && a.second.worker == w->id &&
                   !a.second.in_flight.empty();
          }))
        continue;
      set_state(*w, Worker::State::leaving);
      actors_leave(*w, "its worker left the pool (Pool::resize)", false);
    }
    if (w->group && w->group->members.size() > 1) explain_retire_message();
    send(*w, wire::tag_shutdown, std::string(wire::shutdown_retire));  // it leaves before the others
    changed = true;
  }
  if (changed) {
    std::lock_guard lk(mu_);
    state_cv_.notify_all();
  }
  return changed;
}

void PoolImpl::on_spawn_failed(const Error& e) {
  int live;
  double retry_in;
  {
    std::lock_guard lk(mu_);
    retry_in = backoff_.failed(std::current_exception(), mpi::now_s());
    live = live_count();
    // A lost worker whose process may still hold its slot frees it soon (see watch_workers), and a
    // retiring one still runs its batches: only with neither do the waiting calls give up.
    const bool may_recover = std::any_of(workers_.begin(), workers_.end(), [](auto& w) {
      return w->state == Worker::State::retiring || (w->state == Worker::State::lost && w->holds_slot);
    });
    if (live + counts_.joined_live() == 0 &&
        !may_recover) {  // nobody left to run anything: every waiting call fails now, nothing hangs
      fail_all(std::make_exception_ptr(
          WorkerLost(std::string("fibra: the pool has no workers left and cannot start new ones: ") + e.what())));
    }
    state_cv_.notify_all();
  }
  // Written once mu_ is released: a log sink may ask the pool for its stats.
  log::warning("{}", e.what());  // its text starts with "fibra: "
  log::warning("fibra: the pool carries on with {} worker(s); it tries again in {:.0f} s", live, retry_in);
}

}  // namespace fibra::detail
