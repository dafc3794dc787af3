// The parts of a pool that own their state, each in one process without MPI: the inbox of
// submitted calls (src/driver/submit_inbox.hpp), the queue of replies to executors
// (reply_queue.hpp), the counts of workers by state (worker.hpp) and the rings of calls on
// channels from processes on the driver's host (call_rings.hpp, on real lanes in memfds), and
// what the next agents of a spawn are (spawn_planner.hpp), and the copies of stored objects that
// agents hold (object_copies.hpp), whether agents are alive (liveness.hpp), and when a worker
// that joined leaves again (joined_workers.hpp), and fibra::cancel's requests for the
// communication thread (cancel_requests.hpp).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fibra/error.hpp"
#include "fibra/remote.hpp"
#include "driver/call_rings.hpp"
#include "driver/cancel_requests.hpp"
#include "driver/joined_workers.hpp"
#include "driver/liveness.hpp"
#include "driver/object_copies.hpp"
#include "driver/objects.hpp"
#include "driver/reply_queue.hpp"
#include "driver/spawn_planner.hpp"
#include "driver/submit_inbox.hpp"
#include "driver/worker.hpp"
#include "transport/wire.hpp"

namespace {
long echo(long x) { return x; }
}  // namespace
FIBRA_REMOTE(echo);

namespace {

using namespace fibra::detail;

std::shared_ptr<JobState> job() {
  const auto& fn = function_by_address(reinterpret_cast<const void*>(&echo), "apply_async");
  return std::make_shared<JobState>(fn, CallMode::single);
}

SubmitInbox::Entry entry(std::uint64_t first, std::shared_ptr<JobState> j = job()) {
  return {std::move(j), first, 1, "payload " + std::to_string(first), 0};
}

// ---- SubmitInbox --------------------------------------------------------------------------------

TEST(SubmitInbox, CallsComeOutInTheOrderTheyCameAndNameTheirPool) {
  SubmitInbox in;
  EXPECT_FALSE(in.waiting());
  EXPECT_TRUE(in.empty());
  auto a = job();
  EXPECT_EQ(in.put(7, entry(0, a)), SubmitInbox::Put::first) << "the first call into an empty inbox wakes the taker";
  EXPECT_EQ(a->pool_uid(), 7u) << "fibra::cancel finds the pool from the moment the call is in the inbox";
  EXPECT_EQ(in.put(7, entry(1)), SubmitInbox::Put::queued) << "the taker was woken once for these";
  EXPECT_EQ(in.put(7, entry(2)), SubmitInbox::Put::queued);
  EXPECT_TRUE(in.waiting());
  EXPECT_FALSE(in.empty());
  std::vector<std::uint64_t> got;
  EXPECT_TRUE(in.take([&](SubmitInbox::Entry& e) {
    got.push_back(e.first);
    EXPECT_EQ(e.payload, "payload " + std::to_string(e.first));
  }));
  EXPECT_EQ(got, (std::vector<std::uint64_t>{0, 1, 2}));
  EXPECT_FALSE(in.waiting());
  EXPECT_TRUE(in.empty());
  EXPECT_FALSE(in.take([&](SubmitInbox::Entry&) { ADD_FAILURE() << "a call was taken twice"; }));
  EXPECT_EQ(in.put(7, entry(3)), SubmitInbox::Put::first) << "emptied: the next call wakes the taker again";
}

TEST(SubmitInbox, CallsFromManyThreadsAreEachTakenOnceInEachThreadsOrder) {
  SubmitInbox in;
  constexpr int threads = 4, each = 2000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&in, t] {
      for (int k = 0; k < each; ++k) in.put(1, entry(std::uint64_t(t) * each + k));
    });
  std::vector<std::uint64_t> got;
  auto take = [&] { in.take([&](SubmitInbox::Entry& e) { got.push_back(e.first); }); };
  while (got.size() < std::size_t(threads) * each / 2) take();  // taken while the others put
  for (auto& t : ts) t.join();
  take();
  ASSERT_EQ(got.size(), std::size_t(threads) * each);
  std::vector<int> seen(threads * each, 0);
  std::vector<std::int64_t> last(threads, -1);
  for (auto f : got) {
    ++seen[f];
    const int t = int(f / each);
    EXPECT_GT(std::int64_t(f), last[t]) << "thread " << t << "'s calls came out of order";
    last[t] = std::int64_t(f);
  }
  for (int f = 0; f < threads * each; ++f) ASSERT_EQ(seen[f], 1) << "call " << f;
}

