// Fault injection against real processes: executors and worker agents are killed (SIGKILL),
// stopped (SIGSTOP), crash on purpose, hang, or fail at random, while a call runs. Every test
// checks every result: exact values, none missing, none duplicated.
//
// Runs as `./fibra_fault_tests` (singleton) and under `mpirun --enable-recovery ...`; the same
// binary is started again as agents and executors. Markers under /tmp/fibra-faults-<pid>/ let a
// task know whether it runs for the first time (on any worker).
#include <fcntl.h>
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"

// While this file exists (in the working folder), every executor of this program dies as it starts.
constexpr const char* executors_die_marker = "fibra-test-executors-die-at-start";

/// One task's input: its index, an argument (which item misbehaves), and the run's marker folder id.
struct Item {
  int i = 0;
  int arg = -1;
  int run = 0;
};

/// A task's output, with the processes that computed it.
struct Out {
  long value = 0;
  int pid = 0;   // executor
  int ppid = 0;  // its agent
};

namespace {

std::string marker_dir(int run) { return "/tmp/fibra-faults-" + std::to_string(run); }

// True for exactly one call per (run, what, i), on whichever worker comes first.
bool first_time(const Item& it, const char* what) {
  const std::string path = marker_dir(it.run) + "/" + what + "-" + std::to_string(it.i);
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

void busy_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

Out work(Item it) {
  busy_ms(1);
  return {long(it.i) * it.i, ::getpid(), ::getppid()};
}
long segv_first_time(Item it) {
  if (it.i == it.arg && first_time(it, "segv")) ::raise(SIGSEGV);
  return long(it.i) * 3;
}
long poison(Item it) {
  if (it.i == it.arg) ::raise(SIGSEGV);
  return long(it.i) * 3;
}
long flaky_exit(Item it) {  // Fiber's error-handling test: each run of a task fails with probability 0.05
  thread_local std::mt19937 rng(std::random_device{}());
  if (std::uniform_real_distribution<double>(0, 1)(rng) < 0.05) ::_exit(7);
  return long(it.i) + 1000;
}
long flaky_throw(Item it) {
  thread_local std::mt19937 rng(std::random_device{}());
  if (std::uniform_real_distribution<double>(0, 1)(rng) < 0.05) throw std::runtime_error("unlucky");
  return long(it.i) + 1000;
}
long scribble_first_time(Item it) {  // writes garbage where the executor's results go, once
  if (it.i == it.arg && first_time(it, "scribble")) {
    const char junk[] = "\x10\0\0\0\0\0\0\0this is not a result frame";
    [[maybe_unused]] auto n = ::write(3, junk, sizeof junk - 1);
    busy_ms(100);  // the agent notices while this task still runs
  }
  return long(it.i) * 7;
}
long scribble_text_first_time(Item it) {  // text on fd 3: its first 8 bytes read as an absurd length
  if (it.i == it.arg && first_time(it, "scribble-text")) {
    const char text[] = "hello world, this is not a result frame\n";
    [[maybe_unused]] auto n = ::write(3, text, sizeof text - 1);
    busy_ms(100);
  }
  return long(it.i) * 7;
}
long crash_leaving_a_child_first_time(Item it) {  // a process it started keeps its socket open
  if (it.i == it.arg && first_time(it, "orphan-holder")) {
    const int copy = ::dup(3);  // not close-on-exec: the shell and its sleep inherit it
    (void)copy;
    [[maybe_unused]] int rc = std::system("sleep 15 &");
    ::raise(SIGSEGV);
  }
  return long(it.i) * 11;
}
long hang_on(Item it) {
  if (it.i == it.arg) std::this_thread::sleep_for(std::chrono::hours(1));
  return long(it.i) * 5;
}
long hang_first_time(Item it) {
  if (it.i == it.arg && first_time(it, "hang")) std::this_thread::sleep_for(std::chrono::hours(1));
  return long(it.i) * 5;
}

// The number of cores the calling process may run on (its affinity mask).
int cores_allowed(int) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
}
FIBRA_REMOTE(work);
FIBRA_REMOTE(cores_allowed);
FIBRA_REMOTE(segv_first_time);
FIBRA_REMOTE(poison);
FIBRA_REMOTE(flaky_exit);
FIBRA_REMOTE(flaky_throw);
FIBRA_REMOTE(hang_on);
FIBRA_REMOTE(scribble_first_time);
FIBRA_REMOTE(scribble_text_first_time);
FIBRA_REMOTE(crash_leaving_a_child_first_time);
std::size_t length(std::string s) { return s.size(); }
FIBRA_REMOTE(length);
std::string nested_pool(int) {  // what a Pool created inside a task says
  try {
    fibra::Pool inner(1);
    return "no error";
  } catch (const fibra::ConfigError& e) {
    return e.what();
  }
}
FIBRA_REMOTE(nested_pool);
FIBRA_REMOTE(hang_first_time);

namespace {

using fibra_test::call_within;
using fibra_test::get_within;

// How long a test waits for a call (a loaded 2-core machine: tens of seconds, far below ctest's timeout).
constexpr std::chrono::seconds bound{60};

// pool.map(fn, in, o) within `bound`: past it the test program ends, naming the call (call_within).
template <class F, class In>
auto map_within(fibra::Pool& pool, std::string_view name, F fn, const In& in, fibra::MapOptions o = {},
                std::source_location where = std::source_location::current()) {
  const std::string what = "map of " + std::string(name) + " over " + std::to_string(in.size()) + " items";
  return call_within(
      bound, what, [&] { return pool.map(fn, in, o); }, where);
}

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = static_cast<int>(::getpid()) * 100 + counter_++;
    std::filesystem::create_directories(marker_dir(run_));
  }
  void TearDown() override { std::filesystem::remove_all(marker_dir(run_)); }

