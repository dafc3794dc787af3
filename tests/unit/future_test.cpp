// fibra::Future shared by threads: copies share one result, and no copy waits forever or blocks
// another copy's ready()/wait_for() while a get() waits. The JobState is fed by hand, as the
// driver's communication thread would.
#include <gtest/gtest.h>

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

}  // namespace
