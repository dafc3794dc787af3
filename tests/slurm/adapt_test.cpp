// Pool::adapt on the local Slurm cluster (real slurmctld and slurmd, started by the `slurm` tests'
// fixture; SLURM_CONF points at it): the driver runs outside Slurm, as on a login node, with
// FIBRA_JOIN_FILE, and grows with worker jobs it submits while work waits; one worker job is
// scancelled mid-map (nothing lost, nothing twice); once idle, the joined workers leave and their
// jobs are gone from squeue. Expected values are computed here (3 i + 1). Every wait is bounded
// and names what did not arrive.
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"
#include "../common/items.hpp"

using fibra_test::call_within;
using fibra_test::upto;

namespace {
constexpr std::chrono::seconds bound{180};

struct Where {
  long value = 0;
  long agent = 0;
};
Where where(long i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(40));  // 400 items: 16 s on one worker
  return {3 * i + 1, static_cast<long>(::getppid())};
}
FIBRA_REMOTE(where);

// What a command printed on stdout.
std::string output_of(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char b[512];
    while (std::fgets(b, sizeof b, p)) out += b;
    ::pclose(p);
  }
  return out;
}

// This driver's worker jobs that squeue still shows (pending, running, completing), "id state" lines.
std::string worker_jobs_in_squeue() {
  return output_of("squeue -h -o '%i %T' -n fibra-worker-pid" + std::to_string(::getpid()) + " 2>&1");
}

// Waits (60 s at most) until no worker job of an earlier test is left in squeue, so that each test
// starts with none of another's (a job the pool's end cancelled may still be ending).
void no_worker_jobs_left() {
  std::string left = worker_jobs_in_squeue();
  for (int i = 0; i < 600 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = worker_jobs_in_squeue();
  }
  ASSERT_TRUE(left.empty()) << "60 s after the last test's pool ended, squeue still shows its worker jobs:\n" << left;
}

std::vector<fibra::WorkerInfo> joined_alive(const fibra::Pool& pool) {
  std::vector<fibra::WorkerInfo> out;
  for (const auto& w : pool.workers())
    if (!w.joined_from.empty() && (w.state == "starting" || w.state == "ready" || w.state == "retiring"))
      out.push_back(w);
  return out;
}

