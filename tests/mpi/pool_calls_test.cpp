// multiprocessing.Pool's calls beyond map (issue 46): the initializer each worker process runs
// before its first task, max_tasks_per_child, and map_async/starmap_async with their callbacks.
// Runs as `./fibra_pool_calls_tests` (singleton), with and without lanes; the same binary is
// started again as agents and executors. Each test starts pools of its own (their options differ).
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <ranges>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../common/bounded.hpp"

using namespace std::chrono_literals;
using fibra_test::call_within;
using fibra_test::get_within;
using fibra_test::wait_within;

namespace {
// Set by the initializer, in each worker process.
int g_tag = -1;
int g_inits = 0;  // how many times the initializer ran in this process
}  // namespace

void set_tag(int tag) {
  g_tag = tag;
  ++g_inits;
}
FIBRA_REMOTE(set_tag);

void fail_init(std::string why) { throw std::runtime_error(why); }
FIBRA_REMOTE(fail_init);

void crash_init(int code) { ::_exit(code); }
FIBRA_REMOTE(crash_init);

int unregistered_init(int x) { return x; }

// What a task sees of its process: its pid, the initializer's tag, how many times it ran, and x.
using Seen = std::tuple<long, int, int, int>;
Seen tagged(int x) { return {long(::getpid()), g_tag, g_inits, x}; }
FIBRA_REMOTE(tagged);

long square(int x) { return long(x) * x; }
FIBRA_REMOTE(square);

int add3(int a, int b, int c) { return a + b + c; }
FIBRA_REMOTE(add3);

int maybe_throw(int x) {
  if (x == 13) throw std::invalid_argument("thirteen is not allowed");
  return x;
}
FIBRA_REMOTE(maybe_throw);

