// The agent's side of one executor (src/agent/supervised_executor.hpp).
#include "agent/supervised_executor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>

#include "fibra/error.hpp"
#include "common/log.hpp"
#include "transport/mpi.hpp"
#include "common/trace.hpp"
#include "common/process.hpp"
#include "transport/frame_writer.hpp"
#include "roles.hpp"

extern char** environ;

namespace fibra::detail {
namespace {

// After this many executor deaths in a row outside any chunk (at start-up, between chunks) with
// no result in between, the first waiting chunk is blamed, so a crash loop uses up its retries.
constexpr int idle_deaths_before_blame = 3;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// How an executor's death reads in the failure of the chunk blamed for it; one in the pool's
// initializer says so: "exited with status 3 in the pool's initializer (PoolOptions::initializer)".
std::string death_text(int status, bool in_task, bool in_initializer) {
  std::string how = describe_exit(status);
  if (in_initializer) {
    constexpr std::string_view running = " while running it";
    if (how.ends_with(running)) how.resize(how.size() - running.size());
    return how + " in the pool's initializer (PoolOptions::initializer)";
  }
  return in_task ? how : how + " outside any task, again and again";
}

// The executor gets its socket as fd 3 and its mailbox as fd 4, and nothing else of the agent's:
// an executor holding the agent's PMIx and TCP sockets once wedged a later MPI_Comm_spawn after it
// was killed. glibc 2.34 closes the rest in posix_spawn; older ones (RHEL/Rocky 8 has 2.28) get
// close-on-exec set on every other descriptor first.
void close_the_rest(posix_spawn_file_actions_t* fa) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(fa, 5);
#else
  (void)fa;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    const int own = ::dirfd(d);
    while (dirent* e = ::readdir(d)) {
      const int fd = std::atoi(e->d_name);
      if (fd > 4 && fd != own) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
    }
    ::closedir(d);
  }
#endif
}

}  // namespace

void LineRelay::attach(UniqueFd read_end, const std::string& prefix) {
  finish();
  from_ = std::move(read_end);
  prefix_ = prefix;
  ::fcntl(from_.get(), F_SETFL, ::fcntl(from_.get(), F_GETFL) | O_NONBLOCK);
}

