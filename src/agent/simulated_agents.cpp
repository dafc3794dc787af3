// The agents' side of the scale simulation (simulated_agents.hpp): each simulated agent has its
// setup, says its hello, sends heartbeats when it has been quiet, runs the batches it is sent and
// says bye when told to leave, all on the tags of its block (wire::tags_per_agent); some fall
// silent on purpose, as hung nodes do.
#include "agent/simulated_agents.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "common/process.hpp"
#include "fibra/detail/registry.hpp"
#include "transport/mpi.hpp"

namespace fibra::detail {
namespace {

// How long the process waits for its agents' setups, as a real agent waits for its one.
constexpr double setup_wait_s = 120;

struct SimulatedAgent {
  bool set_up = false;
  bool said_bye = false;
  bool may_fall_silent = false;
  double first_batch_at = -1;  // when its first batch came (-1: none yet)
  double last_sent = 0;
};

class SimulatedAgents {
 public:
  SimulatedAgents(MPI_Comm parent, const wire::AgentSetup& first)
      : parent_(parent), cfg_(first), agents_(first.simulation.agents) {
    const std::uint32_t every = cfg_.simulation.silent_every;
    for (std::size_t k = 0; k < agents_.size(); ++k) agents_[k].may_fall_silent = every > 0 && k % every == every - 1;
  }

  int run() {
    const double started = mpi::now_s();
    last_heard_ = started;
    set_up(0);
    mpi::Napper napper(std::chrono::milliseconds(100));  // idle: as a real agent's naps
    mpi::Message m;
    while (!all_done()) {
      const double now = mpi::now_s();
      bool got = false;
      while (mpi::try_recv(parent_, m)) {
        last_heard_ = mpi::now_s();
        got |= take(m);
      }
      // Agents the driver declared lost are never told to leave: once the pool's end reached the
      // others (not a retirement by Pool::resize: a spawn may keep the driver quiet for seconds
      // meanwhile) and the driver has gone quiet, the process ends.
      if (pool_ending_ && now - last_heard_ > std::max(2.0, 3 * cfg_.heartbeat_s)) break;
      if (set_ups_ < agents_.size() && now - started > setup_wait_s) {
        log::error("fibra simulated agents pid {}: {} of {} setups came within {:.0f} s; exiting", ::getpid(), set_ups_,
                   agents_.size(), setup_wait_s);
        return 3;
      }
      if (now - last_heard_ > cfg_.driver_silence_s) {
        log::error("fibra simulated agents pid {}: the driver has been silent for {:.0f} s; exiting", ::getpid(),
                   now - last_heard_);
        return 4;
      }
      if (now >= next_beats_) beat(now);
      const bool sending = sends_.progress() > 0;
      if (got) {
        napper.busy();
      } else if (auto nap = napper.next(sending); nap.count() > 0) {
        std::this_thread::sleep_for(std::min<std::chrono::microseconds>(nap, std::chrono::milliseconds(100)));
      } else {
        std::this_thread::yield();
      }
    }
    sends_.drain(5.0);
    return 0;
  }

 private:
  // One message to agent k (its tag's block); whether it was more than a heartbeat.
  bool take(mpi::Message& m) {
    const auto k = static_cast<std::size_t>(m.tag / wire::tags_per_agent);
    const int tag = m.tag % wire::tags_per_agent;
    if (k >= agents_.size()) return false;
    if (tag == wire::tag_setup) {
      set_up(k);
      return true;
    }
    if (tag == wire::tag_tasks && agents_[k].first_batch_at < 0) agents_[k].first_batch_at = mpi::now_s();
    if (silent(k, mpi::now_s())) return false;  // a hung node: what it is sent is never answered
    switch (tag) {
      case wire::tag_tasks: run_batch(k, m.data); return true;
      case wire::tag_shutdown:
        send(k, wire::tag_bye, std::string());
        agents_[k].said_bye = true;
        pool_ending_ |= m.data != wire::shutdown_retire;
        return true;
      default: return false;  // heartbeats; nothing else is sent for plain tasks
    }
  }

  void set_up(std::size_t k) {
    if (agents_[k].set_up) return;
    agents_[k].set_up = true;
    ++set_ups_;
    wire::Hello h;
    h.fingerprint = registry_fingerprint();
    h.functions = registry_size();
    h.pid = pid_;
    h.host = host_;
    send(k, wire::tag_hello, wire::encode(h));
  }

