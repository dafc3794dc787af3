// The driver's side of a pool: the public calls, start, the communication thread (loop: it reads
// what workers send and hands each message on) and stopping. pool_impl.hpp says which file holds
// the rest.
#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdio>
#include <exception>
#include <memory>
#include <cerrno>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "fibra/pool.hpp"
#include "fibra/runtime.hpp"
#include "common/freed_memory.hpp"
#include "common/log.hpp"
#include "common/process.hpp"
#include "calls/calls.hpp"
#include "driver/channels.hpp"
#include "driver/pool_impl.hpp"
#include "driver/pool_registry.hpp"
#include "driver/resources.hpp"
#include "driver/driver.hpp"
#include "task_side.hpp"
#include "common/env.hpp"

namespace fibra::detail {
std::vector<std::shared_ptr<PoolImpl>> live_pools() { return PoolRegistry::instance().live(); }

// ---- start: Pool() spawns the first workers (PoolImpl::start) ---------------------------------
// Far more workers than cores (over 32 a core: Pool(64) on 2 cores is fine, Pool(1000) is not): each
// still works, but a word now saves a user a long, silent start and a crawl.
constexpr int crowded_per_core = 32;
void warn_if_crowded(int workers) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (workers <= crowded_per_core * cores) return;
  log::warning(
      "fibra: Pool({}) starts {} workers on a machine with {} cores, {} per core: each gets a sliver of a "
      "core, and their start alone takes a while. Ask for fewer, or run across more nodes.",
      workers, workers, cores, (workers + cores - 1) / cores);
}

void PoolImpl::start() {
  if (!s_.events.empty()) {
    events_ = std::make_unique<PoolEvents>(EventLog::open(s_.events), uid_);
    events_->pool_started(target_, my_host_);
    if (!s_.dashboard.empty()) dashboard_ = Dashboard::open(s_.dashboard, s_.events);
  }
  if (simulation_wanted().agents == 0) warn_if_crowded(target_);  // (simulated agents: a few processes)
  // PoolOptions::start_timeout_s bounds the whole constructor: the spawns and the hellos.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s_.start_timeout_s);
  std::exception_ptr spawn_failed;
  try {
    // The agents that fit in the slots in one spawn (spawn_agents), then the rest (none, unless
    // the slots run out, or hosts take one agent each: the next spawn says so or places them),
    // reading hellos and sending heartbeats in between. The MPI lock is taken per spawn, so that other pools keep their
    // heartbeats too.
    while (live_count() < target_ && std::chrono::steady_clock::now() < deadline) {
      std::lock_guard ml(mpi::lock());
      // While another pool runs, at most grow_together agents a spawn: it holds the MPI lock,
      // and that pool's agents must hear from it within driver_silence_s.
      // (Another pool of this process runs: a spawn holds the MPI lock, which its heartbeats need too.)
      spawn_agents(next_agent_sizes(PoolRegistry::instance().any_live() ? grow_together : INT_MAX));
      receive();
      watch_workers();
      progress_sends();
    }
  } catch (...) {
    spawn_failed = std::current_exception();
  }
  // A queue's store asks this pool's tasks for items they read ahead through it.
  ChannelStore::instance().set_notifier(
      uid_, [self = weak_from_this()](const ChannelHolder& who, wire::ChannelCall call) {
        if (auto p = self.lock())
          p->queue_reply({static_cast<int>(who.worker), who.route, 0, nullptr, wire::encode(call), {}});
      });
  thread_ = std::thread([this] { loop(); });
  if (spawn_failed) {  // the workers that did start are told to leave before the error goes up
    terminate();
    std::rethrow_exception(spawn_failed);
  }
  std::unique_lock lk(mu_);
  const bool ok = state_cv_.wait_until(lk, deadline, [&] { return broken_ || ready_count() >= target_; });
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
                     " workers started within " + seconds_text(s_.start_timeout_s) +
                     " (PoolOptions::start_timeout_s); check that the machine has room for them");
  }
  const int own = target_;
  lk.unlock();
  adapt_as_the_spec_says(own);
}