bool LineRelay::pump() {
  if (from_.get() < 0) return false;
  char buf[1 << 14];
  bool got = false;
  for (;;) {
    const ssize_t k = ::read(from_.get(), buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;  // nothing more now, or the executor closed it
    got = true;
    partial_.append(buf, static_cast<std::size_t>(k));
  }
  const std::size_t end = partial_.rfind('\n');
  if (end != std::string::npos) {
    emit(std::string_view(partial_).substr(0, end + 1));
    partial_.erase(0, end + 1);
  } else if (partial_.size() > (1 << 16)) {  // a very long line goes out in pieces
    partial_ += '\n';
    emit(partial_);
    partial_.clear();
  }
  return got;
}

void LineRelay::finish() {
  pump();
  if (!partial_.empty()) {
    partial_ += '\n';
    emit(partial_);
    partial_.clear();
  }
  from_.reset();
}

AgentOutput& agent_output() {
  static AgentOutput output;
  return output;
}

void LineRelay::emit(std::string_view lines) {
  std::string& out = agent_output().*to_;
  if (prefix_.empty()) {
    out.append(lines);
    return;
  }
  for (std::size_t at = 0; at < lines.size();) {
    const std::size_t nl = lines.find('\n', at);
    out += prefix_;
    out.append(lines.substr(at, nl - at + 1));
    at = nl + 1;
  }
}

SupervisedExecutor::SupervisedExecutor(int index, std::string prefix, bool actor, std::uint64_t lane_nonce)
    : index_(index), prefix_(std::move(prefix)), actor_(actor), region_(LaneRegion::create()) {
  region_->lane().init(lane_nonce, ::getpid());
}

SupervisedExecutor::~SupervisedExecutor() {
  if (pid_ > 0 && !reaped_) {  // a reaped pid may be another process's by now
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void SupervisedExecutor::start() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error("fibra agent: " + errno_text("socketpair for an executor"));
  UniqueFd mine(sv[0]), theirs(sv[1]);
  int big = 4 << 20;
  for (int fd : sv) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  }
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw Error("fibra agent: " + errno_text("pipe for an executor's output"));
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) throw Error("fibra agent: " + errno_text("pipe for an executor's output"));
  UniqueFd err_r(err[0]), err_w(err[1]);
  Mailbox& b = lane().mailbox();
  b.chunk = 0;
  b.item = 0;
  b.stack_overflow = 0;
  b.initializing = 0;
  awaiting_replies_ = 0;  // a new process: the old one's requests are answered to nobody
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), 3);
  posix_spawn_file_actions_adddup2(&fa, region_->fd(), 4);
  close_the_rest(&fa);
  const std::string exe = self_exe();
  // Its socket and lane region at the descriptors the dups above give them.
  std::vector<std::string> args = ExecutorArgs{3, 4, long(::getpid())}.to_argv(exe);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Its environment: the agent's, with its own variables over it.
  std::vector<std::string> vars;
  std::vector<char*> envp;
  if (!env_.empty()) {
    for (char** e = environ; *e; ++e) {
      const std::string_view v(*e);
      const bool overridden = std::any_of(env_.begin(), env_.end(), [&](auto& kv) {
        return v.size() > kv.first.size() && v.substr(0, kv.first.size()) == kv.first && v[kv.first.size()] == '=';
      });
      if (!overridden) envp.push_back(*e);
    }
    for (auto& [k, val] : env_) vars.push_back(k + "=" + val);
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
  }
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), env_.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw Error("fibra agent: cannot start an executor (" + exe + "): " + std::strerror(rc));
  pid_ = pid;
  // The driver may hand it batches from now on (it reads them once started); not before the spawn
  // succeeded: a lane open while no executor runs would take batches nobody reports.
  lane().reopen();      // an actor's too: a driver on this host hands it calls there (wire::ActorLane)
  lane_woken_ = false;  // a new executor reads the flag as it starts; it may be asleep before the driver sets it
  reaped_ = false;
  ready_ = false;
  sock_ = std::move(mine);
  const std::string who = prefix_.empty() ? "" : prefix_ + " pid " + std::to_string(pid) + ") ";
  out_lines_.attach(std::move(out_r), who);
  err_lines_.attach(std::move(err_r), who);
  ::fcntl(sock_.get(), F_SETFL, ::fcntl(sock_.get(), F_GETFL) | O_NONBLOCK);
  watch_chunk_ = 0;
  watch_since_ = mpi::now_s();
}

void SupervisedExecutor::kill_for_cancel(std::uint64_t chunk) {
  if (pid_ <= 0) return;
  killed_for_ = chunk;
  ::kill(pid_, SIGKILL);
}

void SupervisedExecutor::start_if_due(double now) {
  if (pid_ > 0 || now < restart_at_) return;
  try {
    start();
  } catch (const Error& e) {  // out of processes or descriptors, say: this executor waits, the agent goes on
    log::warning("{}; trying again in 1 s", e.what());
    restart_at_ = now + 1.0;
  }
}

void SupervisedExecutor::give(std::string batch) {
  if (held_.empty()) watch_since_ = mpi::now_s();  // the stuck-executor clock starts with work
  for (const auto& t : wire::parse_tasks(batch)) {
    held_.push_back({t.header.chunk, t.header.attempt});
    trace::mark(trace::agent_received, t.header.chunk);
  }
  out_.push_back({batch.size(), std::move(batch)});
}

void SupervisedExecutor::wake_for_lane() {
  if (lane_woken_ || pid_ <= 0 || !lane().in_use()) return;
  lane_woken_ = true;
  out_.push_back({wire::frame_prefix(wire::frame_wake, 0), std::string()});
}

void SupervisedExecutor::give_reply(std::string reply, bool answer) {
  if (answer) awaiting_replies_ = std::max(0, awaiting_replies_ - 1);
  out_.push_back({wire::frame_prefix(wire::frame_reply, reply.size()), std::move(reply)});
}

bool SupervisedExecutor::write() {
  bool wrote = false;
  while (pid_ > 0 && !out_.empty()) {
    Outgoing& o = out_.front();
    const std::ptrdiff_t k = write_frame_some(sock_.get(), o.length, o.body, o.done);
    if (k <= 0) break;  // full, or the executor died: the read side will tell
    wrote = true;
    o.done += static_cast<std::size_t>(k);
    if (o.done < sizeof o.length + o.body.size()) break;
    out_.pop_front();
    if (trace::detail::on && out_.empty())
      for (const auto& h : held_) trace::mark(trace::agent_forwarded, h.chunk);
  }
  if (wrote) lane().ring();  // it may sleep on its lane's bell rather than on its socket
  return wrote;
}

