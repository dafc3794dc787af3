// src/calls/checkpoint.cpp: a call's checkpoint (the untyped part) and the stop on SIGTERM/SIGUSR1,
// in the driver and in tasks alike (calls.hpp); the driver's own part of a stop (pools, MPI) is
// what it registers with set_stop_teardown.
//
// The signal handler only records the signal and wakes a watcher thread. A checkpointed call sees
// the signal in its wait loop (pool.hpp), lets the chunks it handed out come back for a short grace,
// folds what it has into its checkpoint and calls exit_for_stop. When no checkpointed call is
// running, the watcher does the stop itself.
#include "fibra/detail/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "fibra/error.hpp"
#include "common/log.hpp"
#include "calls/calls.hpp"

namespace fibra::detail {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<StopTeardown> g_teardown{nullptr};
std::atomic<int> g_active_calls{0};
int g_wake_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const int saved_errno = errno;
  int none = 0;
  // Only the first signal wakes the watcher: later ones cannot fill the pipe and block here.
  if (g_stop_signal.compare_exchange_strong(none, sig)) {
    const char c = 1;
    [[maybe_unused]] auto n = ::write(g_wake_pipe[1], &c, 1);  // async-signal-safe
  }
  errno = saved_errno;
}

// Waits for a stop signal; if no checkpointed call is running (or one does not end in time), stops
// the driver itself.
void watch_for_stop() {
  char c;
  while (::read(g_wake_pipe[0], &c, 1) < 0 && errno == EINTR) {
  }
  // Well inside a batch system's usual grace (Slurm's spec default: 60 s).
  const auto give_up = std::chrono::steady_clock::now() + stop_grace + std::chrono::seconds(20);
  int idle = 0;
  while (std::chrono::steady_clock::now() < give_up && idle < 4) {
    idle = g_active_calls.load() == 0 ? idle + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Not from this thread: stopping the pools would fail the calls the user's thread waits in (and
  // MPI must not be finalized under its feet). Every checkpoint already holds what was flushed.
  exit_for_stop(idle >= 4 ? "no checkpointed call was running; the checkpoints hold what was flushed"
                          : "the checkpointed call did not stop in time; its checkpoint holds what was flushed",
                false);
}

const char* signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : "a signal";
}

// Ctrl-C is the user's stop, not the batch system's: 128 + SIGINT, as a shell reports it, and no
// requeue (status 75 would ask a batch script for one).
int exit_status_for(int sig) { return sig == SIGINT ? 128 + SIGINT : stop_exit_status; }

}  // namespace

void set_stop_teardown(StopTeardown teardown) noexcept { g_teardown.store(teardown); }

void checkpoint_opened() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_wake_pipe, O_CLOEXEC) != 0)
      throw CheckpointError(std::string("fibra: cannot create the pipe that handles SIGTERM/SIGUSR1: ") +
                            std::strerror(errno));
    std::thread(watch_for_stop).detach();
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGUSR1, &sa, nullptr);
    // Ctrl-C too, unless the program handles (or ignores) SIGINT itself: its handler stays.
    struct sigaction old {};
    if (::sigaction(SIGINT, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
      ::sigaction(SIGINT, &sa, nullptr);
  });
}

int stop_signal() noexcept { return g_stop_signal.load(std::memory_order_relaxed); }

ActiveCheckpoint::ActiveCheckpoint() { g_active_calls.fetch_add(1); }
ActiveCheckpoint::~ActiveCheckpoint() { g_active_calls.fetch_sub(1); }

void exit_for_stop(const std::string& what_was_saved, bool graceful) {
  static std::mutex once;
  once.lock();  // never unlocked: a second caller waits here until the process ends
  const int sig = stop_signal();
  const int status = exit_status_for(sig);
  log::warning("fibra: stopped by {}: {}; exiting with status {}{} (rerun the program to resume)", signal_name(sig),
               what_was_saved, status, sig == SIGINT ? "" : " so that a batch script can requeue the run");
  // What is saved is durable now; a teardown that hangs (a spawn stuck in Open MPI, say) must not
  // cost the requeue.
  std::thread([status] {
    std::this_thread::sleep_for(stop_teardown_limit);
    std::fflush(nullptr);
    std::_Exit(status);
  }).detach();
  if (!graceful) {
    wait_for_checkpoints();  // folds in progress; cut short by the limit above
    std::fflush(nullptr);
    std::_Exit(status);
  }
  if (StopTeardown teardown = g_teardown.load()) {
    teardown();
  } else {
    wait_for_checkpoints();
  }
  std::fflush(nullptr);
  std::_Exit(status);
}

void InputsDigest::add(std::string_view bytes) {
  if (pending_.empty()) {  // whole blocks straight from the caller's bytes
    while (bytes.size() >= block) {
      fp_.update(std::as_bytes(std::span(bytes.data(), block)));
      bytes.remove_prefix(block);
    }
  }
  pending_.append(bytes);
  if (pending_.size() < block) return;
  std::string_view all(pending_);
  while (all.size() >= block) {
    fp_.update(std::as_bytes(std::span(all.data(), block)));
    all.remove_prefix(block);
  }
  pending_.erase(0, pending_.size() - all.size());
}

std::string InputsDigest::hex() {
  if (!pending_.empty()) fp_.update(std::as_bytes(std::span(pending_.data(), pending_.size())));
  pending_.clear();
  return fp_.hex();
}

CallCheckpoint::~CallCheckpoint() {
  if (creating_.valid()) {  // the creation must end before the store can be dropped
    try {
      creating_.get();
    } catch (const std::exception& e) {
      log::error("{}", e.what());  // its text starts with "fibra: "
    }
  }
}

