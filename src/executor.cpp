// The executor: a plain process (no MPI) that runs user functions on the batches its agent sends.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "roles.hpp"
#include "trace.hpp"
#include "wire.hpp"

namespace fibra::detail {
namespace {

constexpr std::size_t flush_bytes = 1 << 20;
// A chunk's results must fit in one MPI message with what the frame held before (under flush_bytes).
constexpr std::size_t max_result_bytes = std::size_t(INT32_MAX) - 2 * flush_bytes;
constexpr auto flush_every = std::chrono::milliseconds(2);

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

void send_frame(int fd, const std::string& body) {
  std::uint64_t n = body.size();
  write_all(fd, &n, sizeof n);
  write_all(fd, body.data(), body.size());
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `results` is the frame buffer, kept from batch to batch so that its memory stays warm.
void run_batch(int sock, Mailbox& box, std::string_view batch, std::string& results) {
  const auto pid = static_cast<std::int64_t>(::getpid());
  results.assign(wire::begin_results(pid));
  auto last_flush = std::chrono::steady_clock::now();
  RunControl ctl;
  std::vector<ItemFailure> failures;
  std::vector<std::uint64_t> traced;  // chunks in the frame being built, for FIBRA_TRACE
  for (const auto& t : wire::parse_tasks(batch)) {
    trace::mark(trace::executor_read, t.header.chunk);
    box.item.store(0, std::memory_order_relaxed);
    box.chunk.store(t.header.chunk, std::memory_order_release);
    const FunctionEntry* fn = function_by_id(t.header.fn);
    ChunkRunner run = !fn ? nullptr : t.header.mode == CallMode::single ? fn->run_single : fn->run_tuple;
    wire::ResultHeader h{t.header.chunk, t.header.attempt, wire::Status::ok};
    const std::int64_t began = now_ns();
    if (!run) {
      h.status = wire::Status::unknown_fn;
      wire::append_result(results, h, "a function this worker does not have (id " + std::to_string(t.header.fn) +
                                          "): driver and workers must run the same binary");
    } else {
      // Results are encoded straight into the frame; a failure replaces what the chunk wrote.
      const std::size_t at = wire::open_result(results, h);
      const std::size_t body = results.size();
      ItemFailure fail;
      failures.clear();
      ctl.keep_going = t.header.keep_going;
      ctl.skip = t.header.skip;
      ctl.failures = &failures;
      const bool ran = run(t.payload, t.header.count, results, fail, box.item, ctl);
      h.run_ns = static_cast<std::uint64_t>(now_ns() - began);
      if (!ran) {
        h.status = wire::Status::raised;
        results.resize(body);
        results += wire::encode(fail);
      } else if (!failures.empty()) {
        h.status = wire::Status::partial;
        const std::string partial = wire::encode_partial(failures, std::string_view(results).substr(body));
        results.resize(body);
        results += partial;
      }
      wire::close_result(results, at, h);
      if (results.size() - at > max_result_bytes) {  // MPI could not carry it to the driver
        const std::string why = "the results of items " + std::to_string(t.header.first) + ".." +
                                std::to_string(t.header.first + t.header.count - 1) + " encode to " +
                                std::to_string(results.size() - at) +
                                " bytes, over the 2 GiB one MPI message can carry; use a smaller chunksize";
        results.resize(at);  // the result goes, and is no longer counted; its failure takes its place
        wire::set_count(results, wire::result_count(results) - 1);
        h.status = wire::Status::raised;
        wire::append_result(results, h, wire::encode(ItemFailure{0, "fibra::ConfigError", why}));
      }
    }
    box.chunk.store(0, std::memory_order_release);
    trace::mark(trace::executor_ran, t.header.chunk);
    if (trace::detail::on) traced.push_back(t.header.chunk);
    auto now = std::chrono::steady_clock::now();
    if (results.size() >= flush_bytes || now - last_flush >= flush_every) {
      send_frame(sock, results);
      for (auto id : traced) trace::mark(trace::executor_sent, id);
      traced.clear();
      results.assign(wire::begin_results(pid));  // keeps its memory: the next frame finds it warm
      last_flush = now;
    }
  }
  if (wire::result_count(results) > 0) send_frame(sock, results);
  for (auto id : traced) trace::mark(trace::executor_sent, id);
}

}  // namespace

namespace {
bool g_in_executor = false;
}  // namespace

bool in_executor() noexcept { return g_in_executor; }

[[noreturn]] void executor_main(int sock, int mailbox_fd, pid_t parent) {
  g_in_executor = true;
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
  void* m = ::mmap(nullptr, sizeof(Mailbox), PROT_READ | PROT_WRITE, MAP_SHARED, mailbox_fd, 0);
  if (m == MAP_FAILED) _exit(120);
  auto& box = *static_cast<Mailbox*>(m);
  const std::uint64_t ready = 0;  // an empty frame: "started, waiting for work"
  write_all(sock, &ready, sizeof ready);
  std::string batch, results;
  for (;;) {
    std::uint64_t n = 0;
    if (!read_all(sock, &n, sizeof n)) break;
    resize_large(batch, n);
    if (!read_all(sock, batch.data(), n)) break;
    run_batch(sock, box, batch, results);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(0);
}

}  // namespace fibra::detail
