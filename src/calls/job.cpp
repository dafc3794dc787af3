// src/calls/job.cpp: JobState (a call's outcomes, handed from the thread that receives them to the
// thread that waits for them) and Progress, in the driver and in tasks alike (calls.hpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <bit>
#include <cstring>
#include <thread>
#include <unordered_map>

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
  if (!kept()) return;
  std::string copy;
  try {
    const std::string_view view = extra.get()->shared;
    append_large(copy, view.data(), view.size());  // split and without zero fill when large
  } catch (const std::bad_alloc&) {
    return;  // no memory for a copy: the result stays where it is, and is read from there
  }
  payload = std::move(copy);
  auto& d = extra.data();
  d.keep.reset();
  d.shared = {};
  d.offset = 0;
  if (d.item_errors.empty()) extra.reset();
}

// ---- JobState ----

struct JobState::Node {
  ChunkOutcome outcome;
  Node* next = nullptr;
};
static_assert(sizeof(ChunkOutcome) <= 64, "a done task's outcome: keep it small (issue 46)");
// 56 bytes, and 16 of shared_ptr's count: 80 with malloc's header, the smallest size class past 64.
static_assert(sizeof(JobState) <= 56, "a Future's state: keep it small (issue 46)");

namespace {

// Calls share their kinds: a JobState points at one. Never freed (not even at exit: a call's state
// may outlive static destruction); past `max_kinds` distinct kinds (a program that makes a new time
// limit per call) a call keeps its kind in its own Extras.
constexpr std::size_t max_kinds = 4096;

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

bool same_kind(const CallKind& k, const FunctionEntry& fn, CallMode mode, const RetryPolicy& p) {
  const RetryPolicy& q = k.policy;
  return k.fn == &fn && k.mode == mode && q.retries == p.retries && q.retry_exceptions == p.retry_exceptions &&
         same_bits(q.task_timeout_s, p.task_timeout_s) && q.keep_going == p.keep_going &&
         same_bits(q.need.cpus, p.need.cpus) && q.need.gpus == p.need.gpus && q.need.memory_mb == p.need.memory_mb;
}

const CallKind* shared_kind(const FunctionEntry& fn, CallMode mode, const RetryPolicy& p) {
  thread_local const CallKind* last = nullptr;  // most calls in a row are of one kind
  if (last && same_kind(*last, fn, mode, p)) return last;
  static std::mutex& mu = *new std::mutex;
  static auto& kinds = *new std::unordered_multimap<const FunctionEntry*, std::unique_ptr<CallKind>>;
  std::lock_guard lk(mu);
  const auto [from, to] = kinds.equal_range(&fn);
  for (auto it = from; it != to; ++it)
    if (same_kind(*it->second, fn, mode, p)) return last = it->second.get();
  if (kinds.size() >= max_kinds) return nullptr;
  auto k = std::make_unique<CallKind>(CallKind{&fn, mode, p});
  last = k.get();
  kinds.emplace(&fn, std::move(k));
  return last;
}

// The locks and condition variables of calls: a call uses the pair its address picks. Waiters
// check their own call's state, so a wake-up meant for another call sharing the pair costs a check.
struct alignas(64) WaitSlot {
  std::mutex mu;
  std::condition_variable cv;
};
constexpr std::size_t wait_slots = 256;
WaitSlot& wait_slot(const void* job) {
  // Never destroyed: a condition variable's destructor waits for its waiters, and a thread may
  // still wait in a Future::get() when the program returns from main.
  static WaitSlot* const slots = new WaitSlot[wait_slots];
  const auto a = reinterpret_cast<std::uintptr_t>(job) >> 6;
  return slots[(a ^ (a >> 8) ^ (a >> 16)) % wait_slots];
}

}  // namespace

JobState::JobState(const FunctionEntry& fn, CallMode mode, RetryPolicy policy) : kind_(shared_kind(fn, mode, policy)) {
  if (!kind_) kind_ = (extras().kind = std::make_unique<CallKind>(CallKind{&fn, mode, policy})).get();
}

JobState::~JobState() {
  if (tail_) {
    Node* n = tail_->next;
    tail_->next = nullptr;
    while (n) delete std::exchange(n, n->next);
  }
  delete extras_.load(std::memory_order_acquire);
  delete settled_.load(std::memory_order_acquire);
}

std::mutex& JobState::mu() const { return wait_slot(this).mu; }
std::condition_variable& JobState::cv() const { return wait_slot(this).cv; }

JobState::Extras& JobState::extras() {
  Extras* e = extras_.load(std::memory_order_acquire);
  if (e) return *e;
  auto made = std::make_unique<Extras>();
  if (extras_.compare_exchange_strong(e, made.get(), std::memory_order_acq_rel)) return *made.release();
  return *e;  // another thread made it first
}

std::vector<ObjectArg> JobState::objects() const {
  if (!has_objects()) return {};
  std::lock_guard lk(mu());
  return extras_.load(std::memory_order_acquire)->objects;  // (objects_bit: made)
}

void JobState::set_objects(std::vector<ObjectArg> objects) {
  if (objects.empty()) return;
  Extras& e = extras();
  std::lock_guard lk(mu());
  if (delivered_.load(std::memory_order_relaxed) > 0) return;  // cancelled meanwhile: held by nothing
  e.objects = std::move(objects);
  flags_.fetch_or(objects_bit, std::memory_order_release);
}