TEST(SubmitInbox, AThrowWhileTakingLeavesTheRestForTheNextTake) {
  SubmitInbox in;
  for (std::uint64_t k = 0; k < 4; ++k) in.put(1, entry(k));
  std::vector<std::uint64_t> got;
  EXPECT_THROW(in.take([&](SubmitInbox::Entry& e) {
    got.push_back(e.first);
    if (e.first == 1) throw std::bad_alloc();
  }),
               std::bad_alloc);
  EXPECT_EQ(got, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_FALSE(in.waiting()) << "(all four were moved out of the appenders' way)";
  EXPECT_FALSE(in.empty()) << "two calls are left over from the take that threw";
  in.put(1, entry(4));
  EXPECT_TRUE(in.take([&](SubmitInbox::Entry& e) { got.push_back(e.first); }));
  EXPECT_EQ(got, (std::vector<std::uint64_t>{0, 1, 2, 3, 4})) << "the one that threw is not handed out again";
  EXPECT_TRUE(in.empty());
}

TEST(SubmitInbox, AClosedInboxRefusesAndFailingItAnswersEveryCallLeft) {
  SubmitInbox in;
  auto a = job(), b = job(), c = job(), late = job();
  in.put(3, entry(0, a));
  in.put(3, entry(0, b));
  in.take([&](SubmitInbox::Entry&) {});  // a and b are queued elsewhere now
  in.put(3, entry(0, c));
  in.close();
  EXPECT_EQ(in.put(3, entry(0, late)), SubmitInbox::Put::refused);
  EXPECT_EQ(late->pool_uid(), 0u) << "a refused call names no pool";
  in.fail(std::make_exception_ptr(fibra::PoolClosed("closed")));
  EXPECT_FALSE(a->ready());
  EXPECT_FALSE(b->ready());
  ASSERT_TRUE(c->ready()) << "a call left in the inbox at the pool's end was never answered";
  ChunkOutcome o;
  ASSERT_TRUE(c->wait_next(o, std::chrono::seconds(1)));
  EXPECT_THROW(std::rethrow_exception(o.error), fibra::PoolClosed);
  EXPECT_FALSE(late->ready());
  EXPECT_TRUE(in.empty());
}

// ---- ReplyQueue ---------------------------------------------------------------------------------

TEST(ReplyQueue, ATakerThatLooksOnlyWhenToldItWaitsMissesNoReply) {
  ReplyQueue q;
  constexpr std::uint64_t each = 20000;
  std::atomic<std::uint64_t> taken{0};
  std::atomic<bool> out_of_order{false};
  // As the communication thread does: it takes only when waiting() says something came.
  std::thread taker([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (taken.load() < each && std::chrono::steady_clock::now() < until) {
      if (!q.waiting()) continue;
      for (const auto& r : q.take()) out_of_order = out_of_order || r.id != taken.fetch_add(1);
    }
  });
  // Each reply is taken before the next is pushed: every push is the last so far, whose signal must
  // not be lost (a later push would hide a lost one).
  for (std::uint64_t k = 0; k < each; ++k) {
    q.push({0, 0, k, nullptr, {}, {}});
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (taken.load() <= k && std::chrono::steady_clock::now() < until) {
    }
    if (taken.load() <= k) break;
  }
  taker.join();
  EXPECT_EQ(taken.load(), each) << "reply " << taken.load() << " was pushed and never signalled";
  EXPECT_FALSE(out_of_order);
}

TEST(ReplyQueue, RepliesFromManyThreadsAreTakenOnceInEachThreadsOrder) {
  ReplyQueue q;
  EXPECT_FALSE(q.waiting());
  EXPECT_TRUE(q.take().empty());
  constexpr int threads = 3, each = 1000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&q, t] {
      for (int k = 0; k < each; ++k) q.push({t, 0, std::uint64_t(k), nullptr, {}, {}});
    });
  std::vector<PendingReply> got;
  for (auto& t : ts) t.join();
  EXPECT_TRUE(q.waiting());
  for (auto& r : q.take()) got.push_back(std::move(r));
  EXPECT_FALSE(q.waiting());
  EXPECT_TRUE(q.take().empty()) << "a reply was taken twice";
  ASSERT_EQ(got.size(), std::size_t(threads) * each);
  std::map<int, std::uint64_t> next;
  for (const auto& r : got) EXPECT_EQ(r.id, next[r.worker]++) << "worker " << r.worker << "'s replies out of order";
}

// ---- WorkerCounts ------------------------------------------------------------------------------

