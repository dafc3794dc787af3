// Agents spawned together (issue 29, item 1): a pool's first agents start in one
// MPI_Comm_spawn_multiple, one Open MPI job, which each agent's environment names
// (OMPI_COMM_WORLD_SIZE and _RANK, inherited by its executors). An agent of such a job killed mid-map
// costs only its own chunks: the others go on, it is replaced, every result comes once and exact;
// and 64 one-worker agents map exactly. Expected values are computed here (3 i + 1, the job's size).
// Every wait is bounded and names what did not arrive (tests/common/bounded.hpp).
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"
#include "../common/items.hpp"

using fibra_test::call_within;
using fibra_test::upto;

namespace {
constexpr std::chrono::seconds bound{120};

// Where it ran: its agent's pid, and that agent's job (size * 1000 + rank); and 3 i + 1.
struct Where {
  long value = 0;
  long agent = 0;
  long job = 0;
};
long env_long(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : -1;
}
Where where(long i) {
  return {3 * i + 1, static_cast<long>(::getppid()),
          env_long("OMPI_COMM_WORLD_SIZE") * 1000 + env_long("OMPI_COMM_WORLD_RANK")};
}
FIBRA_REMOTE(where);

}  // namespace

// Under a plain `mpirun -n 1` (no recovery: ctest mpi.agent_groups.plain_mpirun sets
// FIBRA_TEST_PLAIN_MPIRUN=1) each agent is a job of its own, since one retired without MPI_Finalize
// would end the whole job there; elsewhere (./app) the 4 are one job.
TEST(AgentGroupsAnyLaunch, FirstAgentsAreOneJobOnlyWhereOpenMpisRecoveryIsOn) {
  const char* plain = std::getenv("FIBRA_TEST_PLAIN_MPIRUN");
  const bool together = !(plain && std::string(plain) == "1");
  fibra::Pool pool(4, {.workers_per_agent = 1});
  std::set<long> jobs;
  for (const auto& w :
       call_within(bound, "map of where over 400 items", [&] { return pool.map(where, upto(400), {.chunksize = 1}); }))
    jobs.insert(w.job);
  EXPECT_EQ(jobs, together ? (std::set<long>{4000, 4001, 4002, 4003}) : (std::set<long>{1000}));
  pool.resize(2);  // under plain mpirun this ended the whole program when the agents were one job
  EXPECT_EQ(call_within(bound, "map after resize(2)", [&] { return pool.map(where, upto(40)); }).size(), 40u);
}

