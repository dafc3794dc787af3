// The event log (PoolOptions::events, issue 49) of a run in which a worker's agent is SIGKILLed
// mid-map, a task raises and an actor is called: read back line by line with an independent JSON
// parser, it must hold every chunk queued once and done once, covering every item once, each
// attempt sent and settled, the loss of the killed agent with the attempts it held failed as lost
// and retried elsewhere, the runs placed on their executors with plausible times, the raised task's
// error, every spawn timed (the replacement's too), and the actor's constructor and calls. The
// folder is $FIBRA_TEST_EVENTS_DIR (observe.trace and observe.report read the same log).
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"
#include "observe/event_reader.hpp"
#include "observe/status.hpp"

using namespace std::chrono_literals;
using Json = nlohmann::json;

namespace {
constexpr auto bound = 120s;

struct Out {
  long value = 0;
  int pid = 0;   // executor
  int ppid = 0;  // its agent
};

Out work(int i) {
  std::this_thread::sleep_for(1ms);
  return {long(i) * i, ::getpid(), ::getppid()};
}
FIBRA_REMOTE(work);

int boom(int i) { throw std::runtime_error("boom " + std::to_string(i)); }
FIBRA_REMOTE(boom);

long square(long x) { return x * x; }
FIBRA_REMOTE(square);
long plus(long a, long b) { return a + b; }
FIBRA_REMOTE(plus);
// A task that asks its pool for n tasks of its own (nested), and sums their results.
long fan(int n) {
  std::vector<fibra::Future<long>> parts;
  for (int i = 1; i <= n; ++i) parts.push_back(fibra::submit(square, long(i)));
  long sum = 0;
  for (auto& f : parts) sum += f.get();
  return sum;
}
FIBRA_REMOTE(fan);

class Tally {
 public:
  explicit Tally(long start) : value_(start) {}
  long add(long d) { return value_ += d; }

 private:
  long value_;
};
FIBRA_ACTOR(Tally, long);
FIBRA_ACTOR_METHOD(Tally, add);

// Puts n items (0, 10, 20, ...) into the driver's queue from a task.
long fill(fibra::Queue<long> q, long n) {
  for (long i = 0; i < n; ++i) q.put(i * 10);
  return n;
}
FIBRA_REMOTE(fill);

std::string events_dir() {
  const char* d = std::getenv("FIBRA_TEST_EVENTS_DIR");
  return d && *d ? d : "/tmp/fibra-observe-" + std::to_string(::getpid());
}

// The log's events, once its pool has ended (its `pool_end` written: at most 0.2 s later).
std::vector<Json> read_events(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    std::vector<Json> events;
    bool ended = false;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      events.push_back(Json::parse(line));  // throws on a line that is not whole JSON
      ended |= events.back().at("ev") == "pool_end";
    }
    if (ended) return events;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("no pool_end event in " + path + " within 10 s of the pool's end");
    std::this_thread::sleep_for(50ms);
  }
}

// Attempts are named by (chunk, attempt).
using AttemptKey = std::pair<std::uint64_t, std::uint32_t>;
AttemptKey key(const Json& e) { return {e.at("chunk").get<std::uint64_t>(), e.at("attempt").get<std::uint32_t>()}; }

}  // namespace