  std::vector<Item> items(int n, int arg = -1) const {
    std::vector<Item> v(n);
    for (int i = 0; i < n; ++i) v[i] = {i, arg, run_};
    return v;
  }

  int run_ = 0;
  static inline int counter_ = 0;
};

// Runs `work` over 4000 items with imap_unordered and calls `strike(out)` once, when `at` results
// are in. Checks that every index comes exactly once with its exact value; returns the outputs.
template <class Strike>
std::vector<Out> run_and_strike(fibra::Pool& pool, const std::vector<Item>& in, std::size_t at, Strike strike) {
  std::vector<Out> got(in.size());
  std::vector<int> seen(in.size(), 0);
  std::size_t n = 0;
  call_within(bound,
              "imap_unordered of work over " + std::to_string(in.size()) + " items, struck at " + std::to_string(at),
              [&] {
                for (auto&& [index, out] : pool.imap_unordered(work, in, {.chunksize = 20})) {
                  EXPECT_LT(index, in.size());
                  EXPECT_EQ(seen[index]++, 0) << "index " << index << " came twice";
                  got[index] = out;
                  if (++n == at) strike(out);
                }
              });
  EXPECT_EQ(n, in.size()) << "results missing";
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(seen[i], 1) << "index " << i;
    EXPECT_EQ(got[i].value, long(i) * long(i)) << "index " << i;
  }
  return got;
}

// SIGKILLs the executor that computed the 1200th result mid-run; its agent must survive and start a
// new executor, which computes later results.
void kill_an_executor_and_see_its_agent_replace_it(fibra::Pool& pool, const std::vector<Item>& in) {
  int victim = 0, victim_agent = 0;
  auto got = run_and_strike(pool, in, 1200, [&](const Out& o) {
    victim = o.pid;
    victim_agent = o.ppid;
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
  });
  bool replaced = false;
  for (auto& o : got) replaced |= o.ppid == victim_agent && o.pid != victim;
  EXPECT_TRUE(replaced) << "no result came from a new executor of agent " << victim_agent;
}