namespace {
// The folder a new checkpoint goes into must exist and be writable; a typo in it is an error, not a
// folder created silently (a rerun with the right path would not find this run's results).
void check_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw CheckpointError("fibra: cannot create checkpoint '" + path + "': the folder '" + dir.string() +
                          "' does not exist — create it first or pass another checkpoint path");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw CheckpointError("fibra: cannot create checkpoint '" + path + "': the folder '" + dir.string() +
                          "' is not writable (" + std::strerror(errno) + ") — pass another checkpoint path");
}
}  // namespace

void CallCheckpoint::open(const std::string& path, const hdf5_io::RunRecord& run, const hdf5_io::ElementType& type,
                          double flush_s) {
  if (!(flush_s > 0) || flush_s > 86400)
    throw ConfigError("fibra: MapOptions::checkpoint_flush_s must be between 0 and 86400 seconds (got " +
                      std::to_string(flush_s) + ")");
  wait_for_checkpoints();  // a call's checkpoint still being folded may be this one
  path_ = path;
  hdf5_io::StoreOptions options;
  options.flush_interval = std::chrono::milliseconds(static_cast<long long>(flush_s * 1000));
  n_inputs_ = run.n_inputs;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    store_.emplace(hdf5_io::Store::open_or_create(path, run, type, options));
    const auto info = store_->info();
    folded_at_open_ = info.journal_records == 0 && info.state == "complete";
  } else {                  // nothing is done yet: creating the file (an fsync and a rename) need not hold up the work
    check_directory(path);  // but a place it cannot be created in is said before any work starts
    // A background thread calls HDF5 while the user's may too: only with a thread-safe HDF5.
    const auto how = hdf5_io::hdf5_is_threadsafe() ? std::launch::async : std::launch::deferred;
    creating_ = std::async(how, [=] { return hdf5_io::Store::create(path, run, type, options); });
  }
  checkpoint_opened();
}

hdf5_io::Store& CallCheckpoint::store() const {
  if (!store_) store_.emplace(creating_.get());
  return *store_;
}

std::uint64_t CallCheckpoint::run_length(std::uint64_t first, std::uint64_t max) const {
  if (!store_) return std::min(max, n_inputs_ - first);  // a new checkpoint: nothing is done
  const auto done = store_->done();
  const std::uint64_t end = std::min<std::uint64_t>(done.size(), first + max);
  const auto* p = static_cast<const std::uint8_t*>(std::memchr(done.data() + first, done[first] ? 0 : 1, end - first));
  return p ? static_cast<std::uint64_t>(p - done.data()) - first : end - first;
}

void CallCheckpoint::note(const char* how) {
  if (!events_) return;
  const auto& s = store();
  events_("checkpoint", ",\"path\":" + json_quoted(path_) + ",\"how\":\"" + how + "\",\"done\":" +
                            std::to_string(s.n_done()) + ",\"of\":" + std::to_string(s.run().n_inputs));
}

void CallCheckpoint::flush_if_due() {
  if (store().flush_if_due()) note("flush");
}

void CallCheckpoint::flush() {
  store().flush();
  note("flush");
}

void CallCheckpoint::finish() {
  if (!recorded_ && folded_at_open_) return;
  store().finish();
  note("fold");
}

void CallCheckpoint::stop_and_exit() {
  std::string saved;
  try {
    auto& s = store();
    s.flush();  // durable first (cheap); the rewrite of the .h5 may take longer than the grace left
    s.finish();
    saved = std::to_string(s.n_done()) + " of " + std::to_string(s.run().n_inputs) + " results are in '" +
            s.path().string() + "'";
  } catch (const std::exception& e) {
    saved = std::string("the checkpoint could not be written in full (") + e.what() + "); it holds what was flushed";
  }
  exit_for_stop(saved);
}

namespace {
// Folding threads are detached (a process that ends without the Runtime's destructor must not
// std::terminate over a joinable thread; a fold cut short leaves a resumable checkpoint).
std::mutex g_folding_mu;
std::condition_variable g_folding_cv;
int g_folding = 0;
}  // namespace

namespace {
// Folds the journal into the .h5 file; a failure is reported, never thrown (the journal keeps
// every result, so a rerun resumes and folds).
void fold(CallCheckpoint& c) noexcept {
  try {
    c.finish();
  } catch (const std::exception& e) {
    log::error(
        "fibra: folding checkpoint '{}' into its .h5 file failed ({}); its journal holds every result, "
        "a rerun resumes from it",
        c.store().path().string(), e.what());
  }
}
}  // namespace

void finish_in_background(std::unique_ptr<CallCheckpoint> c) {
  c->flush();
  c->end_call();
  if (!hdf5_io::hdf5_is_threadsafe()) return fold(*c);  // no HDF5 from a second thread: in the caller's
  std::unique_lock lk0(g_folding_mu);                   // counted before the thread runs, released if it cannot start
  ++g_folding;
  lk0.unlock();
  try {
    std::thread([c = std::move(c)]() mutable {
      fold(*c);
      c.reset();  // releases the checkpoint's lock before anyone is told
      std::lock_guard lk(g_folding_mu);
      --g_folding;
      g_folding_cv.notify_all();
    }).detach();
  } catch (const std::system_error& e) {  // no thread: the journal holds every result; fold later
    log::error("fibra: cannot start a thread to fold a checkpoint ({}); a rerun folds it", e.what());
    std::lock_guard lk(g_folding_mu);
    --g_folding;
    g_folding_cv.notify_all();
  }
}

void wait_for_checkpoints() noexcept {
  std::unique_lock lk(g_folding_mu);
  g_folding_cv.wait(lk, [] { return g_folding == 0; });
}

}  // namespace fibra::detail
