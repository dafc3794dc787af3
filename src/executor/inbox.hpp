// src/executor/inbox.hpp: what the executor's agent sends it (task batches, replies to its calls),
// read by whichever of its threads waits; and its calls out (requests, tells, calls on channels
// through its lane's ring).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fibra/detail/core.hpp"
#include "transport/wire.hpp"

namespace fibra::detail::exec {

// What the agent sends: task batches for the task thread, replies for the calls that wait. No
// thread stands between the socket and the task thread: it reads the socket itself when it waits
// for a batch (the data path has no extra wake-up) or for a reply (a wait inside a task). Only
// when another thread (one a task started) waits for a reply is a reader thread started, which
// reads while nobody else does. One frame is read at a time, under read_mu_.
class Inbox {
 public:
  // Request ids start from this process's pid: a reply meant for an executor that died (and was
  // started again under the same route) never matches a request of its successor.
  explicit Inbox(int sock) : sock_(sock), next_id_((static_cast<std::uint64_t>(::getpid()) << 32) + 1) {}

  // A batch from the agent (its bytes), or from the lane (`slot`: a view of it there, valid until
  // the slot is finished, once its results are sent).
  struct Batch {
    std::string bytes;
    std::string_view in_lane;
    int slot = -1;
    std::string_view data() const { return slot >= 0 ? in_lane : std::string_view(bytes); }
  };

  // The next batch, read by the calling thread if none is queued; nullopt once the agent closed
  // the socket and every batch was taken. Between batches it watches its lane for a moment, then
  // sleeps on the lane's bell, which the driver rings for a batch and the agent for what it wrote.
  std::optional<Batch> next_batch();
  std::optional<Batch> try_batch();
  // Reads what arrives within `d` (a reply, a batch to queue), if no other thread is reading. The
  // task's thread (`lane_too`) also returns early for a batch in the lane, which only it takes; a
  // thread a task started waits on the socket alone.
  void read_a_little(std::chrono::milliseconds d, bool lane_too);
  // Bytes (or the end of the socket) wait to be read.
  bool readable() const;
  bool closed();
  // Another thread than the task's waits for a reply: from now on a thread reads while nobody else does.
  void need_reader();

  // A call on a channel (`job`: its answer; none for a tell). Once the driver reads this process's
  // lane (it is on this host), the first such call asks to send them through the lane's ring
  // (ChannelOp::ring, through the socket): its answer comes after all that went the socket's way,
  // so no call overtakes an earlier one. From then on they all go through the ring, in order, and
  // their answers come back through the other ring (or the socket, for one that did not fit).
  void channel_call(wire::Request r, std::shared_ptr<JobState> job);
  // Answers the driver put in the ring, delivered by whichever thread looks first; whether some were.
  bool take_ring_replies();
  // Calls on channels go through the lane's ring now: the driver is on this host, and reads this
  // process's memfds (transport/shared_items.hpp).
  bool calls_through_ring() const { return ring_.load(std::memory_order_acquire) == Ring::on; }

  // A request that wants no reply (a queue's acknowledgement).
  void tell(wire::Request r);

  // A call into the pool: its request goes out, its outcome to `job` when the reply comes.
  void request(wire::Request r, std::shared_ptr<JobState> job, const std::vector<int>& fds = {});
  // Some request went through the socket: a call in the ring could overtake it.
  bool used_socket();

 private:
  struct Waiting {
    std::shared_ptr<JobState> job;
    std::uint64_t first = 0;
    std::uint32_t count = 1;
  };
  enum class Ring { unasked, on, off };

  static ChunkOutcome closed_outcome(std::uint64_t first, std::uint32_t count);

  // Under send_mu_: asks the driver to read this process's calls on channels from its lane's ring,
  // and waits for the answer (without running tasks meanwhile: one might call a channel too).
  void ask_for_ring();

  // Reads one frame (under read_mu_): a batch is queued, a reply delivered. Without `block` it
  // reads only if bytes are there. At the end of the socket, calls still waiting get an answer.
  void read_one(bool block);
  bool has_queued();

  void deliver(const wire::Reply& r);

  static std::exception_ptr rebuild(const wire::ErrorText& e);

  int sock_;
  bool just_ran_ = false;                    // the task's thread took a batch since it last waited
  std::atomic<bool> reader_running_{false};  // need_reader() started the reader thread
  std::mutex read_mu_;                       // held while one frame is read
  std::mutex mu_;                            // what follows
  std::deque<std::string> batches_;
  std::unordered_map<std::uint64_t, Waiting> waiting_;
  std::uint64_t next_id_;
  bool used_socket_ = false;  // a request or tell went through the socket
  bool closed_ = false;
  std::once_flag reader_started_;
  std::mutex send_mu_;  // calls on channels go out one at a time, each the way the one before went
  std::atomic<Ring> ring_{Ring::unasked};
  std::mutex ring_read_mu_;   // held while answers are taken from the ring
  std::string ring_partial_;  // the first fragments of an answer (under ring_read_mu_)
};

}  // namespace fibra::detail::exec