TEST_F(Faults, AnExecutorKilledMidChunkCostsARetryNotAResult) {
  fibra::Pool pool(3);
  kill_an_executor_and_see_its_agent_replace_it(pool, items(4000));
  auto again = map_within(pool, "work", work, items(300));
  for (int i = 0; i < 300; ++i) ASSERT_EQ(again[i].value, long(i) * i);
}

TEST_F(Faults, AnAgentKilledMidMapIsReplacedAndItsChunksRunElsewhere) {
  fibra::Pool pool(3);
  int victim = 0;
  auto got = run_and_strike(pool, items(4000), 2400, [&](const Out& o) {
    victim = o.ppid;
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
  });
  // The loss is declared before the next map: until the killed agent has exited (it needs the CPU
  // to, and the suite loads both cores), its executors still take batches from their lanes and
  // answer with its pid (seen in a full run: 4 agents answered, the victim among them).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pool.stats().workers_lost == 0 && std::chrono::steady_clock::now() < deadline) busy_ms(20);
  ASSERT_EQ(pool.stats().workers_lost, 1u) << "the killed agent was not declared lost within 30 s";
  std::set<int> agents;
  for (auto& o : map_within(pool, "work", work, items(600), {.chunksize = 1})) agents.insert(o.ppid);
  EXPECT_EQ(agents.count(victim), 0u);
  EXPECT_EQ(pool.size(), 3);
  // The replacement takes part: after the loss there are again 3 agents answering.
  EXPECT_EQ(agents.size(), 3u) << "the lost worker was not replaced";
}