// A job spec's [elastic] (FIBRA_ELASTIC_*): the first pool of the run adapts, its own workers and
// the worker jobs' between the spec's bounds. A program that calls Pool::adapt itself replaces it.
// The pool that takes it gives it back when it stops, for the next pool to start: a program that
// runs one pool per phase grows in each.
void PoolImpl::adapt_as_the_spec_says(int own) {
  try {
    const auto a = adapt_from_environment();
    if (!a) return;
    spec_adapt_ = true;
    const int per = a->options.workers_per_job;
    log::info(
        "fibra: [elastic] in the job spec: this pool of {} grows to at most {} workers with worker jobs of {} "
        "worker(s) each, and keeps at least {}",
        own, own + a->max_jobs * per, per, own + a->min_jobs * per);
    try {
      adapt(own + a->min_jobs * per, own + a->max_jobs * per, a->options);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("fibra: the job spec's [elastic] (") + env::shown("FIBRA_ELASTIC_MAX_JOBS") +
                        ") cannot take effect: " + e.what() +
                        "; render the script again with `fibra slurm render`, or drop [elastic]");
    }
  } catch (...) {
    terminate();
    throw;
  }
}

void PoolImpl::join() {
  std::unique_lock lk(mu_);
  if (!closed_) throw ConfigError("fibra: Pool::join() before Pool::close(): close the pool first");
  closed_reason_ = "was joined (Pool::close() and Pool::join())";
  // Queued work, tasks still waiting for their Future arguments, and actor calls all finish first.
  state_cv_.wait(
      lk, [&] { return broken_ || (sched_.idle() && inbox_empty() && dependents_ == 0 && actors_idle()) || stopped_; });
  lk.unlock();
  stop();
}

void PoolImpl::terminate() {
  {
    std::lock_guard lk(mu_);
    if (!closed_ || closed_reason_.rfind("was closed", 0) == 0)
      closed_reason_ = "was terminated (Pool::terminate(), ~Pool(), or the end of fibra::Runtime)";
    closed_ = true;
    close_inbox();
    fail_all(std::make_exception_ptr(PoolClosed("fibra: the pool was terminated before this task finished")));
  }
  stop();
}

// ---- run: the communication thread (PoolImpl::loop) ---------------------------------------------
void PoolImpl::loop() {
  mpi::Napper napper;
  mpi::precise_sleeps();
  for (;;) {
    bool busy = false, sending = false;
    try {
      std::lock_guard ml(mpi::lock());
      busy |= receive();
      busy |= send_replies();
      busy |= dispatch();
      busy |= dispatch_actors();
      busy |= adjust_size();
      busy |= take_joins();
      sending = progress_sends();
      watch_workers();
      draw_graph_progress();
    } catch (...) {
      std::lock_guard lk(mu_);
      broken_ = std::current_exception();
      closed_reason_ = "stopped after an error (" + error_text(broken_) + ")";
      closed_ = true;
      close_inbox();
      fail_all(broken_);
      state_cv_.notify_all();
    }
    if (busy) freed_memory_busy();
    std::unique_lock lk(mu_);
    if (stopping_) break;
    if (busy || kicked_)
      napper.busy();
    else if (auto nap = napper.next(sending); nap.count() > 0) {
      napping_.store(true);  // before the conditions are looked at: a submit that comes after sees it, and kicks
      wake_.wait_for(lk, nap, [&] { return kicked_ || replies_.waiting() || inbox_.waiting(); });
      napping_.store(false);
    } else {  // spinning for a reply: give a core to whoever needs one (the caller woken by a result)
      lk.unlock();
      std::this_thread::yield();
      lk.lock();
    }
    kicked_ = false;
  }
  say_goodbye();
  // What this pool's tasks waited for on queues is no longer wanted, and what they were sent and did not
  // acknowledge goes back.
  ChannelStore::instance().set_notifier(uid_, nullptr);
  ChannelStore::instance().forget(uid_, 0, std::nullopt);
}

