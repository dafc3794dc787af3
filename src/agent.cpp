// The worker agent: an MPI process spawned by the driver. It relays task batches to its executor
// (a plain child process that runs user code), relays results back, and turns the executor's death
// into an ordinary message. It never runs user code, so user crashes never touch MPI state.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "fibra/error.hpp"
#include "mpi.hpp"
#include "roles.hpp"
#include "trace.hpp"
#include "wire.hpp"

extern char** environ;

namespace fibra::detail {
namespace {

struct Sent {
  std::uint64_t chunk;
  std::uint32_t attempt;
  std::uint32_t timeout_ms;
};

// After this many executor deaths in a row outside any chunk (at start-up, between chunks) with
// no result in between, the first waiting chunk is blamed, so a crash loop uses up its retries.
constexpr int idle_deaths_before_blame = 3;
// An executor that holds work but is in no task for this long is stuck (in start-up, say).
constexpr double executor_stuck_s = 60;

class Agent {
 public:
  Agent(MPI_Comm parent, const AgentConfig& cfg) : parent_(parent), cfg_(cfg) {
    mailbox_fd_ = ::memfd_create("fibra-mailbox", MFD_CLOEXEC);
    if (mailbox_fd_ < 0 || ::ftruncate(mailbox_fd_, sizeof(Mailbox)) != 0)
      throw Error(std::string("fibra agent: cannot create its executor mailbox: ") + std::strerror(errno));
    void* m = ::mmap(nullptr, sizeof(Mailbox), PROT_READ | PROT_WRITE, MAP_SHARED, mailbox_fd_, 0);
    if (m == MAP_FAILED) throw Error(std::string("fibra agent: mmap failed: ") + std::strerror(errno));
    box_ = new (m) Mailbox();
  }

  int run() {
    say_hello();
    start_executor();
    mpi::Napper napper;
    mpi::precise_sleeps();
    last_heard_ = mpi::now_s();
    while (!leaving_) {
      bool busy = receive_from_driver();
      busy |= write_to_executor();
      busy |= read_from_executor();
      busy |= enforce_time_limit();
      const bool sending = sends_.progress() > 0;
      const double now = mpi::now_s();
      if (now - last_sent_ > cfg_.heartbeat_s) send(wire::tag_heartbeat, {});
      if (now - last_heard_ > cfg_.driver_silence_s) {
        stop_executor();
        std::fprintf(stderr, "fibra agent pid %ld: the driver has been silent for %.0f s; exiting\n",
                     static_cast<long>(::getpid()), cfg_.driver_silence_s);
        return 3;
      }
      if (busy) napper.busy();
      else if (auto nap = napper.next(sending); nap.count() > 0) wait_a_little(nap);
      else std::this_thread::yield();  // spinning for a reply: give a core to whoever needs one
    }
    stop_executor();
    send(wire::tag_bye, {});
    sends_.drain(5.0);
    return 0;
  }

 private:
  void send(int tag, std::string data) {
    sends_.send(parent_, 0, tag, std::move(data));
    last_sent_ = mpi::now_s();
  }

  void say_hello() {
    wire::Hello h;
    h.fingerprint = registry_fingerprint();
    h.functions = registry_size();
    h.pid = ::getpid();
    h.host = host_name();
    send(wire::tag_hello, wire::encode(h));
  }

  bool receive_from_driver() {
    bool got = false;
    mpi::Message m;
    while (!leaving_ && mpi::try_recv(parent_, m)) {
      got |= m.tag != wire::tag_heartbeat;  // a heartbeat is no reason to stay awake
      last_heard_ = mpi::now_s();
      if (m.tag == wire::tag_tasks) {
        if (sent_.empty()) watch_since_ = mpi::now_s();  // the stuck-executor clock starts with work
        for (const auto& t : wire::parse_tasks(m.data)) {
          sent_.push_back({t.header.chunk, t.header.attempt, t.header.timeout_ms});
          trace::mark(trace::agent_received, t.header.chunk);
        }
        to_exec_.push_back({m.data.size(), std::move(m.data)});
      } else if (m.tag == wire::tag_shutdown) {
        leaving_ = true;
      }
    }
    return got;
  }