// A frozen worker (a hung node, say): its agent and its executor are stopped. (Its executor alone
// would go on taking work through its lane until the silence verdict.)
TEST_F(Faults, AStoppedAgentIsDeclaredLostBySilence) {
  fibra::Pool pool(3, {.heartbeat_s = 0.2, .worker_silence_s = 1.5});
  int victim = 0;
  const auto t0 = std::chrono::steady_clock::now();
  run_and_strike(pool, items(4000), 1200, [&](const Out& o) {
    victim = o.ppid;
    ASSERT_EQ(::kill(victim, SIGSTOP), 0);  // alive to the kernel, silent to the driver
    ASSERT_EQ(::kill(o.pid, SIGSTOP), 0);
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 30.0);
  std::set<int> agents;
  for (auto& o : map_within(pool, "work", work, items(300), {.chunksize = 1})) agents.insert(o.ppid);
  EXPECT_EQ(agents.count(victim), 0u);
  ::kill(victim, SIGKILL);  // the stopped agent was started by this test's pool
}

// SIGSTOP a worker (agent and executor) until it is declared lost, then SIGCONT it: the results
// its executor finishes then reach the driver late and are dropped; every index still comes
// exactly once.
TEST_F(Faults, ALateResultFromAWorkerDeclaredLostIsDroppedAndEveryIndexComesOnce) {
  fibra::Pool pool(3, {.heartbeat_s = 0.2, .worker_silence_s = 1.5, .driver_silence_s = 8});
  int victim = 0;
  std::thread resume;
  run_and_strike(pool, items(4000), 1200, [&](const Out& o) {
    victim = o.ppid;
    const int executor = o.pid;
    ASSERT_EQ(::kill(executor, SIGSTOP), 0);
    ASSERT_EQ(::kill(victim, SIGSTOP), 0);
    resume = std::thread([&pool, victim, executor] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (pool.stats().workers_lost == 0 && std::chrono::steady_clock::now() < deadline) busy_ms(20);
      ::kill(executor, SIGCONT);  // declared lost: now let it speak
      ::kill(victim, SIGCONT);
    });
  });
  resume.join();
  EXPECT_EQ(pool.stats().workers_lost, 1u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (pool.stats().late_results_dropped == 0 && std::chrono::steady_clock::now() < deadline) busy_ms(20);
  EXPECT_GE(pool.stats().late_results_dropped, 1u) << "the continued agent's results were not read, or not dropped";
  auto again = map_within(pool, "work", work, items(300));
  for (int i = 0; i < 300; ++i) ASSERT_EQ(again[i].value, long(i) * i);
  ::kill(victim, SIGKILL);  // started by this test's pool; its orphan guard would end it later
}

TEST_F(Faults, TheLineAboutALostWorkerGoesToTheLogSinkAndALevelSilencesIt) {
  std::vector<std::string> lines;
  fibra::log::set_sink([&](fibra::log::Level l, std::string_view s) {
    if (l == fibra::log::Level::warning) lines.emplace_back(s);
  });
  fibra::Pool pool(2);
  int victim = 0;
  run_and_strike(pool, items(2000), 600, [&](const Out& o) { ::kill(victim = o.ppid, SIGKILL); });
  const std::string lost = "fibra: worker ";
  ASSERT_EQ(
      std::count_if(lines.begin(), lines.end(),
                    [&](auto& s) { return s.starts_with(lost) && s.find(" was lost: its process is gone") != s.npos; }),
      1)
      << (lines.empty() ? "no line" : lines.front());
  lines.clear();
  fibra::log::set_level(fibra::log::Level::error);
  run_and_strike(pool, items(2000), 600, [&](const Out& o) { ::kill(o.ppid, SIGKILL); });
  EXPECT_TRUE(lines.empty()) << lines.front();
  fibra::log::set_level(fibra::log::Level::info);
  fibra::log::set_sink({});
}

TEST_F(Faults, APoolOfMoreThan32WorkersPerCoreGetsAWarningNamingTheNumbers) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (cores > 2) GTEST_SKIP() << "a crowded pool here would need " << 32 * cores + 1 << " workers";
  std::vector<std::string> lines;
  fibra::log::set_sink([&](fibra::log::Level, std::string_view s) { lines.emplace_back(s); });
  { fibra::Pool fine(32 * cores); }
  EXPECT_TRUE(lines.empty()) << lines.front();
  {
    fibra::Pool crowded(32 * cores + 1);
    EXPECT_EQ(map_within(crowded, "work", work, items(200), {.chunksize = 1}).size(), 200u);
  }
  fibra::log::set_sink({});
  const std::string n = std::to_string(32 * cores + 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "fibra: Pool(" + n + ") starts " + n + " workers on a machine with " + std::to_string(cores) +
                          " cores, 33 per core: each gets a sliver of a core, and their start alone takes a while. "
                          "Ask for fewer, or run across more nodes.");
}

TEST_F(Faults, ATaskThatSegfaultsOnItsFirstAttemptSucceedsOnTheSecond) {
  fibra::Pool pool(2);
  for (std::size_t chunksize : {1u, 7u}) {
    SetUp();
    auto r = map_within(pool, "segv_first_time", segv_first_time, items(200, 77), {.chunksize = chunksize});
    ASSERT_EQ(r.size(), 200u);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(r[i], 3L * i) << "chunksize " << chunksize;
    EXPECT_TRUE(std::filesystem::exists(marker_dir(run_) + "/segv-77"));  // the crash did happen
  }
}

