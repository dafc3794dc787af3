// The executor: a plain process (no MPI) that runs user functions on the batches its agent sends.
// This file holds its core loop (executor_main, run_batch) and its waits (help_while_waiting); its
// parts are beside it: the inbox (inbox.*), a chunk's result (results.*), calls on channels
// (channel_calls.*), an actor's call threads (call_threads.*), the pool as a task sees it
// (executor_core.cpp), the task thread's stack (stack.cpp), and what they share (state.hpp).
#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "fibra/detail/checkpoint.hpp"
#include "common/env.hpp"
#include "common/freed_memory.hpp"
#include "common/trace.hpp"
#include "executor/call_threads.hpp"
#include "executor/channel_calls.hpp"
#include "executor/executor.hpp"
#include "executor/inbox.hpp"
#include "executor/objects.hpp"
#include "executor/results.hpp"
#include "executor/state.hpp"
#include "roles.hpp"
#include "task_side.hpp"
#include "transport/frame_writer.hpp"
#include "transport/lane.hpp"
#include "transport/wire.hpp"

namespace fibra::detail::exec {

ExecutorState g_executor;
thread_local constinit bool t_queue_wait = false;
thread_local constinit std::uint64_t* t_chunk_wait_ns = nullptr;
thread_local constinit bool t_answer_soon = false;

void send_frame(int fd, const std::string& body, std::uint64_t kind, const std::vector<int>& fds) {
  std::lock_guard lk(g_executor.write_mu);
  if (!write_frame(fd, wire::frame_prefix(kind, body.size()), body, fds)) _exit(0);  // the agent is gone
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t wall_us_at(std::int64_t steady_ns) {
  // The wall clock's lead over the steady one, read again once a second: one read of the wall
  // clock a second rather than one a chunk (the two drift apart by microseconds an hour).
  thread_local std::int64_t lead_ns = 0, read_at = INT64_MIN / 2;
  if (steady_ns - read_at > 1'000'000'000) {
    read_at = now_ns();
    lead_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count() -
              read_at;
  }
  return (steady_ns + lead_ns) / 1000;
}

namespace {

// `results` is the frame buffer, kept from batch to batch so that its memory stays warm.
// `sent` (a batch from the lane): where the agent reads how many of its chunks have their results
// out, so that a death after them does not report them again. Frames go out every flush_bytes or
// flush_every, and at the end. An `outermost` batch (not one run while a task waits) stops after
// the chunk that used up max_tasks_per_child: false then, and its agent reports the rest not run.
bool run_batch(int sock, Mailbox& box, std::string_view batch, std::string& results,
               std::atomic<std::uint32_t>* sent = nullptr, bool outermost = false) {
  const bool via_lane = sent != nullptr;
  std::uint32_t ran = 0;
  const std::string frame_head = wire::begin_results(static_cast<std::int64_t>(::getpid()));
  results.assign(frame_head);  // a copy, not a move: `results` keeps its memory, warm from the last frame
  FrameSpill spill(results, via_lane);
  auto last_flush = std::chrono::steady_clock::now();
  RunControl ctl;
  std::vector<ItemFailure> failures;
  std::vector<std::uint64_t> traced;  // chunks in the frame being built, for FIBRA_TRACE
  KeptResults kept;
  auto flush = [&] {
    // What the tasks printed goes to the agent before their results do.
    std::fflush(stdout);
    std::fflush(stderr);
    send_results(sock, results, via_lane, spill, kept);
    if (sent) sent->store(ran, std::memory_order_release);
    for (auto id : traced) trace::mark(trace::executor_sent, id);
    traced.clear();
  };
  const std::vector<wire::TaskView> tasks = wire::parse_tasks(batch);
  executor_keep_objects_of(tasks);
  for (const auto& t : tasks) {
    if (t.header.actor != 0) g_executor.actor_process = true;
    trace::mark(trace::executor_read, t.header.chunk);
    box.item.store(0, std::memory_order_relaxed);
    box.timeout_s.store(t.header.timeout_s, std::memory_order_relaxed);
    box.chunk.store(t.header.chunk, std::memory_order_release);
    with_own_puts([&] { run_chunk(t, box, results, spill, ctl, failures, &kept); });
    box.chunk.store(0, std::memory_order_release);
    ++ran;
    if (t.header.actor == 0 && g_executor.tasks_left > 0 && --g_executor.tasks_left == 0) g_executor.retiring = true;
    trace::mark(trace::executor_ran, t.header.chunk);
    if (trace::detail::on) traced.push_back(t.header.chunk);
    const auto now = std::chrono::steady_clock::now();
    // An actor's call goes out as soon as it is done: the next call of its batch may end the
    // process (abort(), a crash), and a call that finished must not be lost with it.
    // A kept result goes at once: its memfd is held until then.
    if (results.size() >= flush_bytes || now - last_flush >= flush_every || t.header.actor != 0 || !kept.empty()) {
      flush();
      results.assign(frame_head);  // keeps its memory: the next frame finds it warm
      last_flush = now;
    }
    if (outermost && g_executor.retiring) break;
  }
  if (wire::result_count(results) > 0) {
    flush();
  } else {
    if (sent) sent->store(ran, std::memory_order_release);
    for (auto id : traced) trace::mark(trace::executor_sent, id);
  }
  spill.give_back();  // (nothing is claimed after the last send; the string is let go below)
  // Kept warm up to what a lane keeps of its large slots; a larger frame's memory is given back.
  if (results.capacity() > lane::large_kept) std::string().swap(results);
  return ran == tasks.size();
}

// Runs a batch, wherever it came from; a lane's slot is freed once its results are out (a batch
// cut short stays taken: its agent reads what was not run from it once this process has ended).
void run(const Inbox::Batch& b, std::string& results, bool outermost = false) {
  RunningBatch running;
  const bool whole = run_batch(g_executor.sock, *g_executor.box, b.data(), results,
                               b.slot >= 0 ? &g_executor.lane->sent(b.slot) : nullptr, outermost);
  if (b.slot >= 0 && whole) g_executor.lane->finish(b.slot);
}

// The pool's initializer (FIBRA_INITIALIZER), once, before the first batch, run as a call of one
// item is. What it threw fails each chunk this process is given, and it is not run again: a
// process started over would only throw again (Python's Pool restarts such workers for ever).
void run_initializer() {
  const char* text = env::raw("FIBRA_INITIALIZER");
  if (!text || !*text) return;
  wire::Initializer init;
  try {
    init = wire::initializer_from_text(text);
  } catch (const wire::Malformed& e) {
    g_executor.init_failure = ItemFailure{0, "fibra::ConfigError", e.what()};
    return;
  }
  const FunctionEntry* fn = function_by_id(init.fn);
  const ChunkRunner runner = !fn ? nullptr : init.mode == CallMode::single ? fn->run_single : fn->run_tuple;
  if (!runner) {
    g_executor.init_failure = ItemFailure{0, "fibra::ConfigError",
                                          "this worker does not have it: driver and workers must run the same binary"};
    return;
  }
  std::string out;
  Cursor item{0};
  ItemFailure fail;
  g_executor.box->initializing.store(1, std::memory_order_relaxed);
  const bool ok = runner(init.args, 1, out, fail, item, RunControl{});
  g_executor.box->initializing.store(0, std::memory_order_relaxed);
  if (!ok) g_executor.init_failure = std::move(fail);
}

// Runs a batch that arrived while a task waits: on this stack while it has room, else on a new
// thread (see "The task thread and its stack" in state.hpp), which this one waits for.
void run_nested(const Inbox::Batch& b, std::string& results) {
  if (stack_left() >= stack_headroom) {
    run(b, results);
    return;
  }
  struct Call {
    const Inbox::Batch* batch;
    std::string* results;
  } call{&b, &results};
  pthread_attr_t attr;
  ::pthread_attr_init(&attr);
  ::pthread_attr_setstacksize(&attr, fresh_stack_bytes);
  pthread_t thread;
  const int rc = ::pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        auto* c = static_cast<Call*>(p);
        become_task_thread();
        run(*c->batch, *c->results);  // (run_batch keeps a task's exceptions in its results)
        return nullptr;
      },
      &call);
  ::pthread_attr_destroy(&attr);
  if (rc != 0) {  // no thread to be had: on this stack, which may run out (and is then reported)
    run(b, results);
    return;
  }
  ::pthread_join(thread, nullptr);
}

// A wait in the task's thread runs the batches that arrive meanwhile (the tasks it waits for may be
// among them), and tells the agent it waits, so that the driver sends this worker more work.
int help_while_waiting(const std::function<bool()>& ready, std::optional<std::chrono::nanoseconds> timeout) {
  if (!g_executor.inbox) return -1;
  if (!t_task.is) {  // a thread a task started: someone must read for it
    g_executor.inbox->need_reader();
    return -1;
  }
  if (ready()) return 1;
  // The chunk's wait is counted from here; the nested chunks run meanwhile count their own.
  std::int64_t since = now_ns();
  const auto count_wait = [&since] {
    const std::int64_t now = now_ns();
    if (t_chunk_wait_ns) *t_chunk_wait_ns += static_cast<std::uint64_t>(now - since);
    since = now;
  };
  // An actor's process, and a queue's wait, read the socket without running what arrives.
  const bool help = !g_executor.actor_process && !t_queue_wait;
  const auto deadline =
      timeout ? std::chrono::steady_clock::now() + *timeout : std::chrono::steady_clock::time_point::max();
  auto blocked = [](std::int32_t delta) {
    send_frame(g_executor.sock, wire::encode(wire::WaitDelta{delta}), wire::frame_blocked);
  };
  if (help) blocked(+1);
  // What the mailbox said before: the task that waits is still the one the agent watches after.
  const std::uint64_t chunk = g_executor.box->chunk.load(std::memory_order_relaxed);
  const std::uint32_t item = g_executor.box->item.load(std::memory_order_relaxed);
  const double timeout_s = g_executor.box->timeout_s.load(std::memory_order_relaxed);
  std::string results;
  bool ok = false;
  for (;;) {
    if (ready()) {
      ok = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    if (auto b = help ? g_executor.inbox->try_batch() : std::nullopt) {
      count_wait();
      run_nested(*b, results);
      since = now_ns();
      g_executor.box->item.store(item, std::memory_order_relaxed);
      g_executor.box->timeout_s.store(timeout_s, std::memory_order_relaxed);
      g_executor.box->chunk.store(chunk, std::memory_order_release);
      continue;
    }
    if (g_executor.inbox->closed()) break;
    // (One that does not run batches does not watch its lane: a batch waiting there would wake it at once, for ever.)
    g_executor.inbox->read_a_little(std::chrono::milliseconds(2), help);
  }
  if (help) blocked(-1);
  count_wait();
  return ok ? 1 : 0;
}

}  // namespace

}  // namespace fibra::detail::exec