TEST(WorkerCounts, CountExecutorsByStateAndJoinedWorkersApart) {
  WorkerCounts n;
  Worker a, b, j;
  a.executors = 3;
  b.executors = 2;
  j.executors = 4;
  j.joined = true;
  for (Worker* w : {&a, &b, &j}) n.count(*w, +1);  // planned: starting
  EXPECT_EQ(n.live(), 5);
  EXPECT_EQ(n.ready(), 0);
  EXPECT_EQ(n.joined_live(), 4);
  n.change(a, Worker::State::ready);
  n.change(j, Worker::State::ready);
  EXPECT_EQ(a.state, Worker::State::ready);
  EXPECT_EQ(n.live(), 5);
  EXPECT_EQ(n.ready(), 3);
  EXPECT_EQ(n.joined_ready(), 4);
  n.change(a, Worker::State::retiring);
  n.change(j, Worker::State::retiring);
  EXPECT_EQ(n.live(), 2) << "a retiring agent's executors take no new work";
  EXPECT_EQ(n.ready(), 0);
  EXPECT_EQ(n.joined_live(), 0);
  EXPECT_EQ(n.retiring(), 2) << "agents, not executors";
  n.change(a, Worker::State::leaving);
  n.change(b, Worker::State::lost);
  EXPECT_EQ(n.retiring(), 1);
  EXPECT_EQ(n.live(), 0);
  n.count(j, -1);  // a spawn undone, a worker forgotten
  EXPECT_EQ(n.retiring(), 0);
}

// ---- CallRings -----------------------------------------------------------------------------------

std::shared_ptr<LaneRegion> lane() {
  std::shared_ptr<LaneRegion> r = LaneRegion::create();
  r->lane().init(0x5eed, ::getpid());
  r->lane().reopen();
  return r;
}

void put(LaneRegion& r, const std::string& call) {
  std::string_view rest = call;
  while (!rest.empty()) ASSERT_TRUE(r.lane().put_request(rest)) << "no room in an empty ring";
}

struct Seen {
  std::vector<std::pair<std::uint64_t, std::string>> calls;  // route, bytes
  std::vector<std::pair<const Worker*, std::string>> bad;
};

CallRings rings_for(Seen& seen) {
  return CallRings(
      [&seen](const std::shared_ptr<CallRing>& ring, const std::string& bytes) {
        if (bytes == "garbage") throw fibra::wire::Malformed("it does not decode");
        seen.calls.emplace_back(ring->route, bytes);
      },
      [&seen](Worker& w, const std::string& why) { seen.bad.emplace_back(&w, why); });
}

TEST(CallRings, CallsAreReadInOrderAndWhatIsLeftIsReadAsARingCloses) {
  Seen seen;
  CallRings rings = rings_for(seen);
  Worker w;
  auto one = lane(), two = lane();
  EXPECT_FALSE(rings.read_all());
  rings.open(w, 1, 1, one);
  rings.open(w, 1, 2, two);
  put(*one, "a");
  put(*two, "b");
  put(*one, "c");
  EXPECT_TRUE(rings.read_all());
  EXPECT_EQ(seen.calls, (decltype(seen.calls){{1, "a"}, {1, "c"}, {2, "b"}}));
  put(*one, "d");
  put(*two, "e");
  rings.read_of(w, 2);  // a request through the agent from route 2: its ring's calls first
  EXPECT_EQ(seen.calls.back(), (std::pair<std::uint64_t, std::string>{2, "e"}));
  EXPECT_EQ(seen.calls.size(), 4u) << "read_of read another process's ring";
  rings.close(w, 1);  // its process ended: the put it made before is not lost
  EXPECT_EQ(seen.calls.back(), (std::pair<std::uint64_t, std::string>{1, "d"}));
  put(*one, "after");
  rings.read_all();
  EXPECT_EQ(seen.calls.size(), 5u) << "a closed ring was read";
  rings.close(w, std::nullopt, false);
  EXPECT_TRUE(rings.empty());
  EXPECT_TRUE(seen.bad.empty());
}

