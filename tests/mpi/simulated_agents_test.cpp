// The scale simulation (issue 29, item 3; docs/architecture.md "The scale simulation"): with
// FIBRA_SIMULATED_AGENTS=k each spawned process speaks for k agents of one worker, each on the
// tags of its own block, and the driver's real code serves them as agents. Here: 2,000 agents in
// two processes map exactly; and agents that fall silent (a hung node) are declared lost one by
// one, each costing only its own chunks, while the other agents of their processes work on.
// Expected values are computed here (3 i + 1); every wait is bounded and names what did not arrive
// (tests/common/bounded.hpp).
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
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

// 3 i + 1, and the pid of the process that ran it (a simulated agents' process runs its tasks).
struct Ran {
  long value = 0;
  long pid = 0;
};
Ran ran(long i) { return {3 * i + 1, static_cast<long>(::getpid())}; }
FIBRA_REMOTE(ran);

void expect_exact(const std::vector<Ran>& out, long n) {
  ASSERT_EQ(out.size(), static_cast<std::size_t>(n));
  long wrong = 0;
  for (long i = 0; i < n; ++i) wrong += out[static_cast<std::size_t>(i)].value != 3 * i + 1;
  EXPECT_EQ(wrong, 0) << "results that are not 3 i + 1";
}

// Sets the simulation's variables for the pools a test starts, and unsets them after.
class Simulation {
 public:
  Simulation(int agents_per_process, int silent_every, double silent_after_s) {
    ::setenv("FIBRA_SIMULATED_AGENTS", std::to_string(agents_per_process).c_str(), 1);
    ::setenv("FIBRA_SIMULATED_SILENT_EVERY", std::to_string(silent_every).c_str(), 1);
    ::setenv("FIBRA_SIMULATED_SILENT_AFTER_S", std::to_string(silent_after_s).c_str(), 1);
  }
  ~Simulation() {
    ::unsetenv("FIBRA_SIMULATED_AGENTS");
    ::unsetenv("FIBRA_SIMULATED_SILENT_EVERY");
    ::unsetenv("FIBRA_SIMULATED_SILENT_AFTER_S");
  }
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;
};
}  // namespace

TEST(SimulatedAgents, TwoThousandAgentsInTwoProcessesMapExactly) {
  Simulation sim(1000, 0, 0);
  fibra::Pool pool(2000, {.start_timeout_s = 120, .workers_per_agent = 1});
  const auto workers = pool.workers();
  ASSERT_EQ(workers.size(), 2000u);
  std::set<long> processes;
  for (const auto& w : workers) {
    EXPECT_EQ(w.state, "ready");
    processes.insert(w.pid);
  }
  EXPECT_EQ(processes.size(), 2u) << "2,000 agents in processes of 1,000";
  const long n = 20000;
  const auto out = call_within(bound, "map of ran over 20,000 items on 2,000 simulated agents",
                               [&] { return pool.map(ran, upto(n), {.chunksize = 1}); });
  expect_exact(out, n);
  std::set<long> ran_in;
  for (const auto& r : out) ran_in.insert(r.pid);
  EXPECT_EQ(ran_in, processes) << "the tasks ran in the simulated agents' processes";
  EXPECT_EQ(pool.stats().workers_lost, 0u);
}

// Every 50th agent of each process (4 of its 200: slots 50, 100, ..., 400) falls silent at its
// first batch, which it never answers. Each is declared lost after worker_silence_s, alone (the
// other 196 agents of its process go on), and its chunks run elsewhere. Heartbeats every 0.25 s
// against a silence of 6 s: a busy machine does not lose an agent that still speaks.
TEST(SimulatedAgents, AgentsThatFallSilentCostOnlyTheirOwnChunks) {
  Simulation sim(200, 50, 0);
  fibra::Pool pool(400, {.heartbeat_s = 0.25, .worker_silence_s = 6, .start_timeout_s = 120, .workers_per_agent = 1});
  const long n = 4000;
  const auto out = call_within(bound, "map of ran over 4,000 items while 8 of 400 simulated agents are silent",
                               [&] { return pool.map(ran, upto(n), {.chunksize = 1}); });
  expect_exact(out, n);
  const auto s = pool.stats();
  EXPECT_EQ(s.workers_lost, 8u) << "exactly the silent agents are lost, not their processes' others";
  EXPECT_GE(s.chunks_resubmitted, 8u) << "each silent agent held chunks, which ran elsewhere";
  std::set<int> lost;
  long ready = 0;
  for (const auto& w : pool.workers()) {
    if (w.state == "lost") lost.insert(w.slot);
    ready += w.state == "ready";
  }
  EXPECT_EQ(lost, (std::set<int>{50, 100, 150, 200, 250, 300, 350, 400})) << "the silent ones, and only they";
  EXPECT_GE(ready, 392) << "the other agents of their processes are still at work";
}

// A simulation of agents of several workers is refused, naming the fix.
TEST(SimulatedAgents, AgentsOfSeveralWorkersAreRefused) {
  Simulation sim(100, 0, 0);
  try {
    fibra::Pool pool(8, {.workers_per_agent = 2});
    FAIL() << "Pool() accepted a simulation of agents of 2 workers";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("workers_per_agent = 1"), std::string::npos) << e.what();
  }
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