TEST(AgentGroups, APoolsFirstAgentsAreOneJobAndALostOneCostsOnlyItsChunks) {
  fibra::Pool pool(4, {.workers_per_agent = 1});
  const auto before =
      call_within(bound, "map of where over 400 items", [&] { return pool.map(where, upto(400), {.chunksize = 1}); });
  std::set<long> jobs, agents;
  for (const auto& w : before) {
    jobs.insert(w.job);
    agents.insert(w.agent);
  }
  // One job of 4, ranks 0..3 (spawned one by one, each agent was a job of 1, rank 0).
  EXPECT_EQ(jobs, (std::set<long>{4000, 4001, 4002, 4003}));
  ASSERT_EQ(agents.size(), 4u);

  // One of them killed while a map runs: every result comes once, exact; the pool goes on with 4.
  const long victim = *agents.begin();
  std::vector<long> seen(4000, 0);
  long n = 0;
  call_within(bound, "imap_unordered of where over 4000 items, one agent killed at the 1000th", [&] {
    for (auto&& [i, w] : pool.imap_unordered(where, upto(4000), {.chunksize = 20})) {
      ++seen[i];
      EXPECT_EQ(w.value, 3 * long(i) + 1) << i;
      if (++n == 1000) ASSERT_EQ(::kill(static_cast<pid_t>(victim), SIGKILL), 0);
    }
  });
  for (long i = 0; i < 4000; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)], 1) << "index " << i;
  // The map may end before the loss is declared (the killed agent needs the CPU to exit; in a
  // clean-clone run the map was done first, and workers_lost read 0): it is awaited, bounded.
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (pool.stats().workers_lost == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(pool.stats().workers_lost, 1u) << "the killed agent was not declared lost within " << bound.count() << " s";
  // Its replacement is ready within the bound (4 ready agents again), and takes part.
  int ready = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    ready = 0;
    for (const auto& w : pool.workers()) ready += w.state == "ready" && w.pid != victim;
    if (ready == 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(ready, 4) << "no replacement of the lost agent was ready within " << bound.count() << " s";
  const auto after =
      call_within(bound, "map of where after the loss", [&] { return pool.map(where, upto(400), {.chunksize = 1}); });
  std::set<long> now;
  for (const auto& w : after) now.insert(w.agent);
  EXPECT_EQ(now.count(victim), 0u);
  EXPECT_EQ(now.size(), 4u) << "the lost agent was not replaced";
}

// Growth spawns the agents it lacks together too: resize(4) from 1 adds one job of 3 (3 jobs of 1
// before), and the pool maps exactly on all 4.
TEST(AgentGroups, AGrowingPoolSpawnsItsNewAgentsTogether) {
  fibra::Pool pool(1, {.workers_per_agent = 1});
  pool.resize(4);
  const auto r = call_within(bound, "map of where over 800 items after resize(4)",
                             [&] { return pool.map(where, upto(800), {.chunksize = 1}); });
  std::set<long> sizes, agents;
  for (long i = 0; i < 800; ++i) {
    ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
    sizes.insert(r[static_cast<std::size_t>(i)].job / 1000);
    agents.insert(r[static_cast<std::size_t>(i)].agent);
  }
  EXPECT_EQ(agents.size(), 4u);
  EXPECT_EQ(sizes, (std::set<long>{1, 3})) << "the first agent is a job of 1, the 3 added one job of 3";
}

// resize() retires agents of a job whose other agents go on: the retired ones' processes end (they
// leave without MPI_Finalize, which would wait for the rest of their job), the others keep
// working, and growing again starts new agents.
TEST(AgentGroups, AgentsRetiredFromAJobEndWhileTheirJobMatesWorkOn) {
  fibra::Pool pool(4, {.workers_per_agent = 1});
  std::set<long> before;
  for (const auto& w :
       call_within(bound, "map of where on 4 agents", [&] { return pool.map(where, upto(400), {.chunksize = 1}); }))
    before.insert(w.agent);
  ASSERT_EQ(before.size(), 4u);
  pool.resize(2);
  std::set<long> kept;
  for (const auto& w : call_within(bound, "map of where after resize(2)",
                                   [&] { return pool.map(where, upto(400), {.chunksize = 1}); })) {
    kept.insert(w.agent);
    ASSERT_EQ(w.job / 1000, 4) << "a kept agent is one of the first job of 4";
  }
  ASSERT_EQ(kept.size(), 2u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (long pid : before) {
    if (kept.count(pid)) continue;
    while (::kill(static_cast<pid_t>(pid), 0) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_NE(::kill(static_cast<pid_t>(pid), 0), 0) << "retired agent " << pid << " is still running";
  }
  pool.resize(4);
  const auto r =
      call_within(bound, "map of where after resize(4)", [&] { return pool.map(where, upto(800), {.chunksize = 1}); });
  std::set<long> now;
  for (long i = 0; i < 800; ++i) {
    ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
    now.insert(r[static_cast<std::size_t>(i)].agent);
  }
  EXPECT_EQ(now.size(), 4u);
}

TEST(AgentGroups, SixtyFourOneWorkerAgentsMapExactly) {
  fibra::Pool pool(64, {.workers_per_agent = 1});
  const auto r = call_within(bound, "map of where over 6400 items on 64 agents",
                             [&] { return pool.map(where, upto(6400), {.chunksize = 10}); });
  std::set<long> agents;
  for (long i = 0; i < 6400; ++i) {
    ASSERT_EQ(r[static_cast<std::size_t>(i)].value, 3 * i + 1) << i;
    EXPECT_EQ(r[static_cast<std::size_t>(i)].job / 1000, 64) << "item " << i << " ran in a job not of 64";
    agents.insert(r[static_cast<std::size_t>(i)].agent);
  }
  EXPECT_GE(agents.size(), 2u);
  EXPECT_EQ(pool.size(), 64);
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
