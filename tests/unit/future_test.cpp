// fibra::Future shared by threads: copies share one result, and no copy waits forever or blocks
// another copy's ready()/wait_for() while a get() waits. The JobState is fed by hand, as the
// driver's communication thread would.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

#include "fibra/future.hpp"
#include "fibra/remote.hpp"

namespace {
long answer(long x) { return x; }
}  // namespace
FIBRA_REMOTE(answer);

namespace {

using namespace std::chrono_literals;
using fibra::detail::ChunkOutcome;
using fibra::detail::JobState;

std::shared_ptr<JobState> job() {
  const auto& fn = fibra::detail::function_by_address(reinterpret_cast<const void*>(&answer), "apply_async");
  return std::make_shared<JobState>(fn, fibra::detail::CallMode::single);
}

ChunkOutcome outcome(long v) { return ChunkOutcome{0, 1, fibra::detail::encode_value(v), {}, {}}; }

TEST(Future, CopiesWaitingInSeveralThreadsAllSeeTheResult) {
  auto j = job();
  fibra::Future<long> a(j);
  const fibra::Future<long> b = a, c = a;
  std::atomic<long> got_a{0};
  std::atomic<bool> b_woke{false};
  std::latch waiting(2);  // both threads are at their get()/wait(), not merely created
  std::thread ta([&] {
    waiting.count_down();
    got_a = a.get();
  });
  std::thread tb([&] {
    waiting.count_down();
    b.wait();
    b_woke = true;
  });
  waiting.wait();
  // While both wait: another copy answers at once instead of blocking behind them.
  const auto t = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.ready());
  EXPECT_FALSE(c.wait_for(20ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t, 1s);
  j->deliver(outcome(42));
  ta.join();
  tb.join();  // used to wait forever once a.get() had taken the only outcome
  EXPECT_EQ(got_a, 42);
  EXPECT_TRUE(b_woke);
  EXPECT_TRUE(c.ready());
  EXPECT_TRUE(c.wait_for(0ms));
  EXPECT_EQ(b.get(), 42);
  EXPECT_EQ(c.get(), 42);
}

// An allocator that counts: a vector copied allocates, a vector moved does not.
template <class T>
struct Counting {
  using value_type = T;
  static inline int allocations = 0;
  Counting() = default;
  template <class U>
  Counting(const Counting<U>&) {}
  T* allocate(std::size_t n) {
    ++allocations;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) { std::allocator<T>().deallocate(p, n); }
  template <class U>
  bool operator==(const Counting<U>&) const {
    return true;
  }
};

TEST(Future, AFutureNotKeptGivesUpItsResultAndOneWithCopiesLeftCopiesIt) {
  using V = std::vector<double, Counting<double>>;
  const V big(100'000, 2.5);
  auto deliver = [&](const std::shared_ptr<JobState>& j) {
    j->deliver(ChunkOutcome{0, 1, fibra::detail::encode_value(big), {}, {}});
  };
  auto j = job();
  fibra::Future<V> a(j);
  deliver(j);
  int before = Counting<double>::allocations;
  const V moved = std::move(a).get();
  EXPECT_EQ(moved, big);
  EXPECT_EQ(Counting<double>::allocations - before, 1) << "decoded once, then moved out, not copied";

  auto k = job();
  fibra::Future<V> b(k);
  const fibra::Future<V> kept = b;
  deliver(k);
  before = Counting<double>::allocations;
  EXPECT_EQ(std::move(b).get(), big);
  EXPECT_EQ(Counting<double>::allocations - before, 2) << "a copy of the future is left: the result is copied";
  EXPECT_EQ(kept.get(), big) << "the copy still reads the whole result";
}

TEST(Future, AnErrorReachesEveryCopy) {
  auto j = job();
  fibra::Future<long> a(j);
  const fibra::Future<long> b = a;
  std::latch waiting(1);
  std::thread t([&] {
    waiting.count_down();
    EXPECT_THROW(a.get(), fibra::WorkerLost);
  });
  waiting.wait();
  j->deliver(ChunkOutcome{0, 1, {}, std::make_exception_ptr(fibra::WorkerLost("fibra: lost")), {}});
  t.join();
  b.wait();
  EXPECT_THROW(b.get(), fibra::WorkerLost);
}

// What a future costs (issue 46): the bytes malloc hands out for a call's state and its Future,
// counted by malloc itself (mallinfo2: chunk sizes with their headers), while the call waits and
// once its result is in. A million outstanding tasks are a million of these.
std::size_t heap_bytes() { return ::mallinfo2().uordblks; }

TEST(Future, AFutureAndItsCallStateTakeUnder200BytesQueuedAndDone) {
  constexpr std::size_t n = 20'000;
  std::vector<fibra::Future<long>> fs;
  std::vector<std::shared_ptr<JobState>> pool_refs;  // what the pool holds while the call is queued
  fs.reserve(n);
  pool_refs.reserve(n);
  const std::size_t base = heap_bytes();
  for (std::size_t i = 0; i < n; ++i) {
    pool_refs.push_back(job());
    fs.emplace_back(pool_refs.back());
  }
  // (+ 16: the Future itself, in its caller's vector, as b7_tasks --held-futures counts it)
  const double queued = double(heap_bytes() - base) / double(n) + 16;
  for (std::size_t i = 0; i < n; ++i) pool_refs[i]->deliver(outcome(long(i)));
  pool_refs.clear();  // (its buffer stays: counted in neither figure)
  const double done = double(heap_bytes() - base) / double(n) + 16;
  std::printf("a future: %.0f bytes queued, %.0f done\n", queued, done);
  EXPECT_LT(queued, 200) << "bytes a queued task costs its caller (its state and its Future)";
  EXPECT_LT(done, 200) << "bytes a done, kept Future costs (its small result not read yet)";
  for (std::size_t i = 0; i < n; i += 997) EXPECT_EQ(fs[i].get(), long(i));
}

// Calls share locks and condition variables (a table of 256, chosen by address): a delivery to one
// call must wake its own waiter, whichever other waiters share its pair, and no other's into a
// false answer. 64 waiters over 256 pairs: some share one in practically every run.
TEST(Future, CallsThatShareALockSeeOnlyTheirOwnResults) {
  constexpr int calls = 1'000, waiters = 64, step = 15;
  std::vector<std::shared_ptr<JobState>> js;
  for (int i = 0; i < calls; ++i) js.push_back(job());
  std::vector<fibra::Future<long>> fs(js.begin(), js.end());
  auto waited = [&](int i) { return i % step == 3 && i / step < waiters; };
  std::vector<std::thread> ts;
  std::atomic<int> right{0}, early{0};
  std::latch waiting(waiters);
  for (int w = 0; w < waiters; ++w)
    ts.emplace_back([&, w] {
      const int mine = w * step + 3;  // delivered last of all
      waiting.count_down();
      if (fs[mine].wait_for(200ms)) ++early;  // nothing of its own came yet: every wake-up so far is another's
      if (fs[mine].wait_for(10s) && fs[mine].get() == mine) ++right;
    });
  waiting.wait();
  for (int i = 0; i < calls; ++i)
    if (!waited(i)) js[i]->deliver(outcome(i));
  std::this_thread::sleep_for(300ms);  // the waiters' 200 ms ran out meanwhile
  for (int w = 0; w < waiters; ++w) js[w * step + 3]->deliver(outcome(w * step + 3));
  for (auto& t : ts) t.join();
  EXPECT_EQ(early, 0) << "a waiter saw a result that was not its call's";
  EXPECT_EQ(right, waiters) << "a waiter was not woken by its own call's result within 10 s";
  for (int i = 0; i < calls; i += 37) EXPECT_EQ(fs[i].get(), i);
}

// Calls of one function with one policy share one description (CallKind); past the table's size,
// each keeps its own, and still its own policy.
TEST(Future, EveryCallKeepsItsOwnPolicyHoweverManyKindsThereAre) {
  using fibra::detail::CallMode;
  using fibra::detail::RetryPolicy;
  const auto& fn = fibra::detail::function_by_address(reinterpret_cast<const void*>(&answer), "apply_async");
  auto policy = [](int i) {
    RetryPolicy p;
    p.task_timeout_s = 1.0 + i;
    p.retries = std::uint32_t(i % 7);
    p.retry_exceptions = i % 3 == 0;
    p.keep_going = i % 5 == 0;
    p.need = {0.5 * (i % 4), i % 2, 100L * (i % 3)};
    return p;
  };
  auto same = [](const RetryPolicy& a, const RetryPolicy& b) {
    return a.task_timeout_s == b.task_timeout_s && a.retries == b.retries && a.retry_exceptions == b.retry_exceptions &&
           a.keep_going == b.keep_going && a.need.cpus == b.need.cpus && a.need.gpus == b.need.gpus &&
           a.need.memory_mb == b.need.memory_mb;
  };
  // Two calls of one kind share its description; calls that differ in any one field do not.
  auto a = std::make_shared<JobState>(fn, CallMode::single, policy(0));
  auto b = std::make_shared<JobState>(fn, CallMode::single, policy(0));
  EXPECT_EQ(&a->policy(), &b->policy());
  RetryPolicy p = policy(0);
  for (int field = 0; field < 7; ++field) {
    RetryPolicy q = p;
    switch (field) {
      case 0: q.task_timeout_s += 1; break;
      case 1: q.retries += 1; break;
      case 2: q.retry_exceptions = !q.retry_exceptions; break;
      case 3: q.keep_going = !q.keep_going; break;
      case 4: q.need.cpus += 1; break;
      case 5: q.need.gpus += 1; break;
      case 6: q.need.memory_mb += 1; break;
    }
    auto c = std::make_shared<JobState>(fn, CallMode::single, q);
    EXPECT_NE(&c->policy(), &a->policy()) << "field " << field;
    EXPECT_TRUE(same(c->policy(), q)) << "field " << field;
  }
  EXPECT_EQ(std::make_shared<JobState>(fn, CallMode::tuple, p)->mode(), CallMode::tuple);
  // Past the table's 4,096 kinds, each call keeps its own.
  std::vector<std::shared_ptr<JobState>> js;
  for (int i = 0; i < 5'000; ++i)
    js.push_back(std::make_shared<JobState>(fn, i % 2 ? CallMode::tuple : CallMode::single, policy(i)));
  for (int i = 0; i < 5'000; ++i) {
    EXPECT_TRUE(same(js[i]->policy(), policy(i))) << i;
    EXPECT_EQ(js[i]->mode(), i % 2 ? CallMode::tuple : CallMode::single);
    EXPECT_EQ(&js[i]->fn(), &fn);
  }
  auto named = job();
  EXPECT_EQ(named->name(), "answer");
  named->set_name("the answer");
  EXPECT_EQ(named->name(), "the answer");
}

}  // namespace

namespace {

TEST(ChunkOutcome, AResultTakenWithItsMessageIsReadFromItsPlaceThere) {
  // A message short enough to live inside its std::string (moved by copying its bytes), and a long one.
  for (const std::string result : {std::string("ok"), std::string(100000, 'r')}) {
    std::string message = "h|" + result;
    const std::string_view part = std::string_view(message).substr(2);
    ChunkOutcome o{0, 1, {}, {}, {}};
    o.take_message(std::move(message), part);
    EXPECT_EQ(o.bytes(), result) << "a message of " << result.size() + 2 << " bytes";
    ChunkOutcome whole{0, 1, {}, {}, {}};
    std::string only = result;
    whole.take_message(std::move(only), std::string_view(only));
    EXPECT_EQ(whole.bytes(), result) << "no headers: no offset kept";
    EXPECT_FALSE(whole.extra) << "an outcome with no offset makes no extra";
  }
}

}  // namespace
