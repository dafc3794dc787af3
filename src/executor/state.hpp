// src/executor/state.hpp: what the executor's parts share inside one executor process: its state
// (socket, mailbox, lane, inbox), the task thread and its stack, the frames it sends its agent, and
// what a wait asks of the thread. Internal to src/executor/ (namespace exec); what the rest of fibra
// calls is in executor.hpp.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/lane.hpp"
#include "transport/wire.hpp"

namespace fibra::detail::exec {

constexpr std::size_t flush_bytes = 1 << 20;
// A chunk's results must fit in one MPI message with what the frame held before (under flush_bytes).
constexpr std::size_t max_result_bytes = std::size_t(INT32_MAX) - 2 * flush_bytes;
constexpr auto flush_every = std::chrono::milliseconds(2);

class Inbox;

// The executor's process-wide state, one per process: set up once by executor_main, but for
// `actor_process`, set by the first batch of an actor's call.
struct ExecutorState {
  int sock = -1;           // to and from the agent
  pid_t agent = 0;         // its agent's pid (stored objects: executor_arguments)
  Mailbox* box = nullptr;  // shared with the agent: the chunk and item being run
  // Its lane (src/transport/lane.hpp): batches the driver put there, and the way back for their results.
  Lane* lane = nullptr;
  Inbox* inbox = nullptr;  // what the agent sends (task batches, replies)
  // This process hosts an actor (it was sent an actor's calls): a wait in one of its methods does
  // not run the next call meanwhile, since an actor's calls run one at a time, in order.
  bool actor_process = false;
  // PoolOptions::max_tasks_per_child: chunks it may still run (0: no limit); once none are left it
  // is `retiring`, and ends when its outermost batch is out (executor.cpp).
  std::uint32_t tasks_left = 0;
  bool retiring = false;
  // What its pool's initializer threw (PoolOptions::initializer): each chunk it is given fails so
  // (results.cpp), since running the initializer again would only fail again.
  std::optional<ItemFailure> init_failure;
  // Frames to the agent come from the task's thread (results, requests, waits) and from threads a
  // task started (requests): one frame at a time.
  std::mutex write_mu;
};
extern ExecutorState g_executor;

// ---- The task thread and its stack ----
// A wait inside a task runs the batches that arrive meanwhile (help_while_waiting), on the waiting
// task's own stack. A task that submits itself and waits, thousands of levels deep, overflowed it
// (2.2 KiB a level, measured: some 3,800 levels on an 8 MiB stack, then a segfault that nothing
// explained, and a driver waiting for the levels above it).
// When less than stack_headroom is left, the next batch runs on a new thread with a stack of its
// own, while the waiting one waits for it: one thread runs tasks at any time, the task thread.
// What is left of a stack that does run out is reported by the agent as a stack overflow.
constexpr std::size_t stack_headroom = std::size_t(1) << 20;      // a task's own frames, with room to spare
constexpr std::size_t fresh_stack_bytes = std::size_t(64) << 20;  // reserved; pages count once touched

struct TaskThread {
  bool is = false;  // this thread runs batches (executor_main's, or one that took over its stack's load)
  // Set for a thread that runs tasks (the task thread, an actor's call thread: watch_stack).
  char* low = nullptr;   // the lowest address of its stack (stacks grow down)
  char* high = nullptr;  // the end it grows from
};
extern thread_local constinit TaskThread t_task;

// Makes the calling thread the task thread (stack.cpp).
void become_task_thread();
// Notes the calling thread's stack bounds, and gives it an alternate stack for on_segv.
void watch_stack();
// Bytes of the calling thread's stack below this frame; the most a size_t holds if unknown.
std::size_t stack_left();

// A frame to the agent, one at a time (g_executor.write_mu); `fds` go with its first bytes
// (SCM_RIGHTS: FrameReader gives them with it). The process ends if the agent is gone: there is
// nothing left to report to.
void send_frame(int fd, const std::string& body, std::uint64_t kind = wire::frame_results,
                const std::vector<int>& fds = {});

std::int64_t now_ns();
/// The moment `steady_ns` (a now_ns() reading) in microseconds since the Unix epoch
/// (wire::ResultHeader::start_us).
std::int64_t wall_us_at(std::int64_t steady_ns);

// After a batch, the executor watches its lane this long before it sleeps: the next batch of a
// quick succession of calls comes sooner than a wake-up from sleep would take.
constexpr auto lane_spin = std::chrono::microseconds(100);

// A wait on a queue, pipe or event runs no other task meanwhile (as a Python process would not):
// a task run on top of the waiting one would hold it (and its acknowledgement) until it ended.
extern thread_local constinit bool t_queue_wait;
/// Where the chunk that this thread runs now adds the time its tasks wait in help_while_waiting
/// (wire::ResultHeader::wait_ns), not counting the nested chunks run meanwhile; null outside a chunk.
extern thread_local constinit std::uint64_t* t_chunk_wait_ns;
// The task's thread waits for a pipe's recv (Inbox::read_a_little watches the ring a moment).
extern thread_local constinit bool t_answer_soon;
// Sets a thread-local for as long as it lives, then puts back what it was.
template <class T>
class ScopedSet {
 public:
  ScopedSet(T& var, T value) : var_(var), was_(std::exchange(var, value)) {}
  ~ScopedSet() { var_ = was_; }
  ScopedSet(const ScopedSet&) = delete;
  ScopedSet& operator=(const ScopedSet&) = delete;

 private:
  T& var_;
  T was_;
};
// Makes this thread's waits a queue's while it lives.
struct QueueWait : ScopedSet<bool> {
  QueueWait() : ScopedSet(t_queue_wait, true) {}
};

// This process's lane is mapped by the driver: it runs on the driver's host, with lanes on
// (FIBRA_LANES=0 turns them off; the driver then maps no lane to read at a loss).
bool lane_reaches_driver();

// Items the gets of this process's tasks read ahead (ReadAhead, channel_calls.cpp): a recall from the
// driver, and the end of a chunk, give back what no get took.
void on_channel_notice(const std::string& payload);
void give_back_read_ahead() noexcept;
// Unmaps the stored objects that no call of this process waits with or runs (CallThreads, call_threads.cpp).
void keep_objects_in_use();

}  // namespace fibra::detail::exec