// Log lines, kept for the test to look into.
std::mutex g_log_mu;
std::vector<std::string> g_log;
bool logged(const std::string& part) {
  std::lock_guard lk(g_log_mu);
  for (const auto& l : g_log)
    if (l.find(part) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST(Adapt, APoolGrowsWithWorkerJobsLosesOneToScancelAndShrinksWhenIdle) {
  no_worker_jobs_left();
  fibra::Pool pool(1);
  // (--mem: the cluster's memory is consumable, and a job that asks for none takes all of it.)
  pool.adapt(1, 3,
             {.workers_per_job = 1,
              .time = "00:10:00",
              .sbatch_args = {"--mem=500M"},
              .backlog = 2,
              .idle_timeout_s = 3,
              .submit_gap_s = 0.2});
  // While the map runs: once two worker jobs have joined, the first is cancelled.
  std::string cancelled, running;
  std::atomic<bool> done{false};
  std::thread canceller([&] {
    for (int i = 0; i < 6000 && !done; ++i) {
      const auto j = joined_alive(pool);
      int ready = 0;
      for (const auto& w : j) ready += w.state == "ready";
      if (ready >= 2) {
        cancelled = j[0].joined_from.substr(std::string("Slurm job ").size());
        running = worker_jobs_in_squeue();  // the query below sees them while they run
        output_of("scancel " + cancelled);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const auto r =
      call_within(bound, "map of where over 400 items", [&] { return pool.map(where, upto(400), {.chunksize = 1}); });
  done = true;
  canceller.join();
  ASSERT_EQ(r.size(), 400u);
  std::set<long> agents;
  for (long i = 0; i < 400; ++i) {
    ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
    agents.insert(r[static_cast<std::size_t>(i)].agent);
  }
  EXPECT_GE(agents.size(), 3u) << "the map ran on " << agents.size() << " agent(s): no worker job joined in time";
  ASSERT_FALSE(cancelled.empty()) << "two worker jobs never joined at once during the map";
  EXPECT_NE(running.find(cancelled + " RUNNING"), std::string::npos) << "squeue showed, as they ran:\n" << running;
  EXPECT_TRUE(logged("submitted worker job")) << "no submission was logged";
  bool seen_lost = false;
  for (const auto& w : pool.workers()) seen_lost |= w.joined_from == "Slurm job " + cancelled && w.state == "lost";
  EXPECT_TRUE(seen_lost) << "the worker of the cancelled job " << cancelled << " is not shown lost";

  // Idle: the joined workers leave (3 s), their jobs end, and the pool is back to its own worker.
  bool shrunk = false;
  for (int i = 0; i < 3000 && !shrunk; ++i) {
    shrunk = joined_alive(pool).empty() && pool.size() == 1 && worker_jobs_in_squeue().empty();
    if (!shrunk) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(shrunk) << "30 s after the map: " << joined_alive(pool).size() << " joined worker(s) alive, size "
                      << pool.size() << ", in squeue:\n"
                      << worker_jobs_in_squeue();
  EXPECT_TRUE(logged("AdaptOptions::idle_timeout_s")) << "no idle worker was let go";
  // One item: the pool still runs work after the shrink, and nothing waits, so no worker job is
  // submitted that the pool's end would cancel once it runs. (With 20 items one was, and its worker
  // said hello to the join listener and was killed by the cancel before it connected: the listener
  // then waits in MPI_Comm_accept for good, and the next test's joins never come.)
  const auto again = call_within(bound, "map after the shrink", [&] { return pool.map(where, upto(1)); });
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].value, 1);
}

// A worker job of one minute, drained 50 s before its limit: its worker leaves about 10 s after it
// starts, mid-map, without a chunk cut (every result exact), and a job takes its place while work
// still waits. The map is long enough (48 s on the pool's own worker) for the second job to start
// and join even when the test cluster's CPUs are busy with other tests' jobs (600 items were not,
// once: the map ended 5 s after the second job was submitted, before it ran).
TEST(Adapt, AWorkerLeavesBeforeItsJobsTimeLimitAndAnotherTakesItsPlace) {
  no_worker_jobs_left();
  fibra::Pool pool(1);
  pool.adapt(1, 2,
             {.workers_per_job = 1,
              .time = "00:01:00",
              .sbatch_args = {"--mem=500M"},
              .idle_timeout_s = 60,
              .submit_gap_s = 0.2,
              .drain_before_s = 50});
  const auto r = call_within(bound, "map of where over 1,200 items",
                             [&] { return pool.map(where, upto(1200), {.chunksize = 1}); });  // 48 s on one worker
  ASSERT_EQ(r.size(), 1200u);
  for (long i = 0; i < 1200; ++i) ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
  EXPECT_TRUE(logged("time limit is")) << "no worker left before its job's time limit";
  std::set<std::string> jobs;
  for (const auto& w : pool.workers())
    if (!w.joined_from.empty()) jobs.insert(w.joined_from);
  EXPECT_GE(jobs.size(), 2u) << "no second worker job joined after the first was drained";
  for (const auto& w : pool.workers())
    if (!w.joined_from.empty()) EXPECT_NE(w.state, "lost") << w.joined_from << " was lost, not drained";
}

TEST(Adapt, SubmissionPausesAfterFailedSubmitsAndThePoolGoesOn) {
  no_worker_jobs_left();
  fibra::Pool pool(1);
  // Under its minimum, it submits at once; sbatch refuses each job (no such partition).
  pool.adapt(2, 3, {.partition = "no_such_partition", .submit_gap_s = 0.1, .failed_submits = 3});
  bool paused = false;
  for (int i = 0; i < 3000 && !paused; ++i) {
    paused = logged("submits no more worker jobs after 3 failures in a row");
    if (!paused) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(paused) << "no pause within 30 s";
  EXPECT_TRUE(logged("no_such_partition")) << "sbatch's refusal was not passed on";
  const auto r = call_within(bound, "map while paused", [&] { return pool.map(where, upto(20)); });
  for (long i = 0; i < 20; ++i) ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1);
}

// Chunks that need a GPU, in a pool that shares out its own (a joined worker offers none), call
// for no worker job: they wait for the pool's own worker, and the log says why. (The GPU id is a
// name only: the task does not use it.)
TEST(Adapt, NoWorkerJobForWorkThatNoWorkerJobCouldRun) {
  no_worker_jobs_left();
  {
    std::lock_guard lk(g_log_mu);
    g_log.clear();  // the lines of the tests before
  }
  fibra::Pool pool(1, {.offers = {.gpus = 1}, .gpu_ids = {"0"}});
  pool.adapt(1, 3, {.sbatch_args = {"--mem=100M"}, .submit_gap_s = 0.1});
  std::string seen;  // worker jobs squeue showed while the map ran
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done && seen.empty()) {
      seen = worker_jobs_in_squeue();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  // 60 items of 40 ms on the one worker: 2.4 s, ten looks of adapt's with chunks waiting
  const auto r = call_within(bound, "map of where needing a GPU",
                             [&] { return pool.map(where, upto(60), {.chunksize = 1, .resources = {.gpus = 1}}); });
  done = true;
  watcher.join();
  for (long i = 0; i < 60; ++i) ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1);
  EXPECT_EQ(seen, "") << "a worker job was submitted for chunks that need a GPU, which no worker job offers";
  EXPECT_FALSE(logged("submitted worker job")) << "a submission was logged";
  EXPECT_TRUE(logged("need more than a worker job's worker offers")) << "the log does not say why none was submitted";
}

// A worker job still pending when the pool ends is cancelled: none is left in squeue.
TEST(Adapt, ThePoolsEndCancelsItsPendingWorkerJobs) {
  no_worker_jobs_left();
  {
    fibra::Pool pool(1);
    pool.adapt(2, 2, {.sbatch_args = {"--mem=100M", "--begin=now+3600"}});  // under its minimum: it submits at once
    bool pending = false;
    for (int i = 0; i < 3000 && !pending; ++i) {
      pending = worker_jobs_in_squeue().find("PENDING") != std::string::npos;
      if (!pending) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(pending) << "no pending worker job within 30 s; squeue:\n" << worker_jobs_in_squeue();
  }
  bool gone = false;
  for (int i = 0; i < 1000 && !gone; ++i) {
    gone = worker_jobs_in_squeue().empty();
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "10 s after the pool's end, squeue still shows:\n" << worker_jobs_in_squeue();
  EXPECT_TRUE(logged("(the pool ended)")) << "no cancellation was logged";
}

TEST(Adapt, BoundsThatCannotHoldAreRefused) {
  fibra::Pool pool(2);
  try {
    pool.adapt(3, 2);
    ADD_FAILURE() << "adapt(3, 2) was accepted";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("min_workers <= max_workers"), std::string::npos) << e.what();
  }
  try {
    pool.adapt(1, 4, {.time = "00:01:00"});  // drained 60 s before a limit of 60 s
    ADD_FAILURE() << "a worker job's time under its drain was accepted";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("drain_before_s"), std::string::npos) << e.what();
  }
  try {
    pool.adapt(1, 1);  // the pool has 2 of its own
    ADD_FAILURE() << "adapt(1, 1) on a pool of 2 was accepted";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("resize() it first"), std::string::npos) << e.what();
  }
}

int main(int argc, char** argv) {
  bool joiner = false;
  for (int i = 1; i < argc; ++i) joiner |= std::string(argv[i]) == "--fibra-join";
  std::string dir;
  if (!joiner) {
    if (!std::getenv("SLURM_CONF")) {
      std::printf("FAIL: SLURM_CONF is not set: run this test through ctest, whose fixture starts the cluster\n");
      return 1;
    }
    char tmpl[] = "/tmp/fibra-adapt-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::setenv("FIBRA_JOIN_FILE", (dir + "/join").c_str(), 1);
    fibra::log::set_sink([](fibra::log::Level, std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
      std::lock_guard lk(g_log_mu);
      g_log.emplace_back(line);
    });
  }
  int rc = 0;
  {
    fibra::Runtime rt(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    rc = RUN_ALL_TESTS();
  }
  if (!dir.empty() && rc == 0) std::filesystem::remove_all(dir);
  return rc;
}