  // Writes batches to the executor, each framed by its length, straight from the MPI message.
  bool write_to_executor() {
    bool wrote = false;
    while (!to_exec_.empty()) {
      Outgoing& o = to_exec_.front();
      iovec v[2];
      int n = 0;
      if (o.done < sizeof o.length) v[n++] = {reinterpret_cast<char*>(&o.length) + o.done, sizeof o.length - o.done};
      const std::size_t body_done = o.done > sizeof o.length ? o.done - sizeof o.length : 0;
      v[n++] = {o.body.data() + body_done, o.body.size() - body_done};
      msghdr mh{};
      mh.msg_iov = v;
      mh.msg_iovlen = static_cast<std::size_t>(n);
      ssize_t k = ::sendmsg(sock_, &mh, MSG_NOSIGNAL);
      if (k <= 0) break;  // full, or the executor died: the read side will tell
      wrote = true;
      o.done += static_cast<std::size_t>(k);
      if (o.done < sizeof o.length + o.body.size()) break;
      to_exec_.pop_front();
      if (trace::detail::on && to_exec_.empty())
        for (const auto& s : sent_) trace::mark(trace::agent_forwarded, s.chunk);
    }
    return wrote;
  }

  // Reads result frames: each one's length, then the frame straight into a buffer of its own,
  // which goes on to the driver as it is.
  bool read_from_executor() {
    bool got = false;
    for (;;) {
      char* dst;
      std::size_t want;
      if (from_len_done_ < sizeof from_len_) {
        dst = reinterpret_cast<char*>(&from_len_) + from_len_done_;
        want = sizeof from_len_ - from_len_done_;
      } else {
        dst = from_exec_.data() + from_done_;
        want = from_exec_.size() - from_done_;
      }
      ssize_t k = want ? ::read(sock_, dst, want) : 0;
      if (want && k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (want && k < 0 && errno == EINTR) continue;
      if (want && k <= 0) {
        executor_died();  // EOF or error: the executor is gone
        return true;
      }
      got = true;
      if (from_len_done_ < sizeof from_len_) {
        from_len_done_ += static_cast<std::size_t>(k);
        if (from_len_done_ < sizeof from_len_) continue;
        std::string().swap(from_exec_);
        reserve_large(from_exec_, from_len_);
        from_exec_.resize(from_len_);
        from_done_ = 0;
        continue;
      }
      from_done_ += static_cast<std::size_t>(k);
      if (from_done_ == from_exec_.size()) {
        forward_results(std::move(from_exec_));
        from_exec_.clear();
        from_len_done_ = 0;
      }
    }
    return got;
  }

  // Sends one result frame to the driver.
  void forward_results(std::string frame) {
    std::vector<std::uint64_t> traced;
    for (const auto& r : wire::parse_results(frame).results) {
      forget(r.header.chunk);
      trace::mark(trace::agent_read, r.header.chunk);
      if (trace::detail::on) traced.push_back(r.header.chunk);
    }
    idle_deaths_ = 0;
    send(wire::tag_results, std::move(frame));
    for (auto id : traced) trace::mark(trace::agent_sent, id);
  }

  void forget(std::uint64_t chunk) {
    for (auto it = sent_.begin(); it != sent_.end(); ++it)
      if (it->chunk == chunk) {
        sent_.erase(it);
        return;
      }
  }

  // Kills the executor when the item it is on has run past its chunk's time limit. The executor
  // pays nothing for this: the agent watches the item cursor in the mailbox change.
  bool enforce_time_limit() {
    const std::uint64_t chunk = box_->chunk.load(std::memory_order_acquire);
    const std::uint32_t item = box_->item.load(std::memory_order_relaxed);
    const double now = mpi::now_s();
    if (chunk != watch_chunk_ || item != watch_item_) {
      watch_chunk_ = chunk;
      watch_item_ = item;
      watch_since_ = now;
      return false;
    }
    if (chunk == 0) {
      // Work waits, but the executor is in no task (stuck starting up, say): after a long while it
      // is killed, an executor death outside any task.
      if (!sent_.empty() && now - watch_since_ > executor_stuck_s) {
        ::kill(exec_pid_, SIGKILL);
        watch_since_ = now;
      }
      return false;
    }
    const Sent* s = find_sent(chunk);
    if (!s || s->timeout_ms == 0 || now - watch_since_ < s->timeout_ms / 1000.0) return false;
    ::kill(exec_pid_, SIGKILL);
    const double ran = now - watch_since_;
    std::string out = wire::begin_results(exec_pid_);
    for (const auto& t : sent_) {
      const bool guilty = t.chunk == chunk;
      wire::ResultHeader h{t.chunk, t.attempt, guilty ? wire::Status::timed_out : wire::Status::not_run};
      ItemFailure f{item, "timeout", ""};
      char text[160];
      std::snprintf(text, sizeof text, "ran for %.1f s, past its time limit of %.1f s, and its executor was killed",
                    ran, t.timeout_ms / 1000.0);
      f.message = text;
      wire::append_result(out, h, guilty ? wire::encode_failure(f) : std::string());
    }
    reap(0.5);
    restart_after_death(std::move(out));
    return true;
  }

  const Sent* find_sent(std::uint64_t chunk) const {
    for (const auto& s : sent_)
      if (s.chunk == chunk) return &s;
    return nullptr;
  }

  // Reports the chunks the dead executor held: the one it died in as crashed (with the item it was
  // on), the others as not run; then starts a fresh executor.
  void executor_died() {
    const int status = reap(0.5);
    const std::uint64_t died_in = box_->chunk.load(std::memory_order_acquire);
    const std::uint32_t item = box_->item.load(std::memory_order_relaxed);
    if (died_in == 0) ++idle_deaths_;  // also paces the restarts of an executor that keeps dying
    const bool blame_first = died_in == 0 && idle_deaths_ >= idle_deaths_before_blame;
    std::string out = wire::begin_results(exec_pid_);
    bool blamed = false;
    for (const auto& s : sent_) {
      const bool guilty = died_in == s.chunk || (blame_first && !blamed);
      wire::ResultHeader h{s.chunk, s.attempt, guilty ? wire::Status::crashed : wire::Status::not_run};
      ItemFailure f;
      f.offset = died_in == s.chunk ? item : wire::unknown_item;
      f.type = WIFSIGNALED(status) ? "signal" : "exit";
      f.message = describe_exit(status) + (died_in == s.chunk ? "" : " outside any task, again and again");
      wire::append_result(out, h, guilty ? wire::encode_failure(f) : std::string());
      blamed |= guilty;
    }
    if (blamed && died_in == 0) idle_deaths_ = 0;
    if (died_in == 0) {
      std::fprintf(stderr, "fibra agent pid %ld: its executor (pid %ld) %s outside any task; starting another\n",
                   static_cast<long>(::getpid()), static_cast<long>(exec_pid_), describe_exit(status).c_str());
    }
    restart_after_death(std::move(out));
  }

  // Sends the report on the chunks the dead executor held, forgets them, starts a new executor.
  void restart_after_death(std::string report) {
    sent_.clear();
    to_exec_.clear();
    from_exec_.clear();
    from_len_done_ = 0;
    from_done_ = 0;
    if (report.size() > sizeof(std::uint32_t) + sizeof(std::int64_t)) send(wire::tag_results, std::move(report));
    if (idle_deaths_ > 0) {  // a crash loop at start-up must not spin: back off a little
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * std::min(idle_deaths_, 20)));
    }
    start_executor();
    watch_chunk_ = 0;
    watch_since_ = mpi::now_s();
  }

