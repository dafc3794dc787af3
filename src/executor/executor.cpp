// The executor: a plain process (no MPI) that runs user functions on the batches its agent sends.
#include <fcntl.h>
#include <sys/socket.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "fibra/detail/checkpoint.hpp"
#include "fibra/error.hpp"
#include "fibra/future.hpp"

#include "common/error_types.hpp"
#include "common/freed_memory.hpp"
#include "executor/objects.hpp"
#include "transport/frame_reader.hpp"
#include "transport/lane.hpp"
#include "transport/object_memory.hpp"
#include "common/trace.hpp"
#include "transport/wire.hpp"
#include "executor/executor.hpp"
#include "common/env.hpp"

namespace fibra::detail {
namespace {

constexpr std::size_t flush_bytes = 1 << 20;
// A chunk's results must fit in one MPI message with what the frame held before (under flush_bytes).
constexpr std::size_t max_result_bytes = std::size_t(INT32_MAX) - 2 * flush_bytes;
constexpr auto flush_every = std::chrono::milliseconds(2);

class Inbox;
// Items the gets of this process's tasks read ahead (ReadAhead, below): a recall from the
// driver, and the end of a chunk, give back what no get took.
void on_channel_notice(const std::string& payload);
void give_back_read_ahead() noexcept;
// Unmaps the stored objects that no call of this process waits with or runs (CallThreads).
void keep_objects_in_use();

// The executor's process-wide state, one per process: set up once by executor_main, but for
// `actor_process`, set by the first batch of an actor's call.
struct ExecutorState {
  bool in_executor = false;  // this process is an executor (executor_main began)
  int sock = -1;             // to and from the agent
  pid_t agent = 0;           // its agent's pid (stored objects: executor_arguments)
  Mailbox* box = nullptr;    // shared with the agent: the chunk and item being run
  // Its lane (src/transport/lane.hpp): batches the driver put there, and the way back for their results.
  Lane* lane = nullptr;
  Inbox* inbox = nullptr;  // what the agent sends (task batches, replies)
  // This process hosts an actor (it was sent an actor's calls): a wait in one of its methods does
  // not run the next call meanwhile, since an actor's calls run one at a time, in order.
  bool actor_process = false;
  // Frames to the agent come from the task's thread (results, requests, waits) and from threads a
  // task started (requests): one frame at a time.
  std::mutex write_mu;
};
ExecutorState g_executor;

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
thread_local TaskThread t_task;

// On a SIGSEGV at the end of a task thread's stack the mailbox says so before the process dies
// (the signal is delivered on an alternate stack: the thread's own has no room left).
void on_segv(int sig, siginfo_t* si, void*) {
  const char* at = static_cast<const char*>(si->si_addr);
  constexpr std::size_t window = std::size_t(1) << 20;  // the guard, and what a frame may skip past it
  if (t_task.low && at + window >= t_task.low && at < t_task.low + 4 * 4096 && g_executor.box)
    g_executor.box->stack_overflow.store(1, std::memory_order_relaxed);
  // SA_RESETHAND made the action the default again. The signal is raised again, since it may have
  // come from raise() or kill() (a task that ends itself so), after which nothing faults again: it
  // is blocked until this handler returns, and then ends the process by SIGSEGV, as without it.
  ::raise(sig);
}

// Notes the calling thread's stack bounds, and gives it an alternate stack for on_segv.
void watch_stack() {
  pthread_attr_t attr;
  if (::pthread_getattr_np(::pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    std::size_t size = 0;
    if (::pthread_attr_getstack(&attr, &addr, &size) == 0) {
      t_task.low = static_cast<char*>(addr);
      t_task.high = t_task.low + size;
    }
    ::pthread_attr_destroy(&attr);
  }
  static thread_local std::unique_ptr<char[]> alt;
  if (!alt) {
    constexpr std::size_t alt_bytes = 64 * 1024;
    alt = std::make_unique<char[]>(alt_bytes);
    stack_t ss{};
    ss.ss_sp = alt.get();
    ss.ss_size = alt_bytes;
    ::sigaltstack(&ss, nullptr);
  }
  static std::once_flag installed;  // once per process: a handler a task installed later stays
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, nullptr);
  });
}

// Makes the calling thread the task thread.
void become_task_thread() {
  t_task.is = true;
  watch_stack();
}

// Bytes of the calling thread's stack below this frame; the most a size_t holds if unknown.
std::size_t stack_left() {
  char here = 0;
  if (!t_task.low || &here < t_task.low || &here > t_task.high) return SIZE_MAX;
  return static_cast<std::size_t>(&here - t_task.low);
}

bool read_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = ::read(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

void write_all(int fd, const void* p, std::size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = ::write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) _exit(0);  // the agent is gone: nothing to report to
    c += k;
    n -= static_cast<std::size_t>(k);
  }
}

// A frame to the agent; `fds` go with its first bytes (SCM_RIGHTS: FrameReader gives them with it).
void send_frame(int fd, const std::string& body, std::uint64_t kind = wire::frame_results,
                const std::vector<int>& fds = {}) {
  std::lock_guard lk(g_executor.write_mu);
  const std::uint64_t n = wire::frame_prefix(kind, body.size());
  std::size_t done = 0;  // bytes of prefix and body sent with the descriptors
  if (!fds.empty()) {
    iovec iov[2] = {{const_cast<std::uint64_t*>(&n), sizeof n}, {const_cast<char*>(body.data()), body.size()}};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * FrameReader::max_fds)] = {};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    ssize_t k;
    do k = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k <= 0) _exit(0);  // the agent is gone: nothing to report to
    done = static_cast<std::size_t>(k);
  }
  if (done < sizeof n) write_all(fd, reinterpret_cast<const char*>(&n) + done, sizeof n - done);
  const std::size_t from = done > sizeof n ? done - sizeof n : 0;
  write_all(fd, body.data() + from, body.size() - from);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// After a batch, the executor watches its lane this long before it sleeps: the next batch of a
// quick succession of calls comes sooner than a wake-up from sleep would take.
constexpr auto lane_spin = std::chrono::microseconds(100);

// A result frame of a batch that came by the lane, whose large blocks (a large result vector, say)
// are encoded straight into the lane's large up slot, at the offsets they have in the frame, while
// that slot is free: the frame string grows past each block without writing it (spill_large), and
// posting the frame copies only the rest. Without this, each large result was copied once more,
// from the frame into the slot (docs/architecture.md, "Large payloads").
struct FrameSpill {
  std::string* frame = nullptr;
  bool claimed = false;               // the large up slot is this frame's (writing)
  std::vector<Lane::Range> in_place;  // in order, apart
  std::size_t written_to = 0;         // how far into the slot blocks were written
  FrameSpill* outer = nullptr;        // the frame of the batch a waiting task's wait interrupted

  FrameSpill(std::string& f, bool via_lane) : frame(via_lane ? &f : nullptr), outer(current) { current = this; }
  ~FrameSpill() {
    give_back();
    current = outer;
  }
  FrameSpill(const FrameSpill&) = delete;
  FrameSpill& operator=(const FrameSpill&) = delete;

