// src/calls/job.cpp: JobState (a call's outcomes, handed from the thread that receives them to the
// thread that waits for them) and Progress, in the driver and in tasks alike (calls.hpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "common/trace.hpp"
#include "common/env.hpp"
#include "calls/calls.hpp"

namespace fibra::detail {

// A core without worker processes of its own (a test's) hosts no actors.
std::uint64_t PoolCore::start_actor(const FunctionEntry&, std::string, ActorSettings s) {
  throw ConfigError("fibra: this pool cannot host actors (" + s.class_name + ")");
}

void PoolCore::adapt(int, int, const AdaptOptions&) {
  throw ConfigError("fibra: Pool::adapt works on the driver's pools only, not inside a task");
}

std::uint64_t PoolCore::find_actor(const std::string& name, const std::string&, bool) {
  throw ConfigError("fibra: this pool cannot find actors by name (\"" + name +
                    "\"): find named actors in the driver, and pass their handles to tasks");
}
const FunctionEntry& actor_find_entry() {
  static const FunctionEntry e{"Actor::get", 0, nullptr, {}, nullptr, nullptr, {}};
  return e;
}

const FunctionEntry& channel_entry() {
  static const FunctionEntry e{"a queue's call", 0, nullptr, {}, nullptr, nullptr, {}};
  return e;
}

void PoolCore::call_actor(std::uint64_t, const std::shared_ptr<JobState>& job, std::string) {
  throw ConfigError("fibra: this pool cannot host actors (" + job->name() + ")");
}

void ChunkOutcome::unshare() {
  if (!keep) return;
  std::string copy;
  try {
    append_large(copy, shared.data(), shared.size());  // split and without zero fill when large
  } catch (const std::bad_alloc&) {
    return;  // no memory for a copy: the result stays where it is, and is read from there
  }
  payload = std::move(copy);
  offset = 0;
  shared = {};
  keep.reset();
}

void JobState::unshare_held() {
  std::vector<std::pair<std::uint64_t, std::function<void()>>> callbacks;
  {
    std::lock_guard lk(mu_);
    if (uncounted_ == 0) return;
    for (std::size_t i = done_head_; i < done_.size(); ++i) done_[i].unshare();
    if (delivered_.fetch_add(std::exchange(uncounted_, 0), std::memory_order_release) == 0)
      callbacks.swap(on_delivered_);
  }
  cv_.notify_all();
  for (auto& [token, f] : callbacks) f();
}

void JobState::deliver(ChunkOutcome o) {
  std::vector<std::pair<std::uint64_t, std::function<void()>>> callbacks;
  std::vector<ObjectArg> done_with;  // the task's stored arguments: let go outside mu_ (a free tells pools)
  {
    std::lock_guard lk(mu_);
    done_with.swap(objects_);
    has_objects_.store(false, std::memory_order_release);
    // Nobody waits to take it: the deliverer copies it out of its lane's slot next, and counts it
    // then (unshare_held). A stored object (put's, a kept result) is not a slot: it stays there.
    const bool later = o.keep && !object_ && waiters_.load(std::memory_order_acquire) == 0;
    done_.push_back(std::move(o));
    if (later) {
      ++uncounted_;
      return;
    }
    if (delivered_.fetch_add(1, std::memory_order_release) == 0) callbacks.swap(on_delivered_);
  }
  cv_.notify_all();
  for (auto& [token, f] : callbacks) f();
}

std::uint64_t JobState::on_delivered(std::function<void()> f) {
  {
    std::lock_guard lk(mu_);
    if (delivered_.load(std::memory_order_acquire) == 0) {
      const std::uint64_t token = next_token_++;
      on_delivered_.emplace_back(token, std::move(f));
      return token;
    }
  }
  f();
  return 0;
}

void JobState::forget_on_delivered(std::uint64_t token) {
  if (token == 0) return;
  std::lock_guard lk(mu_);
  std::erase_if(on_delivered_, [&](const auto& c) { return c.first == token; });
}

namespace {
std::atomic<WaitHook> g_wait_hook{nullptr};
}  // namespace

void set_wait_hook(WaitHook hook) noexcept { g_wait_hook.store(hook); }

int wait_with_hook(const std::function<bool()>& ready, std::optional<std::chrono::nanoseconds> timeout) {
  const WaitHook hook = g_wait_hook.load(std::memory_order_relaxed);
  return hook ? hook(ready, timeout) : -1;
}

template <class Pred>
bool JobState::wait_until(Pred pred, std::optional<std::chrono::nanoseconds> timeout) {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { n.fetch_sub(1, std::memory_order_acq_rel); }
  } leave{waiters_};
  if (const WaitHook hook = g_wait_hook.load(std::memory_order_relaxed)) {
    const int r = hook([&] { return pred(); }, timeout);
    if (r >= 0) return r == 1;
  }
  // A short spin first: a fast round trip should not pay for a sleep and a wake-up.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  while (std::chrono::steady_clock::now() < spin_until) {
    if (pred()) return true;
    std::this_thread::yield();
  }
  std::unique_lock lk(mu_);
  if (!timeout) {
    cv_.wait(lk, pred);
    return true;
  }
  return cv_.wait_for(lk, *timeout, pred);
}