// Fiber's own error-handling test, ported: 300 tasks, each run fails with probability 0.05.
TEST_F(Faults, FibersRandomFailureTestOrderedAndUnordered) {
  fibra::Pool pool(3);
  for (std::size_t chunksize : {1u, 5u}) {
    // 20 retries: at chunksize 5 a chunk fails 23% of the time; 21 failures in a row do not happen.
    fibra::MapOptions o{.chunksize = chunksize, .retries = 20};
    auto r = map_within(pool, "flaky_exit", flaky_exit, items(300), o);
    for (int i = 0; i < 300; ++i) ASSERT_EQ(r[i], i + 1000L);
    std::vector<int> seen(300, 0);
    call_within(bound, "imap_unordered of flaky_exit over 300 items", [&] {
      for (auto&& [index, v] : pool.imap_unordered(flaky_exit, items(300), o)) {
        ASSERT_EQ(v, long(index) + 1000);
        ++seen[index];
      }
    });
    for (int i = 0; i < 300; ++i) ASSERT_EQ(seen[i], 1) << i;
    int k = 0;
    call_within(bound, "imap of flaky_exit over 300 items", [&] {
      for (long v : pool.imap(flaky_exit, items(300), o)) ASSERT_EQ(v, k++ + 1000L);
    });
    EXPECT_EQ(k, 300);
    o.retry_exceptions = true;
    auto t = map_within(pool, "flaky_throw", flaky_throw, items(300), o);
    for (int i = 0; i < 300; ++i) ASSERT_EQ(t[i], i + 1000L);
  }
}

TEST_F(Faults, ExceptionsAreNotRetriedUnlessAsked) {
  fibra::Pool pool(2);
  // With probability 1 - 0.95^300 some task throws; without retries the map fails with it.
  int failed = 0;
  for (int k = 0; k < 3; ++k) {
    try {
      map_within(pool, "flaky_throw", flaky_throw, items(300), {.chunksize = 1});
    } catch (const fibra::RemoteError& e) {
      EXPECT_EQ(e.remote_message(), "unlucky");
      EXPECT_EQ(std::string(e.what()).find("attempt 2"), std::string::npos) << e.what();
      ++failed;
    }
  }
  EXPECT_GE(failed, 2);
}

TEST_F(Faults, APoisonItemFailsTheCallWithEveryAttemptNamed) {
  fibra::Pool pool(2);
  try {
    map_within(pool, "poison", poison, items(300, 123), {.chunksize = 10, .retries = 2});
    FAIL() << "no error";
  } catch (const fibra::ExecutorCrashed& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.site().item, 123u);
    EXPECT_EQ(e.site().function, "poison");
    EXPECT_EQ(m.rfind("fibra: poison failed 3 times on items 120..129; no retries left (retries = 2)", 0), 0u) << m;
    for (int a = 1; a <= 3; ++a) {
      EXPECT_NE(m.find("\n  attempt " + std::to_string(a) +
                       ": the executor running poison on item 123 was killed by signal 11 (Segmentation fault)"),
                std::string::npos)
          << m;
    }
    EXPECT_EQ(m.find("attempt 4"), std::string::npos) << m;
  }
  // Collected instead of thrown: every other item is exact, and the poison item is the one error.
  for (std::size_t chunksize : {1u, 10u}) {
    std::vector<fibra::ItemError> errors;
    auto r =
        map_within(pool, "poison", poison, items(300, 123), {.chunksize = chunksize, .retries = 1, .errors = &errors});
    ASSERT_EQ(r.size(), 300u);
    for (int i = 0; i < 300; ++i) ASSERT_EQ(r[i], i == 123 ? 0L : 3L * i) << i;
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].index, 123u);
    EXPECT_NE(errors[0].message.find("on item 123 was killed by signal 11"), std::string::npos) << errors[0].message;
    EXPECT_THROW(std::rethrow_exception(errors[0].error), fibra::ExecutorCrashed);
  }
}