int sleepy(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
FIBRA_REMOTE(sleepy);

int exit_now(int code) { ::_exit(code); }
FIBRA_REMOTE(exit_now);

namespace {

std::vector<int> upto(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

// Every result carries the initializer's tag, run once in its process; x comes back in order.
void expect_initialized(const std::vector<Seen>& r, int tag) {
  for (std::size_t i = 0; i < r.size(); ++i) {
    const auto& [pid, t, inits, x] = r[i];
    EXPECT_EQ(t, tag) << "item " << i << " ran in pid " << pid << " without the initializer's tag";
    EXPECT_EQ(inits, 1) << "item " << i << ": the initializer ran " << inits << " times in pid " << pid;
    EXPECT_EQ(x, int(i));
  }
}

std::map<long, int> items_per_pid(const std::vector<Seen>& r) {
  std::map<long, int> n;
  for (const auto& s : r) ++n[std::get<0>(s)];
  return n;
}

}  // namespace

TEST(Initializer, EveryTaskSeesTheGlobalItSet) {
  fibra::Pool pool(2, {.initializer = {set_tag, 41}});
  const auto r =
      call_within(60s, "map of tagged over 40 items", [&] { return pool.map(tagged, upto(40), {.chunksize = 1}); });
  ASSERT_EQ(r.size(), 40u);
  expect_initialized(r, 41);
  EXPECT_LE(items_per_pid(r).size(), 2u) << "more processes than workers ran tasks";
  // apply_async runs on the same initialized processes.
  const Seen one = get_within(pool.apply_async(tagged, 7), 30s, "apply_async of tagged");
  EXPECT_EQ(std::get<1>(one), 41);
  EXPECT_EQ(std::get<3>(one), 7);
}

TEST(Initializer, AThrowingOneFailsTheCallsWithItsMessage) {
  fibra::Pool pool(2, {.initializer = {fail_init, std::string("no model at /nowhere")}});
  for (int round = 0; round < 2; ++round) {  // the pool stays usable, and fails the same way again
    const auto start = std::chrono::steady_clock::now();
    try {
      call_within(30s, "map of tagged over workers whose initializer threw",
                  [&] { return pool.map(tagged, upto(10), {.chunksize = 1}); });
      ADD_FAILURE() << "the map did not fail";
    } catch (const fibra::RemoteError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("the pool's initializer fail_init raised std::runtime_error: no model at /nowhere"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("tagged"), std::string::npos) << what;
      EXPECT_EQ(e.type_name(), "std::runtime_error");
      EXPECT_EQ(e.remote_message(), "no model at /nowhere");
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "round " << round;
  }
  auto f = pool.apply_async(square, 3);
  EXPECT_TRUE(f.wait_for(30s));
  try {
    f.get();
    ADD_FAILURE() << "apply_async did not fail";
  } catch (const fibra::RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("initializer fail_init"), std::string::npos) << e.what();
  }
}

// An initializer that ends its process: its agent starts another, which ends too; after three such
// deaths in a row the chunk that waits counts a failed attempt, so the call ends once its retries
// are spent, naming where the process died.
TEST(Initializer, OneThatEndsItsProcessEndsTheCall) {
  fibra::Pool pool(1, {.initializer = {crash_init, 3}});
  const auto start = std::chrono::steady_clock::now();
  try {
    call_within(60s, "map of tagged on a worker whose initializer exits",
                [&] { return pool.map(tagged, upto(2), {.chunksize = 1, .retries = 1}); });
    ADD_FAILURE() << "the map did not fail";
  } catch (const fibra::ExecutorCrashed& e) {
    EXPECT_NE(std::string(e.what()).find("exited with status 3 in the pool's initializer (PoolOptions::initializer)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST(Initializer, AReplacementAfterACrashRunsItAgain) {
  fibra::Pool pool(1, {.initializer = {set_tag, 5}});
  const Seen before = get_within(pool.apply_async(tagged, 1), 30s, "tagged before the crash");
  EXPECT_EQ(std::get<1>(before), 5);
  auto crash = pool.submit(fibra::TaskOptions{.retries = 0}, exit_now, 3);
  wait_within(crash, 30s, "the task that exits its process");
  EXPECT_THROW(crash.get(), fibra::ExecutorCrashed);
  const Seen after = get_within(pool.apply_async(tagged, 2), 30s, "tagged after the crash");
  EXPECT_NE(std::get<0>(after), std::get<0>(before)) << "the same process ran after the crash";
  EXPECT_EQ(std::get<1>(after), 5);
  EXPECT_EQ(std::get<2>(after), 1);
}

TEST(Initializer, RefusedWhenItCannotWork) {
  try {
    fibra::PoolOptions o{.initializer = {unregistered_init, 1}};
    ADD_FAILURE() << "an unregistered initializer was taken";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PoolOptions::initializer was given 'unregistered_init(int)', which is not "
                                         "registered"),
              std::string::npos)
        << e.what();
  }
  try {
    fibra::Pool pool(1, {.initializer = {fail_init, std::string(40000, 'x')}});
    ADD_FAILURE() << "an initializer of 40000 bytes of arguments was taken";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("PoolOptions::initializer: the arguments of fail_init encode to 40008 "
                                         "bytes, over the 32768"),
              std::string::npos)
        << e.what();
  }
}

TEST(MaxTasksPerChild, NoProcessRunsMoreThanItsShare) {
  fibra::Pool pool(2, {.initializer = {set_tag, 7}, .max_tasks_per_child = 2});
  const auto r = call_within(60s, "map of tagged over 20 items, 2 tasks per process",
                             [&] { return pool.map(tagged, upto(20), {.chunksize = 1}); });
  ASSERT_EQ(r.size(), 20u);
  expect_initialized(r, 7);  // every replacement ran the initializer, once
  auto per_pid = items_per_pid(r);
  EXPECT_GE(per_pid.size(), 10u);
  // apply_async counts too, and the pool goes on with new processes.
  for (int i = 0; i < 6; ++i) {
    const Seen s = get_within(pool.apply_async(tagged, i), 30s, "apply_async of tagged");
    EXPECT_EQ(std::get<1>(s), 7);
    EXPECT_EQ(std::get<3>(s), i);
    ++per_pid[std::get<0>(s)];
  }
  for (const auto& [pid, n] : per_pid) EXPECT_LE(n, 2) << "pid " << pid << " ran " << n << " tasks";
}

// Many small chunks waiting (a window of 300) are sent to a worker in batches of several: the
// process ends in the middle of one, and the chunks of it that it did not start run elsewhere, once.
TEST(MaxTasksPerChild, ABatchIsCutShortAndItsRestRunsOnce) {
  fibra::Pool pool(2, {.max_tasks_per_child = 5});
  const auto r = call_within(60s, "map of tagged over 300 items, 5 tasks per process",
                             [&] { return pool.map(tagged, upto(300), {.chunksize = 1, .max_inflight_chunks = 300}); });
  ASSERT_EQ(r.size(), 300u);
  for (std::size_t i = 0; i < r.size(); ++i) EXPECT_EQ(std::get<3>(r[i]), int(i));
  const auto per_pid = items_per_pid(r);
  for (const auto& [pid, n] : per_pid) EXPECT_LE(n, 5) << "pid " << pid << " ran " << n << " tasks";
  EXPECT_EQ(pool.stats().attempts_failed, 0u) << "a chunk handed back was counted as a failed attempt";
}

TEST(MapAsync, CallbackGetsTheWholeListOnAnotherThread) {
  fibra::Pool pool(2);
  std::mutex mu;
  std::vector<long> seen;
  int calls = 0, error_calls = 0;
  std::thread::id callback_thread;
  auto r = pool.map_async(
      square, upto(100), {.chunksize = 7},
      [&](const std::vector<long>& all) {
        std::lock_guard lk(mu);
        seen = all;
        ++calls;
        callback_thread = std::this_thread::get_id();
      },
      [&](std::exception_ptr) {
        std::lock_guard lk(mu);
        ++error_calls;
      });
  const std::vector<long> got = get_within(r, 60s, "map_async of square over 100 items");
  std::vector<long> want(100);
  for (int i = 0; i < 100; ++i) want[static_cast<std::size_t>(i)] = long(i) * i;
  EXPECT_EQ(got, want);
  EXPECT_TRUE(r.ready());
  EXPECT_TRUE(r.successful());
  std::lock_guard lk(mu);  // the callback ran before the result turned ready
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(error_calls, 0);
  EXPECT_EQ(seen, want);
  EXPECT_NE(callback_thread, std::this_thread::get_id());
}

TEST(MapAsync, ErrorCallbackGetsTheException) {
  fibra::Pool pool(2);
  std::mutex mu;
  std::exception_ptr caught;
  int calls = 0, error_calls = 0;
  auto r = pool.map_async(
      maybe_throw, upto(30), {.chunksize = 1},
      [&](const std::vector<int>&) {
        std::lock_guard lk(mu);
        ++calls;
      },
      [&](std::exception_ptr e) {
        std::lock_guard lk(mu);
        caught = e;
        ++error_calls;
      });
  wait_within(r, 60s, "map_async of maybe_throw over 30 items");
  EXPECT_FALSE(r.successful());
  try {
    r.get();
    ADD_FAILURE() << "get() did not throw";
  } catch (const fibra::RemoteError& e) {
    EXPECT_EQ(e.site().item, 13u);
    EXPECT_EQ(e.remote_message(), "thirteen is not allowed");
  }
  std::lock_guard lk(mu);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(error_calls, 1);
  ASSERT_TRUE(caught);
  try {
    std::rethrow_exception(caught);
  } catch (const fibra::RemoteError& e) {
    EXPECT_EQ(e.type_name(), "std::invalid_argument");
    EXPECT_NE(std::string(e.what()).find("maybe_throw raised std::invalid_argument on item 13"), std::string::npos)
        << e.what();
  } catch (...) {
    ADD_FAILURE() << "error_callback got something else than a RemoteError";
  }
}

TEST(MapAsync, StarmapAsyncAndWaiting) {
  fibra::Pool pool(2);
  std::vector<std::tuple<int, int, int>> t;
  for (int i = 0; i < 50; ++i) t.emplace_back(i, 2 * i, 3 * i);
  std::atomic<int> sum{-1};
  auto r = pool.starmap_async(add3, t, {}, [&](const std::vector<int>& all) {
    int s = 0;
    for (int v : all) s += v;
    sum = s;
  });
  const auto got = get_within(r, 60s, "starmap_async of add3 over 50 items");
  ASSERT_EQ(got.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], 6 * i);
  EXPECT_EQ(sum.load(), 6 * (49 * 50 / 2));

  // A slow call: not ready at first, get(timeout) gives up and the call goes on.
  auto slow = pool.map_async(sleepy, std::vector<int>{800, 800}, {.chunksize = 1});
  EXPECT_FALSE(slow.ready());
  EXPECT_THROW((void)slow.successful(), fibra::Error);
  EXPECT_THROW((void)slow.get(10ms), fibra::GetTimeout);
  EXPECT_EQ(get_within(slow, 30s, "map_async of sleepy"), (std::vector<int>{800, 800}));
  EXPECT_TRUE(slow.successful());
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);  // in spawned workers this never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
