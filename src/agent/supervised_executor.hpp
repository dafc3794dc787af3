// src/agent/supervised_executor.hpp: the agent's view of one executor, a plain child process that runs user
// code: its process, its socket, the mailbox it shares with the agent, the batches it was given
// and the result frames it sends back. An agent supervises several (src/agent/agent.cpp).
#pragma once

#include <sys/types.h>

#include <climits>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"
#include "transport/frame_reader.hpp"
#include "transport/lane.hpp"
#include "transport/object_memory.hpp"
#include "transport/wire.hpp"

namespace fibra::detail {

/// What the agent's executors printed, in whole lines, until the agent sends it to the driver
/// (wire::Output), which writes each message with one write of its own. Lines do not go to the
/// agent's own stdout: under Open MPI's forwarding of spawned processes' output, writes of
/// several agents were cut and spliced mid-line (issue 28: 850-1,600 broken lines of 80,000).
struct AgentOutput {
  std::string out, err;
};
/// The agent's one collection of its executors' lines.
AgentOutput& agent_output();

/// An executor's stdout or stderr, which the agent reads through a pipe and collects in whole
/// lines, each after a prefix that says which worker printed it (none when the prefix is empty).
class LineRelay {
 public:
  explicit LineRelay(std::string AgentOutput::*to) : to_(to) {}
  /// Reads from `read_end` from now on (the previous pipe's rest is written first).
  void attach(UniqueFd read_end, const std::string& prefix);
  /// Collects every whole line that has arrived; true if it read anything.
  bool pump();
  /// The executor is gone: collects what is left, ending it with a newline.
  void finish();

 private:
  void emit(std::string_view lines);
  UniqueFd from_;
  std::string AgentOutput::*to_;
  std::string prefix_, partial_;
};

class SupervisedExecutor {
 public:
  /// `index`: 1..K within its agent; `prefix`: what its lines of output start with ("" for none).
  /// An actor's process (`actor`) is not restarted by its agent, and its death is no warning here:
  /// the driver decides what follows (ActorDeath).
  /// Its shared memory (mailbox and lane) is made here, once: a restarted executor maps the same.
  /// An actor's process keeps its lane closed (its calls come through the agent, in order).
  SupervisedExecutor(int index, std::string prefix, bool actor = false, std::uint64_t lane_nonce = 0);
  ~SupervisedExecutor();  // kills and reaps a running executor
  SupervisedExecutor(const SupervisedExecutor&) = delete;
  SupervisedExecutor& operator=(const SupervisedExecutor&) = delete;

  /// Variables set in its environment (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS), over the agent's.
  void set_env(std::vector<std::pair<std::string, std::string>> vars) { env_ = std::move(vars); }
  /// Starts the process (posix_spawn of this binary); throws Error.
  void start();
  /// Starts it again after a death, once its back-off (for crash loops) has passed.
  void start_if_due(double now);
  bool running() const { return pid_ > 0; }
  /// It has started and waits for work (it said so with an empty frame).
  bool ready() const { return ready_; }
  /// Ready, or it died before it got there: either way the agent need not wait for it to say hello
  /// (an executor that dies as it starts is a crash loop for the chunks to report, not a hang).
  bool started_or_failed() const { return ready_ || idle_deaths_ > 0; }
  pid_t pid() const { return pid_; }
  /// Whether its process has ended (reaped now), even if something it started still holds its
  /// socket open (a grandchild would keep the end of file from coming).
  bool exited();
  /// Its wait status, once exited() said it ended.
  int exit_status() const { return reaped_status_; }
  /// What its dead process had taken of the items it read ahead; the slots are cleared for the next
  /// process.
  std::vector<std::uint64_t> take_ahead_taken() const {
    std::vector<std::uint64_t> out;
    lane().mailbox().take_ahead_taken(out);
    return out;
  }
  /// The chunk it is in now (its mailbox), 0 between chunks.
  std::uint64_t current_chunk() const { return lane().mailbox().chunk.load(std::memory_order_acquire); }
  /// Ends its process (SIGKILL) for fibra::cancel with force of `chunk`, which it was seen in. Its
  /// death is read and reported as any, but if it was in another chunk by then (it finished that
  /// one and began the next), no chunk is blamed: they were not run.
  void kill_for_cancel(std::uint64_t chunk);
  int socket() const { return sock_.get(); }
  /// Chunks given (by the agent, or by the driver through its lane) and not reported back: how busy it is.
  std::size_t load() const { return held_.size() + lane().chunks_held(); }
  /// The descriptor of its shared memory, which the driver opens to use its lane.
  int lane_fd() const { return region_->fd(); }
  /// Its process calls channels, and would send those calls through its lane (Mailbox::wants_lane).
  bool wants_lane() const { return lane().mailbox().wants_lane.load(std::memory_order_relaxed) != 0; }
  /// Running with chunks to do: results may come from it.
  bool holds_work() const { return running() && load() > 0; }
  /// Running with chunks that the agent gave it (not only through its lane): their results come
  /// through its socket, to the agent.
  bool awaits_socket_results() const { return running() && !held_.empty(); }
  bool wants_to_write() const { return !out_.empty(); }