TEST_F(Faults, AHungTaskIsKilledAtItsTimeLimit) {
  fibra::Pool pool(2);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    map_within(pool, "hang_on", hang_on, items(40, 9), {.chunksize = 4, .retries = 1, .task_timeout_s = 0.5});
    FAIL() << "no error";
  } catch (const fibra::TaskTimeout& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.site().item, 9u);
    EXPECT_NE(m.find("attempt 1: hang_on on item 9 ran for 0.5 s, past its time limit of 0.5 s, and its "
                     "executor was killed"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("attempt 2: "), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  // Hangs once: the retry succeeds and every result is exact.
  auto r = map_within(pool, "hang_first_time", hang_first_time, items(40, 9), {.chunksize = 4, .task_timeout_s = 0.5});
  for (int i = 0; i < 40; ++i) ASSERT_EQ(r[i], 5L * i);
  // A time limit that is never reached changes nothing.
  auto q = map_within(pool, "hang_first_time", hang_first_time, items(40, -1), {.task_timeout_s = 30});
  for (int i = 0; i < 40; ++i) ASSERT_EQ(q[i], 5L * i);
}

TEST_F(Faults, ResizeWhileAMapRunsKeepsEveryResult) {
  fibra::Pool pool(2);
  std::size_t n = 0;
  std::vector<int> seen(4000, 0);
  std::set<int> ran;  // agents that ran a task
  call_within(bound, "imap_unordered of work over 4000 items, resized on the way", [&] {
    for (auto&& [index, out] : pool.imap_unordered(work, items(4000), {.chunksize = 20})) {
      ASSERT_EQ(out.value, long(index) * long(index));
      ++seen[index];
      ran.insert(out.ppid);
      if (++n == 1000) pool.resize(3);
      if (n == 2500) pool.resize(1);
    }
  });
  for (int i = 0; i < 4000; ++i) ASSERT_EQ(seen[i], 1) << i;
  EXPECT_EQ(pool.size(), 1);
  // The retired agents have left, not only stopped taking work: their processes end at their bye
  // (before, they waited in MPI_Comm_disconnect until the pool ended).
  std::set<int> agents;
  for (const Out& o : map_within(pool, "work", work, items(200), {.chunksize = 10})) agents.insert(o.ppid);
  ASSERT_EQ(agents.size(), 1u);
  const int remaining = *agents.begin();
  std::set<int> retired;
  for (int pid : ran)
    if (pid != remaining) retired.insert(pid);
  ASSERT_GE(retired.size(), 1u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int pid : retired) {
    while (::kill(pid, 0) == 0 && std::chrono::steady_clock::now() < deadline) busy_ms(20);
    EXPECT_NE(::kill(pid, 0), 0) << "retired agent " << pid << " is still running";
  }
}

TEST_F(Faults, GarbageOnAnExecutorsSocketCostsThatChunkAnAttemptNotTheAgent) {
  fibra::Pool pool(2);
  // The agents as the pool lists them (not the ones a short map happened to reach: an idle
  // worker may take back every batch of a descheduled one, and did once in CI).
  auto agent_pids = [&] {
    std::set<long> pids;
    for (const auto& w : pool.workers())
      if (w.state == "ready") pids.insert(w.pid);
    return pids;
  };
  const std::set<long> agents_before = agent_pids();
  ASSERT_EQ(agents_before.size(), 2u);
  auto r = map_within(pool, "scribble_first_time", scribble_first_time, items(200, 50), {.chunksize = 10});
  for (int i = 0; i < 200; ++i) ASSERT_EQ(r[i], 7L * i) << i;
  EXPECT_TRUE(std::filesystem::exists(marker_dir(run_) + "/scribble-50"));
  EXPECT_GE(pool.stats().attempts_failed, 1u);
  EXPECT_EQ(pool.stats().workers_lost, 0u) << "the agent must survive its executor's garbage";
  std::set<int> ran_after;
  for (auto& o : map_within(pool, "work", work, items(40), {.chunksize = 1})) ran_after.insert(o.ppid);
  EXPECT_EQ(agent_pids(), agents_before) << "an agent was replaced";
  for (int pid : ran_after) EXPECT_EQ(agents_before.count(pid), 1u) << "a task ran under agent " << pid;
}

TEST_F(Faults, AChunkOverMpisLimitIsRefusedInTheCallersThreadAndThePoolStaysUsable) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "4 GiB of memory and 9 s: run once, as ./app";
  fibra::Pool pool(1);
  std::string big(std::size_t(1) << 31, 'x');  // 2 GiB: its message would be over MPI's int count
  try {
    pool.apply_async(length, big);
    ADD_FAILURE() << "no error for a 2 GiB argument";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("over the 2147479551 that one MPI message can carry (2 GiB); use a smaller "
                                         "chunksize, or smaller items"),
              std::string::npos)
        << e.what();
  }
  big = std::string();
  EXPECT_EQ(get_within(pool.apply_async(length, std::string(1000, 'y')), bound, "length of 1000 characters"), 1000u);
}