TEST(EventLog, HoldsEveryChunkItsAttemptsAKilledWorkerAndARaisedTask) {
  const std::string dir = events_dir();
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/events.jsonl");
  const auto before_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  constexpr int n = 1200, chunksize = 10;
  int victim = 0;
  std::set<int> agents;
  {
    fibra::PoolOptions o;
    o.events = dir;
    fibra::Pool pool(3, o);
    std::vector<int> in(n);
    for (int i = 0; i < n; ++i) in[i] = i;
    std::vector<int> seen(n, 0);
    int got = 0;
    fibra_test::call_within(bound, "imap_unordered of work over 1200 items, an agent killed at 400", [&] {
      for (auto&& [index, out] : pool.imap_unordered(work, in, {.chunksize = chunksize})) {
        ASSERT_EQ(out.value, long(index) * long(index));
        ++seen[index];
        agents.insert(out.ppid);
        if (++got == 400) ASSERT_EQ(::kill(victim = out.ppid, SIGKILL), 0);
      }
    });
    for (int i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "item " << i;
    // The loss declared and the replacement ready before the rest (the killed agent's executors may
    // still answer through their lanes until it has exited: see tests/faults/fault_test.cpp).
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while ((pool.stats().workers_lost == 0 || pool.stats().workers_ready < 3) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    ASSERT_EQ(pool.stats().workers_lost, 1u) << "the killed agent was not declared lost within 60 s";
    ASSERT_EQ(pool.stats().workers_ready, 3) << "no replacement ready within 60 s of the loss";
    EXPECT_THROW(fibra_test::get_within(pool.apply_async(boom, 7), bound, "boom(7)"), fibra::RemoteError);
    auto tally = fibra::Actor<Tally>::start({.pool = &pool}, 5L);
    for (long k = 1; k <= 3; ++k)
      EXPECT_EQ(fibra_test::get_within(tally.call(&Tally::add, k), bound, "Tally::add"), 5 + k * (k + 1) / 2);
  }
  const auto after_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const auto events = read_events(dir + "/events.jsonl");

  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().at("ev"), "log");
  EXPECT_EQ(events.front().at("pid").get<long>(), long(::getpid()));

  std::map<int, long> worker_pid;  // worker id -> its agent's pid
  std::set<int> lost_workers;
  std::map<std::uint64_t, Json> queued;       // chunk -> its queued event
  std::map<AttemptKey, int> sent_to;          // attempt -> worker
  std::map<AttemptKey, std::string> settled;  // attempt -> done, failed, requeued, ...
  std::map<AttemptKey, Json> ran, failed;
  std::map<std::uint64_t, int> done_per_chunk;
  std::vector<Json> spawns, actor_calls;
  for (const auto& e : events) {
    const std::string ev = e.at("ev");
    if (ev != "log") {
      EXPECT_GE(e.at("t").get<std::int64_t>(), before_us) << e.dump();
      EXPECT_LE(e.at("t").get<std::int64_t>(), after_us + 1'000'000) << e.dump();
    }
    if (ev == "pool") EXPECT_EQ(e.at("workers"), 3);
    if (ev == "worker") {
      EXPECT_GT(e.at("pid").get<long>(), 0);
      EXPECT_FALSE(e.at("host").get<std::string>().empty());
      worker_pid[e.at("worker")] = e.at("pid");
    }
    if (ev == "lost") lost_workers.insert(e.at("worker").get<int>());
    if (ev == "queued") EXPECT_TRUE(queued.emplace(e.at("chunk").get<std::uint64_t>(), e).second) << "queued twice";
    if (ev == "sent") EXPECT_TRUE(sent_to.emplace(key(e), e.at("worker").get<int>()).second) << e.dump();
    if (ev == "ran") ran[key(e)] = e;
    if (ev == "done" || ev == "failed" || ev == "requeued" || ev == "cancelled" || ev == "abandoned")
      EXPECT_TRUE(settled.emplace(key(e), ev).second) << "settled twice: " << e.dump();
    if (ev == "failed") failed[key(e)] = e;
    if (ev == "done") ++done_per_chunk[e.at("chunk").get<std::uint64_t>()];
    if (ev == "spawn") spawns.push_back(e);
    if (ev == "actor_call") actor_calls.push_back(e);
  }

  // The spawns: the first agents and the replacement, each timed.
  int spawned = 0;
  for (const auto& s : spawns) {
    spawned += s.at("agents").get<int>();
    EXPECT_GE(s.at("start").get<std::int64_t>(), before_us);
    EXPECT_GT(s.at("took").get<std::int64_t>(), 0);
    EXPECT_LE(s.at("start").get<std::int64_t>() + s.at("took").get<std::int64_t>(), s.at("t").get<std::int64_t>() + 1);
  }
  EXPECT_GE(spawns.size(), 2u);
  EXPECT_EQ(spawned, static_cast<int>(worker_pid.size())) << "agents spawned against agents that said hello";

  // The actor: its constructor and three calls, each run and timed in its process.
  int ctors = 0, calls = 0;
  for (const auto& a : actor_calls) {
    EXPECT_EQ(a.at("status"), "ok") << a.dump();
    EXPECT_GT(a.at("exec").get<long>(), 0);
    EXPECT_GE(a.at("start").get<std::int64_t>(), before_us);
    (a.at("ctor").get<bool>() ? ctors : calls) += 1;
    if (!a.at("ctor").get<bool>()) EXPECT_NE(a.at("fn").get<std::string>().find("add"), std::string::npos) << a.dump();
  }
  EXPECT_EQ(ctors, 1);
  EXPECT_EQ(calls, 3);

  // The killed agent: said hello, was declared lost, and a replacement said hello too.
  int victim_id = -1;
  for (auto [id, pid] : worker_pid)
    if (pid == victim) victim_id = id;
  ASSERT_NE(victim_id, -1) << "no worker event for the killed agent (pid " << victim << ")";
  EXPECT_EQ(lost_workers, std::set<int>{victim_id});
  EXPECT_GE(worker_pid.size(), 4u) << "no replacement's worker event";

  // Every item of the map in exactly one chunk, each chunk done exactly once.
  std::vector<int> covered(n, 0);
  int work_chunks = 0;
  for (const auto& [chunk, q] : queued) {
    const std::string fn = q.at("fn");
    if (fn.find("work") == std::string::npos) continue;
    ++work_chunks;
    EXPECT_EQ(done_per_chunk[chunk], 1) << "chunk " << chunk;
    const auto first = q.at("first").get<int>(), count = q.at("count").get<int>();
    for (int i = first; i < first + count; ++i) ++covered.at(i);
  }
  EXPECT_EQ(work_chunks, n / chunksize);
  for (int i = 0; i < n; ++i) ASSERT_EQ(covered[i], 1) << "item " << i;

  // Every attempt sent is settled (the pool ended cleanly), and settled only if it was sent.
  for (const auto& [a, w] : sent_to) EXPECT_TRUE(settled.count(a)) << "chunk " << a.first << " attempt " << a.second;
  for (const auto& [a, how] : settled)
    if (how != "cancelled") EXPECT_TRUE(sent_to.count(a)) << how << " but never sent: chunk " << a.first;

  // The agent's attempts in flight failed as lost and ran again on another worker.
  int lost_attempts = 0;
  for (const auto& [a, f] : failed) {
    if (f.at("kind") != "lost") continue;
    ++lost_attempts;
    EXPECT_EQ(sent_to.at(a), victim_id);
    EXPECT_TRUE(f.at("retried").get<bool>());
    const AttemptKey next{a.first, a.second + 1};
    ASSERT_TRUE(sent_to.count(next)) << "chunk " << a.first << " was not sent again";
    EXPECT_NE(sent_to.at(next), victim_id);
  }
  EXPECT_GE(lost_attempts, 1) << "no attempt failed as lost";

  // Runs: on a real executor, within the run, at least 1 ms an item.
  int runs = 0;
  for (const auto& [a, r] : ran) {
    if (r.at("status") != "ok" || !queued.count(a.first)) continue;
    const auto& q = queued.at(a.first);
    if (q.at("fn").get<std::string>().find("work") == std::string::npos) continue;
    ++runs;
    EXPECT_GT(r.at("exec").get<long>(), 0);
    EXPECT_GE(r.at("start").get<std::int64_t>(), before_us);
    EXPECT_LE(r.at("start").get<std::int64_t>() + r.at("run").get<std::int64_t>(),
              r.at("t").get<std::int64_t>() + 1000);
    EXPECT_GE(r.at("run").get<std::int64_t>(), 1000 * q.at("count").get<std::int64_t>()) << r.dump();
  }
  EXPECT_GE(runs, n / chunksize);

  // The raised task: one attempt, failed as raised, not retried, its message kept.
  int raised = 0;
  for (const auto& [a, f] : failed)
    if (f.at("kind") == "raised") {
      ++raised;
      EXPECT_FALSE(f.at("retried").get<bool>());
      EXPECT_NE(f.at("error").get<std::string>().find("boom 7"), std::string::npos) << f.dump();
    }
  EXPECT_EQ(raised, 1);
}

// A task given other tasks' Futures as arguments names them in its `queued` event (`after`: their
// chunk ids, as their own `queued` events give them); the tasks a task asks for name it
// (`asked_by`: a worker of the pool, as its `worker` events name them); a checkpointed map's writes are `checkpoint`
// events, the last a fold of every item into the file. Its log stays in <events_dir()>-deps
// (observe.trace.deps makes a trace of it, with the dependencies' flows).
TEST(EventLog, NamesDependenciesNestedCallsAndCheckpointWrites) {
  std::string dir = "/tmp/fibra-observe-deps-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string ckpt = dir + "/squares.h5", log_dir = events_dir() + "-deps";
  std::filesystem::remove_all(log_dir);
  std::set<int> workers;
  {
    fibra::PoolOptions o;
    o.events = log_dir;
    fibra::Pool pool(2, o);
    auto a = pool.submit(square, 3L);
    auto b = pool.submit(square, 4L);
    auto c = pool.submit(plus, a, b);
    EXPECT_EQ(c.get(bound), 25);
    EXPECT_EQ(pool.submit(fan, 5).get(bound), 1 + 4 + 9 + 16 + 25);
    std::vector<long> items(300);
    std::iota(items.begin(), items.end(), 0L);
    const auto out = pool.map(square, items, {.chunksize = 10, .checkpoint = ckpt});
    ASSERT_EQ(out.size(), items.size());
    EXPECT_EQ(out[299], 299L * 299);
  }
  // The map's checkpoint is folded on a thread of its own, which may end after the pool did: its
  // `fold` event is waited for (10 s at most), then the log is read again.
  auto events = read_events(log_dir + "/events.jsonl");
  for (const auto deadline = std::chrono::steady_clock::now() + 10s;
       std::none_of(events.begin(), events.end(),
                    [](const Json& e) { return e.at("ev") == "checkpoint" && e.at("how") == "fold"; }) &&
       std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(50ms);
    events = read_events(log_dir + "/events.jsonl");
  }
  std::vector<Json> queued_squares, nested;
  Json plus_queued, last_checkpoint, fan_queued;
  int checkpoints = 0;
  std::map<std::uint64_t, Json> ran;  // by chunk: the last attempt's
  for (const auto& e : events) {
    if (e.at("ev") == "queued" && e.at("fn").get<std::string>().find("plus") != std::string::npos) plus_queued = e;
    if (e.at("ev") == "queued" && e.at("fn").get<std::string>().find("fan") != std::string::npos) fan_queued = e;
    if (e.at("ev") == "ran") ran[e.at("chunk").get<std::uint64_t>()] = e;
    if (e.at("ev") == "queued" && e.contains("asked_by")) nested.push_back(e);
    if (e.at("ev") == "queued" && e.at("fn").get<std::string>().find("square") != std::string::npos &&
        !e.contains("asked_by") && e.at("task").get<bool>())
      queued_squares.push_back(e);
    if (e.at("ev") == "worker") workers.insert(e.at("worker").get<int>());
    if (e.at("ev") == "checkpoint") {
      ++checkpoints;
      last_checkpoint = e;
    }
  }
  ASSERT_GE(queued_squares.size(), 2u);
  ASSERT_FALSE(plus_queued.is_null()) << "no queued event of plus";
  const std::vector<std::uint64_t> want = {queued_squares[0].at("chunk"), queued_squares[1].at("chunk")};
  ASSERT_TRUE(plus_queued.contains("after")) << plus_queued.dump();
  EXPECT_EQ(plus_queued.at("after").get<std::vector<std::uint64_t>>(), want) << plus_queued.dump();
  ASSERT_EQ(nested.size(), 5u);
  for (const auto& e : nested) {
    EXPECT_NE(e.at("fn").get<std::string>().find("square"), std::string::npos) << e.dump();
    EXPECT_TRUE(workers.count(e.at("asked_by").at("worker").get<int>())) << e.dump();
    // A square waits on nothing: its run has no wait in it.
    const auto r = ran.find(e.at("chunk").get<std::uint64_t>());
    ASSERT_NE(r, ran.end()) << "no ran event of " << e.dump();
    EXPECT_EQ(r->second.at("wait"), 0) << r->second.dump();
  }
  // fan waited on its 5 nested calls' Futures (a round trip through the driver each, at least):
  // some of its run, never more than all of it.
  ASSERT_FALSE(fan_queued.is_null()) << "no queued event of fan";
  const auto fan_ran = ran.find(fan_queued.at("chunk").get<std::uint64_t>());
  ASSERT_NE(fan_ran, ran.end()) << "no ran event of fan";
  EXPECT_GT(fan_ran->second.at("wait").get<std::int64_t>(), 0) << fan_ran->second.dump();
  EXPECT_LE(fan_ran->second.at("wait").get<std::int64_t>(), fan_ran->second.at("run").get<std::int64_t>())
      << fan_ran->second.dump();
  EXPECT_GE(checkpoints, 1);
  ASSERT_FALSE(last_checkpoint.is_null());
  EXPECT_EQ(last_checkpoint.at("path"), ckpt);
  EXPECT_EQ(last_checkpoint.at("how"), "fold");
  EXPECT_EQ(last_checkpoint.at("done"), 300);
  EXPECT_EQ(last_checkpoint.at("of"), 300);
  std::filesystem::remove_all(dir);
}

// Each Queue and Pipe direction leaves a `queue` event with its totals as it goes: a queue a task
// fills with 4 items and the driver takes 3 from, and a duplex pipe's two directions, one sent 3
// items and read twice, the other unused. `fibra status` sums them.
TEST(EventLog, SaysWhatEachQueueAndPipeSaw) {
  const std::string log_dir = events_dir() + "-queues";
  std::filesystem::remove_all(log_dir);
  {
    fibra::PoolOptions o;
    o.events = log_dir;
    fibra::Pool pool(1, o);
    {
      fibra::Queue<long> q;
      EXPECT_EQ(pool.submit(fill, q, 4L).get(bound), 4);
      for (long i = 0; i < 3; ++i) EXPECT_EQ(q.get(bound), i * 10);
      auto [mine, theirs] = fibra::Pipe<long>();
      for (long v : {1L, 2L, 3L}) mine.send(v);
      EXPECT_EQ(theirs.recv(bound), 1);
      EXPECT_EQ(theirs.recv(bound), 2);
    }  // both go here, while the pool runs
  }
  std::vector<Json> queues, pipes;
  for (const auto& e : read_events(log_dir + "/events.jsonl"))
    if (e.at("ev") == "queue") (e.at("kind") == "pipe" ? pipes : queues).push_back(e);
  ASSERT_EQ(queues.size(), 1u);
  const Json& q = queues[0];
  EXPECT_EQ(q.at("put"), 4) << q.dump();
  EXPECT_EQ(q.at("taken"), 3) << q.dump();
  EXPECT_EQ(q.at("left"), 1) << q.dump();
  EXPECT_EQ(q.at("came_back"), 0) << q.dump();
  EXPECT_GE(q.at("most").get<int>(), 1) << q.dump();
  EXPECT_GT(q.at("bytes").get<int>(), 0) << q.dump();
  ASSERT_EQ(pipes.size(), 2u) << "a duplex pipe is two directions";
  std::sort(pipes.begin(), pipes.end(), [](const Json& a, const Json& b) { return a.at("put") > b.at("put"); });
  EXPECT_EQ(pipes[0].at("put"), 3) << pipes[0].dump();
  EXPECT_EQ(pipes[0].at("taken"), 2) << pipes[0].dump();
  EXPECT_EQ(pipes[0].at("left"), 1) << pipes[0].dump();
  EXPECT_EQ(pipes[1].at("put"), 0) << pipes[1].dump();
  const auto status = fibra::observe::status_text(fibra::observe::read_event_log(log_dir), 0);
  EXPECT_NE(status.find("queues     3 queues and pipes gone: 7 items put, 5 taken, 0 came back, 2 left in them"),
            std::string::npos)
      << status;
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