bool SupervisedExecutor::read(std::vector<std::string>& frames, bool& got) {
  if (const auto n = lane().mailbox().results.load(std::memory_order_relaxed); n != lane_results_) {
    lane_results_ = n;  // it sent results through its lane: its deaths are no crash loop
    idle_deaths_ = 0;
  }
  bool ended = false;  // its process was seen to have ended: one more pass drains what it wrote
  while (pid_ > 0) {
    switch (in_.read(sock_.get(), got)) {
      case FrameReader::Status::again:
        // Nothing more now. A process it started may keep the socket open after it died, so no end
        // of file would come: waitpid says whether it is gone.
        if (ended || !exited()) return !ended;
        ended = true;
        continue;
      case FrameReader::Status::closed: return false;  // the executor is gone
      case FrameReader::Status::junk: return stop_for_junk(in_.what_junk());
      case FrameReader::Status::frame:
        if (!take_frame(in_.take(), frames)) return false;
    }
  }
  return true;
}

// A whole frame from the executor: results (an empty frame: "started"), a request, or a change of
// its waiting count. False if it is not what its kind says (the executor is then stopped).
bool SupervisedExecutor::take_frame(FrameReader::Frame f, std::vector<std::string>& frames) {
  std::string& frame = f.body;
  const std::uint64_t kind = f.kind;
  if (kind == wire::frame_request || kind == wire::frame_tell) {
    if (!f.fds.empty() && !adopt_objects(frame, f.fds)) return false;
    if (kind == wire::frame_request) ++awaiting_replies_;
    requests_.push_back(std::move(frame));
    return true;
  }
  if (kind == wire::frame_blocked) {
    std::int32_t delta = 0;
    try {
      delta = wire::decode_whole<wire::WaitDelta>(frame).delta;
    } catch (const wire::Malformed&) {
      return stop_for_junk("a wait frame of " + std::to_string(frame.size()) + " bytes");
    }
    blocked_ += delta;
    blocked_delta_ += delta;
    return true;
  }
  if (frame.empty()) {  // the empty frame it sends once started
    ready_ = true;
    return true;
  }
  wire::ResultBatch batch;
  try {
    batch = wire::parse_results(frame);
  } catch (const wire::Malformed& e) {
    return stop_for_junk(e.what());
  }
  std::size_t fd = 0;
  for (const auto& r : batch.results) {
    forget(r.header.chunk);
    trace::mark(trace::agent_read, r.header.chunk);
    if (r.header.status != wire::Status::kept) continue;
    // Its memfd came with the frame; held here, the driver finds it by name (a malformed one, or
    // one missing, is not taken, and the driver fails that attempt saying so).
    try {
      const auto k = wire::decode_whole<wire::Kept>(r.payload);
      if (fd < f.fds.size())
        if (auto m = ObjectMemory::adopt(std::move(f.fds[fd++]), object_memfd_name(pid_, k.id), k.size))
          kept_.push_back({k.id, pid_, k.size, true, std::move(m)});
    } catch (const wire::Malformed& e) {
      return stop_for_junk(e.what());
    }
  }
  idle_deaths_ = 0;
  frames.push_back(std::move(frame));  // on to the driver as it is
  return true;
}

// The memfds of values a task stored (fibra::put in a task) that came with its request: held here
// until the driver frees them, so that the driver finds them by name. False if the request is junk.
bool SupervisedExecutor::adopt_objects(const std::string& request, std::vector<UniqueFd>& fds) {
  wire::Request r;
  try {
    r = wire::decode<wire::Request>(request);
  } catch (const wire::Malformed& e) {
    return stop_for_junk(e.what());
  }
  for (std::size_t i = 0; i < r.objects.size() && i < fds.size(); ++i) {
    const auto& o = r.objects[i];
    if (auto m = ObjectMemory::adopt(std::move(fds[i]), object_memfd_name(o.origin, o.id), o.size))
      kept_.push_back({o.id, o.origin, o.size, false, std::move(m)});
  }
  return true;
}