TEST(CallRings, ACallThatDoesNotDecodeClosesItsWorkersRingsAndNamesTheWorker) {
  Seen seen;
  CallRings rings = rings_for(seen);
  Worker w, other;
  auto a = lane(), b = lane(), c = lane();
  rings.open(w, 1, 1, a);
  rings.open(w, 1, 2, b);
  rings.open(other, 2, 1, c);
  put(*a, "garbage");
  put(*b, "never read");
  put(*c, "fine");
  rings.read_all();
  ASSERT_EQ(seen.bad.size(), 1u);
  EXPECT_EQ(seen.bad[0].first, &w);
  EXPECT_NE(seen.bad[0].second.find("does not decode"), std::string::npos) << seen.bad[0].second;
  EXPECT_EQ(seen.calls, (decltype(seen.calls){{1, "fine"}})) << "the bad worker's other ring was read";
  put(*c, "still");
  rings.read_all();
  EXPECT_EQ(seen.calls.size(), 2u) << "the other worker's ring was closed with the bad one's";
  // Read as its process ends (its worker already being let go): closed, and no second verdict.
  auto d = lane();
  rings.open(other, 2, 3, d);
  put(*d, "garbage");
  rings.close(other, std::nullopt);
  EXPECT_EQ(seen.bad.size(), 1u) << "a bad call read while its ring closed declared the worker lost again";
  EXPECT_TRUE(rings.empty());
}

// ---- SpawnPlanner --------------------------------------------------------------------------------

PoolSettings settings(int workers_per_agent = 0) {
  PoolSettings s{};
  s.workers = 8;
  s.workers_per_agent = workers_per_agent;
  return s;
}

std::unique_ptr<Worker> worker(int slot, int executors, std::string host = {}) {
  auto w = std::make_unique<Worker>();
  w->slot = slot;
  w->executors = executors;
  w->planned_host = std::move(host);
  return w;
}