  // Waits up to `grace` seconds for the executor to exit, then kills it; returns its wait status.
  int reap(double grace) {
    int status = 0;
    const double end = mpi::now_s() + grace;
    for (;;) {
      pid_t r = ::waitpid(exec_pid_, &status, WNOHANG);
      if (r == exec_pid_ || (r < 0 && errno != EINTR)) break;
      if (mpi::now_s() > end) {
        ::kill(exec_pid_, SIGKILL);
        ::waitpid(exec_pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ::close(sock_);
    sock_ = -1;
    return status;
  }

  void start_executor() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw Error(std::string("fibra agent: socketpair failed: ") + std::strerror(errno));
    int big = 4 << 20;
    for (int fd : sv) {
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    }
    box_->chunk = 0;
    box_->attempt = 0;
    box_->item = 0;
    box_->started_ns = 0;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    posix_spawn_file_actions_adddup2(&fa, mailbox_fd_, 4);
    // The agent's MPI and PMIx sockets must not live on in the executor.
    posix_spawn_file_actions_addclosefrom_np(&fa, 5);
    const std::string exe = self_exe();
    const std::string parent = std::to_string(::getpid());
    char* argv[] = {const_cast<char*>(exe.c_str()), const_cast<char*>(executor_flag), const_cast<char*>("3"),
                    const_cast<char*>("4"), const_cast<char*>(parent.c_str()), nullptr};
    pid_t pid = 0;
    int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    if (rc != 0) throw Error("fibra agent: cannot start an executor (" + exe + "): " + std::strerror(rc));
    exec_pid_ = pid;
    sock_ = sv[0];
    ::fcntl(sock_, F_SETFL, ::fcntl(sock_, F_GETFL) | O_NONBLOCK);
  }

  void stop_executor() {
    if (sock_ < 0) return;
    ::shutdown(sock_, SHUT_WR);  // EOF: the executor finishes its chunk's write and exits
    reap(2.0);
  }

  void wait_a_little(std::chrono::microseconds nap) {
    timespec ts{0, static_cast<long>(nap.count()) * 1000};
    if (sent_.empty()) {
      ::nanosleep(&ts, nullptr);
      return;
    }
    pollfd p{sock_, static_cast<short>(POLLIN | (to_exec_.empty() ? 0 : POLLOUT)), 0};
    ::ppoll(&p, 1, &ts, nullptr);
  }

  MPI_Comm parent_;
  AgentConfig cfg_;
  mpi::SendQueue sends_;
  int mailbox_fd_ = -1;
  Mailbox* box_ = nullptr;
  pid_t exec_pid_ = -1;
  int sock_ = -1;
  std::deque<Sent> sent_;  // chunks given to the executor, in order, without a result yet
  struct Outgoing {
    std::uint64_t length;  // the frame's length prefix
    std::string body;      // the batch as it came from the driver
    std::size_t done = 0;  // bytes of prefix and body written
  };
  std::deque<Outgoing> to_exec_;
  std::uint64_t from_len_ = 0;  // the result frame being read: its length prefix, then its bytes
  std::size_t from_len_done_ = 0;
  std::string from_exec_;
  std::size_t from_done_ = 0;
  double last_heard_ = 0, last_sent_ = 0;
  bool leaving_ = false;
  int idle_deaths_ = 0;  // executor deaths outside a chunk since the last result
  std::uint64_t watch_chunk_ = 0;  // the time limit's view of what the executor is on, and since when
  std::uint32_t watch_item_ = 0;
  double watch_since_ = 0;
};

}  // namespace

int agent_main(MPI_Comm parent, const AgentConfig& cfg) {
  ::signal(SIGPIPE, SIG_IGN);
  // mpirun forwards SIGUSR1/SIGUSR2 to every process it started; they are meant for the driver
  // (checkpoint and requeue), whose agents must not die of them.
  ::signal(SIGUSR1, SIG_IGN);
  ::signal(SIGUSR2, SIG_IGN);
  try {
    Agent a(parent, cfg);
    return a.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fibra agent pid %ld on %s: %s\n", static_cast<long>(::getpid()), host_name().c_str(),
                 e.what());
    return 2;
  }
}

}  // namespace fibra::detail
