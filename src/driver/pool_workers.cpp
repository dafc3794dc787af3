// The lifecycle of a pool's workers on the driver: spawning (agents together in one
// MPI_Comm_spawn_multiple, within the allocation's slots), their hello, heartbeats and liveness, declaring one lost,
// growing and shrinking the pool, and the goodbye at the end.
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
#include "driver/resources.hpp"
#include "common/process.hpp"
#include "driver/driver.hpp"
#include "roles.hpp"
#include "common/env.hpp"

namespace fibra::detail {

std::atomic<int> g_agents_in_slots{0};

namespace {

// Whether the lines tasks print start with "(worker 3 pid 1234) ": FIBRA_OUTPUT_PREFIX=1 or 0, or
// by default when the driver's stdout is a terminal (as Ray does).
bool prefix_output() {
  if (const auto on = env::flag("FIBRA_OUTPUT_PREFIX")) return *on;
  return ::isatty(STDOUT_FILENO) == 1;
}

// Why a pool spawns nothing after an agent on another host was lost (measured on the virtual
// cluster, docs/fault-tolerance.md#a-node-lost).
const char* const frozen_reason =
    "with Open MPI 4.1, a spawn after a node fell silent blocks for good if the node is cut off, and aborts the driver "
    "if it is dead";

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
                   frozen_reason + "); the pool carries on with " + std::to_string(live_count()) + " worker(s)");
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

// How many executors the next agent runs: PoolOptions::workers_per_agent, or automatically a
// quarter of the pool (at most 4 agents, so that start-up costs at most 4 MPI spawns); never more
// than the pool still lacks.
int PoolImpl::next_agent_size() const {
  const int target = target_now();
  return std::max(1, std::min(agent_size(target), target - live_count()));
}

// The sizes of the next agents to spawn together: what the pool lacks, at most `most` agents and
// as many as the slots hold (at least one: a spawn that does not fit is refused, naming why).
// Without Open MPI's recovery (a plain `mpirun -n 1 ./app`), one at a time, each agent a job of its
// own: an agent of a larger job that resize() retires could neither end without MPI_Finalize (Open
// MPI would end the whole job, the driver too: seen under plain mpirun) nor in it (it waits there
// for the rest of its job).
std::vector<int> PoolImpl::next_agent_sizes(int most) const {
  const int target = target_now();
  std::vector<int> sizes;
  // `most` and the slots count processes: a simulated agents' process speaks for k agents.
  const long long k = std::max<long long>(1, simulation_wanted().agents);
  const int room =
      static_cast<int>(std::min<long long>(INT_MAX, k * std::min(mpi::recovery_enabled() ? most : 1, free_slots())));
  for (int planned = live_count(); planned < target && static_cast<int>(sizes.size()) < room;) {
    sizes.push_back(std::max(1, std::min(agent_size(target), target - planned)));
    planned += sizes.back();
  }
  if (sizes.empty()) sizes.push_back(next_agent_size());
  return sizes;
}

// Executors per agent: PoolOptions::workers_per_agent, else spread over at most auto_agents
// agents (or one per host the pool spreads over, if more); one each when GPUs are shared out, so
// that each worker's GPUs are its agent's to match.
int PoolImpl::agent_size(int target) const {
  if (s_.workers_per_agent > 0) return s_.workers_per_agent;
  if (!s_.gpu_ids.empty() && s_.resources.gpus > 0) return 1;
  const int agents = s_.pack ? auto_agents : std::max(auto_agents, static_cast<int>(s_.hosts.size()));
  return std::max(1, (target + agents - 1) / agents);
}

// "node01" and "node01.cluster.local" are one host (Slurm names nodes short, gethostname may not).
bool PoolImpl::same_host(const std::string& a, const std::string& b) {
  return a.substr(0, a.find('.')) == b.substr(0, b.find('.'));
}

// Spawns agents together, one running executors[i] workers each (the first of them at least, and
// as many as fit one per host when the pool places them on hosts), in one MPI_Comm_spawn_multiple
// (one Open MPI job: on a cluster their MPI_Init runs in parallel, where one spawn per agent took
// about 0.29 s each, one after the other): for each, its first message (setup), the GPUs it gets
// and where it goes, planned in turn (each sees the ones planned before it, as the workers that
// stand for them are added first); then the spawn, and the setups.
void PoolImpl::spawn_agents(const std::vector<int>& executors) {
  if (remote_host_lost())  // a new pool, or one still starting, after another pool lost a node
    throw MpiError("fibra: MPI_Comm_spawn not tried for worker " + std::to_string(live_count() + 1) + " of " +
                   std::to_string(target_now()) + ": agents on " + lost_remote_hosts() + " were lost, and " +
                   frozen_reason);
  std::vector<wire::AgentSetup> setups;
  std::vector<std::unique_ptr<mpi::Info>> infos;
  std::vector<Worker*> added;
  std::vector<std::string> remote;  // the other hosts it starts agents on
  // If planning or the spawn fails, none of them exists: the workers planned for them go.
  const auto unplan = [&] {
    std::lock_guard lk(mu_);
    for (Worker* w : added) count_state(*w, -1);
    std::erase_if(workers_, [&](const auto& w) { return std::count(added.begin(), added.end(), w.get()) > 0; });
  };
  MPI_Comm inter = MPI_COMM_NULL;
  // Simulated agents (simulation_wanted): `per_rank` of them a process, on this host, one worker each.
  wire::Simulation sim = simulation_wanted();
  const int per_rank = std::max(1, static_cast<int>(sim.agents));
  {
    std::lock_guard lk(mu_);
    if (stats_.workers_started > 0) sim.silent_every = 0;  // only the first agents fall silent, not their replacements
  }
  try {
    for (const int n : executors) {
      if (per_rank > 1 && n != 1)
        throw ConfigError(
            "fibra: FIBRA_SIMULATED_AGENTS simulates agents of one worker each: set "
            "PoolOptions::workers_per_agent = 1");
      wire::AgentSetup setup = agent_setup(n);
      setup.simulation = sim;
      AgentGpus gpus = share_gpus(n);
      setup.gpus = std::move(gpus.ids);
      auto info = std::make_unique<mpi::Info>();
      if (oversubscribe_allowed()) info->set("map_by", ":OVERSUBSCRIBE");
      const std::string host = per_rank > 1 ? std::string() : place_agent(n, setup.slot, *info);
      // One agent per host in a group: Open MPI maps a job's processes on a host against the slots
      // that host's info names ("host:n"), and refused a second agent of one job there ("All nodes
      // which are allocated for this job are already filled", pack on virtual nodes). The next
      // group takes it.
      if (!host.empty() &&
          std::any_of(added.begin(), added.end(), [&](const Worker* w) { return w->planned_host == host; }))
        break;
      // Each agent with its workers' GPUs, or not in this group: the pool waits for the GPUs of the
      // first one (gpus_still_held), not for the others'.
      if (!added.empty() && !s_.gpu_ids.empty() && s_.resources.gpus > 0 && gpus.each < s_.resources.gpus) break;
      // An agent is one MPI process but runs several executors: Open MPI's default binding (to one
      // core when a job has at most 2 processes) would pin them all to that core.
      info->set("bind_to", "none");
      if (!host.empty() && !same_host(host, my_host_) && std::count(remote.begin(), remote.end(), host) == 0)
        remote.push_back(host);
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
      if (added.size() % static_cast<std::size_t>(per_rank) == 0) infos.push_back(std::move(info));  // a process
      setups.push_back(std::move(setup));
      Worker* planned = w.get();
      {
        std::lock_guard lk(mu_);
        workers_.push_back(std::move(w));
        count_state(*planned, +1);  // starting
      }
      added.push_back(planned);  // only once in workers_: unplan() erases what it lists
    }
    // A simulated agents' process hears how many it speaks for: per_rank, or the rest (the last).
    for (std::size_t i = 0; i < setups.size(); ++i)
      if (per_rank > 1)
        setups[i].simulation.agents = static_cast<std::uint32_t>(
            std::min(added.size() - i / static_cast<std::size_t>(per_rank) * static_cast<std::size_t>(per_rank),
                     static_cast<std::size_t>(per_rank)));
    std::vector<const mpi::Info*> plan;
    for (const auto& i : infos) plan.push_back(i.get());
    int first = live_count() + 1;  // the number of its first worker among the pool's ("worker 5 of 8")
    for (const Worker* w : added) first -= w->executors;
    const std::string who =
        added.size() == 1 ? "worker " + std::to_string(added[0]->slot) : std::to_string(added.size()) + " agents";
    if (!remote.empty()) {  // only another host's daemon can fail to start so
      std::string hosts;
      for (const auto& h : remote) hosts += (hosts.empty() ? "" : ", ") + h;
      SpawnWatch watch("MPI_Comm_spawn of " + who + " on host" + (remote.size() > 1 ? "s " : " ") + hosts,
                       s_.start_timeout_s + SpawnWatch::spawn_grace_s);
      inter = spawn_processes(plan, first);
    } else {
      inter = spawn_processes(plan, first);
    }
  } catch (...) {
    unplan();
    throw;
  }
  auto group = std::make_shared<AgentGroup>();
  group->comm = inter;
  group->open = static_cast<int>(added.size());
  group->per_rank = per_rank;
  groups_.push_back(group);
  const double now = mpi::now_s();
  {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < added.size(); ++i) {
      Worker& w = *added[i];
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
    stats_.workers_started += added.size();
    spawn_failures_ = 0;
  }
  for (std::size_t i = 0; i < added.size(); ++i)
    send(*added[i], wire::tag_setup, wire::encode(setups[i]));  // before anything else it hears
}

bool PoolImpl::adopt_join(JoinedAgent& j) {
  std::lock_guard lk(mu_);
  if (closed_ || stopping_) return false;
  joins_.push_back(j);
  joins_waiting_.store(true, std::memory_order_release);
  kick();
  return true;
}

void PoolImpl::adapt(int min_workers, int max_workers, const AdaptOptions& options) {
  {
    std::lock_guard lk(mu_);
    if (closed_) throw PoolClosed("fibra: adapt() on a pool that " + closed_reason_);
    if (min_workers <= max_workers && max_workers < target_)
      throw ConfigError("fibra: Pool::adapt(" + std::to_string(min_workers) + ", " + std::to_string(max_workers) +
                        "): the pool has " + std::to_string(target_) +
                        " workers of its own, more than max_workers; resize() it first, or allow more");
  }
  auto e = std::make_unique<Elastic>(min_workers, max_workers, options, uid_, s_.resources.cpus,
                                     [this] { return elastic_view(); });
  std::unique_ptr<Elastic> old;
  {
    std::lock_guard el(elastic_mu_);
    if (!elastic_closed_) {
      old = std::move(elastic_);
      elastic_ = std::move(e);
    }
  }
  if (e) {  // the pool stopped meanwhile: the new one goes before it submits anything
    e->halt();
    e->cancel(true, "the pool ended");
    throw PoolClosed("fibra: adapt() on a pool that ended while it was called");
  }
  {
    std::lock_guard lk(mu_);
    adapt_min_ = min_workers;
    adapt_idle_s_ = options.idle_timeout_s;
    drain_before_s_ = options.drain_before_s;
    kick();
  }
  if (old) {  // a second adapt() replaces the first: its jobs not joined yet are not wanted now
    old->halt();
    old->cancel(false, "Pool::adapt was called again");
  }
}

// What Pool::adapt's thread looks at: the workers, the chunks waiting, and the Slurm jobs whose
// worker joined (WorkerInfo::joined_from says "Slurm job <id>").
Elastic::View PoolImpl::elastic_view() const {
  std::lock_guard lk(mu_);
  Elastic::View v;
  v.workers = live_count() + joined_live_;
  // Only chunks that a joined worker could run call for a worker job (the first 4096 are enough
  // to tell, and keep the look short while a million wait).
  const std::size_t pending = sched_.pending();
  if (pending > 0 && sched_.pending_fits(joined_offer(), 4096)) {
    v.waiting = pending;
  } else if (pending > 0) {
    v.unfit = pending;
    v.unfit_example = describe(joined_offer());
  }
  v.joined = joined_jobs_;
  return v;
}

// What each executor of a joined agent offers: the pool's own resources, but no GPUs when the
// pool shares out its GPUs (PoolOptions::gpu_ids are on its own hosts).
Resources PoolImpl::joined_offer() const {
  Resources r = s_.resources;
  if (!s_.gpu_ids.empty()) r.gpus = 0;
  return r;
}

// A joined worker leaves (it is retired as resize() retires one: it finishes what it runs):
// - AdaptOptions::drain_before_s before its Slurm job's time limit, so that no chunk is cut by it;
// - under Pool::adapt, once idle for AdaptOptions::idle_timeout_s, as long as the pool keeps its
//   minimum, unless it hosts actors (they would have to start again elsewhere).
// On the communication thread.
// A walk over the workers, so at most every 50 ms (a pass costs the workers at work, issue 29).
bool PoolImpl::let_joined_go(int live) {
  const double now = mpi::now_s();
  if (now < next_joined_look_) return false;
  next_joined_look_ = now + 0.05;
  std::vector<std::string> lines;
  {
    std::lock_guard lk(mu_);
    if (joined_live_ == 0) return false;
    int total = live + joined_live_;
    for (auto& w : workers_) {
      // (One rank of a launch of several that left alone would end the others: Open MPI ends a job
      // whose process exits without MPI_Finalize, and the others are not done. They stay.)
      if (!w->joined || w->state != Worker::State::ready || w->joined_ranks > 1) continue;
      // (Not Worker::last_busy: a batch through a lane is no message.)
      if (!w->batches.empty() || w->blocked > 0 || w->idle_since == 0) w->idle_since = now;
      std::string why;
      if (w->job_ends_at > 0 && now >= w->job_ends_at - drain_before_s_) {
        why = ": its Slurm job's time limit is " + seconds(w->job_ends_at - now) +
              " away (AdaptOptions::drain_before_s): it finishes what it runs and leaves the pool";
      } else if (adapt_idle_s_ > 0 && now - w->idle_since >= adapt_idle_s_ && total - w->executors >= adapt_min_ &&
                 std::none_of(actors_.begin(), actors_.end(), [&](auto& a) {
                   return a.second.state == ActorState::State::placed && a.second.worker == w->id;
                 })) {
        why = " was idle for " + seconds(now - w->idle_since) + " (AdaptOptions::idle_timeout_s): it leaves the pool";
      } else {
        continue;
      }
      set_state(*w, Worker::State::retiring);
      mark_hot(*w);
      total -= w->executors;
      // (All its workers leave with it: name them all, not "a worker of agent 2".)
      const std::string who = w->executors == 1
                                  ? name(*w)
                                  : "agent " + std::to_string(w->slot) + " with " + std::to_string(w->executors) +
                                        " workers (joined from " + w->joined_from + ")";
      lines.push_back(who + why + ", which keeps " + std::to_string(total) + " worker(s)");
    }
  }
  for (const auto& l : lines) log::info("fibra: {}", l);
  return !lines.empty();
}

// Agents that joined (src/driver/joins.hpp) become workers as a spawned agent does, each a group of
// its own: its setup first, then its hello. They add to the pool's workers without counting
// against its target. Under the MPI lock.
bool PoolImpl::take_joins() {
  // (Every pass comes here: the flag spares it the pool's lock while nobody joins.)
  if (!joins_waiting_.load(std::memory_order_acquire)) return false;
  std::vector<JoinedAgent> joins;
  {
    std::lock_guard lk(mu_);
    joins_waiting_.store(false, std::memory_order_relaxed);
    if (joins_.empty()) return false;
    joins.swap(joins_);
  }
  for (auto& j : joins) {
    auto group = std::make_shared<AgentGroup>();
    group->comm = j.comm;
    group->open = 1;
    groups_.push_back(group);
    wire::AgentSetup setup;
    Worker* w = nullptr;
    {
      std::lock_guard lk(mu_);
      setup = agent_setup(j.hello.executors);
      auto made = std::make_unique<Worker>();
      made->id = next_worker_id_++;
      made->slot = setup.slot;
      made->executors = j.hello.executors;
      made->planned_host = j.hello.host;
      made->has = joined_offer();
      made->holds_slot = false;  // not of this allocation's slots
      made->joined = true;
      made->joined_from = j.hello.origin;
      constexpr std::string_view slurm = "Slurm job ";
      if (made->joined_from.rfind(slurm, 0) == 0) joined_jobs_.insert(made->joined_from.substr(slurm.size()));
      if (j.hello.time_left_s > 0) made->job_ends_at = mpi::now_s() + j.hello.time_left_s;
      made->joined_ranks = std::max(1, static_cast<int>(j.hello.ranks));
      made->comm = j.comm;
      made->group = group;
      made->spawned_at = made->last_heard = made->last_sent = made->last_busy = made->idle_since = mpi::now_s();
      w = made.get();
      group->members.push_back(w);
      workers_.push_back(std::move(made));
      count_state(*w, +1);  // starting (not PoolStats::workers_started, which counts the ones it spawned)
      mark_hot(*w);
    }
    log::info("fibra: agent {} with {} worker(s) joined from {} on {} (pid {})", w->slot, w->executors, j.hello.origin,
              j.hello.host, j.hello.pid);
    send(*w, wire::tag_setup, wire::encode(setup));
  }
  return true;
}

// A worker's side of its group's communicator is no longer used (it said bye; or the pool ends):
// the communicator is freed with its group's last open member (MPI_Comm_free is local, never a
// wait). Under the MPI lock.
void PoolImpl::release_comm(Worker& w) {
  if (w.comm == MPI_COMM_NULL || w.state == Worker::State::lost) return;
  AgentGroup& g = *w.group;
  w.comm = MPI_COMM_NULL;
  if (--g.open > 0) return;
  for (Worker* m : g.members) m->comm = MPI_COMM_NULL;  // lost ones too: nothing more is read from it
  MPI_Comm_free(&g.comm);
}

// A member of a group was declared lost: it no longer counts among the open ones. Its
// communicator stays, for what it may still send (still_heard); as today for an agent of its own,
// a group whose members were all lost keeps its communicator.
void PoolImpl::group_member_lost(Worker& w) {
  if (w.group && w.comm != MPI_COMM_NULL) --w.group->open;
}

// What a new agent is told first: the pool's settings (PoolOptions, resolved), its number.
wire::AgentSetup PoolImpl::agent_setup(int executors) const {
  wire::AgentSetup setup;
  setup.heartbeat_s = s_.heartbeat_s;
  setup.driver_silence_s = s_.driver_silence_s;
  setup.executors = executors;
  setup.slot = free_slot_number();
  setup.prefix_output = prefix_output();
  setup.cpus = s_.resources.cpus;
  setup.policy = s_.policy;
  setup.lane_nonce = lane_nonce_;
  setup.keep_freed_bytes = s_.keep_freed_bytes;
  setup.spare_processes = s_.spare_processes;
  setup.driver_host = my_host_;
  setup.driver_pid = ::getpid();
  return setup;
}

// GPUs for a new agent: `resources.gpus` for each executor, from those no other agent holds (an
// agent lost but maybe still running keeps its own until its process is surely gone). All or
// none: an agent offers GPUs only if each of its executors gets its share.
PoolImpl::AgentGpus PoolImpl::share_gpus(int executors) const {
  AgentGpus out;
  out.each = s_.resources.gpus;
  if (s_.gpu_ids.empty()) return out;
  std::vector<bool> held(s_.gpu_ids.size(), false);
  for (auto& w : workers_)
    if (w->holds_slot)
      for (int g : w->gpus) held[static_cast<std::size_t>(g)] = true;
  const std::size_t each = static_cast<std::size_t>(s_.resources.gpus);
  std::size_t next = 0;
  const auto free_ids = static_cast<std::size_t>(std::count(held.begin(), held.end(), false));
  if (free_ids < each * static_cast<std::size_t>(executors)) next = held.size();
  for (int e = 0; e < executors; ++e) {
    std::string ids;
    std::size_t got = 0;
    for (; next < held.size() && got < each; ++next) {
      if (held[next]) continue;
      ids += (ids.empty() ? "" : ",") + s_.gpu_ids[next];
      out.held.push_back(static_cast<int>(next));
      ++got;
    }
    out.each = std::min<int>(out.each, static_cast<int>(got));
    out.ids.push_back(ids);
  }
  return out;
}

// Where a new agent goes, set in `info`; returns the host ("" where MPI places it).
// Spread: agent k on host k mod n (a replacement takes the slot, and so the host, of the lost
// one), or the next host with room; pack: the first host with room (detail::choose_host).
// Open MPI reads "host" as that host with one slot, which the driver may fill already. In a
// Slurm allocation, "host:n" also lowers that node's slots to n for the rest of the job, never
// raising them again (orte_util_add_dash_host_nodes, Open MPI 4.1.1 and later): so the node's
// own slot count when it is known, which lowers nothing and leaves Open MPI's check of full nodes
// in force; else room for one more process than the pool's and the driver's there.
std::string PoolImpl::place_agent(int executors, int slot, mpi::Info& info) const {
  if (s_.hosts.empty()) return {};
  // Every host is usable: after a loss on another host nothing is spawned at all (spawn).
  const std::size_t n = s_.hosts.size();
  const std::vector<bool> usable(n, true);
  std::vector<HostLoad> load(n);
  for (std::size_t h = 0; h < n; ++h) {
    load[h].processes = load[h].workers = same_host(s_.hosts[h], my_host_) ? 1 : 0;
    for (auto& w : workers_)
      if (w->planned_host == s_.hosts[h] && w->holds_slot) {
        ++load[h].processes;
        load[h].workers += w->executors;
      }
  }
  const std::size_t h = choose_host(Placement{s_.pack, s_.hosts, s_.host_slots}, usable, load, executors, slot);
  const int count = s_.host_slots[h] > 0 ? s_.host_slots[h] : load[h].processes + 1;
  info.set("host", (s_.hosts[h] + ":" + std::to_string(count)).c_str());
  return s_.hosts[h];
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
  close_call_rings(w, std::nullopt, false);  // (read when it said bye or was lost)
  w.lanes.clear();                           // its processes are gone, or no longer heard: nothing more comes that way
  w.actor_lanes.clear();
  w.actor_lanes_in_use.clear();
  if (!w.holds_slot) return;
  w.holds_slot = false;
  g_agents_in_slots.fetch_sub(1);
}

// The smallest worker number no live worker uses.
// One pass over the workers (a pass per number tried took 77% of the driver's time while it
// started 4,000 simulated agents).
int PoolImpl::free_slot_number() const {
  std::vector<char> used(workers_.size() + 2, 0);
  for (auto& w : workers_)
    if (w->alive() && w->slot > 0 && static_cast<std::size_t>(w->slot) < used.size())
      used[static_cast<std::size_t>(w->slot)] = 1;
  int n = 1;
  while (used[static_cast<std::size_t>(n)]) ++n;
  return n;
}

void PoolImpl::on_hello(Worker& w, const wire::Hello& h) {
  auto lanes = open_lanes(w, h);  // outside mu_: it may log, and a log sink may ask for stats()
  std::lock_guard lk(mu_);
  w.host = h.host;
  w.pid = static_cast<long>(h.pid);
  if (h.fingerprint != registry_fingerprint()) {
    throw ConfigError("fibra: worker " + std::to_string(w.slot) + " on " + h.host + " (pid " + std::to_string(h.pid) +
                      ") has " + std::to_string(h.functions) + " remote functions registered, this driver has " +
                      std::to_string(registry_size()) +
                      " or others: driver and workers must run the same build of the program");
  }
  w.shared_memory = !lanes.empty();
  w.object_port = peer_objects_on() ? h.object_port : 0;
  // Its tasks' large results that tasks take stay where they are made: on this host the driver
  // opens its memfds; on another, its agent (which serves its objects to peers) sends a copy.
  w.keeps_results =
      w.shared_memory || (!lanes_on() && same_host(h.host, my_host_)) || (w.object_port != 0 && h.copies_kept);
  w.lanes = std::move(lanes);
  if (w.state == Worker::State::starting) set_state(w, Worker::State::ready);
  state_cv_.notify_all();
}

// FIBRA_PEER_OBJECTS=0: agents do not copy objects from each other (a cluster whose firewall lets
// only MPI through); every copy comes from the driver, and results made on other hosts come back.
bool PoolImpl::peer_objects_on() {
  static const bool enabled = env::flag("FIBRA_PEER_OBJECTS").value_or(true);
  return enabled;
}

// An agent on this host: its executors' lanes are mapped, all or none (FIBRA_LANES=0: none).
bool PoolImpl::lanes_on() {
  static const bool enabled = env::flag("FIBRA_LANES").value_or(true);
  return enabled;
}

std::vector<std::shared_ptr<LaneRegion>> PoolImpl::open_lanes(const Worker& w, const wire::Hello& h) {
  if (!lanes_on() || h.lane_fds.size() != std::size_t(w.executors) || !same_host(h.host, my_host_)) return {};
  std::vector<std::shared_ptr<LaneRegion>> lanes;
  for (const auto fd : h.lane_fds) {
    std::string why;
    auto r = LaneRegion::open("/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(fd), lane_nonce_, h.pid, why);
    if (!r) {
      log::debug("fibra: worker {}'s executors are reached through their agent, not shared memory: {}", w.slot, why);
      return {};
    }
    lanes.push_back(std::move(r));
  }
  for (auto& r : lanes) r->lane().mark_in_use();  // only now: executors watch a lane in use
  return lanes;
}

// Heartbeats to quiet workers, and the liveness check of every worker: a worker that has been
// silent too long (or whose process is gone, for workers on this host) is declared lost.
void PoolImpl::watch_workers() {
  const double now = mpi::now_s();
  // A sweep every 10 ms, not every pass, over a tenth of the workers (64 at least): each is looked
  // at every 100 ms, where the bounds are seconds (a sweep over every one of the scale
  // simulation's 10,000 agents every pass was most of an idle driver's time).
  if (now < next_watch_) return;
  next_watch_ = now + 0.010;
  // Whether its process is gone from this host: a kill(pid, 0) at most every 50 ms for each worker
  // (a small pool's sweep covers every worker every 10 ms), and one for adjacent agents of one
  // process (the scale simulation's: one rank of one group).
  const Worker* last = nullptr;
  bool last_gone = false;
  const auto gone_here = [&](Worker& w) {
    if (now - w.pid_checked < 0.05) return false;
    w.pid_checked = now;
    if (!last || last->group != w.group || last->rank != w.rank || last->pid != w.pid) last_gone = process_gone_here(w);
    last = &w;
    return last_gone;
  };
  const std::size_t n = workers_.size();
  const std::size_t slice = std::min(n, std::max<std::size_t>(64, (n + 9) / 10));
  for (std::size_t i = 0; i < slice; ++i) {
    if (watch_next_ >= n) watch_next_ = 0;
    auto& w = workers_[watch_next_++];
    if (w->state == Worker::State::lost && (w->read_after_loss || w->holds_slot)) {
      const bool gone = gone_here(*w);
      if (gone) w->read_after_loss = false;  // nothing more comes from it (still_heard)
      // Its slot is free once its process is: gone from this host, or past the orphan guard.
      if (w->holds_slot && (gone || now - w->lost_at > s_.driver_silence_s + 2 * s_.heartbeat_s)) free_slot(*w);
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
    if (gone_here(*w)) {
      declare_lost(*w, "its process is gone");
      continue;
    }
    const bool working = w->state == Worker::State::ready || w->state == Worker::State::retiring;
    if (working && now - w->last_sent > s_.heartbeat_s) send(*w, wire::tag_heartbeat, std::string());
  }
  // Groups none of whose members is read again are probed no more.
  std::erase_if(groups_, [&](const auto& g) {
    return std::none_of(g->members.begin(), g->members.end(), [&](const Worker* w) {
      return w->comm != MPI_COMM_NULL && (w->alive() || still_heard(*w, now));
    });
  });
}

// True when the worker runs on this host and its process no longer exists.
bool PoolImpl::process_gone_here(const Worker& w) const {
  return w.pid > 0 && w.host == my_host_ && ::kill(static_cast<pid_t>(w.pid), 0) != 0 && errno == ESRCH;
}

std::string PoolImpl::seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

// The worker is dead to the pool: nothing is sent to it or read from it again, and the chunks it
// held are failed attempts (retried elsewhere while they have retries left).
void PoolImpl::declare_lost(Worker& w, const std::string& why) {
  close_call_rings(w, std::nullopt);  // the puts its processes made before are the queues' still
  std::string line;                   // written once mu_ is released: a log sink may ask the pool for its stats
  {
    std::lock_guard lk(mu_);
    const bool was_leaving = w.state == Worker::State::leaving;
    set_state(w, Worker::State::lost);
    mark_hot(w);  // what it still sends is read at every pass while it is heard (still_heard)
    w.lost_at = mpi::now_s();
    // Copies of results it kept whose Kept will not come now (late ones are not taken).
    std::erase_if(kept_copies_, [&](const auto& e) { return e.second.second == w.id; });
    // A lost agent on this host that holds GPUs is ended, so that its replacement gets them soon
    // (stopped, it would keep them until its orphan guard ends it).
    if (!w.gpus.empty() && w.host == my_host_ && w.pid > 0) ::kill(static_cast<pid_t>(w.pid), SIGKILL);
    // What its processes took of the items they read ahead (only processes on this host read ahead):
    // gone with them; the rest come back. Read before free_slot lets go of the lanes.
    std::vector<std::uint64_t> taken;
    for (const auto& r : w.lanes) r->lane().mailbox().take_ahead_taken(taken);
    for (const auto& [key, r] : w.actor_lanes) r->lane().mailbox().take_ahead_taken(taken);
    if (process_gone_here(w)) free_slot(w);  // its replacement may take the slot on the next pass
    // A host whose agent fell silent may be cut off or gone: no agent is spawned again, there or
    // anywhere else, by any pool of this process, since every spawn involves every node's Open MPI
    // daemon (see frozen_reason). Placement "none" plans no host: the host its hello gave counts.
    // (Not one that joined: its node is not of this job, whose daemons a spawn involves.)
    const std::string& lost_host = w.planned_host.empty() ? w.host : w.planned_host;
    if (!lost_host.empty() && !same_host(lost_host, my_host_))
      w.joined ? note_lost_joined_host(lost_host) : note_lost_remote_host(lost_host);
    sends_.abandon(w.comm, w.rank, w.tag_of(0), w.tag_of(wire::tags_per_agent));
    group_member_lost(w);
    ChannelStore::instance().forget(uid_, static_cast<std::uint64_t>(w.id), std::nullopt, taken);
    w.batches.clear();
    const auto held = sched_.owned_by(w.id);
    const std::string who =
        (w.executors == 1 ? name(w)
                          : "agent " + std::to_string(w.slot) + " with " + std::to_string(w.executors) + " workers" +
                                (w.joined ? " (joined from " + w.joined_from + ")" : "")) +
        " on " + (w.host.empty() ? "?" : w.host) + " (pid " + std::to_string(w.pid) + ")";
    if (!was_leaving) {
      const bool replaced = !w.joined && live_count() < target_ && !stopping_;
      line = "fibra: " + who + " was lost: " + why + "; the " + std::to_string(held.size()) +
             " chunk(s) it held count a failed attempt";
      if (replaced && !remote_host_lost()) {
        line += "; a replacement is being started";
      } else if (replaced) {
        line += "; no replacement is started (" + std::string(frozen_reason) + "): the pool carries on with " +
                std::to_string(live_count()) + " worker(s)";
        if (env::raw("FIBRA_LOST_HOSTS_FILE"))
          line += ", until the batch script relaunches it on the nodes still alive";
      }
    }
    ++stats_.workers_lost;
    actors_leave(w, "its worker was lost: " + why, true);
    for (const auto& [id, attempt] : held) {
      const Chunk* c = sched_.find(id, attempt);
      if (!c) continue;
      auto e = std::make_exception_ptr(WorkerLost("fibra: " + who + " was lost while it ran " + c->job->name() +
                                                  " on items " + std::to_string(c->first) + ".." +
                                                  std::to_string(c->first + c->count - 1) + ": " + why));
      attempt_failed(id, attempt, FailKind::lost, e, std::nullopt);
    }
    state_cv_.notify_all();
  }
  if (!line.empty()) log::warning("{}", line);
}

// True while a replacement would start without its GPUs because a lost agent still holds them:
// it waits for them (its process ending, or its orphan guard) rather than start without.
bool PoolImpl::gpus_still_held() const {
  if (s_.gpu_ids.empty() || s_.resources.gpus <= 0) return false;
  std::size_t held = 0, held_by_lost = 0;
  for (auto& w : workers_) {
    if (!w->holds_slot) continue;
    held += w->gpus.size();
    if (w->state == Worker::State::lost) held_by_lost += w->gpus.size();
  }
  const std::size_t need = static_cast<std::size_t>(s_.resources.gpus) * static_cast<std::size_t>(next_agent_size());
  return held_by_lost > 0 && s_.gpu_ids.size() - held < need;
}

// Spawns or retires workers until the pool has its target size. A spawn that fails is reported
// and tried again later; the pool carries on with the workers it has.
bool PoolImpl::adjust_size() {
  int target, live;
  double next_spawn;
  bool stopping;
  {
    std::lock_guard lk(mu_);  // resize() and terminate() write these from a user's thread
    target = target_;
    live = live_count();
    next_spawn = next_spawn_;
    stopping = stopping_;
  }
  if (stopping) return false;  // no new agent only to be told to leave
  if (live < target && !remote_host_lost() && mpi::now_s() >= next_spawn && !gpus_still_held()) {
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
  for (auto it = workers_.begin(); retiring_agents_ > 0 && it != workers_.end(); ++it) {
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
    spawn_error_ = std::current_exception();
    ++spawn_failures_;
    next_spawn_ = mpi::now_s() + std::min(60.0, 2.0 * spawn_failures_);
    live = live_count();
    retry_in = next_spawn_ - mpi::now_s();
    // A lost worker whose process may still hold its slot frees it soon (see watch_workers), and a
    // retiring one still runs its batches: only with neither do the waiting calls give up.
    const bool may_recover = std::any_of(workers_.begin(), workers_.end(), [](auto& w) {
      return w->state == Worker::State::retiring || (w->state == Worker::State::lost && w->holds_slot);
    });
    if (live + joined_live_ == 0 &&
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

// Asks every agent to leave, waits (bounded) for their goodbyes, and disconnects from those that
// said it. An agent that never answers is not waited for again.
// The MPI lock is taken per step, never across the wait: other pools keep their heartbeats.
void PoolImpl::say_goodbye() {
  try {
    {
      std::lock_guard ml(mpi::lock());
      take_joins();  // agents that joined as the pool stopped: they are told to leave as the others
      for (auto& w : workers_) {
        if (!w->alive()) continue;
        send(*w, wire::tag_shutdown, std::string());
        std::lock_guard lk(mu_);
        if (w->alive()) set_state(*w, Worker::State::leaving);  // the send may have lost it
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
        progress_sends();
      }
      if (!got) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::lock_guard ml(mpi::lock());
    sends_.drain(1.0);
  } catch (const std::exception& e) {
    log::error("fibra: while stopping the pool's workers: {}", e.what());
  }
  std::lock_guard ml(mpi::lock());
  for (auto& w : workers_) {
    // Local, never a wait: an agent that said bye frees its side and exits (see handle(), bye).
    if (w->state == Worker::State::gone) release_comm(*w);
    free_slot(*w);  // best effort for the ones that did not say bye: they leave by the orphan guard
  }
  sends_.abandon();
}

}  // namespace fibra::detail