  // The frame was cut to its first `size` bytes (a failed chunk's results dropped).
  void cut(std::size_t size) {
    while (!in_place.empty() && in_place.back().at >= size) in_place.pop_back();
    if (!in_place.empty() && in_place.back().at + in_place.back().n > size)
      in_place.back().n = size - in_place.back().at;
    if (in_place.empty()) give_back();  // nothing of the frame in the slot: free for a nested run's
  }
  // Makes the frame whole (its bytes all in the string) and lets the slot go.
  void give_back() {
    if (claimed) g_executor.lane->unclaim(*frame, in_place, written_to);
    claimed = false;
    in_place.clear();
    written_to = 0;
  }
  // Grows the frame to n bytes past a block written in place; a new buffer gets only the bytes
  // around the blocks (copying the unwritten ones would fault their pages in for nothing).
  void extend(std::size_t n) {
    extend_unwritten(*frame, n, [this](char* to, const char* from, std::size_t size) {
      Lane::copy_around(to, from, size, in_place);
    });
  }
  // Posts the frame into the claimed slot; false if it holds none (or the slot cannot be mapped
  // that far: then the frame is made whole for the agent's way).
  bool post() {
    if (!claimed) return false;
    if (in_place.empty() || !g_executor.lane->post_claimed(*frame, in_place, written_to)) {
      give_back();
      return false;
    }
    claimed = false;
    in_place.clear();
    written_to = 0;
    return true;
  }

  static thread_local FrameSpill* current;
};
thread_local FrameSpill* FrameSpill::current = nullptr;

// A task's result that may be kept on this host (TaskHeader::keep_from), whose large blocks are
// written straight into a memfd at the offsets they have in the result, rather than into the
// frame and again from there: the frame grows past each block without writing it, as FrameSpill's
// does. keep() writes the rest and seals it; undo() reads the blocks back into the frame when the
// result is sent after all (too small, or failed items).
class KeepSpill {
 public:
  KeepSpill(std::string* frame, std::size_t body, std::uint64_t id)
      : frame_(frame), body_(body), id_(id), outer_(current) {
    if (frame_) current = this;
  }
  ~KeepSpill() { stop(); }
  KeepSpill(const KeepSpill&) = delete;
  KeepSpill& operator=(const KeepSpill&) = delete;

  // The encoding is over: blocks go into the frame from now on.
  void stop() {
    if (frame_ && current == this) current = outer_;
  }
  // spill_large for this frame: true if the block went into the memfd.
  bool spill(std::string& out, const void* p, std::size_t n) {
    if (&out != frame_) return false;
    if (!fd_) open();
    const std::size_t at = out.size();
    if (!fd_ || !ObjectMemory::write_at(fd_.get(), {static_cast<const char*>(p), n}, at - body_))
      return false;  // (/dev/shm full)
    extend_unwritten(out, at + n, [this](char* to, const char* from, std::size_t size) {
      Lane::copy_around(to, from, size, blocks_);
    });
    blocks_.push_back({at, n});
    return true;
  }
  // The result (the frame from `body` on) whole in a sealed memfd; nullptr if it cannot be (the
  // frame is whole again then).
  std::unique_ptr<ObjectMemory> keep() {
    const std::string_view f(*frame_);
    const std::size_t size = f.size() - body_;
    if (size > max_result_bytes) {  // sent, and refused as too large for one message, as before
      undo();
      return nullptr;
    }
    if (!fd_) open();
    bool ok = !!fd_ && ::ftruncate(fd_.get(), off_t(std::max<std::size_t>(size, 1))) == 0;
    std::size_t at = body_;
    for (const auto& b : blocks_) {  // the bytes around the blocks written as they were encoded
      ok = ok && ObjectMemory::write_at(fd_.get(), f.substr(at, b.at - at), at - body_);
      at = b.at + b.n;
    }
    ok = ok && ObjectMemory::write_at(fd_.get(), f.substr(at), at - body_);
    if (!ok) {
      undo();
      return nullptr;
    }
    ObjectMemory::seal(fd_.get());
    blocks_.clear();
    return ObjectMemory::adopt(std::move(fd_), object_memfd_name(::getpid(), id_), size);
  }
  // The blocks read back into the frame, where they were skipped.
  void undo() {
    for (const auto& b : blocks_) {
      if (b.at + b.n > frame_->size()) break;
      for (std::size_t done = 0; done < b.n;) {
        const ssize_t k = ::pread(fd_.get(), frame_->data() + b.at + done, b.n - done, off_t(b.at + done - body_));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
          throw std::system_error(errno ? errno : EIO, std::generic_category(), "fibra: reading a result back");
        done += std::size_t(k);
      }
    }
    blocks_.clear();
  }

  static thread_local KeepSpill* current;

 private:
  void open() { fd_ = ObjectMemory::new_memfd(object_memfd_name(::getpid(), id_)); }
  std::string* frame_;
  std::size_t body_;
  std::uint64_t id_;  // TaskHeader::keep_id
  KeepSpill* outer_;
  UniqueFd fd_;
  std::vector<Lane::Range> blocks_;  // in the frame, in order
};
thread_local KeepSpill* KeepSpill::current = nullptr;

// Results kept on this host (TaskHeader::keep_from): their memfds, until the frame that names them
// has gone to the agent with them.
using KeptResults = std::vector<std::unique_ptr<ObjectMemory>>;

