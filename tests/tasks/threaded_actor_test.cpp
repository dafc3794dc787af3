// Actors whose calls run at once (issue 28, item 12: ActorOptions::max_concurrency, Ray's threaded
// actors): calls meet inside the actor, never more than its concurrency at a time; none is lost or
// run twice; a death fails the calls it held and a restart takes the later ones; a stored object
// reaches calls running side by side. Expected values come from the test (counts, closed forms).
// Every wait on another process is bounded and names what did not arrive (tests/common/bounded.hpp).
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"
#include "../common/errors.hpp"

using namespace std::chrono_literals;
using fibra_test::error_of;
using fibra_test::get_within;

namespace {
constexpr auto bound = 60s;

}  // namespace

// meet(n, ms): waits until n calls are inside meet together, or ms pass, and returns the most it
// saw inside at once. add(d): a running total under a lock.
class Gate {
 public:
  long meet(long n, long ms) {
    std::unique_lock lk(mu_);
    ++inside_;
    most_ = std::max(most_, inside_);
    cv_.notify_all();
    cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return most_ >= n; });
    --inside_;
    return most_;
  }
  long add(long d) {
    std::lock_guard lk(mu_);
    return total_ += d;
  }
  long sum(std::vector<long> v) { return std::accumulate(v.begin(), v.end(), 0L); }
  long nap(long ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ms;
  }
  long abort_now() { std::abort(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  long inside_ = 0;
  long most_ = 0;
  long total_ = 0;
};
FIBRA_ACTOR(Gate);
FIBRA_ACTOR_METHOD(Gate, meet);
FIBRA_ACTOR_METHOD(Gate, add);
FIBRA_ACTOR_METHOD(Gate, sum);
FIBRA_ACTOR_METHOD(Gate, nap);
FIBRA_ACTOR_METHOD(Gate, abort_now);

// Four calls made back to back, right after the start, are inside the actor together (one at a
// time, each would see only itself and wait its 5 s out: 1, not 4).
TEST(ThreadedActors, CallsRunAtOnceUpToTheActorsConcurrency) {
  fibra::Pool pool(2);
  auto gate = fibra::Actor<Gate>::start({.max_concurrency = 4, .pool = &pool});
  std::vector<fibra::Future<long>> met;
  for (int i = 0; i < 4; ++i) met.push_back(gate.call(&Gate::meet, 4L, 5000L));
  for (auto& f : met) EXPECT_EQ(get_within(f, bound, "Gate::meet(4)"), 4);

  // Eight calls that wait for 5 inside: never more than 4 at once (two rounds of 1 s).
  auto more = fibra::Actor<Gate>::start({.max_concurrency = 4, .pool = &pool});
  std::vector<fibra::Future<long>> capped;
  for (int i = 0; i < 8; ++i) capped.push_back(more.call(&Gate::meet, 5L, 1000L));
  for (auto& f : capped) EXPECT_EQ(get_within(f, bound, "Gate::meet(5) on 4 threads"), 4);
}

// 300 calls of add(1) on 8 threads: each runs once, so their results are 1..300, each once.
TEST(ThreadedActors, NoCallIsLostOrRunTwice) {
  fibra::Pool pool(2);
  auto gate = fibra::Actor<Gate>::start({.max_concurrency = 8, .pool = &pool});
  std::vector<fibra::Future<long>> sums;
  for (int i = 0; i < 300; ++i) sums.push_back(gate.call(&Gate::add, 1L));
  std::vector<long> got;
  for (auto& f : sums) got.push_back(get_within(f, bound, "Gate::add(1)"));
  std::sort(got.begin(), got.end());
  std::vector<long> want(300);
  std::iota(want.begin(), want.end(), 1L);
  EXPECT_EQ(got, want);
}

// A call that aborts while two others run: all three fail with ActorDied, the others saying that
// the actor runs calls at once (not that they never ran); the restart takes the next call.
TEST(ThreadedActors, ADeathFailsTheCallsItHeldAndARestartTakesTheNext) {
  fibra::Pool pool(2);
  auto gate = fibra::Actor<Gate>::start({.max_restarts = 1, .max_concurrency = 3, .pool = &pool});
  EXPECT_EQ(get_within(gate.call(&Gate::add, 10L), bound, "Gate::add(10)"), 10);
  auto a = gate.call(&Gate::nap, 3000L);
  auto b = gate.call(&Gate::nap, 3000L);
  std::this_thread::sleep_for(300ms);  // both running
  auto c = gate.call(&Gate::abort_now);
  std::string texts;
  for (auto* f : {&a, &b, &c}) {
    const std::string why = error_of([&] { get_within(*f, bound, "a call to the Gate that aborts"); });
    EXPECT_NE(why.find("died"), std::string::npos) << why;
    EXPECT_THROW(f->get(), fibra::ActorDied);
    texts += why + "\n";
  }
  EXPECT_NE(texts.find("runs up to 3 calls at once"), std::string::npos) << texts;
  EXPECT_EQ(texts.find("before this call"), std::string::npos) << texts;
  // A new process, from the constructor: the total starts again.
  EXPECT_EQ(get_within(gate.call(&Gate::add, 5L), bound, "Gate::add(5) after the restart"), 5);
}

// A stored value (fibra::put) given to calls that run side by side: each reads it whole.
TEST(ThreadedActors, CallsRunningTogetherReadAStoredValue) {
  fibra::Pool pool(2);
  auto gate = fibra::Actor<Gate>::start({.max_concurrency = 4, .pool = &pool});
  const long n = 1 << 20;
  std::vector<long> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 1L);
  auto stored = fibra::put(v);
  std::vector<fibra::Future<long>> sums;
  for (int i = 0; i < 8; ++i) sums.push_back(gate.call(&Gate::sum, stored));
  for (auto& f : sums) EXPECT_EQ(get_within(f, bound, "Gate::sum(stored)"), n * (n + 1) / 2);
}

TEST(ThreadedActors, AConcurrencyOutOfRangeIsRefused) {
  fibra::Pool pool(1);
  for (int bad : {0, -2, 5000}) {
    const std::string why = error_of([&] { (void)fibra::Actor<Gate>::start({.max_concurrency = bad, .pool = &pool}); });
    EXPECT_NE(why.find("ActorOptions::max_concurrency is " + std::to_string(bad)), std::string::npos) << why;
  }
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
