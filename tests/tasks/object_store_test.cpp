// The object store (issue 28, item 10): fibra::put keeps a value once, in shared memory, and tasks
// given its Future read it there instead of being sent it each. Expected values are computed here
// in closed form; where the value was read (a mapping of the driver's or the agent's memfd, seen in
// the task's /proc/self/maps) and how often it was sent (PoolStats::objects_sent) are checked, and
// that the memory goes with the last reference. Every wait is bounded (tests/common/bounded.hpp).
#include <dirent.h>
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"

using namespace std::chrono_literals;
using fibra_test::get_within;

namespace {
constexpr auto bound = 60s;

// tasks.object_store.no_lanes runs this suite with FIBRA_LANES=0: every batch and object goes
// through MPI and the agents, as to workers on another host (read once per process by the pool).
bool lanes_off() {
  const char* v = std::getenv("FIBRA_LANES");
  return v && std::string(v) == "0";
}
// tasks.object_store.peers runs the ObjectStorePeers tests with FIBRA_LANES=0 and
// FIBRA_OBJECTS_AS_REMOTE=1: agents serve their objects to each other over TCP, as on other hosts.
bool peers_on() {
  const char* v = std::getenv("FIBRA_OBJECTS_AS_REMOTE");
  return lanes_off() && v && std::string(v) == "1";
}

// v[i] = i / 2, so that sums have a closed form: sum over i < n of i / 2 = n (n - 1) / 4.
std::vector<double> halves(std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = double(i) / 2;
  return v;
}
double halves_sum(std::size_t n) { return double(n) * double(n - 1) / 4; }

// The memfds of stored objects that process `pid` has open ("/memfd:fibra-object-...").
int object_fds(long pid) {
  int n = 0;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char buf[256];
      const ssize_t k = ::readlink((dir + "/" + e->d_name).c_str(), buf, sizeof buf);
      if (k > 0 && std::string(buf, std::size_t(k)).rfind("/memfd:fibra-object-", 0) == 0) ++n;
    }
    ::closedir(d);
  }
  return n;
}

// Waits up to 10 s for process `pid` to hold `n` stored objects; returns how many it holds.
int object_fds_settle(long pid, int n) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  int now = object_fds(pid);
  while (now != n && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
    now = object_fds(pid);
  }
  return now;
}

// Every agent of `pool` lets its stored objects go (within object_fds_settle's 10 s each).
void expect_agents_hold_none(const fibra::Pool& pool, const char* what) {
  for (const auto& w : pool.workers())
    EXPECT_EQ(object_fds_settle(w.pid, 0), 0) << "agent " << w.slot << " (pid " << w.pid << ") keeps a freed " << what;
}
}  // namespace

// A task's sum of every `stride`-th element from `from`, and whether its process maps a stored
// object (the value was read where the driver or the agent keeps it, not from the batch).
struct Probe {
  double sum = 0;
  bool mapped = false;
  int pid = 0;  // the executor's
};
Probe strided_sum(std::vector<double> v, int from, int stride) {
  Probe p;
  p.pid = ::getpid();
  for (std::size_t i = std::size_t(from); i < v.size(); i += std::size_t(stride)) p.sum += v[i];
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("/memfd:fibra-object-") != std::string::npos) p.mapped = true;
  return p;
}
FIBRA_REMOTE(strided_sum);

// The parts of halves(n) that `parts` (strided_sum(value, k, parts.size()) for each k) summed:
// each checked in closed form and read from shared memory; returns their total.
double expect_parts(std::vector<fibra::Future<Probe>>& parts, std::size_t n, const char* what) {
  const std::size_t stride = parts.size();
  double total = 0;
  for (std::size_t k = 0; k < stride; ++k) {
    const Probe p = get_within(parts[k], bound, what);
    // sum over j of (k + stride j) / 2, for k + stride j < n
    const double m = double((n - k + stride - 1) / stride);
    EXPECT_DOUBLE_EQ(p.sum, (double(k) * m + double(stride) * m * (m - 1) / 2) / 2) << "part " << k;
    EXPECT_TRUE(p.mapped) << "part " << k << " was sent the value instead of reading it from shared memory";
    total += p.sum;
  }
  return total;
}

// The executors (pids) the parts ran in.
std::set<int> executors_of(std::vector<fibra::Future<Probe>>& parts) {
  std::set<int> pids;
  for (auto& p : parts) pids.insert(get_within(p, bound, "a part").pid);
  return pids;
}