void JobState::unshare_held() {
  std::vector<std::pair<std::uint64_t, std::function<void()>>> callbacks;
  {
    std::lock_guard lk(mu());
    if (uncounted_ == 0) return;
    if (tail_) {
      Node* n = tail_;
      do {
        n = n->next;
        n->outcome.unshare();
      } while (n != tail_);
    }
    if (delivered_.fetch_add(std::exchange(uncounted_, 0), std::memory_order_release) == 0)
      if (Extras* e = extras_.load(std::memory_order_acquire)) callbacks.swap(e->on_delivered);
  }
  cv().notify_all();
  for (auto& [token, f] : callbacks) f();
}

void JobState::deliver(ChunkOutcome o) {
  std::vector<std::pair<std::uint64_t, std::function<void()>>> callbacks;
  std::vector<ObjectArg> done_with;  // the task's stored arguments: let go outside the lock (a free tells pools)
  auto node = std::make_unique<Node>(Node{std::move(o)});
  {
    std::lock_guard lk(mu());
    Extras* e = extras_.load(std::memory_order_acquire);
    if (e) done_with.swap(e->objects);
    flags_.fetch_and(std::uint8_t(~objects_bit), std::memory_order_release);
    // Nobody waits to take it: the deliverer copies it out of its lane's slot next, and counts it
    // then (unshare_held). A stored object (put's, a kept result) is not a slot: it stays there.
    const bool later = node->outcome.kept() && !(e && e->object) && waiters_.load(std::memory_order_acquire) == 0 &&
                       uncounted_ < UINT8_MAX;
    Node* n = node.release();
    n->next = tail_ ? std::exchange(tail_->next, n) : n;
    tail_ = n;
    if (later) {
      ++uncounted_;
      return;
    }
    if (delivered_.fetch_add(1, std::memory_order_release) == 0 && e) callbacks.swap(e->on_delivered);
  }
  cv().notify_all();
  for (auto& [token, f] : callbacks) f();
}

std::uint64_t JobState::on_delivered(std::function<void()> f) {
  if (delivered_.load(std::memory_order_acquire) == 0) {
    Extras& e = extras();
    std::lock_guard lk(mu());
    if (delivered_.load(std::memory_order_acquire) == 0) {
      const std::uint64_t token = e.next_token++;
      e.on_delivered.emplace_back(token, std::move(f));
      return token;
    }
  }
  f();
  return 0;
}

void JobState::forget_on_delivered(std::uint64_t token) {
  if (token == 0) return;
  Extras* e = extras_.load(std::memory_order_acquire);
  if (!e) return;
  std::lock_guard lk(mu());
  std::erase_if(e->on_delivered, [&](const auto& c) { return c.first == token; });
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
    std::atomic<std::uint16_t>& n;
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
  std::unique_lock lk(mu());
  if (!timeout) {
    cv().wait(lk, pred);
    return true;
  }
  return cv().wait_for(lk, *timeout, pred);
}

bool JobState::wait_ready(std::optional<std::chrono::nanoseconds> timeout) {
  return wait_until([&] { return ready(); }, timeout);
}

bool JobState::wait_delivered(std::uint64_t n, std::optional<std::chrono::nanoseconds> timeout) {
  return wait_until([&] { return delivered() >= n; }, timeout);
}

bool JobState::wait_next(ChunkOutcome& out, std::optional<std::chrono::nanoseconds> timeout) {
  const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout : std::chrono::steady_clock::time_point{};
  std::unique_ptr<Node> oldest;
  for (;;) {
    const auto left =
        timeout ? std::optional(std::max(std::chrono::nanoseconds(0), deadline - std::chrono::steady_clock::now()))
                : std::nullopt;
    if (!wait_ready(left)) return false;
    std::lock_guard lk(mu());
    if (!tail_) continue;  // another thread took it between the two (ready() reads without the lock)
    oldest.reset(tail_->next);
    if (oldest.get() == tail_)
      tail_ = nullptr;
    else
      tail_->next = oldest->next;
    out = std::move(oldest->outcome);
    taken_.fetch_add(1, std::memory_order_release);
    break;
  }
  trace::mark(trace::taken, 0);
  return true;
}

JobState::Settled& JobState::settle(std::unique_ptr<Settled> box, void (*fill)(Settled&, ChunkOutcome&) noexcept) {
  for (;;) {
    if (Settled* s = settled_.load(std::memory_order_acquire)) return *s;
    wait_delivered(1, std::nullopt);
    std::uint8_t f = flags_.load(std::memory_order_acquire);
    if (!(f & (settling_bit | settled_bit))) {
      if (!flags_.compare_exchange_weak(f, f | settling_bit, std::memory_order_acq_rel)) continue;
      ChunkOutcome o;
      wait_next(o);  // delivered: does not wait
      fill(*box, o);
      Settled* s = box.release();
      settled_.store(s, std::memory_order_release);
      flags_.fetch_or(settled_bit, std::memory_order_release);
      flags_.notify_all();
      return *s;
    }
    if (!(f & settled_bit)) flags_.wait(f, std::memory_order_acquire);  // another thread decodes it
  }
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