bool JobState::wait_ready(std::optional<std::chrono::nanoseconds> timeout) {
  return wait_until([&] { return ready(); }, timeout);
}

bool JobState::wait_delivered(std::uint64_t n, std::optional<std::chrono::nanoseconds> timeout) {
  return wait_until([&] { return delivered() >= n; }, timeout);
}

bool JobState::wait_next(ChunkOutcome& out, std::optional<std::chrono::nanoseconds> timeout) {
  if (!wait_ready(timeout)) return false;
  std::lock_guard lk(mu_);
  out = std::move(done_[done_head_++]);
  if (done_head_ == done_.size()) {  // all taken: the vector starts again (its memory kept)
    done_.clear();
    done_head_ = 0;
  }
  taken_.fetch_add(1, std::memory_order_release);
  trace::mark(trace::taken, 0);
  return true;
}

bool stderr_is_terminal() {
  static const bool terminal = ::isatty(STDERR_FILENO) == 1;
  return terminal;
}

bool progress_wanted() {
  if (const char* v = env::raw("FIBRA_PROGRESS")) return std::strcmp(v, "0") != 0 && *v;  // set but empty: off
  return stderr_is_terminal();
}

std::atomic<int>& maps_drawing_progress() {
  static std::atomic<int> n{0};
  return n;
}

namespace {

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) / 60 % 60);
  return buf;
}
}  // namespace

Progress::Progress(std::string label, std::optional<std::uint64_t> total, std::optional<bool> enabled)
    : label_(std::move(label)),
      total_(total),
      on_(enabled.value_or(progress_wanted())),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  if (on_) maps_drawing_progress().fetch_add(1);
}

Progress::~Progress() {
  if (on_ && !finished_ && done_ > 0 && stderr_is_terminal()) std::fputc('\n', stderr);
  if (on_) maps_drawing_progress().fetch_sub(1);
}

void Progress::advance(std::uint64_t items) {
  done_ += items;
  if (!on_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ >= std::chrono::milliseconds(stderr_is_terminal() ? 500 : 10'000)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::finish() {
  if (!on_ || finished_) return;
  finished_ = true;
  // Short calls finish silently: progress is for long work.
  if (std::chrono::steady_clock::now() - start_ >= std::chrono::milliseconds(500)) draw(true);
}

void Progress::draw(bool final) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = secs > 0 ? double(done_) / secs : 0;
  char line[256];
  if (total_ && *total_ > 0) {
    const double left = rate > 0 ? double(*total_ - std::min(done_, *total_)) / rate : 0;
    std::snprintf(line, sizeof line, "\r[fibra] %s: %llu/%llu (%.0f%%) %.0f items/s %s %s", label_.c_str(),
                  (unsigned long long)done_, (unsigned long long)*total_, 100.0 * double(done_) / double(*total_), rate,
                  final ? "in" : "ETA", fmt_duration(final ? secs : left).c_str());
  } else {
    std::snprintf(line, sizeof line, "\r[fibra] %s: %llu done %.0f items/s %s", label_.c_str(),
                  (unsigned long long)done_, rate, fmt_duration(secs).c_str());
  }
  const bool terminal = stderr_is_terminal();
  std::string text = terminal ? line : line + 1;  // a whole line, without its "\r", into a file
  if (final || !terminal) text += '\n';
  std::fputs(text.c_str(), stderr);  // one write: another thread's line cannot land inside it
  std::fflush(stderr);
}

}  // namespace fibra::detail