// Arguments on both sides of a stored one: joined around it in the executor.
double scaled_sum(double factor, std::vector<double> v, std::string tag) {
  double s = 0;
  for (double x : v) s += x;
  return factor * s + double(tag.size());
}
FIBRA_REMOTE(scaled_sum);

long sum_longs(std::vector<long> v) {
  long s = 0;
  for (long x : v) s += x;
  return s;
}
FIBRA_REMOTE(sum_longs);

// Inside a task, put stores the value in the task's process: the tasks given its Future read it
// there (on the driver's host). The sum of 4 strided parts, and how many of them mapped it.
Probe put_inside(int n) {
  Probe total;
  std::vector<fibra::Future<Probe>> parts;
  {
    auto f = fibra::put(halves(std::size_t(n)));
    for (int k = 0; k < 4; ++k) parts.push_back(fibra::submit(strided_sum, f, k, 4));
  }  // the put's Future is gone: the calls hold the value
  total.mapped = true;
  for (auto& p : parts) {
    const Probe r = p.get();
    total.sum += r.sum;
    total.mapped = total.mapped && r.mapped;
  }
  return total;
}
FIBRA_REMOTE(put_inside);

// One stored value, given to call after call, each waited for: between two calls the driver lets
// it go and tells the agent, while the task hands it over again.
double put_then_call_again(int n, int times) {
  auto f = fibra::put(halves(std::size_t(n)));
  double total = 0;
  for (int i = 0; i < times; ++i) total += fibra::submit(strided_sum, f, i % 4, 4).get().sum;
  return total;
}
FIBRA_REMOTE(put_then_call_again);

// A task's large result, which PoolOptions::keep_results_from keeps where it was made when tasks
// take it. make_halves_after, given a Future of nap, waits for it, so that the tasks given its
// result are all submitted before it is sent to a worker; it then naps as long again.
std::vector<double> make_halves(std::size_t n) { return halves(n); }
FIBRA_REMOTE(make_halves);
int nap(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
FIBRA_REMOTE(nap);
std::vector<double> make_halves_after(int ms, std::size_t n) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return halves(n);
}
FIBRA_REMOTE(make_halves_after);

TEST(ObjectStore, ATasksResultGivenToOtherTasksStaysWhereItWasMade) {
  fibra::Pool pool(2, {.workers_per_agent = 1});
  const int before = object_fds(::getpid());
  constexpr std::size_t n = 1 << 20;  // 8 MiB of doubles, over the 1 MiB default
  std::vector<fibra::Future<Probe>> parts;
  {
    auto made = pool.submit(make_halves_after, pool.submit(nap, 300), n);
    for (int k = 0; k < 8; ++k) parts.push_back(pool.submit(strided_sum, made, k, 8));
    EXPECT_EQ(get_within(made, bound, "make_halves(n)"), halves(n)) << "get() reads the kept result";
    EXPECT_EQ(object_fds(::getpid()), before + 1) << "the driver holds the kept result's memfd, not its bytes";
  }
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(made, k, 8)"), halves_sum(n));
  EXPECT_EQ(pool.stats().results_kept, 1u) << "kept by the worker that made it";
  EXPECT_EQ(pool.stats().results_stored_on_arrival, 0u) << "not copied into the driver's memory";
  if (lanes_off())
    EXPECT_LE(pool.stats().objects_sent, 1u) << "only the agent that did not make it is sent a copy";
  else
    EXPECT_EQ(pool.stats().objects_sent, 0u) << "workers on the driver's host read it where it lies";
  parts.clear();
  EXPECT_EQ(object_fds_settle(::getpid(), before), before) << "freed with its Future and its last task";
  expect_agents_hold_none(pool, "result");
}

// A kept result the driver has opened outlives the worker that made it: its agent is SIGKILLed
// (a process this test's pool started), and tasks given the result afterwards read it exactly.
TEST(ObjectStore, AKeptResultOutlivesTheAgentThatMadeIt) {
  // (Without lanes the other agent may be sent a copy, and could be taken for the holder.)
  if (lanes_off()) GTEST_SKIP() << "tasks.object_store runs it";
  fibra::Pool pool(2, {.workers_per_agent = 1});
  constexpr std::size_t n = 1 << 19;
  auto made = pool.submit(make_halves_after, pool.submit(nap, 300), n);
  auto first = pool.submit(strided_sum, made, 0, 1);  // a task takes it: it is kept
  EXPECT_DOUBLE_EQ(get_within(first, bound, "strided_sum(made, 0, 1)").sum, halves_sum(n));
  ASSERT_EQ(pool.stats().results_kept, 1u);
  long holder = 0;
  for (const auto& w : pool.workers())
    if (object_fds(w.pid) > 0) holder = w.pid;
  ASSERT_NE(holder, 0) << "no agent holds the kept result's memfd";
  ASSERT_EQ(::kill(pid_t(holder), SIGKILL), 0);
  std::vector<fibra::Future<Probe>> parts;
  for (int k = 0; k < 4; ++k) parts.push_back(pool.submit(strided_sum, made, k, 4));
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(made, k, 4) after its maker's agent died"), halves_sum(n))
      << "read from the driver's copy of the memfd";
  EXPECT_EQ(get_within(made, bound, "made after its maker's agent died"), halves(n));
}