  // Silent from silent_after_s after its first batch on (that batch too, when 0): the driver has
  // handed it work it will never answer.
  bool silent(std::size_t k, double now) const {
    const SimulatedAgent& a = agents_[k];
    return a.may_fall_silent && a.first_batch_at >= 0 && now - a.first_batch_at >= cfg_.simulation.silent_after_s;
  }

  // Each chunk through its function's runner, as an executor runs it (without its mailbox, its
  // lane and the objects it maps); the results go back as one message.
  void run_batch(std::size_t k, std::string_view batch) {
    std::string out = wire::begin_results(pid_);
    for (const wire::TaskView& t : wire::parse_tasks(batch)) {
      wire::ResultHeader h{t.header.chunk, t.header.attempt, wire::Status::ok};
      const FunctionEntry* fn = function_by_id(t.header.fn);
      const ChunkRunner run = !fn ? nullptr : t.header.mode == CallMode::single ? fn->run_single : fn->run_tuple;
      if (!run || t.header.actor != 0 || !t.header.objects.empty()) {
        h.status = wire::Status::unknown_fn;
        wire::append_result(out, h,
                            "the scale simulation runs plain tasks of this binary's functions only (no actors, "
                            "no stored objects)");
        continue;
      }
      const std::size_t at = wire::open_result(out, h);
      const std::size_t body = out.size();
      ItemFailure fail;
      std::vector<ItemFailure> failures;
      RunControl ctl;
      ctl.keep_going = t.header.keep_going;
      ctl.skip = t.header.skip;
      ctl.failures = &failures;
      Cursor item{0};
      if (!run(t.payload, t.header.count, out, fail, item, ctl)) {
        h.status = wire::Status::raised;
        out.resize(body);
        out += wire::encode(fail);
      } else if (!failures.empty()) {
        h.status = wire::Status::partial;
        const std::string partial = wire::encode_partial(failures, std::string_view(out).substr(body));
        out.resize(body);
        out += partial;
      }
      wire::close_result(out, at, h);
    }
    send(k, wire::tag_results, std::move(out));
  }

  // Heartbeats of the agents quiet for heartbeat_s, looked at four times a heartbeat.
  void beat(double now) {
    next_beats_ = now + cfg_.heartbeat_s / 4;
    for (std::size_t k = 0; k < agents_.size(); ++k) {
      const SimulatedAgent& a = agents_[k];
      if (a.set_up && !a.said_bye && !silent(k, now) && now - a.last_sent > cfg_.heartbeat_s)
        send(k, wire::tag_heartbeat, std::string());
    }
  }

  // Every agent said bye, or fell silent (the driver no longer writes to it).
  bool all_done() const {
    const double now = mpi::now_s();
    for (std::size_t k = 0; k < agents_.size(); ++k)
      if (!agents_[k].said_bye && !silent(k, now)) return false;
    return true;
  }

  void send(std::size_t k, int tag, std::string data) {
    sends_.send(parent_, 0, tag + static_cast<int>(k) * wire::tags_per_agent, std::move(data));
    agents_[k].last_sent = mpi::now_s();
  }

  MPI_Comm parent_;
  wire::AgentSetup cfg_;
  std::vector<SimulatedAgent> agents_;
  std::size_t set_ups_ = 0;
  bool pool_ending_ = false;  // a shutdown that is not a retirement came
  std::string host_ = host_name();
  std::int64_t pid_ = ::getpid();
  mpi::SendQueue sends_;
  double last_heard_ = 0, next_beats_ = 0;
};

}  // namespace

int simulated_agents_main(MPI_Comm parent, const wire::AgentSetup& first) {
  int* tag_ub = nullptr;
  int flag = 0;
  const long long top = static_cast<long long>(first.simulation.agents) * wire::tags_per_agent;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag) == MPI_SUCCESS && flag && tag_ub && top > *tag_ub) {
    log::error(
        "fibra simulated agents pid {}: {} agents need MPI tags up to {}, over this MPI's {}; simulate fewer "
        "agents a process (FIBRA_SIMULATED_AGENTS)",
        ::getpid(), first.simulation.agents, top, *tag_ub);
    return 2;
  }
  SimulatedAgents a(parent, first);
  return a.run();
}

}  // namespace fibra::detail
