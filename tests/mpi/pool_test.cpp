// Every Pool call against real spawned workers. Runs as `./fibra_pool_tests` (singleton) and as
// `mpirun -n 1 ./fibra_pool_tests`; the same binary is started again as agents and executors.
#include <fibra/fibra.hpp>
#include <fibra/serialization.hpp>  // Params below has serialize()
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/serialization/map.hpp>
#include <boost/serialization/string.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <ranges>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "../common/bounded.hpp"

struct Params {
  std::string name;
  std::map<std::string, double> values;
  template <class A>
  void serialize(A& ar, unsigned) {
    ar& name& values;
  }
};

long square(int x) { return long(x) * x; }
int add3(int a, int b, int c) { return a + b + c; }
int maybe_throw(int x) {
  if (x == 13) throw std::invalid_argument("thirteen is not allowed");
  return x;
}
int crash_on(int x) {
  if (x == 5) ::raise(SIGSEGV);
  if (x == 6) std::abort();
  if (x == 7) ::_exit(3);
  return x;
}
int sleepy(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
double weigh(const Params& p) {
  double s = 0;
  for (auto& [k, v] : p.values) s += v * double(k.size());
  return s + double(p.name.size());
}
std::vector<double> scale(std::vector<double> v) {
  for (double& x : v) x *= 2;
  return v;
}
// scale, after 200 ms: long enough for the caller to be waiting when the result comes.
std::vector<double> scale_slowly(std::vector<double> v) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return scale(std::move(v));
}
// Which processes ran an item: the executor and its agent (the executor's parent).
struct Pids {
  long executor = 0, agent = 0;
};
Pids pids_after(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {::getpid(), ::getppid()};
}
// Two large vectors (over the codec's 4 MiB large block, 5.1 and 5.6 MB) with small fields around
// and between them: a result frame with two stretches encoded straight into the lane's slot.
using TwoBlocks = std::tuple<int, std::vector<double>, std::string, std::vector<double>>;
TwoBlocks two_blocks(int n) {
  std::vector<double> a(640'000), b(700'000);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = n + 0.5 * double(i);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = -n - double(i);
  return {n, a, "between " + std::to_string(n), b};
}
// A large result (5.1 MB of n), except for item 1, which throws.
std::vector<double> big_or_throw(int n) {
  if (n == 1) throw std::runtime_error("item one fails");
  return std::vector<double>(640'000, double(n));
}
// What a process holds: its resident memory (MiB); after touch_mib, the page faults of its second
// touch and whether the block it kept taken lies above the first (not at the end of the heap).
struct Held {
  long rss_mib = 0;
  long faults = 0;
  bool pinned = false;
};
// Resident memory of a process (this one by default), in MiB.
long rss_mib(long pid = 0) {
  long pages = 0, resident = 0;
  const std::string path = pid ? "/proc/" + std::to_string(pid) + "/statm" : "/proc/self/statm";
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * ::sysconf(_SC_PAGESIZE) >> 20;
}
// Looks at rss_mib(pid) every 100 ms until it is at most `limit` MiB, for at most `ms`; the last look.
long rss_until(long pid, long limit, int ms) {
  long rss = rss_mib(pid);
  for (int waited = 0; rss > limit && waited < ms; waited += 100) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rss = rss_mib(pid);
  }
  return rss;
}
Held held(int) { return {rss_mib(), 0}; }
// Takes n bytes, writes every page of them and frees them, as a task that builds a large vector
// does. `pin`: 1 MiB is taken after them and kept, so that the freed block is not at the end of the
// heap (where the C library's own threshold would give it back); true if it lies above the block.
bool touch(std::size_t n, bool pin = false) {
  static std::vector<std::unique_ptr<char[]>> kept;
  std::unique_ptr<char[]> p(new char[n]);
  volatile char* v = p.get();
  for (std::size_t i = 0; i < n; i += 4096) v[i] = 1;
  if (!pin) return false;
  kept.emplace_back(new char[1 << 20]);
  return kept.back().get() > p.get();
}
// touch(`mib` MiB, pinned) twice, `pause_ms` apart, as two tasks do; the faults are the second time's.
Held touch_mib(int mib, int pause_ms) {
  const std::size_t n = std::size_t(mib) << 20;
  const bool pinned = touch(n, true);
  std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  rusage before{}, after{};
  ::getrusage(RUSAGE_THREAD, &before);
  touch(n);
  ::getrusage(RUSAGE_THREAD, &after);
  return {rss_mib(), after.ru_minflt - before.ru_minflt, pinned};
}
// Frees `mib` MiB written page by page (as touch_mib does), then, still running, looks at its own
// resident memory until it is back within 16 MiB of what it was before, for at most 5 s.
Held free_and_watch(int mib) {
  const long before = rss_mib();
  const bool pinned = touch(std::size_t(mib) << 20, true);
  return {rss_until(0, before + 16, 5000), 0, pinned};
}
// Whether a process here can keep freed memory (docs/architecture.md, "Freed memory kept"): glibc
// 2.33 or later and its own allocator; elsewhere the Executors tests are skipped.
bool can_keep_freed() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#elif defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 33)
  const char* preload = std::getenv("LD_PRELOAD");
  return !preload || !*preload;
#else
  return false;
#endif
#else
  return false;