// Tasks given the result only once its task runs: the driver stores it once, on arrival.
TEST(ObjectStore, AResultTasksAreGivenAfterItsTaskStartedIsStoredOnceInTheDriver) {
  fibra::Pool pool(2, {.workers_per_agent = 1});
  const int before = object_fds(::getpid());
  constexpr std::size_t n = 1 << 19;
  std::vector<fibra::Future<Probe>> parts;
  {
    const auto sent = pool.stats().batches_sent;
    auto made = pool.submit(make_halves_after, 300, n);  // (runs at once: 300 is not a Future)
    // Sent to a worker (without keep_from: no task takes it yet) before the tasks are given it.
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (pool.stats().batches_sent == sent && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    ASSERT_GT(pool.stats().batches_sent, sent) << "make_halves_after was not sent to a worker within 10 s";
    for (int k = 0; k < 4; ++k) parts.push_back(pool.submit(strided_sum, made, k, 4));
    EXPECT_EQ(get_within(made, bound, "make_halves_after(300, n)"), halves(n));
    EXPECT_EQ(object_fds(::getpid()), before + 1) << "stored in the driver's shared memory on arrival";
  }
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(made, k, 4)"), halves_sum(n));
  EXPECT_EQ(pool.stats().results_stored_on_arrival, 1u);
  EXPECT_EQ(pool.stats().results_kept, 0u) << "it was sent before any task took it";
  parts.clear();
  EXPECT_EQ(object_fds_settle(::getpid(), before), before) << "freed with its Future and its last task";
}

TEST(ObjectStore, ResultsNoTaskTakesSmallOnesAndAPoolThatKeepsNoneAreSentAsBefore) {
  fibra::Pool keeps(1);
  EXPECT_EQ(get_within(keeps.submit(make_halves, std::size_t(1) << 18), bound, "make_halves(2^18)"),
            halves(std::size_t(1) << 18));
  EXPECT_EQ(keeps.stats().results_kept, 0u) << "2 MiB for the driver alone comes back the fastest way";
  auto small = keeps.submit(make_halves_after, keeps.submit(nap, 50), std::size_t(1000));
  EXPECT_DOUBLE_EQ(get_within(keeps.submit(strided_sum, small, 0, 1), bound, "strided_sum(small, 0, 1)").sum,
                   halves_sum(1000));
  EXPECT_EQ(keeps.stats().results_kept, 0u) << "8 KB is under the 1 MiB threshold";
  fibra::Pool none(1, {.keep_results_from = 0});
  auto made = none.submit(make_halves_after, none.submit(nap, 50), std::size_t(1) << 18);
  EXPECT_DOUBLE_EQ(get_within(none.submit(strided_sum, made, 0, 1), bound, "strided_sum(made, 0, 1)").sum,
                   halves_sum(std::size_t(1) << 18));
  EXPECT_EQ(none.stats().results_kept + none.stats().results_stored_on_arrival, 0u)
      << "keep_results_from = 0 keeps none";
}

TEST(ObjectStore, TasksOnTheDriversHostReadThePutValueWhereItLies) {
  fibra::Pool pool(2);
  constexpr std::size_t n = 1 << 20;  // 8 MiB of doubles
  auto ref = fibra::put(halves(n));
  EXPECT_EQ(object_fds(::getpid()), 1) << "the put value is one memfd of the driver's";
  std::vector<fibra::Future<Probe>> parts;
  for (int k = 0; k < 8; ++k) parts.push_back(pool.submit(strided_sum, ref, k, 8));
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(ref, k, 8)"), halves_sum(n));
  if (lanes_off()) {
    EXPECT_EQ(pool.stats().objects_sent, 1u) << "8 tasks on 2 agents without shared memory: one copy leaves the driver";
    EXPECT_EQ(pool.stats().objects_fetched_from_peers, 1u) << "... and the other agent copies it from the first";
  } else
    EXPECT_EQ(pool.stats().objects_sent, 0u) << "workers on the driver's host map its memory: nothing is sent";
  EXPECT_EQ(ref.get(), halves(n)) << "get() in the driver reads the stored value";
}

TEST(ObjectStore, ArgumentsAroundAStoredOneAreJoinedInTheirPlaces) {
  fibra::Pool pool(2);
  auto ref = fibra::put(halves(1000));
  auto f = pool.submit(scaled_sum, 2.0, ref, std::string("abc"));
  EXPECT_DOUBLE_EQ(get_within(f, bound, "scaled_sum(2, ref, \"abc\")"), 2 * halves_sum(1000) + 3);
  // A Future of another type converts: passed as a value, not a reference.
  auto ints = fibra::put(std::vector<long>{1, 2, 3, 4});
  EXPECT_EQ(get_within(pool.submit(sum_longs, ints), bound, "sum_longs(ints)"), 10);
}

TEST(ObjectStore, ThePutMemoryGoesWithTheLastReference) {
  fibra::Pool pool(1);
  const int before = object_fds(::getpid());
  fibra::Future<long> sum;
  {
    auto ref = fibra::put(std::vector<long>(100000, 2L));
    EXPECT_EQ(object_fds(::getpid()), before + 1);
    sum = pool.submit(sum_longs, ref);
  }  // the put's Future is gone; the task may still hold it
  EXPECT_EQ(get_within(sum, bound, "sum_longs(ref)"), 200000);
  EXPECT_EQ(object_fds_settle(::getpid(), before), before) << "freed once its task ran and its Future went";
}

TEST(ObjectStore, AnAgentWithoutSharedMemoryIsSentEachObjectOnce) {
  if (!lanes_off()) GTEST_SKIP() << "the agents' way: tasks.object_store.no_lanes runs it (FIBRA_LANES=0)";
  fibra::Pool pool(2, {.workers_per_agent = 1});
  constexpr std::size_t n = 1 << 18;
  std::vector<fibra::Future<Probe>> parts;
  {
    auto ref = fibra::put(halves(n));
    for (int k = 0; k < 16; ++k) parts.push_back(pool.submit(strided_sum, ref, k, 16));
  }
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(ref, k, 16) through the agents"), halves_sum(n));
  const auto sent = pool.stats().objects_sent;
  EXPECT_GE(sent, 1u);
  EXPECT_LE(sent, 2u) << "16 tasks on 2 agents: at most one copy each";
  parts.clear();
  expect_agents_hold_none(pool, "object");
}

TEST(ObjectStore, AValueATaskStoredCanBeHandedOverAgainAfterTheDriverLetItGo) {
  fibra::Pool& pool = fibra::default_pool(2);
  constexpr int n = 1 << 16, times = 60;
  // the parts of each round of 4 add up to the whole sum: 15 rounds
  EXPECT_DOUBLE_EQ(get_within(pool.submit(put_then_call_again, n, times), bound, "put_then_call_again"),
                   double(times / 4) * halves_sum(std::size_t(n)));
  expect_agents_hold_none(pool, "value");
}

TEST(ObjectStore, PutInsideATaskStoresTheValueWhereTheTaskRuns) {
  fibra::Pool& pool = fibra::default_pool(2);
  const auto before = pool.stats().objects_from_tasks;
  const Probe p = get_within(pool.submit(put_inside, 1 << 20), bound, "put_inside(2^20)");
  EXPECT_DOUBLE_EQ(p.sum, halves_sum(std::size_t(1) << 20));
  EXPECT_TRUE(p.mapped) << "a task given the Future of a put in a task was sent the value by copy";
  EXPECT_EQ(pool.stats().objects_from_tasks - before, 4u) << "4 calls, each taking the stored value";
  expect_agents_hold_none(pool, "value");
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// Agents that serve their objects to each other (FIBRA_OBJECTS_AS_REMOTE=1, the way of agents on
// other hosts than the driver's): a result kept by one is copied by the other from it, and the
// driver sends neither a copy.
TEST(ObjectStorePeers, AResultKeptByOneAgentIsCopiedByTheOtherFromIt) {
  if (!peers_on()) GTEST_SKIP() << "tasks.object_store.peers runs it";
  fibra::Pool pool(2, {.workers_per_agent = 1});
  constexpr std::size_t n = 1 << 20;
  std::vector<fibra::Future<Probe>> parts;
  {
    auto made = pool.submit(make_halves_after, pool.submit(nap, 300), n);
    for (int k = 0; k < 8; ++k) parts.push_back(pool.submit(strided_sum, made, k, 8));
    EXPECT_EQ(get_within(made, bound, "make_halves(n)"), halves(n)) << "get() reads the driver's copy";
  }
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(made, k, 8) between peers"), halves_sum(n));
  const std::set<int> executors = executors_of(parts);
  const auto s = pool.stats();
  EXPECT_EQ(s.results_kept, 1u);
  EXPECT_EQ(s.objects_sent, 0u) << "the driver sent no agent the result";
  EXPECT_LE(s.objects_fetched_from_peers, 1u);
  if (executors.size() == 2)  // one of them did not make it: it copied it from the one that did
    EXPECT_EQ(s.objects_fetched_from_peers, 1u) << "tasks ran in both agents' executors";
  parts.clear();
  expect_agents_hold_none(pool, "result");
}

TEST(ObjectStorePeers, APutValueLeavesTheDriverOnce) {
  if (!peers_on()) GTEST_SKIP() << "tasks.object_store.peers runs it";
  fibra::Pool pool(2, {.workers_per_agent = 1});
  constexpr std::size_t n = 1 << 19;
  std::vector<fibra::Future<Probe>> parts;
  {
    auto ref = fibra::put(halves(n));
    for (int k = 0; k < 16; ++k) parts.push_back(pool.submit(strided_sum, ref, k, 16));
  }
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(ref, k, 16) between peers"), halves_sum(n));
  const std::set<int> executors = executors_of(parts);
  const auto s = pool.stats();
  EXPECT_EQ(s.objects_sent, 1u) << "one copy leaves the driver";
  EXPECT_EQ(s.objects_fetched_from_peers, executors.size() - 1) << "the other agent copies it from the first";
  parts.clear();
  expect_agents_hold_none(pool, "object");
}

// The same with PoolOptions::encrypt_objects: the copy between agents is sealed, and arrives whole.
TEST(ObjectStorePeers, APutValueCopiedSealedBetweenAgentsArrivesWhole) {
  if (!peers_on()) GTEST_SKIP() << "tasks.object_store.peers runs it";
  fibra::Pool pool(2, {.workers_per_agent = 1, .encrypt_objects = true});
  constexpr std::size_t n = 1 << 19;
  std::vector<fibra::Future<Probe>> parts;
  {
    auto ref = fibra::put(halves(n));
    for (int k = 0; k < 16; ++k) parts.push_back(pool.submit(strided_sum, ref, k, 16));
  }
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(ref, k, 16) between peers, sealed"), halves_sum(n));
  const auto s = pool.stats();
  EXPECT_EQ(s.objects_sent, 1u) << "one copy leaves the driver";
  EXPECT_EQ(s.objects_fetched_from_peers, executors_of(parts).size() - 1) << "the other agent copies it, sealed";
}

// The agent that kept a result is SIGKILLed (a process this test's pool started): the tasks given
// the result afterwards still read it exactly, copied from the driver's copy (or from the peer, if
// it was asked before its death was seen, and then from the driver when the copy failed).
TEST(ObjectStorePeers, AnAgentWhosePeerDiedGetsTheObjectFromTheDriver) {
  if (!peers_on()) GTEST_SKIP() << "tasks.object_store.peers runs it";
  fibra::Pool pool(2, {.workers_per_agent = 1});
  constexpr std::size_t n = 1 << 19;
  auto made = pool.submit(make_halves_after, pool.submit(nap, 300), n);
  auto first = pool.submit(strided_sum, made, 0, 1);
  const Probe p = get_within(first, bound, "strided_sum(made, 0, 1)");
  EXPECT_DOUBLE_EQ(p.sum, halves_sum(n));
  ASSERT_EQ(pool.stats().results_kept, 1u);
  long holder = 0;
  for (const auto& w : pool.workers())
    if (object_fds(w.pid) > 0) holder = w.pid;
  ASSERT_NE(holder, 0) << "no agent holds the kept result's memfd";
  ASSERT_EQ(::kill(pid_t(holder), SIGKILL), 0);
  std::vector<fibra::Future<Probe>> parts;
  for (int k = 0; k < 4; ++k) parts.push_back(pool.submit(strided_sum, made, k, 4));
  EXPECT_DOUBLE_EQ(expect_parts(parts, n, "strided_sum(made, k, 4) after its maker's agent died"), halves_sum(n));
  EXPECT_EQ(get_within(made, bound, "made after its maker's agent died"), halves(n));
  EXPECT_GE(pool.stats().objects_sent, 1u) << "the driver sent its copy to the agent left";
}
