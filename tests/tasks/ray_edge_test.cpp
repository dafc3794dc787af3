// Edges of tasks and actors where Ray users push hardest (issue 28), each reproduced first:
//  - a finished actor call is delivered when the next call of its batch ends the process;
//  - a closed pool refuses a submit with a Future argument at once, as one without;
//  - a checkpointed map that a task runs is folded into its .h5 when the worker stops.
// Every wait on another process is bounded and names what did not arrive (tests/common/bounded.hpp).
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <future>
#include <ctime>
#include <unistd.h>
#include <fcntl.h>
#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../common/bounded.hpp"
#include "../common/errors.hpp"

using namespace std::chrono_literals;
using fibra_test::error_of;
using fibra_test::get_within;
using fibra_test::wait_within;

namespace {
constexpr auto bound = 60s;

}  // namespace

class Loud {
 public:
  explicit Loud(long start) : value_(start) {}
  long add_loud(long d) {
    value_ += d;
    std::printf("value now %ld\n", value_);
    std::fflush(stdout);
    return value_;
  }
  long abort_now() { std::abort(); }

 private:
  long value_;
};
FIBRA_ACTOR(Loud, long);
FIBRA_ACTOR_METHOD(Loud, add_loud);
FIBRA_ACTOR_METHOD(Loud, abort_now);

int ident(int x) { return x; }
FIBRA_REMOTE(ident);
int plus(int a, int b) { return a + b; }
FIBRA_REMOTE(plus);

long square(long x) { return x * x; }
FIBRA_REMOTE(square);

// A task that runs a checkpointed map on the pool that runs it; returns the sum.
long checkpointed_sum(std::string path) {
  std::vector<long> in(200);
  std::iota(in.begin(), in.end(), 0L);
  const std::vector<long> out = fibra::default_pool().map(square, in, {.chunksize = 10, .checkpoint = path});
  return std::accumulate(out.begin(), out.end(), 0L);
}
FIBRA_REMOTE(checkpointed_sum);

// add_loud(1) ran (it printed) when abort_now() ended the process right after it, in one batch:
// its result must be delivered, and only abort_now fail, saying it died in that call.
TEST(RayEdges, AFinishedActorCallIsDeliveredWhenTheNextOneAborts) {
  fibra::Pool pool(1);
  for (int round = 0; round < 5; ++round) {
    auto c = fibra::Actor<Loud>::start({.pool = &pool}, 1L);
    auto added = c.call(&Loud::add_loud, 1L);
    auto aborted = c.call(&Loud::abort_now);
    EXPECT_EQ(get_within(added, bound, "Loud::add_loud(1)"), 2) << "round " << round;
    const std::string e = error_of([&] { get_within(aborted, bound, "Loud::abort_now()"); });
    EXPECT_NE(e.find("Loud::abort_now"), std::string::npos) << "round " << round << ": " << e;
    EXPECT_EQ(e.find("Loud::add_loud"), std::string::npos) << "round " << round << ": " << e;
  }
}

TEST(RayEdges, AClosedPoolRefusesASubmitWithAFutureArgumentAtOnce) {
  fibra::Pool pool(1);
  auto a = pool.submit(ident, 20);
  pool.close();
  const std::string closed = error_of([&] { pool.submit(plus, a, 1); });
  EXPECT_NE(closed.find("work was submitted to a pool that was closed"), std::string::npos) << closed;
  EXPECT_EQ(get_within(a, bound, "ident(20)"), 20);
  pool.join();
  const std::string joined = error_of([&] { pool.submit(plus, a, 1); });
  EXPECT_NE(joined.find("work was submitted to a pool that was joined"), std::string::npos) << joined;
  EXPECT_THROW(pool.submit(plus, a, 1), fibra::PoolClosed);
}

// Read by Debian's h5py, not by fibra: the file a task's checkpointed map wrote is complete, and
// nothing of the write is left beside it.
TEST(RayEdges, ACheckpointedMapInsideATaskIsFoldedIntoItsFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fibra-ray-edge-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "inner.h5").string();
  long expected = 0;
  for (long i = 0; i < 200; ++i) expected += i * i;
  {
    fibra::Pool pool(1);
    EXPECT_EQ(get_within(pool.apply_async(checkpointed_sum, path), bound, "checkpointed_sum"), expected);
    pool.close();
    pool.join();  // the worker stops: what it wrote must be whole by then
  }
  const std::string check =
      "/usr/bin/python3 -c \"import h5py, sys; f = h5py.File(sys.argv[1], 'r'); "
      "a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}; "
      "print('n_done', int(a['n_done']), 'state', a['state'])\" " +
      path + " > " + (dir / "check.out").string() + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0);
  std::string out;
  if (std::FILE* f = std::fopen((dir / "check.out").c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, f)) out += buf;
    std::fclose(f);
  }
  EXPECT_NE(out.find("n_done 200 state complete"), std::string::npos) << out;
  for (const char* ext : {".tmp", ".journal"})
    EXPECT_FALSE(std::filesystem::exists(path + ext)) << path + ext << " left behind";
  std::filesystem::remove_all(dir);
}

class Cell {
 public:
  explicit Cell(long v) : v_(v) {}
  long get() const { return v_; }

 private:
  long v_;
};
FIBRA_ACTOR(Cell, long);
FIBRA_ACTOR_METHOD(Cell, get);