TEST_F(Faults, APoolCreatedInsideATaskSaysToUseThePoolThatRunsIt) {
  fibra::Pool pool(1);
  EXPECT_EQ(get_within(pool.apply_async(nested_pool, 0), bound, "nested_pool(0)"),
            "fibra: a Pool was created inside a remote function, on a worker: a task uses the pool that runs it "
            "instead, through fibra::default_pool() (its map, imap, submit) or fibra::submit "
            "(docs/tasks.md#nested-tasks)");
}

// Executors that die as they start (a broken static initializer, say): the pool still starts, and the
// call fails with the crash loop named, within seconds, not after start_timeout_s.
TEST_F(Faults, ExecutorsThatDieAsTheyStartFailTheCallNotThePoolsStart) {
  { std::ofstream(executors_die_marker) << "1"; }
  struct Remove {
    ~Remove() { std::filesystem::remove(executors_die_marker); }
  } remove;
  const auto t0 = std::chrono::steady_clock::now();
  fibra::Pool pool(1, {.start_timeout_s = 30});
  try {
    map_within(pool, "work", work, items(10), {.chunksize = 10, .retries = 1});
    ADD_FAILURE() << "no error";
  } catch (const fibra::ExecutorCrashed& e) {
    EXPECT_NE(std::string(e.what()).find("exited with status 9 while running it outside any task, again and again"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15.0);
}

TEST_F(Faults, LaterCallsOnAStoppedPoolSayWhyItStopped) {
  fibra::Pool a(1), b(1);
  a.close();
  b.terminate();
  auto message = [](fibra::Pool& p) {
    try {
      p.apply_async(length, std::string("z"));
    } catch (const fibra::PoolClosed& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(a), "fibra: work was submitted to a pool that was closed (Pool::close())");
  try {
    b.map(length, std::vector<std::string>{"x"});
    ADD_FAILURE() << "no error";
  } catch (const fibra::PoolClosed& e) {
    EXPECT_STREQ(e.what(),
                 "fibra: map() on a pool that was terminated (Pool::terminate(), ~Pool(), or the end of "
                 "fibra::Runtime)");
  }
  EXPECT_EQ(message(b),
            "fibra: work was submitted to a pool that was terminated (Pool::terminate(), ~Pool(), or the "
            "end of fibra::Runtime)");
}

TEST_F(Faults, TextOnAnExecutorsSocketIsRefusedAsAFrameLengthNotTheAgentsEnd) {
  fibra::Pool pool(2);
  auto r = map_within(pool, "scribble_text_first_time", scribble_text_first_time, items(200, 50), {.chunksize = 10});
  for (int i = 0; i < 200; ++i) ASSERT_EQ(r[i], 7L * i) << i;
  EXPECT_GE(pool.stats().attempts_failed, 1u);
  EXPECT_EQ(pool.stats().workers_lost, 0u) << "the agent must survive a frame length of 8e18";
}

TEST_F(Faults, AnExecutorThatCrashesWhileItsChildHoldsItsSocketIsStillSeenDead) {
  fibra::Pool pool(2);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = map_within(pool, "crash_leaving_a_child_first_time", crash_leaving_a_child_first_time, items(100, 30),
                      {.chunksize = 5});
  for (int i = 0; i < 100; ++i) ASSERT_EQ(r[i], 11L * i) << i;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
      << "the crash was noticed only when the child let go of the socket";
  EXPECT_GE(pool.stats().attempts_failed, 1u);
}

// Agents that run several workers (executors) each: PoolOptions::workers_per_agent.

// The processes that ran a map of `in`, item by item: executors (pids) and agents (their parents).
// Every value is checked.
struct Processes {
  std::set<int> executors, agents;
};
Processes who_ran(fibra::Pool& pool, const std::vector<Item>& in) {
  Processes p;
  auto r = map_within(pool, "work", work, in, {.chunksize = 1});
  for (int i = 0; i < int(in.size()); ++i) {
    EXPECT_EQ(r[i].value, long(i) * i) << i;
    p.executors.insert(r[i].pid);
    p.agents.insert(r[i].ppid);
  }
  return p;
}

TEST_F(Faults, AgentsRunSeveralWorkersEachAndAllOfThemWork) {
  fibra::Pool pool(6, {.workers_per_agent = 3});
  EXPECT_EQ(pool.size(), 6);
  const Processes p = who_ran(pool, items(1200));
  EXPECT_EQ(p.agents.size(), 2u) << "6 workers, 3 per agent";
  EXPECT_EQ(p.executors.size(), 6u) << "every worker took part";
}

TEST_F(Faults, AutomaticAgentsSpreadTenWorkersOverFour) {
  fibra::Pool pool(10);
  const Processes p = who_ran(pool, items(2000));
  EXPECT_EQ(p.agents.size(), 4u) << "ceil(10 / 4) = 3 per agent: agents of 3, 3, 3 and 1";
  EXPECT_EQ(p.executors.size(), 10u);
}

// Open MPI binds a spawned job of one or two processes to a core by default: an agent's executors
// would then all share that one core. The driver spawns its agents unbound.
TEST_F(Faults, ASharedAgentsWorkersMayRunOnEveryCoreTheDriverMay) {
  const int mine = cores_allowed(0);
  if (mine < 2) GTEST_SKIP() << "the driver may run on one core only";
  fibra::Pool pool(2, {.workers_per_agent = 2});
  const auto r = map_within(pool, "cores_allowed", cores_allowed, std::vector<int>(40, 0), {.chunksize = 1});
  for (int n : r) ASSERT_EQ(n, mine) << "a worker is bound to fewer cores than the driver may use";
}

TEST_F(Faults, AnExecutorKilledInASharedAgentCostsOnlyItsOwnChunks) {
  fibra::Pool pool(4, {.workers_per_agent = 2});
  kill_an_executor_and_see_its_agent_replace_it(pool, items(4000));  // its other worker kept working
  EXPECT_EQ(pool.stats().workers_lost, 0u);
}

TEST_F(Faults, ASharedAgentKilledMidMapCostsItsWorkersChunksAndIsReplaced) {
  fibra::Pool pool(4, {.workers_per_agent = 2});
  int victim = 0;
  run_and_strike(pool, items(4000), 2000, [&](const Out& o) {
    victim = o.ppid;
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
  });
  EXPECT_EQ(pool.stats().workers_lost, 1u);
  const Processes p = who_ran(pool, items(800));
  EXPECT_EQ(p.agents.count(victim), 0u);
  EXPECT_EQ(p.agents.size(), 2u) << "the lost agent was not replaced";
  EXPECT_EQ(p.executors.size(), 4u) << "the replacement runs 2 workers again";
}

TEST_F(Faults, AHangingTaskInASharedAgentTimesOutWhileItsNeighbourWorks) {
  fibra::Pool pool(2, {.workers_per_agent = 2});
  auto r = map_within(pool, "hang_first_time", hang_first_time, items(40, 9), {.chunksize = 4, .task_timeout_s = 0.5});
  for (int i = 0; i < 40; ++i) ASSERT_EQ(r[i], 5L * i);
  EXPECT_GE(pool.stats().attempts_failed, 1u);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--fibra-executor") == 0 && std::filesystem::exists(executors_die_marker))
    std::_Exit(9);
  fibra::Runtime rt(argc, argv);  // in spawned workers this never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