// Something wrote on its socket that is not a result frame (user code writing to fd 3, say): it is
// treated as a crash of the executor, in the chunk it was running. Returns false, as read() does
// for a dead executor.
bool SupervisedExecutor::stop_for_junk(const std::string& what) {
  log::warning("fibra agent pid {}: its executor {} (pid {}) sent bytes that are not results ({}); it is stopped",
               ::getpid(), index_, pid_, what);
  ::kill(pid_, SIGKILL);
  return false;
}

void SupervisedExecutor::forget(std::uint64_t chunk) {
  auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.chunk == chunk; });
  if (it != held_.end()) held_.erase(it);
}

// A result batch on the chunks it held, given by the agent or through its lane (which is closed
// now: the executor is dead): `guilty_chunk` (or, with blame_first, the first one) gets
// `guilty_status` and the failure `f`; the others are reported not run (no attempt counted).
// Empty when it held none. `held_item` says whether the guilty chunk was among them.
std::string SupervisedExecutor::report(std::uint64_t guilty_chunk, bool blame_first, wire::Status guilty_status,
                                       ItemFailure f) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> held;
  for (const auto& h : held_) held.emplace_back(h.chunk, h.attempt);
  for (const auto& h : lane().close()) {
    std::vector<wire::TaskView> tasks;
    try {
      tasks = wire::parse_tasks(h.batch);
    } catch (const wire::Malformed& e) {  // the driver wrote it: cannot happen short of a bug
      log::error(
          "fibra agent pid {}: a batch in its executor {}'s lane does not parse ({}); its chunks are not reported",
          ::getpid(), index_, e.what());
      continue;
    }
    for (std::size_t i = h.sent; i < tasks.size(); ++i)  // the first `sent` ones have their results out
      held.emplace_back(tasks[i].header.chunk, tasks[i].header.attempt);
  }
  if (held.empty()) return {};
  if (guilty_chunk != 0 && std::none_of(held.begin(), held.end(), [&](auto& h) { return h.first == guilty_chunk; }))
    f.offset = wire::unknown_item;
  std::string out = wire::begin_results(pid_);
  bool blamed = false;
  for (const auto& [chunk, attempt] : held) {
    const bool guilty = chunk == guilty_chunk || (blame_first && !blamed);
    wire::ResultHeader r{chunk, attempt, guilty ? guilty_status : wire::Status::not_run};
    wire::append_result(out, r, guilty ? wire::encode(f) : std::string());
    blamed |= guilty;
  }
  if (blamed && guilty_chunk == 0) idle_deaths_ = 0;
  return out;
}

std::optional<std::string> SupervisedExecutor::enforce_time_limit(double now, double stuck_s) {
  if (pid_ <= 0) return std::nullopt;
  const Mailbox& b = lane().mailbox();
  const std::uint64_t chunk = b.chunk.load(std::memory_order_acquire);
  const std::uint32_t item = b.item.load(std::memory_order_relaxed);
  if (chunk != watch_chunk_ || item != watch_item_) {
    watch_chunk_ = chunk;
    watch_item_ = item;
    watch_since_ = now;
    return std::nullopt;
  }
  if (chunk == 0) {
    // Work waits, but the executor is in no task (stuck starting up, say): after a long while it
    // is killed, an executor death outside any task (the read side reports it).
    // Idle, or in its pool's initializer (which may take long: a simulator to load), it is not stuck.
    if (load() == 0 || b.initializing.load(std::memory_order_relaxed) != 0) {
      watch_since_ = now;  // idle: the clock starts when work comes (the driver's lane does not say when)
    } else if (now - watch_since_ > stuck_s) {
      ::kill(pid_, SIGKILL);
      watch_since_ = now;
    }
    return std::nullopt;
  }
  // The chunk's time limit, as the executor wrote it beside the chunk (it may have come through the
  // lane); read between two readings of the chunk, so that it is that chunk's.
  const double timeout_s = b.timeout_s.load(std::memory_order_acquire);
  if (b.chunk.load(std::memory_order_acquire) != chunk || b.item.load(std::memory_order_relaxed) != item)
    return std::nullopt;  // it moved on meanwhile: the next pass watches the new one
  if (timeout_s <= 0 || now - watch_since_ < timeout_s) return std::nullopt;
  ::kill(pid_, SIGKILL);
  char text[160];
  std::snprintf(text, sizeof text, "ran for %.1f s, past its time limit of %.1f s, and its executor was killed",
                now - watch_since_, timeout_s);
  death_ = {chunk, pid_, text};
  reap(0.5);  // dead before its lane is closed and read
  std::string out = report(chunk, false, wire::Status::timed_out, ItemFailure{item, "timeout", text});
  clear_after_death(now);
  return out;
}