TEST(SpawnPlanner, AgentsRunAQuarterOfThePoolOrWhatTheOptionsSayAndNeverMoreThanIsLacking) {
  PoolSettings s = settings();
  const SpawnPlanner auto_sized(s, "here");
  EXPECT_EQ(auto_sized.agent_size(8), 2);  // spread over auto_agents = 4 agents
  EXPECT_EQ(auto_sized.agent_size(9), 3);
  EXPECT_EQ(auto_sized.agent_size(1), 1);
  EXPECT_EQ(auto_sized.next_sizes(9, 0, 100), (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(auto_sized.next_sizes(9, 7, 100), (std::vector<int>{2})) << "never more than the pool lacks";
  EXPECT_EQ(auto_sized.next_sizes(9, 0, 2), (std::vector<int>{3, 3})) << "at most `room` agents";
  EXPECT_EQ(auto_sized.next_sizes(9, 0, 0), (std::vector<int>{3})) << "no room: one, which is refused naming why";
  EXPECT_EQ(auto_sized.next_sizes(9, 9, 100), (std::vector<int>{1})) << "nothing lacking: still one agent of one";
  PoolSettings six = settings(6);
  EXPECT_EQ(SpawnPlanner(six, "here").next_sizes(8, 0, 100), (std::vector<int>{6, 2}));
  PoolSettings hosts = settings();
  hosts.hosts = {"a", "b", "c", "d", "e", "f"};
  EXPECT_EQ(SpawnPlanner(hosts, "here").agent_size(12), 2) << "spread: an agent per host when hosts outnumber 4";
  hosts.pack = true;
  EXPECT_EQ(SpawnPlanner(hosts, "here").agent_size(12), 3);
  PoolSettings gpus = settings();
  gpus.gpu_ids = {"0", "1"};
  gpus.resources.gpus = 1;
  EXPECT_EQ(SpawnPlanner(gpus, "here").agent_size(8), 1) << "each worker's GPUs are its agent's";
}

TEST(SpawnPlanner, GpusGoAllOrNoneAndNeverToTwoAgentsWhileTheirHolderMayRun) {
  PoolSettings s = settings();
  s.gpu_ids = {"g0", "g1", "g2", "g3", "g4"};
  s.resources.gpus = 2;
  const SpawnPlanner plan(s, "here");
  SpawnPlanner::Workers workers;
  auto first = plan.share_gpus(workers, 2);
  EXPECT_EQ(first.ids, (std::vector<std::string>{"g0,g1", "g2,g3"}));
  EXPECT_EQ(first.held, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(first.each, 2);
  workers.push_back(worker(1, 2));
  workers.back()->gpus = first.held;
  auto none = plan.share_gpus(workers, 1);
  EXPECT_EQ(none.each, 0) << "one GPU left where two are needed: none, not one";
  EXPECT_TRUE(none.held.empty());
  workers.back()->holds_slot = false;  // its process is surely gone: its GPUs are free again
  auto again = plan.share_gpus(workers, 2);
  EXPECT_EQ(again.each, 2);
  EXPECT_EQ(again.ids, (std::vector<std::string>{"g0,g1", "g2,g3"}));
}

TEST(SpawnPlanner, AgentsAreSpreadOverHostsOrPackedAndNamedByTheSmallestFreeNumber) {
  PoolSettings s = settings();
  s.hosts = {"n1", "n2.cluster", "n3"};
  s.host_slots = {4, 0, 2};
  const SpawnPlanner spread(s, "n2");
  SpawnPlanner::Workers workers;
  EXPECT_EQ(spread.place(workers, 1, 1).host, "n1");
  EXPECT_EQ(spread.place(workers, 1, 1).slots, 4) << "a node's own slots when known";
  EXPECT_EQ(spread.place(workers, 1, 2).host, "n2.cluster");
  EXPECT_EQ(spread.place(workers, 1, 2).slots, 2) << "unknown: room for one more than the driver (n2 is its host)";
  EXPECT_EQ(spread.place(workers, 1, 3).host, "n3");
  PoolSettings packed = s;
  packed.pack = true;
  const SpawnPlanner pack(packed, "elsewhere");
  workers.push_back(worker(1, 2, "n1"));
  EXPECT_EQ(pack.place(workers, 2, 2).host, "n1") << "n1's 4 slots hold 2 + 2 workers";
  workers.push_back(worker(2, 2, "n1"));
  EXPECT_EQ(pack.place(workers, 1, 3).host, "n2.cluster") << "n1 is full";
  EXPECT_EQ(SpawnPlanner(settings(), "x").place(workers, 1, 1).host, "") << "no hosts: MPI places it";
  EXPECT_EQ(SpawnPlanner::free_slot_number(workers), 3);
  workers[0]->state = Worker::State::lost;
  EXPECT_EQ(SpawnPlanner::free_slot_number(workers), 1) << "a replacement takes the number of the lost one";
  EXPECT_TRUE(same_host("node01", "node01.cluster.local"));
  EXPECT_FALSE(same_host("node01", "node011"));
}

// ---- AgentObjects, FreedObjects --------------------------------------------------------------------

TEST(AgentObjects, ACopyIsSentOnceAndDroppedWithEveryHandingCounted) {
  AgentObjects a;
  EXPECT_TRUE(a.add(5)) << "the first batch that takes object 5 sends it";
  EXPECT_FALSE(a.add(5)) << "the agent holds a copy: not sent again";
  a.hold_handed(9);
  a.hold_handed(9);
  EXPECT_TRUE(a.holds(9));
  EXPECT_EQ(a.drop(5), std::optional<std::uint64_t>(0));
  EXPECT_EQ(a.drop(9), std::optional<std::uint64_t>(2)) << "the agent drops its copy only when told of both handings";
  EXPECT_EQ(a.drop(9), std::nullopt) << "an agent holding no copy is told nothing";
  EXPECT_TRUE(a.add(5)) << "freed and stored again under the same id: sent again";
}

TEST(AgentObjects, AFailedCopyFromAPeerMarksThePeerAndGivesTheObjectBackWhileItLives) {
  AgentObjects a;
  auto o = store_bytes("some bytes", "a test");
  a.add(o->id);
  a.fetching(o, 3);
  EXPECT_FALSE(a.unreachable(3));
  bool was = false;
  EXPECT_EQ(a.fetch_failed(o->id, was), o) << "the driver sends the object itself";
  EXPECT_TRUE(was);
  EXPECT_TRUE(a.unreachable(3)) << "that peer is not asked of this agent again";
  EXPECT_EQ(a.fetch_failed(o->id, was), nullptr);
  EXPECT_FALSE(was) << "one failure, counted once";
  auto gone = store_bytes("more", "a test");
  a.fetching(gone, 4);
  const auto id = gone->id;
  gone.reset();
  EXPECT_EQ(a.fetch_failed(id, was), nullptr) << "freed meanwhile: nothing to send";
  EXPECT_TRUE(was);
  auto third = store_bytes("third", "a test");
  a.add(third->id);
  a.fetching(third, 5);
  EXPECT_EQ(a.drop(third->id), std::optional<std::uint64_t>(0));
  EXPECT_EQ(a.fetch_failed(third->id, was), nullptr);
  EXPECT_FALSE(was) << "a freed object's fetch is forgotten with it: a late failure sends nothing";
}

TEST(FreedObjects, NotesEveryObjectFreedUntilStopped) {
  FreedObjects freed;
  auto a = store_bytes("a", "a test"), b = store_bytes("b", "a test");
  const auto ida = a->id, idb = b->id;
  EXPECT_TRUE(freed.take().empty());
  std::thread t([&] { a.reset(); });  // freed on another thread
  t.join();
  b.reset();
  freed.note(77);
  EXPECT_EQ(freed.take(), (std::vector<std::uint64_t>{ida, idb, 77}));
  EXPECT_TRUE(freed.take().empty());
  freed.stop();
  auto c = store_bytes("c", "a test");
  c.reset();
  EXPECT_TRUE(freed.take().empty()) << "a free noted after stop()";
}

// ---- Liveness ------------------------------------------------------------------------------------

struct Verdicts {
  std::vector<std::tuple<int, Liveness::Verdict, std::string>> all;  // Worker::slot, verdict, why
  Liveness::Act act() {
    return [this](Worker& w, Liveness::Verdict v, const std::string& why) { all.emplace_back(w.slot, v, why); };
  }
};

const Liveness::Rules rules{1.0, 10.0, 30.0, 60.0};  // heartbeat, worker silence, driver silence, start

TEST(Liveness, SilenceLosesAnAgentOnlyRightAfterEveryAgentWasRead) {
  Liveness live(rules, "here");
  SpawnPlanner::Workers ws;
  ws.push_back(worker(1, 1));
  ws.back()->state = Worker::State::ready;
  ws.back()->last_heard = ws.back()->last_sent = 100;
  Verdicts v;
  live.sweep(105, ws, v.act());
  ASSERT_EQ(v.all.size(), 1u);
  EXPECT_EQ(v.all[0], std::make_tuple(1, Liveness::Verdict::heartbeat, std::string()))
      << "told nothing for 5 s: a heartbeat; heard 5 s ago: alive";
  ws[0]->last_sent = 111;
  v.all.clear();
  live.sweep(111, ws, v.act());  // silent 11 s, but nothing was read for 111 s: a long spawn, say
  for (const auto& [slot, verdict, why] : v.all) EXPECT_NE(verdict, Liveness::Verdict::lost) << why;
  live.read_all_at(111.2);
  v.all.clear();
  live.sweep(111.3, ws, v.act());
  ASSERT_EQ(v.all.size(), 1u);
  EXPECT_EQ(std::get<1>(v.all[0]), Liveness::Verdict::lost);
  EXPECT_NE(std::get<2>(v.all[0]).find("silent for 11.3 s (PoolOptions::worker_silence_s = 10.0 s)"), std::string::npos)
      << std::get<2>(v.all[0]);
}

TEST(Liveness, AQuietWorkingAgentIsOwedAHeartbeatAndAStarterItsTimeLimit) {
  Liveness live(rules, "here");
  SpawnPlanner::Workers ws;
  for (int k = 1; k <= 4; ++k) {
    ws.push_back(worker(k, 1));
    ws.back()->last_heard = ws.back()->last_sent = ws.back()->spawned_at = 100;
  }
  ws[0]->state = Worker::State::ready;     // quiet 1.5 s: a heartbeat
  ws[1]->state = Worker::State::leaving;   // told to leave: nothing more to say
  ws[2]->state = Worker::State::starting;  // within its start time
  ws[3]->state = Worker::State::starting;
  ws[3]->spawned_at = 30;  // 71.5 s without a hello
  Verdicts v;
  live.read_all_at(101.5);
  live.sweep(101.5, ws, v.act());
  ASSERT_EQ(v.all.size(), 2u);
  EXPECT_EQ(v.all[0], std::make_tuple(1, Liveness::Verdict::heartbeat, std::string()));
  EXPECT_EQ(std::get<0>(v.all[1]), 4);
  EXPECT_EQ(std::get<1>(v.all[1]), Liveness::Verdict::lost);
  EXPECT_NE(std::get<2>(v.all[1]).find("did not start within 60.0 s"), std::string::npos) << std::get<2>(v.all[1]);
  v.all.clear();
  live.sweep(101.505, ws, v.act());
  EXPECT_TRUE(v.all.empty()) << "a sweep 5 ms after the last: due every 10 ms";
}

TEST(Liveness, AnAgentWhoseProcessIsGoneHereIsLostAndALostOnesSlotFreedOnceItSurelyEnded) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // its pid names no process now
  Liveness live(rules, "here");
  SpawnPlanner::Workers ws;
  ws.push_back(worker(1, 1));
  ws[0]->state = Worker::State::ready;
  ws[0]->host = "here";
  ws[0]->pid = child;
  ws[0]->last_heard = ws[0]->last_sent = 100;
  ws.push_back(worker(2, 1));  // lost on another host: its slot is free after the orphan guard
  ws[1]->state = Worker::State::lost;
  ws[1]->host = "there";
  ws[1]->pid = 1;  // (another process: the sweep asks once for adjacent agents of one process)
  ws[1]->lost_at = 90;
  Verdicts v;
  live.read_all_at(100.2);
  live.sweep(100.2, ws, v.act());
  ASSERT_EQ(v.all.size(), 1u);
  EXPECT_EQ(v.all[0], std::make_tuple(1, Liveness::Verdict::lost, std::string("its process is gone")));
  EXPECT_TRUE(live.still_heard(*ws[1], 100.2)) << "lost 10 s ago elsewhere: what it sends is still read";
  ws[0]->state = Worker::State::lost;  // as the pool declares it, freeing its slot (its process is gone)
  ws[0]->holds_slot = false;
  ws[0]->lost_at = 100.2;
  v.all.clear();
  live.sweep(122.5, ws, v.act());  // lost_at + driver silence (30) + 2 heartbeats: 122
  EXPECT_FALSE(ws[0]->read_after_loss) << "its process is gone: nothing more comes from it";
  ASSERT_EQ(v.all.size(), 1u);
  EXPECT_EQ(v.all[0], std::make_tuple(2, Liveness::Verdict::free_slot, std::string()));
  EXPECT_FALSE(live.still_heard(*ws[1], 122.5)) << "past its orphan guard: it ended";
  EXPECT_TRUE(live.process_gone_here(*ws[0]));
  ws[0]->pid = ::getpid();
  EXPECT_FALSE(live.process_gone_here(*ws[0]));
}

TEST(Liveness, ASweepLooksAtATenthOfManyAgentsAndEachInTurn) {
  Liveness live(rules, "here");
  SpawnPlanner::Workers ws;
  for (int k = 1; k <= 1000; ++k) {
    ws.push_back(worker(k, 1));
    ws.back()->state = Worker::State::ready;
  }
  Verdicts v;
  std::vector<int> times(1001, 0);
  for (int pass = 0; pass < 10; ++pass) {
    v.all.clear();
    live.sweep(100 + 0.011 * pass, ws, v.act());  // every agent is owed a heartbeat
    EXPECT_EQ(v.all.size(), 100u) << "pass " << pass;
    for (const auto& [slot, verdict, why] : v.all) ++times[slot];
  }
  for (int k = 1; k <= 1000; ++k) ASSERT_EQ(times[k], 1) << "agent " << k << " in 10 sweeps";
}

// ---- JoinedWorkers ---------------------------------------------------------------------------------

std::unique_ptr<Worker> joined(int slot, int executors) {
  auto w = worker(slot, executors);
  w->joined = true;
  w->state = Worker::State::ready;
  w->idle_since = 100;
  return w;
}

TEST(JoinedWorkers, OneLeavesBeforeItsJobsLimitAndWhenIdleWhileThePoolKeepsItsMinimum) {
  JoinedWorkers j;
  const auto no_actor = [] { return false; };
  auto w = joined(1, 2);
  EXPECT_EQ(j.leave_reason(*w, 1000, 6, no_actor), "") << "idle 900 s, but no Pool::adapt asked for leaving";
  w->job_ends_at = 1050;  // 50 s left, drained 60 s before by default
  EXPECT_EQ(j.leave_reason(*w, 1000, 6, no_actor),
            ": its Slurm job's time limit is 50.0 s away (AdaptOptions::drain_before_s): it finishes what it runs and "
            "leaves the pool");
  w->job_ends_at = 0;
  fibra::AdaptOptions o;
  o.idle_timeout_s = 5;
  j.adapt(4, o);
  EXPECT_EQ(j.leave_reason(*w, 106, 6, no_actor),
            " was idle for 6.0 s (AdaptOptions::idle_timeout_s): it leaves the pool");
  EXPECT_EQ(j.leave_reason(*w, 106, 5, no_actor), "") << "5 - 2 is under the minimum of 4";
  EXPECT_EQ(j.leave_reason(*w, 106, 6, [] { return true; }), "") << "an actor runs there";
  EXPECT_EQ(j.leave_reason(*w, 104, 6, no_actor), "") << "idle 4 s of 5";
  w->blocked = 1;  // a task of it waits for what it asked: busy
  EXPECT_EQ(j.leave_reason(*w, 106, 6, no_actor), "");
  EXPECT_EQ(w->idle_since, 106) << "busy now: idle from now on";
  w->blocked = 0;
  EXPECT_NE(j.leave_reason(*w, 111.5, 6, no_actor), "");
  auto ranks = joined(2, 1);
  ranks->joined_ranks = 2;  // one rank leaving alone would end the others
  ranks->job_ends_at = 1;
  EXPECT_EQ(j.leave_reason(*ranks, 1000, 6, no_actor), "");
  auto own = worker(3, 1);  // spawned by the pool: never let go here
  own->state = Worker::State::ready;
  own->job_ends_at = 1;
  EXPECT_EQ(j.leave_reason(*own, 1000, 6, no_actor), "");
}

TEST(JoinedWorkers, AgentsWaitToBeTakenAndTheirSlurmJobsAreCounted) {
  JoinedWorkers j;
  EXPECT_FALSE(j.any_waiting());
  JoinedAgent a, b;
  a.hello.host = "n1";
  b.hello.host = "n2";
  j.add(a);
  j.add(b);
  EXPECT_TRUE(j.any_waiting());
  const auto got = j.take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].hello.host, "n1");
  EXPECT_EQ(got[1].hello.host, "n2");
  EXPECT_FALSE(j.any_waiting());
  EXPECT_TRUE(j.take().empty());
  j.note_origin("Slurm job 812");
  j.note_origin("mpirun on n3");
  j.note_origin("Slurm job 812");
  EXPECT_EQ(j.slurm_jobs(), (std::set<std::string>{"812"}));
  EXPECT_TRUE(j.look_due(10));
  EXPECT_FALSE(j.look_due(10.04));
  EXPECT_TRUE(j.look_due(10.051));
}