// The mean proportional set size (Pss, in kB) of the processes the agents of `pool` started (its
// workers' executors and its actors' processes): what each costs in memory, shared pages split.
double mean_child_pss_kib(const fibra::Pool& pool) {
  long total = 0, count = 0;
  for (const auto& w : pool.workers()) {
    std::ifstream children("/proc/" + std::to_string(w.pid) + "/task/" + std::to_string(w.pid) + "/children");
    for (long child; children >> child;) {
      std::ifstream rollup("/proc/" + std::to_string(child) + "/smaps_rollup");
      for (std::string line; std::getline(rollup, line);)
        if (line.rfind("Pss:", 0) == 0) {
          total += std::atol(line.c_str() + 4);
          ++count;
        }
    }
  }
  return count ? double(total) / double(count) : 0.0;
}

// 2,000 actors on 2 workers (about 2 MB of memory each): the agents start their processes while
// the heartbeats go on, so no worker is declared lost and every call returns its own value. It
// prints the start rate and the memory per actor. (Before: every worker lost after
// worker_silence_s, all calls failed.) RAY_EDGE_ACTORS changes the count.
TEST(RayEdges, TwoThousandActorsStartWithoutStarvingTheHeartbeats) {
  const long n = std::getenv("RAY_EDGE_ACTORS") ? std::atol(std::getenv("RAY_EDGE_ACTORS")) : 2000;
  fibra::Pool pool(2, {.worker_silence_s = 10});
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<fibra::Actor<Cell>> cells;
  std::vector<fibra::Future<long>> got;
  for (long i = 0; i < n; ++i) {
    cells.push_back(fibra::Actor<Cell>::start({.pool = &pool}, i));
    got.push_back(cells.back().call(&Cell::get));
  }
  long wrong = 0;
  for (long i = 0; i < n; ++i) {
    try {
      if (get_within(got[std::size_t(i)], 300s, "Cell::get of one of the actors") != i) ++wrong;
    } catch (const std::exception& e) {
      if (++wrong <= 3) ADD_FAILURE() << "actor " << i << ": " << e.what();
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(wrong, 0) << "of " << n << " actors";
  EXPECT_EQ(pool.stats().workers_lost, 0u);
  std::printf("%ld actors started and called in %.2f s: %.0f actors/s; %.2f MB of memory each (Pss)\n", n, s,
              double(n) / s, mean_child_pss_kib(pool) / 1024.0);
}

// A task that submits itself, `n` levels down, each level waiting for the one below.
long descend(long n) { return n == 0 ? 0 : fibra::submit(descend, n - 1).get() + 1; }
FIBRA_REMOTE(descend);

// Depth 20,000 on 2 workers (issue 28, item 1): each wait runs the tasks that arrive meanwhile,
// and ran them on the waiting task's stack, which overflowed near depth 5,000 (a segfault in the
// executor, a hang in the driver). The answer, n, is the count of levels. RAY_EDGE_DEPTH changes it.
TEST(RayEdges, DeepRecursionOfNestedTasksFinishes) {
  const long depth = std::getenv("RAY_EDGE_DEPTH") ? std::atol(std::getenv("RAY_EDGE_DEPTH")) : 20000;
  fibra::Pool pool(2);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(get_within(pool.submit(descend, depth), 300s, "descend(" + std::to_string(depth) + ")"), depth);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(pool.stats().workers_lost, 0u);
  std::printf("nested tasks %ld deep in %.2f s\n", depth, s);
}

// Recurses until its stack runs out (the volatile array keeps each frame from being folded away).
long bottomless(long n) {
  volatile char frame[512];
  frame[0] = static_cast<char>(n);
  return bottomless(n + 1) + frame[0];
}
FIBRA_REMOTE(bottomless);

// A stack that does run out is named: an ExecutorCrashed that says "stack overflow", after the
// chunk's retries, rather than "killed by signal 11" and nothing more.
TEST(RayEdges, AStackOverflowIsReportedAsOne) {
  fibra::Pool pool(1, {.retries = 1});
  auto f = pool.submit(bottomless, 0L);
  wait_within(f, bound, "bottomless(0)");
  try {
    f.get();
    ADD_FAILURE() << "bottomless returned";
  } catch (const fibra::ExecutorCrashed& e) {
    EXPECT_NE(std::string(e.what()).find("stack overflow"), std::string::npos) << e.what();
  }
}

// A host that does not exist (a typo in PoolOptions::hosts, or a SLURM_JOB_NODELIST seen outside
// its allocation): Pool() throws within start_timeout_s, naming the host. (Before: it never returned.)
TEST(RayEdges, AnUnreachableHostFailsWithinTheStartTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = fibra_test::call_within(120s, "Pool(1) on host nosuchhost.invalid", [] {
    return error_of([] { fibra::Pool pool(1, {.start_timeout_s = 10, .hosts = {"nosuchhost.invalid"}}); });
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(e.find("nosuchhost.invalid"), std::string::npos) << e;
  EXPECT_LT(s, 15.0) << e;
}

// A host that resolves but where nothing answers (TEST-NET-1, RFC 5737): Open MPI's spawn never
// returns, and cannot be called off, so the program ends after start_timeout_s and a grace, with
// a message naming the host (ctest tasks.unreachable_host runs it alone and reads that message).
TEST(RayEdgesExit, AHostWhereNothingAnswersEndsTheProgramWithAMessage) {
  if (!std::getenv("RAY_EDGE_DEAD_HOST")) GTEST_SKIP() << "run by ctest tasks.unreachable_host";
  fibra::Pool pool(1, {.start_timeout_s = 5, .hosts = {"192.0.2.1"}});
  ADD_FAILURE() << "a pool started on 192.0.2.1";
}

// Sleeps `ms`; returns its pid, and when it began and ended (CLOCK_MONOTONIC, one clock for all
// the processes of this host).
std::vector<double> nap_ms(int ms) {
  const auto mono = [] {
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  const double began = mono();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {double(::getpid()), began, mono()};
}
FIBRA_REMOTE(nap_ms);

// nap_ms, each start appended to the file `log` as a line "<ms>" (O_APPEND: whole lines from any
// process), so that a test counts the runs of each task, a run whose result was dropped included.
std::vector<double> nap_ms_logged(int ms, std::string log) {
  const std::string line = std::to_string(ms) + "\n";
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, line.data(), line.size()) != ssize_t(line.size()))
    throw std::runtime_error("cannot append to " + log);
  ::close(fd);
  return nap_ms(ms);
}
FIBRA_REMOTE(nap_ms_logged);

// How many lines of file `log` say `ms`.
int runs_logged(const std::string& log, int ms) {
  std::ifstream in(log);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line == std::to_string(ms);
  return n;
}

// Tasks of 1,500, 40 and 1,200 ms on 2 workers (issue 28, item 9): the third was queued behind
// the first (a second batch waits on each busy executor) while the other worker idled after 40 ms,
// 2.71 s in all. It must start on the idle worker before the first ends, and run there only: the
// batch stolen from the first worker's lane must not stay posted there (it would run again).
TEST(RayEdges, AnIdleWorkerTakesATaskQueuedBehindALongOne) {
  const std::string log = std::filesystem::temp_directory_path() / ("fibra-steal-" + std::to_string(::getpid()));
  std::filesystem::remove(log);
  fibra::Pool pool(2);
  auto a = pool.submit(nap_ms_logged, 1500, log);
  auto b = pool.submit(nap_ms_logged, 40, log);
  auto c = pool.submit(nap_ms_logged, 1200, log);
  const auto ra = get_within(a, bound, "nap_ms(1500)");
  const auto rb = get_within(b, bound, "nap_ms(40)");
  const auto rc = get_within(c, bound, "nap_ms(1200)");
  EXPECT_LT(rc[1], ra[2]) << "the 1,200 ms task began " << rc[1] - ra[2] << " s after the 1,500 ms one ended";
  EXPECT_NE(rc[0], ra[0]) << "both ran in pid " << ra[0];
  std::this_thread::sleep_for(500ms);  // a second run of the stolen task would start as the first worker frees
  for (int ms : {1500, 40, 1200}) EXPECT_EQ(runs_logged(log, ms), 1) << "runs of nap_ms(" << ms << ")";
  std::filesystem::remove(log);
  const double span = std::max({ra[2], rb[2], rc[2]}) - std::min({ra[1], rb[1], rc[1]});
  std::printf("1,500 + 40 + 1,200 ms on 2 workers: %.2f s from the first start to the last end (%llu batches stolen)\n",
              span, static_cast<unsigned long long>(pool.stats().batches_stolen));
}

// Tasks start in the order they were submitted (issue 46, case 4): 1,000, 10, 20 and 3,000 ms on 2
// workers, submitted at once. Each was a call of its own, never timed, so each counted as short and
// a second batch was queued on each busy executor: the 20 ms task waited behind the 1,000 ms one
// while the 3,000 ms task, submitted after it, ran first on the worker that freed. A worker that
// frees takes the oldest task: work whose function was never timed is not queued behind a running
// task.
TEST(RayEdges, AWorkerThatFreesTakesTheOldestTaskNotANewerOneQueuedBehindIt) {
  const std::string log = std::filesystem::temp_directory_path() / ("fibra-order-" + std::to_string(::getpid()));
  std::filesystem::remove(log);
  fibra::Pool pool(2);
  auto a = pool.submit(nap_ms_logged, 1000, log);
  auto b = pool.submit(nap_ms_logged, 10, log);
  auto c = pool.submit(nap_ms_logged, 20, log);
  auto d = pool.submit(nap_ms_logged, 3000, log);
  const auto ra = get_within(a, bound, "nap_ms(1000)");
  const auto rb = get_within(b, bound, "nap_ms(10)");
  const auto rc = get_within(c, bound, "nap_ms(20)");
  const auto rd = get_within(d, bound, "nap_ms(3000)");
  EXPECT_LT(rc[1], rd[1]) << "the 20 ms task (submitted third) began " << rc[1] - rd[1]
                          << " s after the 3,000 ms one (submitted fourth)";
  EXPECT_LT(rc[2], ra[2]) << "the 20 ms task waited behind the 1,000 ms one: it ended " << rc[2] - ra[2]
                          << " s after it";
  EXPECT_LT(rb[2], ra[2]);
  for (int ms : {1000, 10, 20, 3000}) EXPECT_EQ(runs_logged(log, ms), 1) << "runs of nap_ms(" << ms << ")";
  std::filesystem::remove(log);
}

// TaskOptions (issue 28, item 13): one task gets its own time limit, retries and name, over the
// pool's defaults (no time limit, 3 retries), and a task beside it keeps those.
TEST(RayEdges, TaskOptionsGiveOneTaskItsOwnLimitRetriesAndName) {
  fibra::Pool pool(2);
  auto limited =
      pool.submit(fibra::TaskOptions{.retries = 0, .task_timeout_s = 0.5, .name = "slow probe"}, nap_ms, 4000);
  auto free_run = pool.submit(nap_ms, 800);
  wait_within(limited, bound, "slow probe");
  try {
    limited.get();
    ADD_FAILURE() << "a 4 s task with a 0.5 s limit returned";
  } catch (const fibra::TaskTimeout& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("slow probe"), std::string::npos) << what;
    EXPECT_NE(what.find("0.5 s"), std::string::npos) << what;
    EXPECT_EQ(what.find("attempt 2"), std::string::npos) << "retried, with retries = 0: " << what;
  }
  EXPECT_EQ(get_within(free_run, bound, "nap_ms(800)").size(), 3u);  // no limit of its own: it ran out
  EXPECT_THROW(pool.submit(fibra::TaskOptions{.task_timeout_s = -1}, nap_ms, 1), fibra::ConfigError);
  // The old spelling (issue 45, item 6) still sets the limit, for one release, with a warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  auto old_spelling =
      pool.submit(fibra::TaskOptions{.retries = 0, .timeout_s = 0.3, .name = "old spelling"}, nap_ms, 3000);
#pragma GCC diagnostic pop
  wait_within(old_spelling, bound, "nap_ms(3000) with the old timeout_s");
  EXPECT_THROW(old_spelling.get(), fibra::TaskTimeout) << "TaskOptions::timeout_s no longer limits the task";
}

// A registered exception type (issue 28, item 14).
struct BadSeed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
FIBRA_EXCEPTION(BadSeed);

long check_seed(long seed) {
  if (seed < 0) throw BadSeed("seed " + std::to_string(seed) + " is negative");
  return seed;
}
FIBRA_REMOTE(check_seed);
long check_seed_nested(long seed) { return fibra::submit(check_seed, seed).get(); }
FIBRA_REMOTE(check_seed_nested);
long throw_text(long) { throw std::string("a plain std::string thrown"); }
FIBRA_REMOTE(throw_text);

// It comes back as itself, with where it came from; through a nested task it is not wrapped again;
// what is not a std::exception keeps its text. (Before: a RemoteError whose type_name() said
// "BadSeed", and "(an exception that is not a std::exception)" for the string.)
TEST(RayEdges, ARegisteredExceptionTypeIsRethrownAsItself) {
  fibra::Pool pool(2);
  for (const bool nested : {false, true}) {
    auto f = nested ? pool.submit(check_seed_nested, -4L) : pool.submit(check_seed, -3L);
    wait_within(f, bound, "check_seed");
    try {
      f.get();
      ADD_FAILURE() << "no exception";
    } catch (const BadSeed& e) {
      EXPECT_EQ(std::string(e.what()), nested ? "seed -4 is negative" : "seed -3 is negative");
      const auto* origin = dynamic_cast<const fibra::RemoteOrigin*>(&e);
      ASSERT_NE(origin, nullptr);
      EXPECT_EQ(origin->type_name(), "BadSeed");
      EXPECT_EQ(origin->site().function, nested ? "check_seed_nested" : "check_seed");
      EXPECT_NE(origin->context().find("raised BadSeed"), std::string::npos) << origin->context();
      EXPECT_EQ(origin->context().find("RemoteException"), std::string::npos) << "wrapped: " << origin->context();
    } catch (const std::exception& e) {
      ADD_FAILURE() << (nested ? "nested: " : "") << "caught as another type: " << e.what();
    }
  }
  auto g = pool.submit(throw_text, 1L);
  wait_within(g, bound, "throw_text");
  try {
    g.get();
  } catch (const fibra::RemoteError& e) {
    EXPECT_EQ(e.remote_message(), "a plain std::string thrown");
  }
}

double first_of(std::vector<double> v) { return v.at(0); }
FIBRA_REMOTE(first_of);

// An actor's method that throws a registered type (issue 46, case 3): it came back as RemoteError
// (type name "BadSeed"), not as itself as from a task.
class Picky {
 public:
  long check(long seed) { return check_seed(seed); }
};
FIBRA_ACTOR(Picky);
FIBRA_ACTOR_METHOD(Picky, check);

TEST(RayEdges, ARegisteredExceptionFromAnActorMethodIsRethrownAsItself) {
  fibra::Pool pool(1);
  auto picky = fibra::Actor<Picky>::start({.pool = &pool});
  EXPECT_EQ(get_within(picky.call(&Picky::check, 5L), bound, "Picky::check(5)"), 5);
  auto f = picky.call(&Picky::check, -2L);
  wait_within(f, bound, "Picky::check(-2)");
  try {
    f.get();
    ADD_FAILURE() << "Picky::check(-2) returned";
  } catch (const BadSeed& e) {
    EXPECT_STREQ(e.what(), "seed -2 is negative");
    const auto* origin = dynamic_cast<const fibra::RemoteOrigin*>(&e);
    ASSERT_NE(origin, nullptr);
    EXPECT_EQ(origin->type_name(), "BadSeed");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "caught as " << fibra::detail::exception_type_name(std::current_exception()) << ": " << e.what();
  }
  EXPECT_EQ(get_within(picky.call(&Picky::check, 6L), bound, "Picky::check(6) after"), 6) << "the actor lives on";
}

// fibra::cancel, Future::get(timeout) and Future::then (issue 28, item 11), on 1 worker that a
// 1.5 s task keeps busy, so that what is submitted after it waits in the driver's queue.
// Ray's num_returns (fibra::split): the squares below n and their sum, each part a Future of its own.
std::tuple<std::vector<long>, long> squares_and_sum(long n) {
  std::vector<long> v;
  for (long k = 0; k < n; ++k) v.push_back(k * k);
  return {v, std::accumulate(v.begin(), v.end(), 0L)};
}
FIBRA_REMOTE(squares_and_sum);
long count_of(std::vector<long> v) { return static_cast<long>(v.size()); }
FIBRA_REMOTE(count_of);
long twice(long x) { return 2 * x; }
FIBRA_REMOTE(twice);
std::pair<long, std::string> fails_before_its_pair(long) { throw std::runtime_error("no pair today"); }
FIBRA_REMOTE(fails_before_its_pair);

TEST(RayEdges, SplitGivesEachReturnAFutureOfItsOwnThatATaskCanTake) {
  auto [squares, sum] = fibra::split(fibra::submit(squares_and_sum, 10L));
  auto count = fibra::submit(count_of, squares);
  auto doubled = fibra::submit(twice, sum);
  EXPECT_EQ(get_within(count, 60s, "count_of(squares)"), 10);
  EXPECT_EQ(get_within(doubled, 60s, "twice(sum)"), 2 * 285);  // 0 + 1 + 4 + ... + 81
  EXPECT_EQ(squares.get().back(), 81);
  auto [first, second] = fibra::split(fibra::submit(fails_before_its_pair, 1L));
  EXPECT_THROW((void)get_within(second, 60s, "the failed pair's second"), fibra::RemoteError);
  const std::string told = error_of([&] { (void)second.get(); });
  EXPECT_NE(told.find("no pair today"), std::string::npos) << told;
  EXPECT_THROW((void)get_within(fibra::submit(twice, first), 60s, "twice(first)"), fibra::DependencyFailed);
}

TEST(RayEdges, ACancelledTaskThatHadNotStartedNeverRuns) {
  fibra::Pool pool(1);
  auto busy = pool.submit(nap_ms, 1500);
  auto queued = pool.submit(nap_ms, 100);
  auto on_queued = pool.submit(first_of, queued);  // waits for `queued`: fails with it
  auto later = pool.submit(nap_ms, 50);
  auto on_later = pool.submit(first_of, later);  // waits for `later`, which runs: cancelled while it waits
  std::promise<double> called_back;
  later.then([&](const fibra::Future<std::vector<double>>& done) { called_back.set_value(done.get().at(2)); });
  EXPECT_THROW(busy.get(std::chrono::milliseconds(50)), fibra::GetTimeout);
  EXPECT_TRUE(fibra::cancel(queued));
  EXPECT_TRUE(fibra::cancel(on_later));
  EXPECT_TRUE(on_later.ready()) << "cancelled while it waited for its argument: its error is there at once";
  EXPECT_THROW(get_within(queued, bound, "the cancelled nap_ms(100)"), fibra::TaskCancelled);
  EXPECT_THROW(get_within(on_queued, bound, "first_of(the cancelled task)"), fibra::DependencyFailed);
  EXPECT_EQ(get_within(busy, bound, "nap_ms(1500)").size(), 3u);  // read after its GetTimeout
  const auto l = get_within(later, bound, "nap_ms(50)");
  EXPECT_THROW(get_within(on_later, bound, "first_of(nap_ms(50)), cancelled"), fibra::TaskCancelled);
  auto cb = called_back.get_future();
  ASSERT_EQ(cb.wait_for(bound), std::future_status::ready) << "Future::then's callback did not run";
  EXPECT_EQ(cb.get(), l.at(2));
  EXPECT_FALSE(fibra::cancel(busy)) << "a finished task cannot be cancelled";
  EXPECT_EQ(pool.stats().chunks_done, 2u) << "busy, later and nothing else ran";
}

// With force, a running task is stopped: its executor ends (the agent starts another) and get()
// throws TaskCancelled at once, not after the task's 60 s; without force it runs on.
TEST(RayEdges, ForceStopsARunningTask) {
  fibra::Pool pool(1);
  auto long_one = pool.submit(nap_ms, 60000);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // it starts within a millisecond or two
  EXPECT_FALSE(fibra::cancel(long_one)) << "it runs: without force it goes on";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(fibra::cancel(long_one, true));
  EXPECT_THROW(get_within(long_one, bound, "nap_ms(60000), cancelled with force"), fibra::TaskCancelled);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(get_within(pool.submit(ident, 9), bound, "ident(9) after the cancel"), 9);
}

// With force, a task that waits behind a running one on the same worker (posted in its lane, or
// held by its agent with FIBRA_LANES=0: tasks.cancel.no_lanes) is cancelled before it starts: it
// never runs, and its error says so; it is not sent out again as a chunk that was merely not run.
TEST(RayEdges, ForceCancelsATaskWaitingBehindARunningOneBeforeItStarts) {
  const std::string log = std::filesystem::temp_directory_path() / ("fibra-force-" + std::to_string(::getpid()));
  std::filesystem::remove(log);
  fibra::Pool pool(1);
  auto running = pool.submit(nap_ms_logged, 60000, log);
  auto waiting = pool.submit(nap_ms_logged, 77, log);  // not timed yet: sent on to wait behind the first
  const auto started_by = std::chrono::steady_clock::now() + bound;
  while (runs_logged(log, 60000) == 0 && std::chrono::steady_clock::now() < started_by)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(runs_logged(log, 60000), 1) << "nap_ms_logged(60000) did not start within " << bound.count() << " s";
  std::this_thread::sleep_for(200ms);  // the second batch reaches the worker
  EXPECT_TRUE(fibra::cancel(waiting, true));
  EXPECT_TRUE(fibra::cancel(running, true));
  try {
    get_within(waiting, bound, "nap_ms_logged(77), cancelled with force");
    ADD_FAILURE() << "a task cancelled with force before it started returned";
  } catch (const fibra::TaskCancelled& e) {
    EXPECT_NE(std::string(e.what()).find("before it started"), std::string::npos) << e.what();
  }
  EXPECT_THROW(get_within(running, bound, "nap_ms_logged(60000), cancelled with force"), fibra::TaskCancelled);
  EXPECT_EQ(get_within(pool.submit(ident, 9), bound, "ident(9) after the cancels"), 9);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(runs_logged(log, 77), 0) << "the task cancelled before it started ran";
  EXPECT_EQ(runs_logged(log, 60000), 1);
  std::filesystem::remove(log);
}

// fibra's own errors escaping a task (issue 45): a GetTimeout from a nested get(timeout) and a
// TaskCancelled the task raised reached the driver as RemoteError ("impatient raised
// fibra::GetTimeout") and a calling task as another type; they are caught as themselves, as types
// registered with FIBRA_EXCEPTION are.
std::vector<double> impatient() { return fibra::submit(nap_ms, 3000).get(std::chrono::milliseconds(50)); }
FIBRA_REMOTE(impatient);
long gives_up(long) { throw fibra::TaskCancelled("gives_up: the work was called off"); }
FIBRA_REMOTE(gives_up);
// What a task catches of impatient()'s failure (which 0) or gives_up's (1).
std::string what_a_caller_catches(int which) {
  try {
    if (which == 0)
      fibra::submit(impatient).get();
    else
      fibra::submit(gives_up, 1L).get();
    return "nothing";
  } catch (const fibra::GetTimeout& e) {
    return std::string("GetTimeout: ") + e.what();
  } catch (const fibra::TaskCancelled& e) {
    return std::string("TaskCancelled: ") + e.what();
  } catch (const std::exception& e) {
    return "another type: " + fibra::detail::exception_type_name(std::current_exception()) + ": " + e.what();
  }
}
FIBRA_REMOTE(what_a_caller_catches);

TEST(RayEdges, FibrasOwnErrorsEscapingATaskAreCaughtAsThemselves) {
  fibra::Pool pool(3);
  try {
    get_within(pool.submit(impatient), bound, "impatient()");
    ADD_FAILURE() << "impatient() returned";
  } catch (const fibra::GetTimeout& e) {
    const auto* origin = dynamic_cast<const fibra::RemoteOrigin*>(&e);
    ASSERT_NE(origin, nullptr) << "no RemoteOrigin: " << e.what();
    EXPECT_EQ(origin->type_name(), "fibra::GetTimeout");
    EXPECT_EQ(origin->site().function, "impatient");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "caught as " << fibra::detail::exception_type_name(std::current_exception()) << ": " << e.what();
  }
  EXPECT_THROW(get_within(pool.submit(gives_up, 1L), bound, "gives_up(1)"), fibra::TaskCancelled);
  const std::string a = get_within(pool.submit(what_a_caller_catches, 0), bound, "what_a_caller_catches(0)");
  EXPECT_EQ(a.rfind("GetTimeout: ", 0), 0u) << a;
  const std::string b = get_within(pool.submit(what_a_caller_catches, 1), bound, "what_a_caller_catches(1)");
  EXPECT_EQ(b, "TaskCancelled: gives_up: the work was called off");
}

class Tally {
 public:
  explicit Tally(long start) : n_(start) {}
  long add(long d) { return n_ += d; }

 private:
  long n_;
};
FIBRA_ACTOR(Tally, long);
FIBRA_ACTOR_METHOD(Tally, add);

// A slow value, and one that fails, for actor calls given Futures.
long later(long v, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return v;
}
FIBRA_REMOTE(later);
long refuse(long v) {
  if (v >= 0) throw std::runtime_error("refused " + std::to_string(v));
  return v;
}
FIBRA_REMOTE(refuse);
long sum_of(std::vector<long> v) {
  long s = 0;
  for (long x : v) s += x;
  return s;
}
FIBRA_REMOTE(sum_of);
class Summer {
 public:
  long add_all(long base, std::vector<long> v) { return base + sum_of(std::move(v)); }
};
FIBRA_ACTOR(Summer);
FIBRA_ACTOR_METHOD(Summer, add_all);

// Future arguments to actor calls (issue 28, item 12): a call waits for its Futures and keeps its
// place among the actor's calls, as Ray's do, so the plain call made after it runs after it; a
// failed dependency fails the call with DependencyFailed and lets the calls behind it run; a value
// stored with fibra::put reaches the actor by reference. Before: Future arguments did not compile.
TEST(RayEdges, AnActorCallWaitsForItsFutureArgumentsInItsPlace) {
  fibra::Pool pool(2);
  auto tally = fibra::Actor<Tally>::start({.pool = &pool}, 0L);
  auto slow = pool.submit(later, 5L, 400);
  auto first = tally.call(&Tally::add, slow);  // waits for 5
  auto second = tally.call(&Tally::add, 1L);   // made after: runs after, on 5
  auto bad = tally.call(&Tally::add, pool.submit(refuse, 7L));
  auto third = tally.call(&Tally::add, 2L);
  EXPECT_EQ(get_within(first, bound, "Tally::add(slow)"), 5);
  EXPECT_EQ(get_within(second, bound, "Tally::add(1) behind it"), 6);
  const std::string why = error_of([&] { get_within(bad, bound, "Tally::add(refuse(7))"); });
  EXPECT_NE(why.find("did not run: its argument 1 is the result of refuse"), std::string::npos) << why;
  EXPECT_THROW(bad.get(), fibra::DependencyFailed);
  EXPECT_EQ(get_within(third, bound, "Tally::add(2) behind the failed call"), 8);

  std::vector<long> big(1 << 20);
  std::iota(big.begin(), big.end(), 1L);  // 1 + ... + n = n (n + 1) / 2
  const long n = long(big.size());
  auto summer = fibra::Actor<Summer>::start({.pool = &pool});
  auto stored = fibra::put(big);
  auto r = summer.call(&Summer::add_all, pool.submit(later, 3L, 10), stored);
  EXPECT_EQ(get_within(r, bound, "Summer::add_all(later(3), stored)"), 3 + n * (n + 1) / 2);
}

// Large arguments and results through an actor (issue 28, item 12): on the driver's host its calls
// go through its process's lane, as tasks' do, once the first (through MPI and the agent) is back:
// the batches in shared memory count them. Before: every call through MPI, the agent and a socket
// (100 MB there and back: 0.65-0.76 s, against 0.095 s for apply_async; b7_tasks --payload-mb).
class Mirror {
 public:
  std::vector<double> reversed(std::vector<double> v) {
    std::reverse(v.begin(), v.end());
    return v;
  }
};
FIBRA_ACTOR(Mirror);
FIBRA_ACTOR_METHOD(Mirror, reversed);

TEST(RayEdges, AnActorOnTheDriversHostTakesItsCallsThroughSharedMemory) {
  const char* lanes = std::getenv("FIBRA_LANES");
  const bool shared = !(lanes && std::string(lanes) == "0");
  fibra::Pool pool(2);
  auto mirror = fibra::Actor<Mirror>::start({.pool = &pool});
  std::vector<double> big(std::size_t(4) << 20);  // 32 MiB: the large slot each way
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = double(i);
  EXPECT_EQ(get_within(mirror.call(&Mirror::reversed, std::vector<double>{1, 2, 3}), bound, "Mirror::reversed(1 2 3)"),
            (std::vector<double>{3, 2, 1}));
  const auto before = pool.stats();
  for (int k = 0; k < 3; ++k) {
    const auto r = get_within(mirror.call(&Mirror::reversed, big), bound, "Mirror::reversed(32 MiB)");
    ASSERT_EQ(r.size(), big.size());
    EXPECT_EQ(r.front(), double(big.size() - 1));
    EXPECT_EQ(r.back(), 0.0);
    EXPECT_EQ(r[12345], double(big.size() - 1 - 12345));
  }
  for (long i = 0; i < 20; ++i)
    EXPECT_EQ(get_within(mirror.call(&Mirror::reversed, std::vector<double>{double(i), 0}), bound, "Mirror::reversed"),
              (std::vector<double>{0, double(i)}));
  const auto after = pool.stats();
  EXPECT_EQ(after.batches_sent - before.batches_sent, 23u);
  EXPECT_EQ(after.batches_shared_memory - before.batches_shared_memory, shared ? 23u : 0u);
}

// Actors started and found inside a task (issue 28, item 12). Before: ConfigError "start actors in
// the driver"; get() had no way to the driver at all.
long start_and_add(long base) {
  auto t = fibra::Actor<Tally>::start(base);
  t.call(&Tally::add, 1L).get();
  return t.call(&Tally::add, 2L).get();  // base + 3
}
FIBRA_REMOTE(start_and_add);
fibra::Actor<Tally> start_named(std::string name) {
  return fibra::Actor<Tally>::start(fibra::ActorOptions{.key = name}, 100L);
}
FIBRA_REMOTE(start_named);
long add_to_named(std::string name, long d) { return fibra::Actor<Tally>::get(name).call(&Tally::add, d).get(); }
FIBRA_REMOTE(add_to_named);

TEST(RayEdges, ATaskStartsAndFindsActors) {
  fibra::Pool& pool = fibra::default_pool(2);
  EXPECT_EQ(get_within(pool.submit(start_and_add, 10L), bound, "start_and_add(10)"), 13);
  // Started in a task, it outlives the task; its handle, returned, reaches the driver and owns it.
  auto handle = get_within(pool.submit(start_named, std::string("from-a-task")), bound, "start_named");
  EXPECT_EQ(get_within(handle.call(&Tally::add, 1L), bound, "Tally::add(1) through the returned handle"), 101);
  EXPECT_EQ(get_within(pool.submit(add_to_named, std::string("from-a-task"), 10L), bound, "add_to_named"), 111);
  EXPECT_EQ(get_within(fibra::Actor<Tally>::get("from-a-task").call(&Tally::add, 100L), bound, "get in the driver"),
            211);
  // One the driver started, found by name in a task.
  auto mine = fibra::Actor<Tally>::start(fibra::ActorOptions{.key = "from-the-driver"}, 0L);
  EXPECT_EQ(get_within(pool.submit(add_to_named, std::string("from-the-driver"), 5L), bound, "add_to_named"), 5);
  EXPECT_EQ(get_within(mine.call(&Tally::add, 1L), bound, "Tally::add(1)"), 6);
  const std::string why =
      error_of([&] { get_within(pool.submit(add_to_named, std::string("nobody"), 1L), bound, "x"); });
  EXPECT_NE(why.find("no live actor has the key \"nobody\""), std::string::npos) << why;
}

// Named actors (issue 28, item 12): found by name as Ray's get_actor finds them, the same object;
// a name is unique among live actors; the handle from get keeps the actor alive too.
TEST(RayEdges, ANamedActorIsFoundByItsName) {
  fibra::Pool pool(1);
  auto first = fibra::Actor<Tally>::start({.key = "tally", .pool = &pool}, 10L);
  EXPECT_EQ(get_within(first.call(&Tally::add, 1L), bound, "Tally::add(1)"), 11);
  auto found = fibra::Actor<Tally>::get("tally", &pool);
  EXPECT_EQ(get_within(found.call(&Tally::add, 2L), bound, "Tally::add(2) through get"), 13);
  const std::string taken = error_of([&] { fibra::Actor<Tally>::start({.key = "tally", .pool = &pool}, 0L); });
  EXPECT_NE(taken.find("runs on this pool already"), std::string::npos) << taken;
  const std::string missing = error_of([&] { fibra::Actor<Tally>::get("nope", &pool); });
  EXPECT_NE(missing.find("no live actor has the key \"nope\""), std::string::npos) << missing;
  EXPECT_NE(missing.find("\"tally\""), std::string::npos) << missing;
  const std::string other = error_of([&] { fibra::Actor<Cell>::get("tally", &pool); });
  EXPECT_NE(other.find("is a Tally, not a Cell"), std::string::npos) << other;
  first = {};  // the handle from get still holds it
  EXPECT_EQ(get_within(found.call(&Tally::add, 3L), bound, "Tally::add(3) after the first handle went"), 16);
  found = {};  // the last handle: the name is free again once it ends
  auto fresh = fibra::Actor<Tally>::start({.key = "tally", .pool = &pool}, 100L);
  EXPECT_EQ(get_within(fresh.call(&Tally::add, 1L), bound, "a new Tally named tally"), 101);
}

// The spellings before ActorOptions::key and ActorOptions::pool (issue 45, item 6) still compile,
// deprecated, and mean what they meant: ActorOptions::name is the key, start_on and get_on choose
// the pool.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(RayEdges, TheOldSpellingsOfKeyAndPoolStillWork) {
  fibra::Pool pool(1);
  auto first = fibra::Actor<Tally>::start_on(pool, {.name = "old"}, 10L);
  auto found = fibra::Actor<Tally>::get_on(pool, "old");
  EXPECT_EQ(get_within(found.call(&Tally::add, 2L), bound, "Tally::add(2) through get_on"), 12);
  EXPECT_EQ(get_within(fibra::Actor<Tally>::get("old", &pool).call(&Tally::add, 1L), bound, "through get"), 13);
  const std::string taken = error_of([&] { fibra::Actor<Tally>::start({.key = "old", .pool = &pool}, 0L); });
  EXPECT_NE(taken.find("an actor with key \"old\" runs on this pool already"), std::string::npos) << taken;
}
#pragma GCC diagnostic pop

// The progress line of task graphs (issue 28, item 15): with FIBRA_PROGRESS=1 the pool draws what
// was submitted as tasks and actor calls, done, running, queued and waiting for their arguments,
// while any is outstanding, and ends it with the final counts. (Before: maps only.)
TEST(RayEdges, TheProgressLineCountsTasksAndActorCalls) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("fibra-progress-" + std::to_string(::getpid()) + ".err")).string();
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int file = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(file, 0);
  ::dup2(file, 2);
  ::close(file);
  ::setenv("FIBRA_PROGRESS", "1", 1);
  {
    fibra::Pool pool(2);  // reads FIBRA_PROGRESS as it starts
    std::vector<fibra::Future<std::vector<double>>> naps;
    for (int i = 0; i < 20; ++i) naps.push_back(pool.submit(nap_ms, 100));
    auto after = pool.submit(first_of, naps.back());  // waits for its argument meanwhile
    auto tally = fibra::Actor<Tally>::start({.pool = &pool}, 0L);
    auto call = tally.call(&Tally::add, 1L);
    for (auto& f : naps) wait_within(f, bound, "nap_ms(100)");
    wait_within(after, bound, "first_of(the last nap)");
    wait_within(call, bound, "Tally::add(1)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the last line comes within 0.5 s
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::setenv("FIBRA_PROGRESS", "0", 1);
  std::string err;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) err.append(buf, n);
    std::fclose(f);
  }
  std::filesystem::remove(path);
  EXPECT_NE(err.find("[fibra] tasks: 21 done, 0 running, 0 queued, 0 waiting for arguments; actor calls: 1 done, 0 "
                     "running, 0 queued"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find(" 1 waiting for arguments"), std::string::npos) << "no line drawn while it waited:\n" << err;
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