std::string SupervisedExecutor::report_death() {
  const int status = reap(0.5);
  const Mailbox& b = lane().mailbox();
  const std::uint64_t died_in = b.chunk.load(std::memory_order_acquire);
  const std::uint32_t item = b.item.load(std::memory_order_relaxed);
  const bool in_initializer = b.initializing.load(std::memory_order_relaxed) != 0;
  // It ran its PoolOptions::max_tasks_per_child tasks and ended between two: no crash, replaced at
  // once. (Not an initializer that happened to exit with that status: that is its crash.)
  const bool retired =
      died_in == 0 && !actor_ && !in_initializer && WIFEXITED(status) && WEXITSTATUS(status) == executor_retired_status;
  if (died_in == 0 && !retired) ++idle_deaths_;  // also paces the restarts of an executor that keeps dying
  const bool blame_first = died_in == 0 && !retired && idle_deaths_ >= idle_deaths_before_blame;
  // Killed to cancel a chunk it had finished by then: what it was in is not to blame.
  const bool cancel_missed = killed_for_ != 0 && died_in != killed_for_;
  killed_for_ = 0;
  ItemFailure f;
  f.offset = died_in != 0 ? item : wire::unknown_item;
  f.type = WIFSIGNALED(status) ? "signal" : "exit";
  f.message = death_text(status, died_in != 0, in_initializer);
  if (b.stack_overflow.load(std::memory_order_relaxed) != 0)
    f.message +=
        ": a stack overflow (the fault was at the end of the stack of the thread running the task): "
        "a recursion without end, or a large array on the stack; `ulimit -s` sets the stack's size";
  const pid_t was = pid_;
  death_ = {died_in, was, describe_exit(status)};
  std::string out = cancel_missed ? report(0, false, wire::Status::crashed, f)
                                  : report(died_in, blame_first, wire::Status::crashed, f);
  if (retired) {
    log::debug(
        "fibra agent pid {}: its executor {} (pid {}) ran its tasks (PoolOptions::max_tasks_per_child); "
        "starting another",
        ::getpid(), index_, was);
  } else if (died_in == 0 && !actor_ && !cancel_missed) {
    log::warning("fibra agent pid {}: its executor {} (pid {}) {}; starting another", ::getpid(), index_, was,
                 in_initializer ? death_text(status, false, true) : describe_exit(status) + " outside any task");
  }
  clear_after_death(mpi::now_s());
  return out;
}

// Forgets what the dead executor held and schedules its restart (a crash loop backs off a little).
void SupervisedExecutor::clear_after_death(double now) {
  blocked_delta_ -= blocked_;  // its waits ended with it
  blocked_ = 0;
  pid_ = -1;
  ready_ = false;
  sock_.reset();
  held_.clear();
  out_.clear();
  in_.reset();
  restart_at_ = now + 0.05 * std::min(idle_deaths_, 20);
}

bool SupervisedExecutor::exited() {
  if (pid_ <= 0 || reaped_) return reaped_;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
  reaped_ = true;
  reaped_status_ = status;
  return true;
}

int SupervisedExecutor::reap(double grace) {
  int status = reaped_status_;
  const double end = mpi::now_s() + grace;
  while (!reaped_) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) break;
    if (mpi::now_s() > end) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  reaped_ = true;
  reaped_status_ = status;
  out_lines_.finish();  // what it printed before it ended
  err_lines_.finish();
  return status;
}

void SupervisedExecutor::begin_stop() {
  if (pid_ <= 0) return;
  ::shutdown(sock_.get(), SHUT_WR);  // end of file: it finishes its chunk's write and exits
  lane().ring();
}

void SupervisedExecutor::stop(double grace) {
  if (pid_ <= 0) return;
  begin_stop();
  reap(grace);
  pid_ = -1;
  sock_.reset();
}

}  // namespace fibra::detail
