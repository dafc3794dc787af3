// src/driver/worker.hpp: the driver's record of one agent of a pool (Worker), the group of agents one
// spawn started (AgentGroup), the batches it has out (BatchesInFlight), and the pool's counts of
// its workers by state (WorkerCounts). The records are the communication thread's; pool_impl.hpp's
// lock table says which fields user threads read, and under which lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fibra/detail/core.hpp"
#include "fibra/resources.hpp"
#include "driver/object_copies.hpp"
#include "driver/scheduler.hpp"
#include "transport/lane.hpp"
#include "transport/mpi.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

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
  // The copies of stored objects its agent holds, was handed by its executors, or copies from a
  // peer (tag_object_fetch; if that fails, the driver sends them, and that peer is not asked of
  // this worker again: a firewall, say). The communication thread's alone.
  AgentObjects objects;
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

// Executors of the agents that are starting or ready, of the ready ones, and agents retiring:
// counted as states change (change()), not by a walk over every agent (issue 29). Workers that
// joined (Worker::joined) are counted apart: the pool's target does not count them. Under the
// pool's mu_, or on the communication thread, which alone changes states.
class WorkerCounts {
 public:
  /// Every change of a Worker's state goes through here.
  void change(Worker& w, Worker::State s) {
    count(w, -1);
    w.state = s;
    count(w, +1);
  }
  /// Adds (+1) or removes (-1) `w` as it stands: a worker planned or adopted, a spawn undone.
  void count(const Worker& w, int sign) {
    const bool ready = w.state == Worker::State::ready;
    if (ready || w.state == Worker::State::starting) (w.joined ? joined_live_ : live_) += sign * w.executors;
    if (ready) (w.joined ? joined_ready_ : ready_) += sign * w.executors;
    if (w.state == Worker::State::retiring) retiring_ += sign;
  }
  int live() const { return live_; }    // spawned executors starting or ready
  int ready() const { return ready_; }  // spawned executors ready
  int joined_live() const { return joined_live_; }
  int joined_ready() const { return joined_ready_; }
  int retiring() const { return retiring_; }  // agents (spawned or joined) retiring

 private:
  int live_ = 0, ready_ = 0, joined_live_ = 0, joined_ready_ = 0, retiring_ = 0;
};

}  // namespace fibra::detail