TEST(SpawnBackoff, EachFailureInARowWaitsTwoSecondsLongerUpToAMinuteAndResizeTriesAtOnce) {
  SpawnBackoff b;
  EXPECT_TRUE(b.due(0));
  EXPECT_FALSE(b.error());
  EXPECT_DOUBLE_EQ(b.failed(std::make_exception_ptr(fibra::MpiError("no slots")), 100), 2);
  EXPECT_FALSE(b.due(101.9));
  EXPECT_TRUE(b.due(102));
  EXPECT_DOUBLE_EQ(b.failed(std::make_exception_ptr(fibra::MpiError("no slots")), 102), 4);
  for (int k = 3; k <= 40; ++k) b.failed(std::make_exception_ptr(fibra::MpiError("no slots")), 200);
  EXPECT_DOUBLE_EQ(b.failed(std::make_exception_ptr(fibra::MpiError("again")), 300), 60) << "at most a minute";
  EXPECT_THROW(std::rethrow_exception(b.error()), fibra::MpiError);
  b.reset();  // Pool::resize
  EXPECT_TRUE(b.due(300.5));
  EXPECT_FALSE(b.error()) << "resize reports only what fails from now on";
  EXPECT_DOUBLE_EQ(b.failed(std::make_exception_ptr(fibra::MpiError("x")), 400), 60) << "still in a row";
  b.succeeded();
  EXPECT_DOUBLE_EQ(b.failed(std::make_exception_ptr(fibra::MpiError("x")), 500), 2) << "a success ends the row";
}