  /// Queues a batch as it came from the driver; it is written as the socket takes it.
  void give(std::string batch);
  /// Queues the reply to one of its requests (a wire::Reply, encoded); or, not `answer`, a notice
  /// of id 0 that no request waits for (a queue's recall).
  void give_reply(std::string reply, bool answer = true);
  /// Wakes it (a frame of nothing) once the driver has started to use its lane: until then it
  /// sleeps on its socket alone.
  void wake_for_lane();
  /// Requests its tasks made (wire::Request, encoded) since the last call.
  std::vector<std::string> take_requests() { return std::exchange(requests_, {}); }
  /// A memfd it handed over: a result it kept (wire::Status::kept), or a value one of its tasks
  /// stored (fibra::put, with a request).
  struct Handed {
    std::uint64_t id = 0;
    std::int64_t origin = 0;  ///< whose pid the memfd's name has (object_memfd_name)
    std::uint64_t size = 0;
    bool result = false;  ///< a kept result (not a stored value)
    std::unique_ptr<ObjectMemory> memory;
  };
  /// What it handed over since the last call, which the agent holds until the driver frees it.
  std::vector<Handed> take_kept() { return std::exchange(kept_, {}); }
  /// Its requests whose replies have not come yet: the agent then watches the driver closely.
  bool awaits_replies() const { return running() && awaiting_replies_ > 0; }
  /// How many more of its tasks wait (in a wait for what they requested) than at the last call.
  int take_blocked_delta() { return std::exchange(blocked_delta_, 0); }
  /// Writes queued batches, framed by their length; true if it wrote anything.
  bool write();
  /// Reads result frames; each complete one goes to `frames`. Returns false when the executor is
  /// gone (its socket ended, its process ended, or it wrote what is not results): call report_death.
  bool read(std::vector<std::string>& frames, bool& got);
  /// Kills the executor when the item it is on has run past its chunk's time limit, or when it
  /// holds work but has been in no task for `stuck_s`; returns the report of its chunks then.
  std::optional<std::string> enforce_time_limit(double now, double stuck_s);
  /// After the executor died: reaps it and returns the report of the chunks it held (the one it
  /// died in crashed, the others not run), forgetting them. Empty when it held none.
  std::string report_death();
  /// Closes its socket for writing: it finishes the chunk it is on and exits.
  void begin_stop();
  /// begin_stop, then reaps it, waiting up to `grace` (then SIGKILL).
  void stop(double grace);
  /// How its last death went: the chunk it was in (0: none), its pid and what ended it.
  struct Death {
    std::uint64_t chunk = 0;
    pid_t pid = 0;
    std::string why;
  };
  const Death& last_death() const { return death_; }
  /// Relays what it printed, in whole lines; true if there was any.
  bool relay_output() { return pid_ > 0 && (out_lines_.pump() | err_lines_.pump()); }

 private:
  struct Held {
    std::uint64_t chunk;
    std::uint32_t attempt;
  };
  struct Outgoing {
    std::uint64_t length;  // the frame's length prefix
    std::string body;      // the batch as it came from the driver
    std::size_t done = 0;  // bytes of prefix and body written
  };
  /// Waits up to `grace` for the process to end (then SIGKILL) and relays the rest of its output;
  /// returns its wait status.
  int reap(double grace);
  bool stop_for_junk(const std::string& what);
  bool take_frame(FrameReader::Frame f, std::vector<std::string>& frames);
  bool adopt_objects(const std::string& request, std::vector<UniqueFd>& fds);
  void forget(std::uint64_t chunk);
  Lane& lane() const { return region_->lane(); }
  std::string report(std::uint64_t guilty_chunk, bool blame_first, wire::Status guilty_status, ItemFailure f);
  void clear_after_death(double now);

  int index_;
  std::string prefix_;
  bool actor_ = false;
  std::vector<std::pair<std::string, std::string>> env_;
  std::vector<std::string> requests_;
  std::vector<Handed> kept_;
  int awaiting_replies_ = 0;  // requests (not tells) passed on, minus replies given
  int blocked_delta_ = 0;
  int blocked_ = 0;  // its tasks waiting now (undone at its death)
  Death death_;
  std::uint64_t killed_for_ = 0;  // kill_for_cancel's chunk, until the death is reported
  LineRelay out_lines_{&AgentOutput::out}, err_lines_{&AgentOutput::err};
  std::unique_ptr<LaneRegion> region_;
  std::uint64_t lane_results_ = 0;  // result frames it had put in its lane when last looked
  bool lane_woken_ = false;         // it was woken for its lane (once the driver uses it)
  pid_t pid_ = -1;
  UniqueFd sock_;
  std::deque<Held> held_;  // chunks given, in order, without a result yet
  std::deque<Outgoing> out_;
  // What it writes on its socket: frames of the kinds an executor sends, none over MPI's 2 GiB.
  FrameReader in_{wire::frame_tell, std::uint64_t(INT32_MAX)};
  bool ready_ = false;
  bool reaped_ = false;  // exited() or reap() reaped it; its wait status:
  int reaped_status_ = 0;
  int idle_deaths_ = 0;            // deaths outside a chunk since the last result
  double restart_at_ = 0;          // after a death: when to start again
  std::uint64_t watch_chunk_ = 0;  // the time limit's view of what it is on, and since when
  std::uint32_t watch_item_ = 0;
  double watch_since_ = 0;
};

}  // namespace fibra::detail