namespace fibra::detail {

using namespace exec;

void executor_wants_lane() noexcept {
  if (g_executor.box && g_executor.lane && !g_executor.lane->in_use())
    g_executor.box->wants_lane.store(1, std::memory_order_relaxed);
}

void executor_await_ring(std::chrono::milliseconds most) noexcept {
  if (!g_executor.lane || !lane_reaches_driver()) return;
  const auto until = std::chrono::steady_clock::now() + most;
  while (!g_executor.lane->reads_calls() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
}

namespace {
// What the code both roles run (src/driver/'s tasks, objects, channels) asks of this process.
class ExecutorSide final : public TaskSide {
 public:
  std::shared_ptr<PoolCore> core(std::uint64_t uid) override { return executor_core(uid); }
  wire::ChannelReply channel_call(wire::ChannelCall call) override { return executor_channel_call(std::move(call)); }
  std::shared_ptr<const StoredObject> store_object(std::string& encoded) override {
    return executor_store_object(encoded);
  }
  void want_lane() noexcept override { executor_wants_lane(); }
  void await_ring(std::chrono::milliseconds most) noexcept override { executor_await_ring(most); }
  bool spill_large(std::string& out, const void* p, std::size_t n) override { return executor_spill_large(out, p, n); }
};
}  // namespace

[[noreturn]] void executor_main(int sock, int mailbox_fd, pid_t parent) {
  static ExecutorSide side;
  register_task_side(side);
  // Its socket and mailbox are its own: a process a task starts must not hold them (a socket kept
  // open by a grandchild would hide this executor's death from its agent).
  ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  ::fcntl(mailbox_fd, F_SETFD, FD_CLOEXEC);
  // Die with the agent, and never outlive it even if it died before this line.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(0);
  ::signal(SIGPIPE, SIG_IGN);
  // Ignored as in the agent: Open MPI's orted forwards mpirun's SIGUSR1/SIGUSR2 to the process group
  // of each process it started, which includes this executor; they are meant for the driver (a stop
  // before the time limit), and the default action would kill the task and run it again.
  ::signal(SIGUSR1, SIG_IGN);
  ::signal(SIGUSR2, SIG_IGN);
  // Its stdout is a pipe to the agent, which passes whole lines on: line-buffered, so that what a
  // task printed is not held back until the buffer fills (or lost when the task crashes).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  static const std::unique_ptr<LaneRegion> region = LaneRegion::adopt(UniqueFd(mailbox_fd));  // for its whole life
  if (!region) _exit(120);
  g_executor.lane = &region->lane();
  auto& box = g_executor.lane->mailbox();
  send_frame(sock, {});  // an empty result frame: "started, waiting for work"
  g_executor.sock = sock;
  g_executor.agent = parent;
  g_executor.box = &box;
  become_task_thread();
  keep_freed_memory(keep_freed_bytes_from_env(), true);
  static Inbox inbox(sock);
  g_executor.inbox = &inbox;
  set_wait_hook(&help_while_waiting);
  g_executor.tasks_left = static_cast<std::uint32_t>(env::number("FIBRA_MAX_TASKS", 0, 0, UINT32_MAX, true));
  run_initializer();
  std::string results;
  while (auto batch = inbox.next_batch()) {
    if (!g_call_threads.take(*batch)) run(*batch, results, true);
    if (g_executor.retiring) break;  // its agent starts another, which takes what this one had not run
  }
  wait_for_checkpoints();  // a checkpointed map a task ran is folded into its .h5 before the process ends
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(g_executor.retiring ? executor_retired_status : 0);
}

}  // namespace fibra::detail