// How long an idle worker's communicator may go unprobed, `quiet` seconds after it was last busy:
// a 40th of that (a message waits at most 2.5% longer than the quiet before it), at most 100 ms
// (after 4 s of quiet: its heartbeats, 1 a second, are read in time all the same).
static double probe_gap(double quiet) { return std::clamp(quiet / 40, 0.0, 0.100); }

// Whether a worker is probed at every pass: it has batches out or tasks waiting in it, actors'
// lanes given a batch, or it is starting, retiring or leaving, or lost but still heard. Under mu_
// (Worker::batches).
bool PoolImpl::urgent(const Worker& w, double now) const {
  if (!w.alive()) return liveness_.still_heard(w, now);
  return w.state != Worker::State::ready || !w.batches.empty() || w.blocked > 0 || !w.actor_lanes_in_use.empty();
}

// A worker that may be urgent is listed in hot_ until a pass finds it is not (issue 29: a pass
// costs the workers at work and the groups, never a walk over every agent). Called when something
// goes to it or comes from it, when it starts and when its state changes; what is missed is
// still read at its group's (or its own) probe gap.
void PoolImpl::mark_hot(Worker& w) {
  if (w.hot) return;
  w.hot = true;
  hot_.push_back(&w);
}

bool PoolImpl::receive() {
  bool got = false;
  const double now = mpi::now_s();
  {
    std::lock_guard lk(mu_);
    for (Worker* w : hot_) w->hot = urgent(*w, now);
  }
  std::erase_if(hot_, [](const Worker* w) { return !w->hot; });
  got |= rings_.read_all();
  const std::uint64_t pass = ++receive_passes_;
  probing_.assign(hot_.begin(), hot_.end());  // a copy: hot_ grows as messages are handled
  for (Worker* w : probing_) {
    if (w->comm == MPI_COMM_NULL) continue;
    const bool lost = !w->alive();
    if (!lost && !w->lane_damage.empty()) {
      declare_lost(*w, "its executor's lane held a batch that does not decode (" + w->lane_damage + ")");
      continue;
    }
    try {
      got |= drain_lanes(*w) && !lost;
    } catch (const wire::Malformed& e) {
      if (lost)
        w->read_after_loss = false;
      else
        declare_lost(*w, std::string("its executor wrote a result frame that does not decode (") + e.what() + ")");
      continue;
    }
    // Agents spawned together are probed once for all, any source, below.
    if (AgentGroup* g = w->group.get(); g && g->members.size() > 1 && !g->split) {
      g->urgent_pass = pass;
      continue;
    }
    w->next_probe = now + probe_gap(now - w->last_busy);
    got |= probe(*w, lost);
  }
  // Each group once (urgent when a member is hot), or, for a group of one or one split, each
  // member that is not hot once its gap is over (an idle ready worker: its actors' calls and
  // heartbeats may still come).
  for (const auto& g : groups_) {
    if (g->members.size() > 1 && !g->split) {
      got |= receive_group(*g, now, g->urgent_pass == pass);
      continue;
    }
    for (Worker* w : g->members) {
      if (w->hot || w->comm == MPI_COMM_NULL || now < w->next_probe) continue;
      const bool lost = !w->alive();
      if (lost && !liveness_.still_heard(*w, now)) continue;
      w->next_probe = now + probe_gap(now - w->last_busy);
      got |= probe(*w, lost);
    }
  }
  liveness_.read_all_at(mpi::now_s());
  return got;
}

// Up to 64 messages from one worker's rank of its communicator.
bool PoolImpl::probe(Worker& w, bool lost) {
  bool got = false;
  mpi::Message m;
  for (int k = 0; k < 64 && (lost || w.alive()); ++k) {
    bool have = false;
    try {
      have = mpi::try_recv(w.comm, m, w.rank);
    } catch (const MpiError& e) {  // its connection broke: the worker is lost, not the pool
      if (lost)
        w.read_after_loss = false;
      else
        declare_lost(w, "MPI failed on its connection (" + error_text(std::current_exception()) + ")");
      break;
    }
    if (!have) break;
    got |= !lost && m.tag != wire::tag_heartbeat;  // a heartbeat is no reason to stay awake
    if (take_message(w, m, lost) == Taken::done) break;
  }
  return got;
}