// ---- CancelRequests ------------------------------------------------------------------------------

TEST(CancelRequests, KillsAndTakeBacksReachTheNextDispatchAndAWaiterThatGaveUpIsNotAnswered) {
  CancelRequests c;
  c.kill(3, 41);
  c.kill(4, 42);
  EXPECT_EQ(c.take_kills(), (std::vector<CancelRequests::Kill>{{3, 41}, {4, 42}}));
  EXPECT_TRUE(c.take_kills().empty()) << "a kill is sent once";
  auto forced = job(), waited = job(), gave_up = job();
  c.take_back(forced);
  auto verdict = c.take_back_and_tell(waited);
  auto abandoned = c.take_back_and_tell(gave_up);
  EXPECT_EQ(verdict.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_TRUE(c.withdraw(gave_up)) << "unanswered: withdrawn, so nothing is cancelled after the caller said no";
  std::vector<JobState*> asked;
  c.answer_take_backs([&](const std::shared_ptr<JobState>& j) {
    asked.push_back(j.get());
    return j == waited;
  });
  EXPECT_EQ(asked, (std::vector<JobState*>{forced.get(), waited.get()})) << "the withdrawn one was carried out";
  ASSERT_EQ(verdict.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_TRUE(verdict.get());
  EXPECT_FALSE(c.withdraw(waited)) << "answered already: the caller takes the verdict";
  asked.clear();
  c.answer_take_backs([&](const std::shared_ptr<JobState>& j) {
    asked.push_back(j.get());
    return false;
  });
  EXPECT_TRUE(asked.empty()) << "a take-back is carried out once";
}

}  // namespace