#endif
}
int unregistered(int x) { return x; }

FIBRA_REMOTE(square);
FIBRA_REMOTE(add3);
FIBRA_REMOTE(maybe_throw);
FIBRA_REMOTE(crash_on);
FIBRA_REMOTE(sleepy);
FIBRA_REMOTE(weigh);
FIBRA_REMOTE(scale);
FIBRA_REMOTE(scale_slowly);
FIBRA_REMOTE(pids_after);
FIBRA_REMOTE(two_blocks);
FIBRA_REMOTE(big_or_throw);
FIBRA_REMOTE(held);
FIBRA_REMOTE(touch_mib);
FIBRA_REMOTE(free_and_watch);

namespace {

using fibra_test::call_within;
using fibra_test::get_within;
using fibra_test::wait_within;

// How long a test waits for a result (a loaded 2-core machine: tens of seconds, far below ctest's timeout).
constexpr std::chrono::seconds bound{60};

fibra::Pool* g_pool = nullptr;
fibra::Pool& pool() { return *g_pool; }

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(Map, ReturnsEveryResultInOrder) {
  auto r = call_within(bound, "map of square over 10,000 items", [] { return pool().map(square, range(10'000)); });
  ASSERT_EQ(r.size(), 10'000u);
  for (int i = 0; i < 10'000; ++i) ASSERT_EQ(r[i], long(i) * i) << i;
}

TEST(Map, AMillionItemsExactly) {
  auto in = range(1'000'000);
  auto r = call_within(bound, "map of square over 1,000,000 items", [&] { return pool().map(square, in); });
  ASSERT_EQ(r.size(), in.size());
  for (int i = 0; i < 1'000'000; ++i) ASSERT_EQ(r[i], long(i) * i) << i;
}

TEST(Map, ExplicitChunkSizes) {
  for (std::size_t cs : {1u, 7u, 1000u, 5000u}) {
    auto r = call_within(bound, "map of square over 3001 items",
                         [&] { return pool().map(square, range(3001), {.chunksize = cs}); });
    ASSERT_EQ(r.size(), 3001u);
    for (int i = 0; i < 3001; ++i) ASSERT_EQ(r[i], long(i) * i) << "chunksize " << cs << " item " << i;
  }
}

TEST(Map, EmptyInput) {
  EXPECT_TRUE(call_within(bound, "map over no items", [] { return pool().map(square, std::vector<int>{}); }).empty());
}

TEST(Map, ConvertsInputsToTheParameterType) {
  std::vector<short> in{1, 2, 3};
  EXPECT_EQ(call_within(bound, "map of square over 3 shorts", [&] { return pool().map(square, in); }),
            (std::vector<long>{1, 4, 9}));
}

TEST(Map, BoostSerializableArguments) {
  std::vector<Params> ps;
  for (int i = 0; i < 50; ++i) ps.push_back({std::string(i % 5, 'x'), {{"ab", i * 1.0}, {"c", 2.0}}});
  auto r = call_within(bound, "map of weigh over 50 Params", [&] { return pool().map(weigh, ps); });
  for (int i = 0; i < 50; ++i) EXPECT_DOUBLE_EQ(r[i], i * 2.0 + 2.0 + i % 5);
}

TEST(Imap, StreamsAMillionLazyItemsInOrder) {
  long n = 0;
  call_within(bound, "imap of square over 1,000,000 items", [&] {
    for (long v : pool().imap(square, std::views::iota(0, 1'000'000))) {
      ASSERT_EQ(v, n * n) << n;
      ++n;
    }
  });
  EXPECT_EQ(n, 1'000'000);
}

TEST(ImapUnordered, YieldsEveryIndexExactlyOnce) {
  auto in = range(5000);
  std::vector<int> seen(in.size(), 0);
  call_within(bound, "imap_unordered of square over 5000 items", [&] {
    for (auto&& [i, v] : pool().imap_unordered(square, in, {.chunksize = 13})) {
      ASSERT_LT(i, in.size());
      EXPECT_EQ(v, long(i) * long(i));
      ++seen[i];
    }
  });
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << i;
}

TEST(Starmap, TuplesAndPairsOfArguments) {
  std::vector<std::tuple<int, int, int>> t;
  for (int i = 0; i < 1000; ++i) t.emplace_back(i, 2 * i, 3);
  auto r = call_within(bound, "starmap of add3 over 1000 tuples", [&] { return pool().starmap(add3, t); });
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(r[i], 3 * i + 3);
}

TEST(ApplyAsync, FuturesGetWaitReady) {
  auto f = pool().apply_async(add3, 1, 2, 3);
  EXPECT_TRUE(f.valid());
  EXPECT_EQ(get_within(f, bound, "add3(1, 2, 3)"), 6);
  EXPECT_TRUE(f.ready());
  EXPECT_EQ(f.get(), 6);  // get() may be called again

  auto slow = pool().apply_async(sleepy, 300);
  EXPECT_FALSE(slow.wait_for(std::chrono::milliseconds(10)));
  EXPECT_FALSE(slow.ready());
  wait_within(slow, bound, "sleepy(300)");  // as wait(), bounded
  EXPECT_TRUE(slow.ready());
  EXPECT_EQ(slow.get(), 300);

  std::vector<fibra::Future<long>> fs;
  for (int i = 0; i < 20'000; ++i) fs.push_back(pool().apply_async(square, i));
  for (int i = 0; i < 20'000; ++i) ASSERT_EQ(get_within(fs[i], bound, "square(i) of 20,000 futures"), long(i) * i) << i;
  EXPECT_THROW(fibra::Future<int>().get(), fibra::Error);
}

// Pool::apply (multiprocessing's Pool.apply, issue 46): the result, waited for; what the function
// threw, thrown.
TEST(ApplyAsync, ApplyReturnsTheResultOrThrowsWhatTheFunctionThrew) {
  EXPECT_EQ(call_within(bound, "apply(add3, 4, 5, 6)", [] { return pool().apply(add3, 4, 5, 6); }), 15);
  EXPECT_EQ(call_within(bound, "apply(big_or_throw, 3)", [] { return pool().apply(big_or_throw, 3); }),
            std::vector<double>(640'000, 3.0));
  try {
    call_within(bound, "apply(big_or_throw, 1)", [] { return pool().apply(big_or_throw, 1); });
    ADD_FAILURE() << "apply of a function that throws returned";
  } catch (const fibra::RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("item one fails"), std::string::npos) << e.what();
  }
}

TEST(ApplyAsync, LargePayloadRoundTrip) {
  std::vector<double> v(8'000'000);  // 64 MB
  std::iota(v.begin(), v.end(), 0.0);
  auto r = get_within(pool().apply_async(scale, v), bound, "scale of 64 MB");
  ASSERT_EQ(r.size(), v.size());
  for (std::size_t i = 0; i < v.size(); i += 9973) ASSERT_EQ(r[i], 2 * v[i]);
  EXPECT_EQ(r.back(), 2 * v.back());
}

// Whether batches may go through shared memory in this run (FIBRA_LANES=0: never).
bool lanes_on() {
  const char* env = std::getenv("FIBRA_LANES");
  return !env || std::string(env) != "0";
}

// `got` is `in` doubled (scale's result), every element.
void expect_doubled(const std::vector<double>& got, const std::vector<double>& in) {
  ASSERT_EQ(got.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(got[i], 2 * in[i]) << i;
}

// Workers on the driver's host get their batches through shared memory (src/transport/lane.hpp), small ones
// and large ones (a large slot each way); FIBRA_LANES=0 sends every batch through MPI and the
// agent. Both ways give every result.
TEST(Lanes, BatchesSmallAndLargeGoThroughSharedMemoryOnTheDriversHost) {
  const bool lanes = lanes_on();
  for (const auto& w : pool().workers()) EXPECT_EQ(w.shared_memory, lanes) << "agent " << w.slot;
  auto before = pool().stats();
  auto r = call_within(bound, "map of square over 3000 items, one per chunk",
                       [] { return pool().map(square, range(3'000), {.chunksize = 1}); });
  for (int i = 0; i < 3'000; ++i) ASSERT_EQ(r[i], long(i) * i) << i;
  auto after = pool().stats();
  const auto sent = after.batches_sent - before.batches_sent;
  EXPECT_GE(sent, 3'000u / 256) << "a batch holds at most 256 items";
  EXPECT_EQ(after.batches_shared_memory - before.batches_shared_memory, lanes ? sent : 0);

  before = after;
  std::vector<double> v(300'000);  // 2.4 MB: over a small slot, both ways
  std::iota(v.begin(), v.end(), 1.0);
  for (int round = 0; round < 3; ++round) {  // the large slots are used again
    // The executor frees the batch's slot just after its results are out (the batch's bytes are
    // read until then): a next large batch that comes within that moment goes through the agent
    // instead, as it should. Under ctest -j2 it came within it once (2 of 3 through the lane), so
    // each round waits a little for the slot.
    if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    expect_doubled(get_within(pool().apply_async(scale, v), bound, "scale of 2.4 MB"), v);
  }
  after = pool().stats();
  EXPECT_EQ(after.batches_sent - before.batches_sent, 3u);
  EXPECT_EQ(after.batches_shared_memory - before.batches_shared_memory, lanes ? 3u : 0u);
  EXPECT_EQ(after.results_shared_memory - before.results_shared_memory, lanes ? 3u : 0u)
      << "a large result decoded where it lay must give its slot back for the next";
}

// A large result a call waits for stays in its slot until the call took it: the worker's next large
// result must not overwrite it there (it goes through the agent meanwhile).
TEST(Lanes, ALargeResultLeftInItsSlotIsNotOverwrittenByTheNext) {
  const bool lanes = lanes_on();
  fibra::Pool p(1);
  std::vector<double> a(300'000), b(300'000);  // 2.4 MB each: the large slots
  std::iota(a.begin(), a.end(), 1.0);
  std::iota(b.begin(), b.end(), -1e6);
  auto fa = p.apply_async(scale_slowly, a);
  wait_within(fa, bound, "scale_slowly of a");  // waited for: delivered where it lies
  auto rb = get_within(p.apply_async(scale, b), bound, "scale of b");
  auto ra = std::move(fa).get();
  expect_doubled(ra, a);
  expect_doubled(rb, b);
  EXPECT_EQ(p.stats().results_shared_memory, lanes ? 1u : 0u) << "the second came through the agent";
}

// A large result that arrives while nobody waits for it is copied out of its slot (it may wait
// long): the worker's next large result comes through shared memory too, and both are whole.
TEST(Lanes, ALargeResultNobodyWaitsForYetLeavesTheWayFree) {
  const bool lanes = lanes_on();
  fibra::Pool p(1);
  std::vector<double> v(300'000);  // 2.4 MB: the large slots
  std::iota(v.begin(), v.end(), 1.0);
  auto first = p.apply_async(scale, v);
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!first.ready() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // ready() does not wait: nobody waits
  ASSERT_TRUE(first.ready()) << "the first scale's result did not arrive within " << bound.count() << " s";
  auto second = get_within(p.apply_async(scale, v), bound, "the second scale");
  auto kept = std::move(first).get();
  expect_doubled(second, v);
  expect_doubled(kept, v);
  EXPECT_EQ(p.stats().results_shared_memory, lanes ? 2u : 0u);
}

// A large result is encoded straight into the lane's large up slot, block by block, at its offset
// in the frame; the bytes between and around the blocks are copied there when the frame is sent.
// One result, and a chunk of three (one frame, six blocks), come back whole.
void expect_two_blocks(const TwoBlocks& got, int n) {
  const auto& [m, a, between, b] = got;
  EXPECT_EQ(m, n);
  EXPECT_EQ(between, "between " + std::to_string(n));
  ASSERT_EQ(a.size(), 640'000u);
  ASSERT_EQ(b.size(), 700'000u);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], n + 0.5 * double(i)) << i;
  for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], -n - double(i)) << i;
}

TEST(Lanes, LargeResultsEncodedIntoTheirSlotComeBackWhole) {
  const auto before = pool().stats();
  auto one = pool().apply_async(two_blocks, 7);
  expect_two_blocks(get_within(one, bound, "two_blocks(7): its result frame (a broken frame?)"), 7);
  const auto r = call_within(bound, "map of two_blocks over 3 items in one chunk", [] {
    return pool().map(two_blocks, std::vector<int>{1, 2, 3}, {.chunksize = 3});
  });
  ASSERT_EQ(r.size(), 3u);
  for (int i = 0; i < 3; ++i) expect_two_blocks(r[std::size_t(i)], i + 1);
  const auto after = pool().stats();
  EXPECT_EQ(after.results_shared_memory - before.results_shared_memory, lanes_on() ? 2u : 0u);
  EXPECT_EQ(after.results_written_in_place - before.results_written_in_place, lanes_on() ? 2u : 0u)
      << "the large blocks went into the frame and were copied into the slot after";
}

// A chunk whose first item's large result went into the slot and whose next item throws: the
// result is dropped for the failure (the call throws), or kept beside it when errors are
// collected; either way the slot is given back for the next large result.
TEST(Lanes, AChunkThatFailsAfterALargeResultGivesItsSlotBack) {
  fibra::Pool p(1);
  const long executor = get_within(p.apply_async(pids_after, 0), bound, "pids_after(0)").executor;
  const std::vector<int> items{0, 1, 2};
  EXPECT_THROW(call_within(bound, "map of big_or_throw", [&] { return p.map(big_or_throw, items, {.chunksize = 3}); }),
               fibra::RemoteError);
  std::vector<fibra::ItemError> errors;
  const auto r = call_within(bound, "map of big_or_throw collecting errors",
                             [&] { return p.map(big_or_throw, items, {.chunksize = 3, .errors = &errors}); });
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].index, 1u);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], std::vector<double>(640'000, 0.0));
  EXPECT_TRUE(r[1].empty());
  EXPECT_EQ(r[2], std::vector<double>(640'000, 2.0));
  const auto before = p.stats();
  std::vector<double> v(700'000);
  std::iota(v.begin(), v.end(), 3.0);
  expect_doubled(get_within(p.apply_async(scale, v), bound, "scale of 5.6 MB"), v);
  EXPECT_EQ(p.stats().results_shared_memory - before.results_shared_memory, lanes_on() ? 1u : 0u);
  EXPECT_EQ(p.stats().results_written_in_place - before.results_written_in_place, lanes_on() ? 1u : 0u)
      << "the slot was not free for the next large result";
  EXPECT_EQ(get_within(p.apply_async(pids_after, 0), bound, "pids_after(0), again").executor, executor)
      << "the executor died on the way";
}

// Batches through lanes are not heard by the agent: the driver must still send it heartbeats, or
// its orphan guard ends it after driver_silence_s of work fed only through shared memory. The map
// lasts 2.5 times that silence, 20 heartbeats: a silence of 10 (1 s) was outlasted once in CI under
// ctest -j2, and not in 31 runs here beside 64 agents starting (a driver's thread starved, as far
// as can be told).
TEST(Lanes, AnAgentWhoseWorkersAreFedThroughLanesStillHearsTheDriver) {
  fibra::Pool p(1, {.heartbeat_s = 0.1, .driver_silence_s = 2.0});
  auto r = call_within(bound, "map of 500 pids_after(10)", [&] {  // 5 s of 10 ms tasks
    return p.map(pids_after, std::vector<int>(500, 10), {.chunksize = 1});
  });
  std::set<long> agents, executors;
  for (const auto& x : r) {
    agents.insert(x.agent);
    executors.insert(x.executor);
  }
  EXPECT_EQ(agents.size(), 1u) << "the agent took the driver for silent, and was replaced";
  EXPECT_EQ(executors.size(), 1u);
  const auto st = p.stats();
  EXPECT_EQ(st.workers_lost, 0u);
  EXPECT_EQ(st.workers_started, 1u);
  EXPECT_EQ(st.attempts_failed, 0u);
}

// A task that takes 64 MiB finds the memory a block of that size freed before: no page to fault
// in again (a fresh 64 MiB takes at least 32 faults, in 2 MiB pages, and 16,384 in 4 KiB ones).
// The executor keeps it after the task, and gives it back to the system once idle 2 s (its
// watcher looks once a second), but not while a task runs.
TEST(Executors, KeepTheMemoryTheirTasksFreedForTheNextTask) {
  if (!can_keep_freed()) GTEST_SKIP() << "no glibc 2.33 allocator here";
  fibra::Pool p(1);
  const Held start = get_within(p.apply_async(held, 0), bound, "held(0)");
  const Held touched = get_within(p.apply_async(touch_mib, 64, 0), bound, "touch_mib(64, 0)");
  EXPECT_LT(touched.faults, 16) << "the 64 MiB freed went back to the system";
  const Held after = get_within(p.apply_async(held, 0), bound, "held(0) after touch_mib");
  EXPECT_GE(after.rss_mib, start.rss_mib + 56) << "64 MiB freed and not kept after the task";
  const long executor = get_within(p.apply_async(pids_after, 0), bound, "pids_after(0)").executor;
  // Looked at from here, which keeps the executor idle.
  EXPECT_LE(rss_until(executor, start.rss_mib + 16, 10'000), start.rss_mib + 16)
      << "the executor kept its freed memory 10 s idle";
  // A task that runs on is not idle: what it freed 3 s ago is still there for it.
  EXPECT_LT(get_within(p.apply_async(touch_mib, 64, 3000), bound, "touch_mib(64, 3000)").faults, 16)
      << "given back while a task ran";
}

// The driver is the user's process: its allocator is left as it is unless a pool asks
// (driver_keep_freed_mib), so 64 MiB freed there goes back to the system at once. Runs before the
// test below, which turns the setting on for the rest of this process.
TEST(Executors, TheDriversAllocatorIsLeftAloneByDefault) {
  if (!can_keep_freed()) GTEST_SKIP() << "no glibc 2.33 allocator here";
  ASSERT_EQ(get_within(pool().apply_async(square, 3), bound, "square(3)"), 9);  // the tests' pool (defaults) started
  EXPECT_GE(touch_mib(64, 0).faults, 32) << "the driver kept 64 MiB freed without driver_keep_freed_mib";
}

// With driver_keep_freed_mib, the driver does what its workers do for what its caller frees (the
// result vector of the last call), from the first pool that asks for it.
TEST(Executors, TheDriverKeepsTheMemoryItsCallerFreedWhenAsked) {
  if (!can_keep_freed()) GTEST_SKIP() << "no glibc 2.33 allocator here";
  fibra::Pool asking(1, {.driver_keep_freed_mib = 256});
  ASSERT_EQ(get_within(asking.apply_async(square, 3), bound, "square(3)"), 9);  // a call: busy, then idle after it
  const Held start = held(0);
  const Held touched = touch_mib(64, 0);
  // The proof that it was kept: the second 64 MiB found the first's pages (a driver that gives them
  // back faults at least 32 times, as the test above shows). Its resident memory read after the
  // second free is not asserted: under load (ctest -j2) the idle give-back, 2 s after the last
  // pool traffic, fell between that free and the read (309 MiB against 312 + 56).
  EXPECT_LT(touched.faults, 16) << "the 64 MiB freed went back to the system";
  EXPECT_LE(rss_until(0, start.rss_mib + 16, 10'000), start.rss_mib + 16)
      << "the driver kept its freed memory 10 s idle";
}

// keep_freed_mib 0 leaves the C library's default (64 MiB goes back at once). A bound below what a
// task freed has the executor give it back at its next look, while the task still runs; what
// comes free after that give-back is measured from it (the heap's free figure still counts what
// was given back), so 8 MiB freed under a 16 MiB bound is kept.
TEST(Executors, KeepNoMoreFreedMemoryThanAsked) {
  if (!can_keep_freed()) GTEST_SKIP() << "no glibc 2.33 allocator here";
  {
    fibra::Pool p(1, {.keep_freed_mib = 0});
    EXPECT_GE(get_within(p.apply_async(touch_mib, 64, 0), bound, "touch_mib(64, 0)").faults, 32)
        << "keep_freed_mib 0: 64 MiB freed was kept";
  }
  {
    fibra::Pool p(1, {.keep_freed_mib = 16});
    const Held start = get_within(p.apply_async(held, 0), bound, "held(0)");
    const Held watched = get_within(p.apply_async(free_and_watch, 64), bound, "free_and_watch(64)");
    ASSERT_TRUE(watched.pinned) << "the block kept taken lies below: the heap's own threshold gives the 64 MiB back";
    EXPECT_LE(watched.rss_mib, start.rss_mib + 16) << "keep_freed_mib 16: 64 MiB freed was kept 5 s by a running task";
    const Held small = get_within(p.apply_async(touch_mib, 8, 3000), bound, "touch_mib(8, 3000)");
    EXPECT_LT(small.faults, 4) << "8 MiB freed under a 16 MiB bound was given back (a look each second)";
  }
  EXPECT_NO_THROW(fibra::Pool(1, {.keep_freed_mib = std::size_t(1) << 20}));
  EXPECT_THROW(fibra::Pool(1, {.keep_freed_mib = (std::size_t(1) << 20) + 1}), fibra::ConfigError);
  EXPECT_THROW(fibra::Pool(1, {.driver_keep_freed_mib = (std::size_t(1) << 20) + 1}), fibra::ConfigError);
}

TEST(Errors, ATaskThatThrowsRaisesRemoteErrorAndThePoolGoesOn) {
  try {
    call_within(bound, "map of maybe_throw over 100 items",
                [] { return pool().map(maybe_throw, range(100), {.chunksize = 10}); });
    FAIL() << "no error";
  } catch (const fibra::RemoteError& e) {
    EXPECT_EQ(e.type_name(), "std::invalid_argument");
    EXPECT_EQ(e.remote_message(), "thirteen is not allowed");
    EXPECT_EQ(e.site().function, "maybe_throw");
    EXPECT_EQ(e.site().item, 13u);
    EXPECT_EQ(e.site().host, fibra::Runtime::host());
    EXPECT_GT(e.site().pid, 0);
    const std::string prefix =
        "fibra: maybe_throw raised std::invalid_argument on item 13: thirteen is not allowed (worker ";
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
  }
  EXPECT_EQ(call_within(bound, "map of maybe_throw over 13 items", [] { return pool().map(maybe_throw, range(13)); }),
            range(13));
  try {
    get_within(pool().apply_async(maybe_throw, 13), bound, "maybe_throw(13)");
    FAIL() << "no error";
  } catch (const fibra::RemoteError& e) {
    EXPECT_EQ(e.site().item, 0u);
  }
  EXPECT_THROW(call_within(bound, "imap of maybe_throw over 100 items",
                           [] {
                             for (int v : pool().imap(maybe_throw, range(100))) (void)v;
                           }),
               fibra::RemoteError);
}

// The pid of the executor that crashed (the error names it).
long expect_crash(int item, const std::string& how) {
  try {
    call_within(bound, "map of crash_on over 4 items", [&] {
      return pool().map(crash_on, std::vector<int>{0, 1, item, 2}, {.chunksize = 1, .retries = 0});
    });
    ADD_FAILURE() << "no error for " << item;
    return 0;
  } catch (const fibra::ExecutorCrashed& e) {
    EXPECT_EQ(e.site().function, "crash_on");
    EXPECT_EQ(e.site().item, 2u);
    EXPECT_GT(e.site().pid, 0);
    std::string m = e.what();
    EXPECT_NE(m.find("fibra: the executor running crash_on on item 2 " + how + " (worker "), std::string::npos) << m;
    EXPECT_NE(m.find(fibra::Runtime::host()), std::string::npos) << m;
    return e.site().pid;
  }
  return 0;
}

// The executors and agents that answer now: items of 10 ms, one per chunk, reach every worker.
std::pair<std::set<long>, std::set<long>> answering() {
  std::set<long> executors, agents;
  const auto r = call_within(bound, "map of 20 pids_after(10)",
                             [] { return pool().map(pids_after, std::vector<int>(20, 10), {.chunksize = 1}); });
  for (const Pids& p : r) {
    executors.insert(p.executor);
    agents.insert(p.agent);
  }
  return {executors, agents};
}

TEST(Errors, AnExecutorCrashNamesTheSignalOrStatusAndThePoolGoesOn) {
  const auto [before, agents] = answering();
  ASSERT_EQ(before.size(), 2u);
  const long first = expect_crash(5, "was killed by signal 11 (Segmentation fault)");
  EXPECT_TRUE(before.contains(first)) << "the error names pid " << first << ", not one of the executors";
  const std::set<long> crashed = {first, expect_crash(6, "was killed by signal 6 (Aborted)"),
                                  expect_crash(7, "exited with status 3 while running it")};
  EXPECT_EQ(crashed.size(), 3u) << "each crash ends its process: three crashes, three pids";
  // Every worker still answers, all results exact.
  auto r = call_within(bound, "map of crash_on over 7 items that do not crash", [] {
    return pool().map(crash_on, std::vector<int>{0, 1, 2, 3, 4, 8, 9}, {.chunksize = 1});
  });
  EXPECT_EQ(r, (std::vector<int>{0, 1, 2, 3, 4, 8, 9}));
  auto r2 = call_within(bound, "map of square over 20,000 items after the crashes",
                        [] { return pool().map(square, range(20'000)); });
  for (int i = 0; i < 20'000; ++i) ASSERT_EQ(r2[i], long(i) * i);
  // The executors that answer now are new processes (none of the crashed ones), under the same
  // agents: a crash costs the executor, not the worker.
  const auto [now, agents_now] = answering();
  EXPECT_EQ(now.size(), 2u);
  EXPECT_EQ(agents_now, agents);
  for (long pid : crashed) {
    EXPECT_FALSE(now.contains(pid)) << "executor " << pid << " crashed and still answers";
    EXPECT_FALSE(agents.contains(pid)) << "the error names the agent " << pid << ", not the executor";
  }
}

TEST(Errors, AnUnregisteredFunctionIsAClearError) {
  try {
    pool().map(unregistered, range(3));
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("fibra: map was given 'unregistered(int)', which is not registered for remote calls: add "
                     "FIBRA_REMOTE(<its name>);"),
              std::string::npos)
        << m;
  }
  EXPECT_THROW(pool().apply_async(unregistered, 1), fibra::ConfigError);
}

// A time limit out of range is refused in the caller, naming the option, the value and the range,
// in a call's MapOptions and in the pool's PoolOptions alike.
TEST(Errors, ATimeLimitOutOfRangeIsAConfigErrorNamingIt) {
  const std::pair<double, const char*> cases[] = {
      {-1.0, "-1.000000"}, {5e6, "5000000.000000"}, {std::numeric_limits<double>::quiet_NaN(), "nan"}};
  for (auto [bad, shown] : cases) {
    const std::string want =
        std::string("fibra: task_timeout_s must be between 0 (no limit) and 4e6 seconds, got ") + shown;
    try {
      pool().map(square, range(3), {.task_timeout_s = bad});
      ADD_FAILURE() << "map: no error for " << shown;
    } catch (const fibra::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
    try {
      fibra::Pool p(1, {.task_timeout_s = bad});
      ADD_FAILURE() << "Pool: no error for " << shown;
    } catch (const fibra::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
  EXPECT_EQ(call_within(bound, "map with a time limit of 4e6 s",
                        [] { return pool().map(square, range(3), {.task_timeout_s = 4e6}); }),
            (std::vector<long>{0, 1, 4}));  // the bound is allowed
}

TEST(Lifecycle, ResizeGrowsAndShrinks) {
  // size() is the target: the processes that take work are what counts. Items of 20 ms, one per
  // chunk, go to every ready worker; each reports its executor and agent (a pool of 4 or fewer
  // has one agent per worker).
  fibra::Pool p(1);
  auto who = [&p] {
    std::set<long> executors, agents;
    const auto r = call_within(bound, "map of 30 pids_after(20)",
                               [&p] { return p.map(pids_after, std::vector<int>(30, 20), {.chunksize = 1}); });
    for (const Pids& w : r) {
      executors.insert(w.executor);
      agents.insert(w.agent);
    }
    return std::pair{executors, agents};
  };
  EXPECT_EQ(p.size(), 1);
  const auto [one, one_agent] = who();
  ASSERT_EQ(one.size(), 1u);
  p.resize(3);  // returns once the new workers are ready
  EXPECT_EQ(p.size(), 3);
  EXPECT_EQ(p.stats().workers_ready, 3);
  const auto [three, three_agents] = who();
  EXPECT_EQ(three.size(), 3u) << "executors that took work after resize(3)";
  EXPECT_EQ(three_agents.size(), 3u) << "agents that took work after resize(3)";
  EXPECT_TRUE(three.contains(*one.begin())) << "the first worker is still one of them";
  for (long a : three_agents) EXPECT_FALSE(three.contains(a));  // agents are not executors
  auto sq = call_within(bound, "map of square after resize(3)", [&] { return p.map(square, range(1000)); });
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sq[i], long(i) * i);
  p.resize(1);  // returns once only one worker takes work
  EXPECT_EQ(p.size(), 1);
  const auto [left, left_agent] = who();
  EXPECT_EQ(left.size(), 1u) << "executors that took work after resize(1)";
  EXPECT_EQ(left_agent.size(), 1u);
  EXPECT_TRUE(three.contains(*left.begin())) << "the one left is one of the three";
  EXPECT_EQ(call_within(bound, "map of square after resize(1)", [&] { return p.map(square, range(5)); }),
            (std::vector<long>{0, 1, 4, 9, 16}));
  EXPECT_THROW(p.resize(0), fibra::ConfigError);
}

TEST(Lifecycle, CloseThenJoinFinishesQueuedWork) {
  fibra::Pool p(1);
  auto f = p.apply_async(sleepy, 200);
  p.close();
  EXPECT_THROW(p.apply_async(sleepy, 1), fibra::PoolClosed);
  EXPECT_THROW(p.map(square, range(3)), fibra::PoolClosed);
  call_within(bound, "join of a pool with sleepy(200) queued", [&] { p.join(); });
  EXPECT_EQ(get_within(f, bound, "sleepy(200)"), 200);
}

// Calls go from the caller's thread to the communication thread through an inbox of their own
// (issue 29, item 4): a join right after a submit to an idle pool (its communication thread
// napping, with nothing queued) still waits for that call, and runs it; a terminate right after
// many submits fails each one not run with PoolClosed, none left waiting.
TEST(Lifecycle, JoinRightAfterSubmitsToAnIdlePoolRunsThem) {
  fibra::Pool p(1);
  ASSERT_EQ(get_within(p.apply_async(square, 5), bound, "square(5)"), 25);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // idle: its communication thread naps
  std::vector<fibra::Future<long>> fs;
  for (int i = 0; i < 3; ++i) fs.push_back(p.apply_async(square, i + 1));
  p.close();
  call_within(bound, "join right after 3 submits", [&] { p.join(); });
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(get_within(fs[i], bound, "square(i) submitted before join"), long(i + 1) * (i + 1));
}

TEST(Lifecycle, TerminateRightAfterManySubmitsFailsEveryOneNotRun) {
  fibra::Pool p(2);
  // Tasks of 1 ms: 25 s of work for 2 workers, so that most are still queued at the terminate.
  std::vector<fibra::Future<int>> fs;
  for (int i = 0; i < 50'000; ++i) fs.push_back(p.apply_async(sleepy, 1));
  p.terminate();
  std::size_t closed = 0;
  for (int i = 0; i < 50'000; ++i) {
    try {
      ASSERT_EQ(get_within(fs[i], bound, "sleepy(1) submitted before terminate"), 1) << i;
    } catch (const fibra::PoolClosed&) {
      ++closed;
    }
  }
  EXPECT_GT(closed, 0u) << "every call ran before terminate() returned: nothing was tested";
  EXPECT_THROW(p.apply_async(square, 1), fibra::PoolClosed);
}

// Threads that submit while another terminates the pool: each submit either returns a Future,
// which then gives its value or PoolClosed, or throws PoolClosed on its own thread; none waits for
// ever (the inbox closes before what it holds fails).
TEST(Lifecycle, SubmitsFromThreadsDuringATerminateEachEndOneWayOrTheOther) {
  fibra::Pool p(2);
  std::atomic<bool> go{false};
  std::atomic<long> refused{0};
  std::vector<std::vector<fibra::Future<int>>> got(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      try {
        for (int i = 0;; ++i) {  // a burst, then one a millisecond until the pool is gone
          got[t].push_back(p.apply_async(sleepy, 1));
          if (i >= 20'000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      } catch (const fibra::PoolClosed&) {
        ++refused;
      }
    });
  go = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  p.terminate();
  call_within(bound, "the submitting threads, refused after terminate()", [&] {
    for (auto& t : threads) t.join();
    return 0;
  });
  EXPECT_EQ(refused.load(), 3) << "a thread's submit after terminate() did not throw PoolClosed";
  // (How many ran before the end depends on the machine's load: none, once, under ctest -j2
  // through MPI; what is checked is that each ends.)
  std::size_t closed = 0;
  for (auto& fs : got)
    for (std::size_t i = 0; i < fs.size(); ++i) {
      try {
        ASSERT_EQ(get_within(fs[i], bound, "sleepy(1) submitted during terminate"), 1) << i;
      } catch (const fibra::PoolClosed&) {
        ++closed;
      }
    }
  EXPECT_GT(closed, 0u) << "every call ran before the end: the terminate was not tested";
}

TEST(Lifecycle, JoinBeforeCloseIsAnError) {
  fibra::Pool p(1);
  try {
    p.join();
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(), "fibra: Pool::join() before Pool::close(): close the pool first");
  }
}

// Every call on a moved-from pool throws PoolClosed with the reason (it used to dereference null).
TEST(Lifecycle, AMovedFromPoolThrowsPoolClosed) {
  fibra::Pool a(1);
  fibra::Pool b(std::move(a));
  const auto in = range(4);
  auto expect_moved_from = [](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " did not throw";
    } catch (const fibra::PoolClosed& e) {
      EXPECT_STREQ(e.what(), "fibra: this Pool was moved from") << what;
    }
  };
  expect_moved_from([&] { a.map(square, in); }, "map");
  expect_moved_from([&] { a.map(square, in, {.checkpoint = "never_created.h5"}); }, "map with a checkpoint");
  expect_moved_from([&] { a.imap(square, in); }, "imap");
  expect_moved_from([&] { a.imap_unordered(square, in); }, "imap_unordered");
  expect_moved_from([&] { a.starmap(add3, std::vector<std::tuple<int, int, int>>{{1, 2, 3}}); }, "starmap");
  expect_moved_from([&] { a.apply_async(square, 3); }, "apply_async");
  expect_moved_from([&] { a.resize(2); }, "resize");
  expect_moved_from([&] { a.stats(); }, "stats");
  expect_moved_from([&] { a.size(); }, "size");
  expect_moved_from([&] { a.close(); }, "close");
  expect_moved_from([&] { a.terminate(); }, "terminate");
  EXPECT_EQ(call_within(bound, "map on the pool moved to b", [&] { return b.map(square, in); }),
            (std::vector<long>{0, 1, 4, 9}));
  a = std::move(b);  // a moved-from pool can be assigned to again
  EXPECT_EQ(call_within(bound, "map on the pool moved back to a", [&] { return a.map(square, in); }),
            (std::vector<long>{0, 1, 4, 9}));
  EXPECT_FALSE(std::filesystem::exists("never_created.h5"));
}

TEST(Lifecycle, TerminateFailsUnfinishedFutures) {
  fibra::Pool p(1);
  auto running = p.apply_async(sleepy, 5000);
  auto queued = p.apply_async(sleepy, 5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t = std::chrono::steady_clock::now();
  p.terminate();
  EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::seconds(4));
  EXPECT_THROW(get_within(running, bound, "the running sleepy(5000), failed by terminate()"), fibra::PoolClosed);
  EXPECT_THROW(get_within(queued, bound, "the queued sleepy(5000), failed by terminate()"), fibra::PoolClosed);
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);  // in spawned workers this never returns
  ::testing::InitGoogleTest(&argc, argv);
  fibra::Pool p(2);
  g_pool = &p;
  return RUN_ALL_TESTS();
}