// Probes a group's communicator for any of its members (up to 64 messages each), when `urgent` or
// its gap is over; a message from a member lost but still heard is read as late results, one
// from a member gone is dropped.
bool PoolImpl::receive_group(AgentGroup& g, double now, bool urgent) {
  if (!urgent && now < g.next_probe) return false;
  g.next_probe = now + probe_gap(now - g.last_busy);
  bool got = false;
  mpi::Message m;
  const int most = 64 * static_cast<int>(g.members.size());
  for (int k = 0; k < most && g.comm != MPI_COMM_NULL; ++k) {
    try {
      if (!mpi::try_recv(g.comm, m)) break;
    } catch (const MpiError& e) {  // whose connection broke is not known: each member is probed alone from now
      if (g.per_rank > 1) {        // (simulated agents share their processes' connections: all of them)
        for (Worker* w : g.members) {
          if (w->alive()) declare_lost(*w, "MPI failed on its connection (" + std::string(e.what()) + ")");
          w->read_after_loss = false;  // the communicator is not probed again
        }
        break;
      }
      log::debug("fibra: a probe of {} agents spawned together failed ({}); they are probed one by one",
                 g.members.size(), e.what());
      g.split = true;
      break;
    }
    // Agent k of a process that speaks for several (the scale simulation) uses the tags of block k.
    const int member = m.source * g.per_rank + m.tag / wire::tags_per_agent;
    m.tag %= wire::tags_per_agent;
    if (m.source < 0 || member >= static_cast<int>(g.members.size())) continue;
    Worker& w = *g.members[static_cast<std::size_t>(member)];
    const bool lost = !w.alive();
    if (lost && !liveness_.still_heard(w, now)) continue;
    if (!lost && m.tag != wire::tag_heartbeat) {
      got = true;
      g.last_busy = now;
      g.next_probe = 0;
    }
    take_message(w, m, lost);
  }
  return got;
}

// One message from a worker: handled; from one lost but still heard, its late results only (its
// hello, heartbeats and bye change nothing now). `done`: nothing more is to be read from it.
PoolImpl::Taken PoolImpl::take_message(Worker& w, mpi::Message& m, bool lost) {
  if (lost) {
    if (m.tag == wire::tag_results) {
      try {
        on_results(w, m.data);
      } catch (const wire::Malformed&) {
        w.read_after_loss = false;
      }
    }
    return Taken::more;
  }
  w.last_heard = mpi::now_s();
  if (m.tag != wire::tag_heartbeat) {
    w.last_busy = w.last_heard;
    w.next_probe = 0;
    mark_hot(w);
  }
  try {
    handle(w, m);
  } catch (const wire::Malformed& e) {  // that worker is not to be trusted; the pool goes on
    declare_lost(w, std::string("it sent a message that does not decode (") + e.what() +
                        "); are driver and workers the same build?");
    return Taken::done;
  }
  return w.alive() ? Taken::more : Taken::done;
}