// A batch's result frame: into the lane if the batch came that way and the frame fits, else to the
// agent (whose count of what this executor holds needs the results of what it gave). A frame that
// names kept results goes to the agent, with their memfds.
void send_results(int sock, const std::string& frame, bool via_lane, FrameSpill& spill, KeptResults& kept) {
  if (!kept.empty()) {  // to the agent with their memfds, which it holds from then on
    spill.give_back();
    std::vector<int> fds;
    for (const auto& m : kept) fds.push_back(m->fd());
    send_frame(sock, frame, wire::frame_results, fds);
    kept.clear();
    return;
  }
  if (via_lane && (spill.post() || g_executor.lane->post_result(frame))) {
    Mailbox& box = g_executor.lane->mailbox();
    box.results.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  send_frame(sock, frame);
}

// A chunk's results in its frame, over what one MPI message can carry: they go, and a failure
// that says why takes their place.
void refuse_oversized(std::string& results, std::size_t at, wire::ResultHeader h, const wire::TaskHeader& t,
                      FrameSpill& spill) {
  const std::string why = "the results of items " + std::to_string(t.first) + ".." +
                          std::to_string(t.first + t.count - 1) + " encode to " + std::to_string(results.size() - at) +
                          " bytes, over the 2 GiB one MPI message can carry; use a smaller chunksize";
  results.resize(at);  // the result goes, and is no longer counted
  spill.cut(at);
  wire::set_count(results, wire::result_count(results) - 1);
  h.status = wire::Status::raised;
  wire::append_result(results, h, wire::encode(ItemFailure{0, "fibra::ConfigError", why}));
}

// A task's result, from `body` on in the frame, goes into a memfd of this process's (`spill` holds
// its large blocks already), which goes to the agent with the frame; a wire::Kept takes its place
// (docs/architecture.md, "The object store"). Without shared memory to be had it stays in the frame.
void keep_result(const wire::TaskHeader& t, std::string& results, std::size_t body, wire::ResultHeader& h,
                 KeepSpill& spill, KeptResults& kept) {
  std::unique_ptr<ObjectMemory> m = spill.keep();
  if (!m) return;  // /dev/shm full, say: sent as any result is
  const wire::Kept k{t.keep_id, results.size() - body};
  results.resize(body);
  results += wire::encode(k);
  h.status = wire::Status::kept;
  kept.push_back(std::move(m));
}

// Runs one chunk and appends its result to the frame: its results, encoded straight into the
// frame, or what replaced them (the failure of an item, the failed items of a keep_going call, a
// function this binary does not have).
void run_chunk(const wire::TaskView& t, Mailbox& box, std::string& results, FrameSpill& spill, RunControl& ctl,
               std::vector<ItemFailure>& failures, KeptResults* kept = nullptr) {
  const FunctionEntry* fn = function_by_id(t.header.fn);
  ChunkRunner run = !fn ? nullptr : t.header.mode == CallMode::single ? fn->run_single : fn->run_tuple;
  wire::ResultHeader h{t.header.chunk, t.header.attempt, wire::Status::ok};
  if (!run) {
    h.status = wire::Status::unknown_fn;
    wire::append_result(results, h,
                        "a function this worker does not have (id " + std::to_string(t.header.fn) +
                            "): driver and workers must run the same binary");
    return;
  }
  const std::int64_t began = now_ns();
  const std::size_t at = wire::open_result(results, h);
  const std::size_t body = results.size();
  ItemFailure fail;
  failures.clear();
  ctl.keep_going = t.header.keep_going;
  ctl.skip = t.header.skip;
  ctl.failures = &failures;
  thread_local std::string joined;  // arguments around stored objects (fibra::put), joined
  std::string_view args;
  bool ran = true;
  try {
    args = executor_arguments(t, g_executor.agent, joined);
  } catch (...) {
    fail = Items<Unit>::failure_at(0);
    ran = false;
  }
  // A result that may be kept has its large blocks written into a memfd, not the lane's slot.
  const bool may_keep = kept && t.header.keep_from > 0;
  KeepSpill keeping(may_keep ? &results : nullptr, body, t.header.keep_id);
  FrameSpill* const spilling = may_keep ? std::exchange(FrameSpill::current, nullptr) : FrameSpill::current;
  if (ran) ran = run(args, t.header.count, results, fail, box.item, ctl);
  FrameSpill::current = spilling;
  keeping.stop();
  const bool keep = may_keep && ran && failures.empty() && results.size() - body >= t.header.keep_from;
  if (may_keep && ran && !keep) keeping.undo();
  if (joined.capacity() >= large_buffer) give_back_large(joined);  // not kept past its task
  h.run_ns = static_cast<std::uint64_t>(now_ns() - began);
  if (!ran) {  // a failure replaces what the chunk wrote
    h.status = wire::Status::raised;
    results.resize(body);
    spill.cut(body);
    results += wire::encode(fail);
  } else if (!failures.empty()) {
    h.status = wire::Status::partial;
    spill.give_back();  // the results are read again below
    const std::string partial = wire::encode_partial(failures, std::string_view(results).substr(body));
    results.resize(body);
    results += partial;
  }
  if (keep) keep_result(t.header, results, body, h, keeping, *kept);
  wire::close_result(results, at, h);
  if (results.size() - at > max_result_bytes) refuse_oversized(results, at, h, t.header, spill);
}

// A wait on a queue, pipe or event runs no other task meanwhile (as a Python process would not):
// a task run on top of the waiting one would hold it (and its acknowledgement) until it ended.
thread_local bool t_queue_wait = false;
// The task's thread waits for a pipe's recv (Inbox::read_a_little watches the ring a moment).
thread_local bool t_answer_soon = false;
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

// A queue's put without a timeout goes out without waiting for its answer, up to `most` at a
// time (the driver answers a put once the queue took it, so a full queue still holds its writer
// back): single puts from a task then cost no round trip each. A failed put (a closed queue) is
// thrown by the task's next call on a queue, and any call but a put first waits for the puts
// before it; a task's puts are all answered before its result is sent, so that the driver sees
// its items in the queue once it sees its result.
class PutsInFlight {
 public:
  static constexpr std::size_t most = 256;
  void add(std::shared_ptr<JobState> job) {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(job));
    empty_.store(false, std::memory_order_release);
  }
  bool full() {
    std::lock_guard lk(mu_);
    return jobs_.size() >= most;
  }
  // Takes the answers that came; throws the first failure among them.
  void reap() {
    if (empty_.load(std::memory_order_acquire)) return;
    std::exception_ptr failed;
    {
      std::lock_guard lk(mu_);
      while (!jobs_.empty() && jobs_.front()->ready()) {
        take(*jobs_.front(), failed);
        jobs_.pop_front();
      }
      empty_.store(jobs_.empty(), std::memory_order_release);
    }
    if (failed) std::rethrow_exception(failed);
  }
  // Waits for the oldest answer (the window is full); throws its failure.
  void wait_oldest() {
    std::shared_ptr<JobState> job;
    {
      std::lock_guard lk(mu_);
      if (jobs_.empty()) return;
      job = jobs_.front();
    }
    std::exception_ptr failed;
    job->wait_ready(std::nullopt);
    {
      std::lock_guard lk(mu_);
      if (!jobs_.empty() && jobs_.front() == job) {
        take(*job, failed);
        jobs_.pop_front();
      }
      empty_.store(jobs_.empty(), std::memory_order_release);
    }
    if (failed) std::rethrow_exception(failed);
  }
  // Waits for every answer; throws the first failure (after all came).
  void drain() {
    std::exception_ptr failed;
    while (!empty_.load(std::memory_order_acquire)) {
      try {
        wait_oldest();
      } catch (...) {
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
  }
  // Waits for every answer (a task returned); a failure is told on stderr, as its task is over.
  void settle() noexcept {
    if (empty_.load(std::memory_order_acquire)) return;
    const QueueWait no_task_on_top;
    while (!empty_.load(std::memory_order_acquire)) {
      try {
        wait_oldest();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fibra: a queue's put made by a task that has returned failed: %s\n", e.what());
      }
    }
  }

 private:
  // A put's failure, told later: as an Error of its own, which a `catch (QueueClosed&)` that reads
  // the end of a stream does not take for one.
  static void take(JobState& job, std::exception_ptr& failed) {
    ChunkOutcome o;
    job.wait_next(o);
    if (!o.error || failed) return;
    std::string why = "an error that is not a std::exception";
    try {
      std::rethrow_exception(o.error);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    failed = std::make_exception_ptr(Error("fibra: an earlier put of this task (sent without waiting) failed: " + why));
  }
  std::mutex mu_;
  std::deque<std::shared_ptr<JobState>> jobs_;
  std::atomic<bool> empty_{true};
};
// Each task has its own (a task run on top of a waiting one, or on a thread of a threaded actor,
// must not wait for another's puts, which may wait for it); a thread a task started has its
// thread's.
thread_local PutsInFlight t_thread_puts;
thread_local PutsInFlight* t_puts = &t_thread_puts;
// This process's lane is mapped by the driver: it runs on the driver's host, with lanes on
// (FIBRA_LANES=0 turns them off; the driver then maps no lane to read at a loss).
bool lane_reaches_driver() {
  static const bool reaches = executor_on_driver_host() && env::flag("FIBRA_LANES").value_or(true);
  return reaches;
}

// Runs `f` (a chunk) with a list of puts of its own, and waits for them before the chunk's result goes.
template <class F>
void with_own_puts(F&& f) {
  PutsInFlight mine;
  const ScopedSet<PutsInFlight*> own(t_puts, &mine);
  f();
  mine.settle();
  give_back_read_ahead();  // what its gets read ahead and did not take is not stranded here
}

// `results` is the frame buffer, kept from batch to batch so that its memory stays warm.
// `sent` (a batch from the lane): where the agent reads how many of its chunks have their results
// out, so that a death after them does not report them again. Frames go out every flush_bytes or
// flush_every, and at the end.
void run_batch(int sock, Mailbox& box, std::string_view batch, std::string& results,
               std::atomic<std::uint32_t>* sent = nullptr) {
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
}

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
  std::optional<Batch> next_batch() {
    const auto idle_from = std::chrono::steady_clock::now();
    bool dropped = false;
    for (;;) {
      // Idle a second: stored objects mapped for the last batches go (the driver may have freed them).
      if (!dropped && std::chrono::steady_clock::now() - idle_from > std::chrono::seconds(1)) {
        keep_objects_in_use();
        dropped = true;
      }
      {
        std::lock_guard rl(read_mu_);
        // The socket first: at its end (the agent stops this executor) no more is taken from the lane.
        if (!closed() && readable()) {
          read_one(true);
          continue;
        }
        if (auto b = try_batch()) {
          just_ran_ = true;
          return b;
        }
        if (closed()) return std::nullopt;
      }
      // The sleeps end by themselves only as a safeguard: what comes wakes them. A batch the
      // reader thread (if a task started one) queued also rings the bell.
      if (g_executor.lane->in_use() || reader_running_.load(std::memory_order_relaxed)) {
        // Its lane is in use: right after a batch it watches it a moment (the next one often comes
        // sooner than a wake-up would take), then sleeps on its bell, which the agent rings too
        // after it writes to the socket. Idle, it does not spin again at each safeguard wake.
        const auto spin = just_ran_ ? lane_spin : std::chrono::microseconds(0);
        just_ran_ = false;
        g_executor.lane->wait(spin, std::chrono::milliseconds(1000),
                              [&] { return g_executor.lane->has_batch() || readable() || has_queued(); });
      } else {
        // Batches come through the socket only (its driver is on another host): it sleeps in poll,
        // which wakes with the data, a wake-up less than the bell. The agent writes a wake frame
        // when the driver starts using the lane.
        pollfd p{sock_, POLLIN, 0};
        ::poll(&p, 1, 1000);
      }
    }
  }
  std::optional<Batch> try_batch() {
    {
      std::lock_guard lk(mu_);
      if (!batches_.empty()) {
        Batch b{std::move(batches_.front()), {}, -1};
        batches_.pop_front();
        return b;
      }
    }
    Batch b;
    if (closed()) return std::nullopt;  // stopping: what is left in the lane is the agent's to report, or nobody's
    // `bytes` holds the batch only if it had to be read rather than mapped (it stays on the heap,
    // where `in_lane` points, when the Batch moves).
    if (auto slot = g_executor.lane->take(b.in_lane, b.bytes)) {
      b.slot = *slot;
      return b;
    }
    return std::nullopt;
  }
  // Reads what arrives within `d` (a reply, a batch to queue), if no other thread is reading. The
  // task's thread (`lane_too`) also returns early for a batch in the lane, which only it takes; a
  // thread a task started waits on the socket alone.
  void read_a_little(std::chrono::milliseconds d, bool lane_too) {
    // With calls through the ring, answers come there too, and the driver rings the bell for them.
    const bool ring = ring_.load(std::memory_order_acquire) == Ring::on;
    if (ring && take_ring_replies()) return;
    if (ring && t_answer_soon) {
      // A pipe's recv: the other end often answers within microseconds (a ping-pong), so the ring is
      // watched 10 us before the sleep (pipe round trip 30-39 -> 14-16 us). Not for other waits: a
      // queue's reader or writer spinning so took the other's core (single items 430-570 k/s -> 280-300 k/s).
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(10);
      while (!g_executor.lane->has_reply() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      if (take_ring_replies()) return;
    }
    if (lane_too || ring) {
      g_executor.lane->wait(std::chrono::microseconds(0), d, [&] {
        return (lane_too && g_executor.lane->has_batch()) || readable() || (ring && g_executor.lane->has_reply());
      });
      if (ring && take_ring_replies()) return;
      if (!readable()) return;
    } else {
      pollfd p{sock_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(d.count())) <= 0) return;
    }
    std::unique_lock rl(read_mu_, std::try_to_lock);
    if (rl.owns_lock()) read_one(false);
  }
  // Bytes (or the end of the socket) wait to be read.
  bool readable() const {
    char c;
    const ssize_t k = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  bool closed() {
    std::lock_guard lk(mu_);
    return closed_;
  }
  // Another thread than the task's waits for a reply: from now on a thread reads while nobody else does.
  void need_reader() {
    std::call_once(reader_started_, [this] {
      reader_running_ = true;
      std::thread([this] {
        while (!closed()) read_a_little(std::chrono::milliseconds(100), false);
      }).detach();  // lives as long as the process
    });
  }

  // A call on a channel (`job`: its answer; none for a tell). Once the driver reads this process's
  // lane (it is on this host), the first such call asks to send them through the lane's ring
  // (ChannelOp::ring, through the socket): its answer comes after all that went the socket's way,
  // so no call overtakes an earlier one. From then on they all go through the ring, in order, and
  // their answers come back through the other ring (or the socket, for one that did not fit).
  void channel_call(wire::Request r, std::shared_ptr<JobState> job) {
    std::lock_guard sl(send_mu_);
    if (ring_.load(std::memory_order_relaxed) == Ring::unasked) {
      if (g_executor.lane->reads_calls() && !used_socket())
        ring_.store(Ring::on, std::memory_order_release);  // nothing sent the other way to overtake
      else if (g_executor.lane->in_use())
        ask_for_ring();
      else
        g_executor.box->wants_lane.store(
            1, std::memory_order_relaxed);  // (an actor's process: its agent tells the driver)
    }
    if (ring_.load(std::memory_order_relaxed) != Ring::on) {
      job ? request(std::move(r), std::move(job)) : tell(std::move(r));
      return;
    }
    bool stopping = false;
    {
      std::lock_guard lk(mu_);
      r.id = next_id_++;
      stopping = closed_;
      if (job && !stopping) waiting_[r.id] = {job, r.first, r.count};
    }
    if (stopping) {  // (delivered outside mu_, as read_one does: a delivery runs callbacks)
      if (job) job->deliver(closed_outcome(r.first, r.count));
      return;
    }
    const std::string bytes = wire::encode(r);
    std::string_view rest = bytes;
    // The driver reads the ring at each pass; a full one waits for it, as a full socket would.
    for (int tries = 0;; ++tries) {
      if (g_executor.lane->put_request(rest)) {
        if (rest.empty()) return;
        tries = 0;  // a fragment went: more room comes as the driver reads
        continue;
      }
      if (closed()) {  // the way to the driver is gone: read_one answered what waited, this one too
        return;
      }
      if (tries < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // Answers the driver put in the ring, delivered by whichever thread looks first; whether some were.
  bool take_ring_replies() {
    if (ring_.load(std::memory_order_acquire) != Ring::on || !g_executor.lane->has_reply()) return false;
    std::unique_lock rl(ring_read_mu_, std::try_to_lock);
    if (!rl.owns_lock()) return false;
    bool got = false;
    std::string reply;
    while (g_executor.lane->take_reply(ring_partial_, reply)) {
      got = true;
      deliver(wire::decode<wire::Reply>(reply));
    }
    return got;
  }

  // A request that wants no reply (a queue's acknowledgement).
  void tell(wire::Request r) {
    {
      std::lock_guard lk(mu_);
      r.id = next_id_++;
      used_socket_ = true;
    }
    send_frame(sock_, wire::encode(r), wire::frame_tell);
  }

  // A call into the pool: its request goes out, its outcome to `job` when the reply comes.
  void request(wire::Request r, std::shared_ptr<JobState> job, const std::vector<int>& fds = {}) {
    {
      std::lock_guard lk(mu_);
      r.id = next_id_++;
      used_socket_ = true;
      waiting_[r.id] = {std::move(job), r.first, r.count};
    }
    send_frame(sock_, wire::encode(r), wire::frame_request, fds);
  }
  // Some request went through the socket: a call in the ring could overtake it.
  bool used_socket() {
    std::lock_guard lk(mu_);
    return used_socket_;
  }

 private:
  struct Waiting {
    std::shared_ptr<JobState> job;
    std::uint64_t first = 0;
    std::uint32_t count = 1;
  };
  enum class Ring { unasked, on, off };

  static ChunkOutcome closed_outcome(std::uint64_t first, std::uint32_t count) {
    return {first, count, {}, std::make_exception_ptr(PoolClosed("fibra: the worker is stopping")), {}};
  }

  // Under send_mu_: asks the driver to read this process's calls on channels from its lane's ring,
  // and waits for the answer (without running tasks meanwhile: one might call a channel too).
  void ask_for_ring() {
    const QueueWait no_task_on_top;
    ring_.store(Ring::off, std::memory_order_relaxed);  // unless the driver says yes
    RetryPolicy once;
    once.retries = 0;
    wire::ChannelCall c;
    c.op = ChannelOp::ring;
    wire::Request r;
    r.actor = wire::channel_request;
    r.mode = CallMode::tuple;
    r.policy = once;
    r.payload = wire::encode(c);
    auto job = std::make_shared<JobState>(channel_entry(), CallMode::tuple, once);
    request(std::move(r), job);
    try {
      if (wire::decode<wire::ChannelReply>(Future<std::string>(job).get()).flag)
        ring_.store(Ring::on, std::memory_order_release);
    } catch (const std::exception&) {  // the worker stops: the socket's way, which says so
    }
  }

  // Reads one frame (under read_mu_): a batch is queued, a reply delivered. Without `block` it
  // reads only if bytes are there. At the end of the socket, calls still waiting get an answer.
  void read_one(bool block) {
    if (!block && !readable()) return;
    std::uint64_t prefix = 0;
    std::string body;
    if (!read_all(sock_, &prefix, sizeof prefix) ||
        (resize_large(body, wire::frame_length(prefix)), !read_all(sock_, body.data(), body.size()))) {
      std::unordered_map<std::uint64_t, Waiting> left;
      {
        std::lock_guard lk(mu_);
        closed_ = true;  // the agent is gone, and with it the way to the driver
        left.swap(waiting_);
      }
      for (auto& [id, w] : left)  // delivered outside mu_: a delivery runs callbacks
        w.job->deliver(closed_outcome(w.first, w.count));
      return;
    }
    if (wire::frame_kind(prefix) == wire::frame_reply) {
      deliver(wire::decode<wire::Reply>(body));
    } else if (wire::frame_kind(prefix) == wire::frame_wake) {
      // nothing to do: it woke this executor from its poll on the socket, and it now sees its lane in use
    } else {
      {
        std::lock_guard lk(mu_);
        batches_.push_back(std::move(body));
      }
      g_executor.lane->ring();  // read by the reader thread, perhaps, while the task's thread sleeps on the bell
    }
  }
  bool has_queued() {
    std::lock_guard lk(mu_);
    return !batches_.empty();
  }

  void deliver(const wire::Reply& r) {
    if (r.id == 0) return on_channel_notice(r.payload);  // nothing waits for it: the driver asks
    Waiting w;
    {
      std::lock_guard lk(mu_);
      auto it = waiting_.find(r.id);
      if (it == waiting_.end()) return;
      w = std::move(it->second);
      waiting_.erase(it);
    }
    ChunkOutcome o{w.first, w.count, {}, {}, {}};
    if (r.ok)
      o.payload = r.payload;
    else
      o.error = rebuild(wire::decode<wire::ErrorText>(r.payload));
    for (std::size_t i = 0; i < r.error_offsets.size() && i < r.errors.size(); ++i)
      o.item_errors.push_back({r.error_offsets[i], rebuild(wire::decode<wire::ErrorText>(r.errors[i]))});
    w.job->deliver(std::move(o));
    // The task's thread waits for it on the lane's bell (help_while_waiting), not on the job: a
    // reply the reader thread took from under it would otherwise leave it asleep until its 2 ms
    // wait ends (a get_many read ahead took 1-2 ms a round trip so, not 50-100 us).
    if (!t_task.is && g_executor.lane) g_executor.lane->ring();
  }

  static std::exception_ptr rebuild(const wire::ErrorText& e) {
    if (e.type == "fibra::RemoteException")
      if (auto registered = make_registered_exception(e.remote_type, e.what, e.remote_message, RemoteSite{}))
        return registered;
    if (auto own = make_fibra_error(e.type, e.what, e.remote_type, e.remote_message)) return own;
    return std::make_exception_ptr(Error(e.what));
  }

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

// Runs a batch, wherever it came from; a lane's slot is freed once its results are out.
void run(const Inbox::Batch& b, std::string& results) {
  RunningBatch running;
  run_batch(g_executor.sock, *g_executor.box, b.data(), results,
            b.slot >= 0 ? &g_executor.lane->sent(b.slot) : nullptr);
  if (b.slot >= 0) g_executor.lane->finish(b.slot);
}

// ---- An actor whose calls run at once (ActorOptions::max_concurrency > 1) ----
// The task thread runs its constructor's batch itself (the driver sends it alone), then hands each
// later call to one of the actor's call threads (as many as its concurrency, started as calls come)
// and goes back to its socket; a call's result goes to the agent as soon as it is done. Such an
// actor's calls come through the agent only (the driver does not use its lane), so that all of
// them can be in the process at once. The mailbox shows the oldest call running: a time limit and
// a crash are told against it. The stored objects of calls waiting or running stay mapped.
class CallThreads {
 public:
  // Takes the batch if it holds calls of such an actor whose object is made (false: run it as any).
  bool take(Inbox::Batch& b) {
    if (b.slot >= 0 || !actor_slot().object) return false;
    const std::vector<wire::TaskView> peek = wire::parse_tasks(b.bytes);
    if (peek.empty() || peek[0].header.actor == 0 || peek[0].header.concurrency <= 1) return false;
    const std::size_t most = std::min<std::size_t>(peek[0].header.concurrency, max_actor_concurrency);
    std::lock_guard lk(mu_);
    if (threads_ == 0 && !start_thread()) return false;  // no thread to be had: its calls run one by one
    auto bytes = std::make_shared<const std::string>(std::move(b.bytes));
    for (auto& t : wire::parse_tasks(*bytes)) {
      for (const auto& r : t.header.objects) ++objects_[r.id];
      waiting_.push_back({bytes, std::move(t)});
    }
    keep_objects();
    while (threads_ < most && threads_ < waiting_.size() + running_.size() && start_thread()) {
    }
    cv_.notify_all();
    return true;
  }
  // Unmaps the stored objects no call waiting or running takes (an idle task thread's sweep).
  void keep_objects_in_use() {
    std::lock_guard lk(mu_);
    keep_objects();
  }

 private:
  struct Call {
    std::shared_ptr<const std::string> batch;  // holds the bytes `view` points into
    wire::TaskView view;
  };

  // One more call thread (under mu_); false if the system gives none now (a limit on threads or
  // memory): the calls go to the threads there are.
  bool start_thread() {
    try {
      std::thread([this] { serve(); }).detach();  // lives as long as the process
    } catch (const std::system_error& e) {
      std::fprintf(stderr, "fibra: an actor's process could not start a thread for its calls (%s); %zu run them\n",
                   e.what(), threads_);
      return false;
    }
    ++threads_;
    return true;
  }

  void serve() {
    watch_stack();  // a stack overflow in a call is reported as such
    std::string results;
    RunControl ctl;
    std::vector<ItemFailure> failures;
    Mailbox& box = *g_executor.box;
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return !waiting_.empty(); });
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      const wire::TaskView t = running_.back().view;
      show_oldest(box);
      lk.unlock();
      results.assign(wire::begin_results(static_cast<std::int64_t>(::getpid())));
      {
        RunningBatch running;
        FrameSpill spill(results, false);
        with_own_puts([&] { run_chunk(t, box, results, spill, ctl, failures); });
      }
      // What it printed goes to the agent before its result does.
      std::fflush(stdout);
      std::fflush(stderr);
      send_frame(g_executor.sock, results);
      lk.lock();
      std::erase_if(running_, [&](const Call& c) { return c.view.header.chunk == t.header.chunk; });
      for (const auto& r : t.header.objects)
        if (auto o = objects_.find(r.id); o != objects_.end() && --o->second <= 0) objects_.erase(o);
      show_oldest(box);
      if (results.capacity() > lane::large_kept) std::string().swap(results);
    }
  }
  // Under mu_.
  void show_oldest(Mailbox& box) {
    if (running_.empty()) {
      box.chunk.store(0, std::memory_order_release);
      return;
    }
    const wire::TaskHeader& h = running_.front().view.header;
    if (box.chunk.load(std::memory_order_relaxed) == h.chunk) return;
    box.item.store(0, std::memory_order_relaxed);
    box.timeout_s.store(h.timeout_s, std::memory_order_relaxed);
    box.chunk.store(h.chunk, std::memory_order_release);
  }
  // Under mu_.
  void keep_objects() {
    std::set<std::uint64_t> ids;
    for (const auto& [id, calls] : objects_) ids.insert(id);
    executor_keep_objects(ids);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Call> waiting_;              // in order
  std::deque<Call> running_;              // in the order they began
  std::map<std::uint64_t, int> objects_;  // stored objects the calls waiting or running take: how many
  std::size_t threads_ = 0;
};
CallThreads g_call_threads;

void keep_objects_in_use() { g_call_threads.keep_objects_in_use(); }

// The pool as a task sees it: what it submits (fibra::submit, a map) and the actors it calls go to
// the driver as requests, through the agent; `uid` names the pool of the actors it calls.
class ExecutorCore final : public PoolCore {
 public:
  explicit ExecutorCore(std::uint64_t uid) : uid_(uid) {}
  void submit(const std::shared_ptr<JobState>& job, std::uint64_t first, std::uint32_t count,
              std::string payload) override {
    wire::Request r = request_for(*job, std::move(payload));
    r.first = first;
    r.count = count;
    const std::vector<int> fds = add_objects(*job, r);
    g_executor.inbox->request(std::move(r), job, fds);
  }
  void call_actor(std::uint64_t actor, const std::shared_ptr<JobState>& job, std::string payload) override {
    wire::Request r = request_for(*job, std::move(payload));
    r.pool = uid_;
    r.actor = actor;
    const std::vector<int> fds = add_objects(*job, r);
    g_executor.inbox->request(std::move(r), job, fds);
  }
  // Starting an actor, or finding one by name, asks the driver and waits for its id (running the
  // batches that come meanwhile, as any wait in a task does).
  std::uint64_t start_actor(const FunctionEntry& ctor, std::string args, ActorSettings s) override {
    auto job = std::make_shared<JobState>(ctor, CallMode::tuple, default_policy());
    job->set_name("Actor<" + s.class_name + ">::start");
    wire::Request r = request_for(*job, wire::encode(wire::ActorStart{std::move(args), s.class_name, s.max_restarts,
                                                                      s.need, s.name, s.max_concurrency}));
    return ask_for_actor(std::move(r), wire::actor_start_request, job);
  }
  std::uint64_t find_actor(const std::string& name, const std::string& class_name, bool) override {
    auto job = std::make_shared<JobState>(actor_find_entry(), CallMode::tuple, default_policy());
    job->set_name("Actor<" + class_name + ">::get(\"" + name + "\")");
    return ask_for_actor(request_for(*job, wire::encode(wire::ActorFind{name, class_name})), wire::actor_find_request,
                         job);
  }
  bool owns_handles() const override { return false; }
  // The pool's defaults (PoolOptions), which its agent gave this executor.
  RetryPolicy default_policy() const override {
    static const RetryPolicy pool = [] {  // read once: the variable is set when the executor starts
      const char* p = env::raw("FIBRA_POOL_POLICY");
      return p ? wire::policy_from_text(p) : RetryPolicy{};
    }();
    return pool;
  }
  int size() const override { return 1; }
  void resize(int) override { throw ConfigError("fibra: a task cannot resize the pool it runs in"); }
  void close() override {}
  void join() override {}
  void terminate() override {}
  bool closed() const override { return false; }
  // uid 0 is the pool that runs this task; a handle of one of its actors that travels (to the
  // driver, say) names it by its own uid, which the driver said when the actor was started or found.
  std::uint64_t uid() const override { return uid_ != 0 ? uid_ : own_pool_uid().load(); }

 private:
  // A call of `job` as a request: its function, and the policy and resources it asks for.
  static wire::Request request_for(const JobState& job, std::string payload) {
    wire::Request r;
    r.fn = job.fn().id;
    r.mode = job.mode();
    r.payload = std::move(payload);
    r.policy = job.policy();
    if (job.name() != job.fn().name) r.name = job.name();
    return r;
  }
  // The values the task stored (fibra::put) among the call's arguments: gaps in its payload, whose
  // memfds go with the request (the agent holds them, and the driver maps them from there).
  static std::vector<int> add_objects(const JobState& job, wire::Request& r) {
    std::vector<int> fds;
    for (const ObjectArg& a : job.objects()) {
      if (fds.size() == FrameReader::max_fds)
        throw ConfigError("fibra: a call takes more than " + std::to_string(FrameReader::max_fds) +
                          " values the task stored (fibra::put); pass fewer, or put them together in one");
      r.objects.push_back(wire::object_ref(a));
      fds.push_back(a.object->fd);
    }
    return fds;
  }
  std::uint64_t ask_for_actor(wire::Request r, std::uint64_t what, const std::shared_ptr<JobState>& job) {
    r.pool = uid_;
    r.actor = what;
    g_executor.inbox->request(std::move(r), job);
    const auto [id, pool] = Future<std::pair<std::uint64_t, std::uint64_t>>(job).get();
    if (uid_ == 0) own_pool_uid().store(pool);  // a handle sent on names the pool by it
    return id;
  }
  // The uid of the pool that runs this executor's tasks, once a reply said it (0: not yet).
  static std::atomic<std::uint64_t>& own_pool_uid() {
    static std::atomic<std::uint64_t> u{0};
    return u;
  }
  std::uint64_t uid_;
};

// Runs a batch that arrived while a task waits: on this stack while it has room, else on a new
// thread (see "The task thread and its stack"), which this one waits for.
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
      run_nested(*b, results);
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
  return ok ? 1 : 0;
}

// Tells the driver what became of delivery `token` (ack, give_back: `taken` of its items); no answer.
void tell_delivery(ChannelOp op, std::uint64_t token, std::uint64_t taken = 0) {
  wire::ChannelCall c;
  c.op = op;
  c.token = token;
  c.n = taken;
  wire::Request r;
  r.actor = wire::channel_request;
  r.payload = wire::encode(c);
  g_executor.inbox->channel_call(std::move(r), nullptr);
}

// Read ahead: a get of a Queue or Pipe from a task asks the driver to send some of the items
// behind its own along (wire::ChannelCall::ahead: none at a chunk's first get on a channel, then
// 4, 16, 64, 256 as its single gets go on; a get_many(n) n, then 4n). The next gets take them
// here, without a round trip (a get_many what is here, up to its n). The
// driver still owes them (an item read ahead comes back if this process dies) until the last of a
// delivery is taken (an ack) or what is left is given back (give_back, with how many were taken):
// at a chunk's end, before any other call on that channel from this process, and when the
// driver asks (a recall: another get waits on the emptied channel). The reader thread answers a
// recall while the task computes, so no item is stranded in a slow or idle reader.
class ReadAhead {
 public:
  static constexpr std::uint64_t most = 256;

  // The next items (up to n) read ahead for `channel`, if there are some; the delivery is
  // acknowledged when its last item is taken.
  std::optional<ChannelItems> pop(std::uint64_t channel, std::uint64_t n) {
    std::lock_guard lk(mu_);
    auto it = held_.find(channel);
    if (it == held_.end() || it->second.left() == 0) return std::nullopt;
    Held& h = it->second;
    const std::size_t k = std::min<std::uint64_t>(std::max<std::uint64_t>(n, 1), h.left());
    ChannelItems out;
    out.add_laid_out(std::string_view(h.items.bytes()).substr(h.at[h.next], h.at[h.next + k] - h.at[h.next]), k,
                     h.items.stride());
    h.next += k;
    h.taken += k;
    mark(h);  // taken, should this process die now
    if (h.left() == 0) {
      tell(ChannelOp::ack, h);
      h.clear();
    }
    return out;
  }
  bool holds(std::uint64_t channel) {
    std::lock_guard lk(mu_);
    auto it = held_.find(channel);
    return it != held_.end() && it->second.left() > 0;
  }
  // How many items the next get of `n` on `channel` may take along: none on another host than the
  // driver's (a lost node would take what its tasks took with it, unsaid), nor for more than 8
  // channels at once.
  std::uint64_t ahead_for(std::uint64_t channel, std::uint64_t n) {
    if (!lane_reaches_driver() || !g_executor.box) return 0;
    std::lock_guard lk(mu_);
    Held& h = held_[channel];
    if (h.slot < 0 && !reserve(h)) return 0;
    const std::uint64_t now = h.more;
    h.more = std::min(most, std::max<std::uint64_t>(4, 4 * h.more));
    return n <= 1 ? now : std::min<std::uint64_t>(now / 4, 4) * n;
  }
  // A get's reply brought `items` under `token`: the first `own` are the get's (left in `items`),
  // the rest are kept here. @throws Error if the items are not laid out as they say.
  void keep(std::uint64_t channel, std::uint64_t token, ChannelItems& items, std::size_t own) {
    {
      std::lock_guard lk(mu_);
      Held& h = held_[channel];
      std::vector<std::uint64_t> at;
      try {
        at = items.offsets();
      } catch (const Error&) {  // (a reply that does not decode: the driver has it all back, and the get fails)
        tell_delivery(ChannelOp::give_back, token, 0);
        throw;
      }
      ChannelItems first;
      first.add_laid_out(std::string_view(items.bytes()).substr(0, at[own]), own, items.stride());
      // Given back at once: another get of this process holds a delivery of this channel (threads),
      // the driver asked for this one before it came, or no slot can say what it took.
      if (h.token != 0 || h.early == token || (h.slot < 0 && !reserve(h))) {
        if (h.early == token) h.early = 0;
        tell_delivery(ChannelOp::give_back, token, own);
        items = std::move(first);
        return;
      }
      h.token = h.last = token;
      h.taken = own;
      h.items = std::move(items);
      h.at = std::move(at);
      h.next = own;
      items = std::move(first);
      mark(h);
    }
    g_executor.inbox->need_reader();  // a recall must be answered while the task computes
  }
  // What `channel` holds goes back (another call on it comes: its gets take fewer along).
  void give_back(std::uint64_t channel) {
    std::lock_guard lk(mu_);
    if (auto it = held_.find(channel); it != held_.end() && give_back(it->second)) it->second.more /= 4;
  }
  // Everything goes back (the chunk ended); returns a channel it gave items of back (0: none).
  std::uint64_t give_back_all() {
    std::lock_guard lk(mu_);
    std::uint64_t gave = 0;
    for (auto& [channel, h] : held_)
      if (give_back(h)) gave = channel;
    held_.clear();  // the next chunk starts its read-ahead afresh
    used_ = 0;
    return gave;
  }
  // The driver asks for delivery `token` back (it may be taken, or given back, already).
  void recalled(std::uint64_t channel, std::uint64_t token) {
    std::lock_guard lk(mu_);
    Held& h = held_[channel];
    if (h.token == token) {
      give_back(h);
      h.more /= 4;  // another reader competes for its items: take fewer along
    } else if (token > h.last) {
      h.early = token;  // its reply is still on its way (tokens grow): given back as it comes
    }
  }

 private:
  struct Held {
    std::uint64_t token = 0;        // the delivery its items came in (0: none held)
    std::uint64_t taken = 0;        // of that delivery, by gets
    ChannelItems items;             // that delivery's, all of them
    std::vector<std::uint64_t> at;  // where each of them starts (ChannelItems::offsets)
    std::size_t next = 0;           // the first not yet taken
    std::size_t left() const { return at.empty() ? 0 : at.size() - 1 - next; }
    void clear() {
      items = {};
      at.clear();
      next = 0;
    }
    std::uint64_t more = 0;   // the next single get asks to take this many along (a get_many n, 4n: ahead_for)
    int slot = -1;            // in Mailbox::ahead_taken
    std::uint64_t last = 0;   // the latest delivery kept
    std::uint64_t early = 0;  // a delivery recalled before it came
  };
  bool reserve(Held& h) {
    for (int i = 0; i < int(std::size(g_executor.box->ahead_taken)); ++i)
      if (!(used_ & (1u << i))) {
        used_ |= 1u << i;
        h.slot = i;
        return true;
      }
    return false;
  }
  void mark(const Held& h) {
    if (h.slot >= 0)
      g_executor.box->ahead_taken[h.slot].store(ahead_packed(h.token, h.taken), std::memory_order_release);
  }
  bool give_back(Held& h) {
    if (h.token == 0 || h.left() == 0) return false;
    tell(ChannelOp::give_back, h);
    h.clear();
    return true;
  }
  // Told under mu_, so that a get that found nothing here sends its request after it. The slot
  // keeps saying what was taken (a tell may be lost with its process: a kill at a time limit drops
  // what its socket held); the driver ignores a delivery it no longer owes.
  static void tell(ChannelOp op, Held& h) {
    tell_delivery(op, h.token, h.taken);
    h.token = 0;
  }
  std::mutex mu_;
  std::unordered_map<std::uint64_t, Held> held_;
  std::uint32_t used_ = 0;  // slots of Mailbox::ahead_taken held by a channel
};
ReadAhead g_read_ahead;

void on_channel_notice(const std::string& payload) {
  try {
    const auto c = wire::decode<wire::ChannelCall>(payload);
    if (c.op == ChannelOp::recall) g_read_ahead.recalled(c.id, c.token);
  } catch (const wire::Malformed&) {  // a notice this build does not know: nothing waits for it
  }
}
void give_back_read_ahead() noexcept {
  try {
    // Given back before the chunk's result reaches the driver, as its puts are: a call on the
    // channel, answered after the driver took what was given back (a result may overtake a tell).
    if (const std::uint64_t channel = g_read_ahead.give_back_all()) {
      wire::ChannelCall c;
      c.op = ChannelOp::info;
      c.id = channel;
      executor_channel_call(std::move(c));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fibra: giving back the items a task read ahead: %s\n", e.what());
  }
}

}  // namespace

wire::ChannelReply executor_channel_call(wire::ChannelCall call) {
  if (!g_executor.inbox) throw Error("fibra: this worker is not yet ready for a queue's call");
  RetryPolicy once;
  once.retries = 0;
  auto job = std::make_shared<JobState>(channel_entry(), CallMode::tuple, once);
  const bool behind = call.op == ChannelOp::put && call.timeout_s < 0;
  const bool a_get = call.op == ChannelOp::get && call.kind != ChannelKind::event;
  const std::uint64_t want = std::max<std::uint64_t>(call.n, 1);
  g_executor.inbox->take_ring_replies();  // answers to earlier puts (the socket's are read as they come)
  if (a_get) {
    t_puts->reap();  // an earlier put that failed is told, as at any call
    if (auto v = g_read_ahead.pop(call.id, want)) {
      wire::ChannelReply r;
      r.items = std::move(*v);
      return r;
    }
    call.ahead = g_read_ahead.ahead_for(call.id, call.n);
  } else if (call.op == ChannelOp::wait && call.kind == ChannelKind::pipe && g_read_ahead.holds(call.id)) {
    wire::ChannelReply r;  // a pipe's poll: a value waits here
    r.flag = true;
    return r;
  } else if (call.op != ChannelOp::put && call.op != ChannelOp::task_done) {
    g_read_ahead.give_back(call.id);  // the driver answers with every item it owes in view
  }
  const QueueWait no_task_on_top;  // every wait below
  // A get or a wait goes out at once: this process's calls on channels reach the driver in order
  // (all through its lane's ring, or all through its socket, its agent and MPI; the driver reads a
  // process's ring before its other requests), so it comes after the puts before it, and a get may make room for a
  // put of this process that waits for some. Any other call waits until this process's puts were
  // taken (a close() must not overtake the puts before it, which may wait for room). An earlier
  // put that failed is told now, or at the next call if it is not answered yet.
  if (behind || call.op == ChannelOp::get || call.op == ChannelOp::wait)
    t_puts->reap();
  else
    t_puts->drain();
  wire::Request r;
  r.actor = wire::channel_request;
  r.mode = CallMode::tuple;
  r.policy = once;
  r.payload = wire::encode(call);
  if (behind) {
    while (t_puts->full()) t_puts->wait_oldest();
    t_puts->add(job);
    g_executor.inbox->channel_call(std::move(r), job);
    return {};
  }
  g_executor.inbox->channel_call(std::move(r), job);
  const ScopedSet<bool> answer_soon(t_answer_soon, call.kind == ChannelKind::pipe && call.op == ChannelOp::get);
  auto reply = wire::decode<wire::ChannelReply>(Future<std::string>(job).get());
  if (reply.token != 0 && a_get && reply.items.size() > want) {
    g_read_ahead.keep(call.id, reply.token, reply.items, want);  // acknowledged as they are taken
  } else if (reply.token != 0) {  // received: the driver no longer owes these items to this process
    tell_delivery(ChannelOp::ack, reply.token);
  }
  return reply;
}

bool in_executor() noexcept { return g_executor.in_executor; }

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

bool spill_large(std::string& out, const void* p, std::size_t n) {
  if (KeepSpill* k = KeepSpill::current; k && k->spill(out, p, n)) return true;
  FrameSpill* s = FrameSpill::current;
  if (!s || &out != s->frame) return false;  // not the frame of a batch from the lane
  const std::size_t at = out.size();
  if (at > lane::large_bytes || n > lane::large_bytes - at) return false;
  char* slot = s->claimed ? g_executor.lane->claimed_large_result(at + n) : g_executor.lane->claim_large_result(at + n);
  if (!slot) return false;  // the driver still holds the slot (or it cannot be mapped): the frame's way
  s->claimed = true;
  s->extend(at + n);
  copy_large(slot + at, p, n);
  s->in_place.push_back({at, n});
  s->written_to = std::max(s->written_to, at + n);
  return true;
}

std::shared_ptr<PoolCore> executor_core(std::uint64_t uid) {
  static auto own = std::make_shared<ExecutorCore>(0);
  return uid == 0 ? std::shared_ptr<PoolCore>(own) : std::make_shared<ExecutorCore>(uid);
}

[[noreturn]] void executor_main(int sock, int mailbox_fd, pid_t parent) {
  g_executor.in_executor = true;
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
  std::string results;
  while (auto batch = inbox.next_batch())
    if (!g_call_threads.take(*batch)) run(*batch, results);
  wait_for_checkpoints();  // a checkpointed map a task ran is folded into its .h5 before the process ends
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(0);
}

}  // namespace fibra::detail