// Lines an agent's executors printed, written with one write (several while the destination takes
// part of it): of all the driver's pools, one at a time, so no two workers' lines are spliced.
void PoolImpl::write_output(const wire::Output& o) {
  static std::mutex mu;
  std::lock_guard lk(mu);
  const int fd = o.stream == 2 ? 2 : 1;
  if (fd == 1) std::fflush(stdout);  // what the caller printed before comes first
  for (std::size_t done = 0; done < o.lines.size();) {
    const ssize_t k = ::write(fd, o.lines.data() + done, o.lines.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;  // nowhere to write: the lines are dropped, the work goes on
    done += static_cast<std::size_t>(k);
  }
}

void PoolImpl::handle(Worker& w, mpi::Message& m) {
  switch (m.tag) {
    case wire::tag_hello: return on_hello(w, wire::decode<wire::Hello>(m.data));
    case wire::tag_results:
      // What its executors put in their lanes before the agent wrote this (a report of a death,
      // say) is taken first, as it would have come first through the agent.
      drain_lanes(w);
      return on_results(w, m.data);
    case wire::tag_request: return on_request(w, m.data);
    case wire::tag_blocked: {
      const std::int32_t d = wire::decode_whole<wire::WaitDelta>(m.data).delta;
      std::lock_guard lk(mu_);
      w.blocked = std::max(0, w.blocked + d);
      kick();
      return;
    }
    case wire::tag_output: return write_output(wire::decode<wire::Output>(m.data));
    case wire::tag_route_gone: {
      const auto g = wire::decode_whole<wire::RouteGone>(m.data);
      rings_.close(w, g.route);  // what it put there before it ended comes first
      return ChannelStore::instance().forget(uid_, static_cast<std::uint64_t>(w.id), g.route, g.taken);
    }
    case wire::tag_actor_lane: return open_actor_lane(w, wire::decode<wire::ActorLane>(m.data));
    case wire::tag_kept_copy: return on_kept_copy(w, m.data);
    case wire::tag_object_missing: return on_object_missing(w, wire::decode<wire::ObjectFree>(m.data).id);
    case wire::tag_actor_died: {
      const auto d = wire::decode<wire::ActorDeath>(m.data);
      rings_.close(w, d.actor | wire::route_actor_bit);
      // What it put in its lane before it died comes first: a finished call is delivered.
      if (auto l = w.actor_lanes.find(d.actor); l != w.actor_lanes.end())
        drain_lane(w, std::shared_ptr<LaneRegion>(l->second));
      std::lock_guard lk(mu_);
      return on_actor_death(w, d);
    }
    case wire::tag_bye: {
      drain_lanes(w);  // before its lanes are let go with its slot
      rings_.close(w, std::nullopt);
      ChannelStore::instance().forget(uid_, static_cast<std::uint64_t>(w.id), std::nullopt);  // its processes end
      bool stopping;
      {
        std::lock_guard lk(mu_);
        set_state(w, Worker::State::gone);
        if (events_) events_->left(w.id);
        stopping = stopping_;
      }
      // A worker retired by resize() frees its side of the connection right after its bye and
      // exits; the pool frees its side too (with its group's last member), so that its slot is
      // free now. MPI_Comm_free is local:
      // MPI_Comm_disconnect, a collective, would wait here for an agent that may never get there
      // (lost on another node), stopping every pool's traffic. At the pool's end say_goodbye()
      // frees the rest the same way.
      if (!stopping) release_comm(w);
      std::lock_guard lk(mu_);
      if (!stopping) free_slot(w);
      return;
    }
    default: return;  // heartbeat
  }
}

// The progress of task graphs (issue 28, item 15): what was submitted as tasks and actor calls,
// done, running and waiting, on one line of stderr redrawn twice a second while any is
// outstanding (after the first half second of it), then ended with a newline. A map's own line
// goes first: this one waits while one is drawn. FIBRA_PROGRESS as for maps.
void PoolImpl::draw_graph_progress() {
  if (!graph_.on) return;
  const double now = mpi::now_s();
  if (now - graph_.last_look < 0.5) return;
  graph_.last_look = now;
  std::uint64_t queued = 0, running = 0, calls_queued = 0, calls_running = 0, tasks = 0, calls = 0;
  int waiting = 0;
  {
    std::lock_guard lk(mu_);
    sched_.count_tasks(queued, running);
    for (const auto& [id, a] : actors_) {
      for (const auto& c : a.queue) calls_queued += !c.ctor;
      for (const auto& [chunk, c] : a.in_flight) calls_running += !c.ctor;
    }
    waiting = dependents_;
    tasks = graph_.tasks;
    calls = graph_.calls;
  }
  const bool outstanding = queued + running + calls_queued + calls_running > 0 || waiting > 0;
  if (outstanding && graph_.busy_since < 0) graph_.busy_since = now;
  if (!outstanding) graph_.busy_since = -1;
  // On a terminal the line is redrawn in place; into a file or a pipe it is a whole line each
  // time, at most every 10 s, and the final counts once more at the end.
  const bool terminal = stderr_is_terminal();
  const bool due =
      outstanding ? now - graph_.busy_since >= 0.5 && (terminal || now - graph_.last_line >= 10) : graph_.drawing;
  if (!due || maps_drawing_progress().load() > 0) return;
  graph_.last_line = now;
  std::string line = terminal ? "\r[fibra]" : "[fibra]";
  if (tasks > 0 || waiting > 0)
    line += " tasks: " + std::to_string(tasks - std::min(tasks, queued + running)) + " done, " +
            std::to_string(running) + " running, " + std::to_string(queued) + " queued, " + std::to_string(waiting) +
            " waiting for arguments";
  if (calls > 0)
    line += std::string(tasks > 0 || waiting > 0 ? ";" : "") +
            " actor calls: " + std::to_string(calls - std::min(calls, calls_queued + calls_running)) + " done, " +
            std::to_string(calls_running) + " running, " + std::to_string(calls_queued) + " queued";
  const std::size_t length = line.size();
  if (terminal && length < graph_.last_length) line.append(graph_.last_length - length, ' ');  // over the longer line
  graph_.last_length = outstanding ? length : 0;
  if (!outstanding || !terminal) line += "\n";
  graph_.drawing = outstanding;
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

// Moves queued sends on; returns whether some are still under way. A send that MPI reports failed
// loses its worker, not the pool.
bool PoolImpl::progress_sends() {
  struct Failed {
    MPI_Comm comm;
    int rank;
    std::string why;
  };
  std::vector<Failed> failed;  // declared lost after the pass: that edits the queue
  sends_.progress([&](MPI_Comm c, int rank, const std::string& why) { failed.push_back({c, rank, why}); });
  for (const auto& [c, rank, why] : failed)
    for (auto& w : workers_)
      if (w->comm == c && w->rank == rank && w->alive()) declare_lost(*w, "MPI failed on its connection (" + why + ")");
  return sends_.pending() > 0;
}

void PoolImpl::send(Worker& w, int tag, std::string data) {
  mpi::Pieces p;
  p.heads = std::move(data);
  send(w, tag, std::move(p));
}

void PoolImpl::send(Worker& w, int tag, mpi::Pieces data) {
  if (!w.alive()) return;  // never to a worker that is gone or lost: a send to a dead peer can wedge MPI
  const bool too_big = data.size() > static_cast<std::size_t>(INT32_MAX);  // the caller's error, not the worker's
  try {
    sends_.send(w.comm, w.rank, w.tag_of(tag), std::move(data));
  } catch (const MpiError&) {
    if (too_big) throw;
    declare_lost(w, "MPI failed on its connection (" + error_text(std::current_exception()) + ")");
    return;
  }
  w.last_sent = mpi::now_s();
  if (tag != wire::tag_heartbeat) {  // an answer may come soon: probed at every pass for a while
    w.last_busy = w.last_sent;
    w.next_probe = 0;
    mark_hot(w);
    if (w.group) {  // (its group's probe, when it was spawned with others)
      w.group->last_busy = w.last_sent;
      w.group->next_probe = 0;
    }
  }
}

// ---- stop: what is left fails, the workers are told goodbye (PoolImpl::stop) -------------------
// Every chunk still queued or running fails with `e`.
void PoolImpl::fail_all(const std::exception_ptr& e) {
  fail_inbox(e);  // (closed by now: nothing comes in after)
  for (auto& c : sched_.take_all()) {
    if (events_) note_unsent_or_in_flight("abandoned", *c);
    c->job->deliver({c->first, c->count, {}, e, {}});
  }
  fail_actors(e);
  for (auto& w : workers_) w->batches.clear();
  state_cv_.notify_all();
}

void PoolImpl::stop() {
  std::unique_ptr<Elastic> elastic;  // Pool::adapt submits nothing more; its jobs are cancelled below
  {
    std::lock_guard el(elastic_mu_);
    elastic = std::move(elastic_);
    elastic_closed_ = true;
  }
  if (elastic) elastic->halt();
  if (spec_adapt_.exchange(false)) give_back_spec_adapt();  // the next pool to start takes it
  {
    std::lock_guard lk(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    closed_ = true;
    close_inbox();
    kick();
  }
  if (thread_.joinable()) thread_.join();
  if (elastic) elastic->cancel(true, "the pool ended");  // what is still pending, or running after the goodbye
  freed_.stop();                                         // no thread left to tell the agents
  std::lock_guard lk(mu_);
  // Nothing answers once the communication thread is gone: what is left fails rather than waits
  // (join() and terminate() leave nothing queued; this is the net under them).
  fail_all(std::make_exception_ptr(PoolClosed("fibra: the pool " + closed_reason_ + " before this call finished")));
  if (events_) events_->pool_ended();
}

std::shared_ptr<PoolCore> start_pool(const PoolSettings& settings) {
  if (in_executor())
    throw ConfigError(
        "fibra: a Pool was created inside a remote function, on a worker: a task uses the pool that "
        "runs it instead, through fibra::default_pool() (its map, imap, submit) or fibra::submit "
        "(docs/tasks.md#nested-tasks)");
  if (!Runtime::active())
    throw ConfigError(
        "fibra: a Pool was created before fibra::Runtime: make `fibra::Runtime rt(argc, argv);` the first line of "
        "main");
  if (settings.workers < 1)
    throw ConfigError("fibra: a pool needs at least 1 worker (asked for " + std::to_string(settings.workers) + ")");
  keep_freed_memory(settings.driver_keep_freed_bytes, false);  // the first pool asking decides for the process
  auto p = std::make_shared<PoolImpl>(settings);
  p->start();
  PoolRegistry::instance().add(p->uid(), p);
  return p;
}

void PoolImpl::check_fits(const Resources& need, const std::string& what) const {
  // The best worker: GPUs go to an agent only for all its executors at once.
  Resources best = s_.resources;
  const int per_agent = s_.resources.gpus * planner_.agent_size(s_.workers);
  best.gpus = static_cast<int>(s_.gpu_ids.size()) >= per_agent ? s_.resources.gpus : 0;
  if (fits(need, best)) return;
  throw ConfigError("fibra: " + what + " asks for " + describe(need) + ", but a worker of this pool offers at most " +
                    describe(best) + ", so it could never run; ask for less, or give the pool's workers more " +
                    "(PoolOptions::offers, PoolOptions::gpu_ids, or the allocation: docs/resources.md)");
}

std::shared_ptr<PoolCore> core_for_actor_handle(std::uint64_t uid) {
  if (in_executor()) return task_side()->core(uid);
  if (auto p = PoolRegistry::instance().find(uid)) return p;
  throw Error("fibra: an actor handle names a pool that is gone");
}

std::shared_ptr<PoolCore> find_pool(std::uint64_t uid) noexcept { return PoolRegistry::instance().find(uid); }

bool pool_running() noexcept {
  const auto live = live_pools();
  return std::any_of(live.begin(), live.end(), [](const auto& p) { return !p->closed(); });
}

// The pool its hello names (a worker job of that pool's Pool::adapt), else the oldest pool still
// running (a program usually has one).
bool offer_joined_agent(JoinedAgent& j) {
  for (auto& p : live_pools())
    if ((j.hello.pool == 0 || p->uid() == j.hello.pool) && p->adopt_join(j)) return true;
  return false;
}

namespace {
// PoolOptions::initializer travels to each worker in its environment (FIBRA_INITIALIZER, in hex),
// so its arguments are kept well below what one variable may hold (128 KiB on Linux).
Initializer checked_initializer(const Initializer& init) {
  constexpr std::size_t most = 32768;
  if (init && init.detail_args().size() > most)
    throw ConfigError("fibra: PoolOptions::initializer: the arguments of " + init.name() + " encode to " +
                      std::to_string(init.detail_args().size()) + " bytes, over the " + std::to_string(most) +
                      " an initializer may take (they travel in each worker's environment): pass the path of a "
                      "file instead, and read the file in the initializer");
  return init;
}
}  // namespace

void stop_all_pools() noexcept {
  const auto live = PoolRegistry::instance().take_all();
  for (auto& p : live) {
    try {
      p->terminate();
    } catch (const std::exception& e) {
      log::error("fibra: stopping a pool: {}", e.what());
    }
  }
}

}  // namespace fibra::detail

namespace fibra {

Pool::Pool(int workers, PoolOptions options) {
  detail::PoolSettings s;
  if (workers < 0)
    throw ConfigError("fibra: Pool(" + std::to_string(workers) +
                      "): the number of workers cannot be negative (0 means one per core)");
  s.workers = workers > 0 ? workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!(options.heartbeat_s > 0) || !(options.worker_silence_s >= 2 * options.heartbeat_s) ||
      !(options.driver_silence_s >= 2 * options.heartbeat_s))
    throw ConfigError(
        "fibra: PoolOptions: heartbeat_s must be > 0 and worker_silence_s and driver_silence_s at least "
        "twice heartbeat_s (got " +
        std::to_string(options.heartbeat_s) + ", " + std::to_string(options.worker_silence_s) + ", " +
        std::to_string(options.driver_silence_s) + ")");
  if (!(options.start_timeout_s > 0)) throw ConfigError("fibra: PoolOptions::start_timeout_s must be > 0");
  s.heartbeat_s = options.heartbeat_s;
  s.worker_silence_s = options.worker_silence_s;
  s.driver_silence_s = options.driver_silence_s;
  s.start_timeout_s = options.start_timeout_s;
  if (options.workers_per_agent < 0)
    throw ConfigError("fibra: PoolOptions::workers_per_agent must be 0 (automatic) or more, got " +
                      std::to_string(options.workers_per_agent));
  s.workers_per_agent = options.workers_per_agent;
  for (auto [name, mib] : {std::pair{"keep_freed_mib", options.keep_freed_mib},
                           std::pair{"driver_keep_freed_mib", options.driver_keep_freed_mib}})
    if (mib > (std::size_t(1) << 20))
      throw ConfigError(std::string("fibra: PoolOptions::") + name + " must be at most 1048576 (1 TiB), got " +
                        std::to_string(mib));
  s.keep_freed_bytes = std::uint64_t(options.keep_freed_mib) << 20;
  s.driver_keep_freed_bytes = std::uint64_t(options.driver_keep_freed_mib) << 20;
  s.keep_results_from = options.keep_results_from;
  if (options.spare_processes < 0 || options.spare_processes > 64)
    throw ConfigError("fibra: PoolOptions::spare_processes must be 0 to 64, got " +
                      std::to_string(options.spare_processes));
  s.spare_processes = options.spare_processes;
  s.initializer = detail::checked_initializer(options.initializer);
  s.max_tasks_per_child = options.max_tasks_per_child;
  s.events = !options.events.empty() ? options.events : detail::env::text("FIBRA_EVENTS");
  s.dashboard = !options.dashboard.empty() ? options.dashboard : detail::env::text("FIBRA_DASHBOARD");
  s.encrypt_objects = options.encrypt_objects;
  if (!s.dashboard.empty() && s.events.empty())
    throw ConfigError("fibra: the live page (" +
                      (options.dashboard.empty() ? detail::env::shown("FIBRA_DASHBOARD") : "PoolOptions::dashboard") +
                      ") is made from the run's event log, and there is none: name its folder (PoolOptions::events "
                      "or FIBRA_EVENTS)");
  s.policy = detail::make_policy({}, options.retries, options.retry_exceptions, options.task_timeout_s);
  const auto r = detail::resolve_resources(options, s.workers);
  s.resources = r.each;
  s.gpu_ids = r.gpu_ids;
  auto placement = detail::resolve_placement(options);
  detail::check_hosts_resolve(placement, detail::host_name());
  s.hosts = std::move(placement.hosts);
  s.host_slots = std::move(placement.slots);
  s.pack = placement.pack;
  core_ = detail::start_pool(s);
}

Pool::~Pool() {
  if (!core_) return;
  try {
    core_->terminate();
  } catch (const std::exception& e) {
    log::error("fibra: ~Pool: {}", e.what());
  }
}

}  // namespace fibra
