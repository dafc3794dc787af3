#include <gtest/gtest.h>
#include <malloc.h>

#include "fibra/remote.hpp"
#include "driver/scheduler.hpp"

namespace {
int ident(int x) { return x; }
}  // namespace
FIBRA_REMOTE(ident);

namespace {

using namespace fibra::detail;

std::shared_ptr<JobState> job(RetryPolicy p = {}) {
  return std::make_shared<JobState>(function_by_address(reinterpret_cast<const void*>(&ident), "map"), CallMode::single,
                                    p);
}

std::exception_ptr err(const char* what) { return std::make_exception_ptr(fibra::Error(what)); }

TEST(Scheduler, BigChunksGoOneByOneInOrder) {
  Scheduler s;
  auto j = job();
  for (int i = 0; i < 4; ++i) s.add(j, i * 1000, 1000, "p");
  auto b = s.take_batch(1, 2);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]->first, 0u);
  EXPECT_EQ(b[0]->attempt, 1u);
  EXPECT_EQ(b[0]->worker, 1);
  EXPECT_EQ(s.take_batch(2, 2)[0]->first, 1000u);
  EXPECT_EQ(s.pending(), 2u);
  EXPECT_EQ(s.in_flight(), 2u);
}

TEST(Scheduler, SmallChunksAreBatchedUpToAFairShare) {
  Scheduler s;
  auto j = job();
  for (int i = 0; i < 100; ++i) s.add(j, i, 1, "p");
  auto b = s.take_batch(1, 2);  // 100 pending, 2 workers: a quarter each batch
  EXPECT_EQ(b.size(), 25u);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i]->first, i);
  Scheduler one;
  one.add(j, 0, 1, "p");
  EXPECT_EQ(one.take_batch(1, 4).size(), 1u);
}

TEST(Scheduler, EachResultIsAcceptedExactlyOnce) {
  Scheduler s;
  auto j = job();
  auto id = s.add(j, 0, 10, "p");
  auto b = s.take_batch(1, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(s.accept(id, 2), nullptr);  // not the attempt in flight
  auto c = s.accept(id, 1);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->first, 0u);
  EXPECT_EQ(s.accept(id, 1), nullptr);  // a duplicate is dropped
  EXPECT_TRUE(s.idle());
}

TEST(Scheduler, ANotRunChunkGoesBackToTheFrontWithoutCostingAnAttempt) {
  Scheduler s;
  auto j = job();
  auto a = s.add(j, 0, 1000, "p");
  s.add(j, 1000, 1000, "p");
  s.take_batch(1, 1);
  EXPECT_TRUE(s.requeue(a, 1));
  EXPECT_FALSE(s.requeue(a, 1));  // no longer in flight
  auto b = s.take_batch(2, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]->id, a);
  EXPECT_EQ(b[0]->attempt, 2u);  // a new number: a late result of the first hand-out is dropped
  EXPECT_TRUE(b[0]->failures.empty());
  EXPECT_EQ(b[0]->worker, 2);
  EXPECT_EQ(s.accept(a, 1), nullptr);
  EXPECT_NE(s.accept(a, 2), nullptr);
}

TEST(Scheduler, CancelledJobsAreDroppedBeforeTheyRun) {
  Scheduler s;
  auto j = job();
  auto k = job();
  const auto dropped = s.add(j, 0, 1000, "p");
  s.add(k, 0, 1000, "p");
  j->cancel();
  auto b = s.take_batch(1, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]->job, k);
  EXPECT_EQ(s.pending(), 0u);
  // ... and said (the event log names each dropped chunk, with the attempt it would have been).
  using Dropped = std::vector<std::pair<std::uint64_t, std::uint32_t>>;
  EXPECT_EQ(s.take_dropped(), (Dropped{{dropped, 1u}}));
  EXPECT_EQ(s.take_dropped(), Dropped{});
}

TEST(Scheduler, KnowsWhatAWorkerOwnsAndTakesEverything) {
  Scheduler s;
  auto j = job();
  for (int i = 0; i < 3; ++i) s.add(j, i * 1000, 1000, "p");
  auto b1 = s.take_batch(1, 2);
  s.take_batch(2, 2);
  auto mine = s.owned_by(1);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].first, b1[0]->id);
  EXPECT_EQ(mine[0].second, 1u);
  EXPECT_EQ(s.take_all().size(), 3u);
  EXPECT_TRUE(s.idle());
}

TEST(Scheduler, AFailedAttemptIsRetriedFirstUntilItsRetriesAreUsedUp) {
  Scheduler s;
  auto j = job(RetryPolicy{.retries = 2});
  auto a = s.add(j, 0, 10, "p");
  s.add(j, 10, 10, "p");
  std::unique_ptr<Chunk> out;
  for (std::uint32_t attempt = 1; attempt <= 2; ++attempt) {
    auto b = s.take_batch(attempt, 1);
    ASSERT_EQ(b[0]->id, a);  // the failed chunk goes to the front
    EXPECT_EQ(s.fail(a, attempt, "crash " + std::to_string(attempt), err("x"), true, out), Failed::retried);
  }
  EXPECT_EQ(s.fail(a, 2, "late", err("x"), true, out), Failed::stale);  // no longer in flight
  s.take_batch(3, 1);
  EXPECT_EQ(s.fail(a, 3, "crash 3", err("x"), true, out), Failed::exhausted);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->failures, (std::vector<std::string>{"crash 1", "crash 2", "crash 3"}));
  EXPECT_EQ(s.pending(), 1u);  // only the other chunk is left
  EXPECT_EQ(s.in_flight(), 0u);
}

TEST(Scheduler, ARetryGoesToAnotherWorkerIfThereIsOne) {
  Scheduler s;
  auto j = job();
  auto a = s.add(j, 0, 1000, "p");
  auto b = s.add(j, 1000, 1000, "p");
  s.take_batch(1, 2);
  std::unique_ptr<Chunk> out;
  ASSERT_EQ(s.fail(a, 1, "crash", err("x"), true, out), Failed::retried);
  auto again = s.take_batch(1, 2);  // worker 1 passes over its own failure
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]->id, b);
  auto other = s.take_batch(2, 2);
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0]->id, a);
  // When no other worker has room, it takes the retry itself rather than let it wait.
  ASSERT_EQ(s.fail(a, 2, "crash", err("x"), true, out), Failed::retried);
  auto busy_others = s.take_batch(2, 2, false);
  ASSERT_EQ(busy_others.size(), 1u);
  EXPECT_EQ(busy_others[0]->id, a);
  // With a single worker it takes the retry itself.
  ASSERT_EQ(s.fail(a, 3, "crash", err("x"), true, out), Failed::retried);
  auto alone = s.take_batch(2, 1);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0]->id, a);
}

// The driver walks its workers for room only when take_batch meets a retry that failed on the
// worker it serves (10,000 agents in the scale simulation), once per batch. A readded chunk
// (keep_going) has no failures but still avoids its worker: the question is asked all the same, so
// that a lone agent of several executors takes it (a shortcut on Chunk::failures left it there).
TEST(Scheduler, WhetherOtherWorkersHaveRoomIsAskedOnlyForARetryOfThisWorker) {
  Scheduler s;
  auto j = job(RetryPolicy{.retries = 0});
  for (int i = 0; i < 3; ++i) s.add(j, i * 1000, 1000, "p");
  int asked = 0;
  const auto no_room = [&] { return ++asked, false; };
  EXPECT_EQ(s.take_batch(1, 2, no_room, nullptr).size(), 1u);
  EXPECT_EQ(asked, 0) << "no retry: nothing to ask";
  std::unique_ptr<Chunk> out;
  ASSERT_EQ(s.fail(1, 1, "crash", err("x"), true, out), Failed::exhausted);
  s.readd(std::move(out));  // failures cleared, avoid_worker kept
  auto b = s.take_batch(1, 2, no_room, nullptr);
  EXPECT_EQ(asked, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]->id, 1u) << "nobody else has room: worker 1 takes its own readded chunk";
  ASSERT_EQ(s.fail(1, 2, "crash", err("x"), true, out), Failed::exhausted);
  s.readd(std::move(out));
  int asked_room = 0;
  auto passed = s.take_batch(
      1, 2, [&] { return ++asked_room, true; }, nullptr);
  EXPECT_EQ(asked_room, 1) << "asked once for the batch";
  ASSERT_EQ(passed.size(), 1u);
  EXPECT_NE(passed[0]->id, 1u) << "another worker has room: the readded chunk is left to it";
}

TEST(Scheduler, ANonRetryableFailureEndsTheChunkAtOnce) {
  Scheduler s;
  auto j = job();
  auto a = s.add(j, 0, 10, "p");
  s.take_batch(1, 1);
  std::unique_ptr<Chunk> out;
  EXPECT_EQ(s.fail(a, 1, "raised", err("x"), false, out), Failed::exhausted);
  ASSERT_NE(out, nullptr);
  EXPECT_TRUE(s.idle());
}

TEST(Scheduler, AReaddedChunkRunsAgainWithFreshRetriesAndANewAttemptNumber) {
  Scheduler s;
  auto j = job(RetryPolicy{.retries = 0});
  auto a = s.add(j, 0, 10, "p");
  s.take_batch(1, 1);
  std::unique_ptr<Chunk> out;
  ASSERT_EQ(s.fail(a, 1, "crash", err("x"), true, out), Failed::exhausted);
  out->skip = {3};
  s.readd(std::move(out));
  auto b = s.take_batch(2, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]->attempt, 2u);
  EXPECT_TRUE(b[0]->failures.empty());
  EXPECT_EQ(b[0]->skip, std::vector<std::uint32_t>{3});
  EXPECT_EQ(s.find(a, 1), nullptr);
  EXPECT_NE(s.find(a, 2), nullptr);
}

}  // namespace

namespace {
using namespace fibra::detail;

TEST(Scheduler, AChunkGoesOnlyToAWorkerThatOffersWhatItNeeds) {
  Scheduler s;
  RetryPolicy gpu;
  gpu.need.gpus = 1;
  auto g = job(gpu);
  auto c = job();
  s.add(g, 0, 1000, "p");  // needs a GPU, first in the queue
  s.add(c, 1000, 1000, "p");
  const fibra::Resources cpu_only{1, 0, 0}, with_gpu{1, 1, 0};
  auto b = s.take_batch(1, 2, true, &cpu_only);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]->job, c);                                   // passed over the GPU chunk
  EXPECT_TRUE(s.take_batch(1, 2, true, &cpu_only).empty());  // nothing it can run
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_EQ(s.in_flight(), 1u);  // (the GPU chunk, passed over, waits: not in flight)
  auto b2 = s.take_batch(2, 2, true, &with_gpu);
  ASSERT_EQ(b2.size(), 1u);
  EXPECT_EQ(b2[0]->job, g);
  EXPECT_EQ(s.in_flight(), 2u);
  EXPECT_EQ(s.pending(), 0u);
}

// A chunk never handed out is the queue's entry alone (issue 46: a million queued tasks): no Chunk,
// no map entry, until a worker takes it. Counted by malloc itself (mallinfo2).
TEST(Scheduler, AQueuedChunkCostsItsQueueEntryAloneUntilItIsTaken) {
  Scheduler s;
  auto j = job();
  constexpr int n = 20'000;
  const std::size_t before = ::mallinfo2().uordblks;
  for (int i = 0; i < n; ++i) s.add(j, std::uint64_t(i), 1, "pay");
  const double each = double(::mallinfo2().uordblks - before) / n;
  EXPECT_LT(each, 90) << "bytes a queued chunk costs the driver's scheduler";
  EXPECT_EQ(s.pending(), std::size_t(n));
  EXPECT_EQ(s.in_flight(), 0u);
  std::printf("a queued chunk: %.0f bytes\n", each);
}

// Chunks never handed out and chunks put back (a retry) wait in one queue and are counted,
// cancelled, fitted and taken alike.
TEST(Scheduler, ChunksNeverHandedOutAndChunksPutBackAreTreatedAlike) {
  Scheduler s;
  auto t = job(), m = job();
  t->set_task();
  const auto t1 = s.add(t, 0, 1, "a"), m1 = s.add(m, 0, 2, "b"), t2 = s.add(t, 1, 1, "c");
  std::uint64_t queued = 0, running = 0;
  s.count_tasks(queued, running);
  EXPECT_EQ(queued, 2u);
  EXPECT_EQ(running, 0u);
  const JobState* front = nullptr;
  std::uint32_t count = 0;
  ASSERT_TRUE(s.front(front, count));
  EXPECT_EQ(front, t.get());
  EXPECT_EQ(count, 1u);

  std::vector<Chunk*> b;  // one at a time (a fair share of three for one worker)
  for (int i = 0; i < 3; ++i)
    for (Chunk* c : s.take_batch(1, 1)) b.push_back(c);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(*b[1]->payload, "b");
  EXPECT_TRUE(s.requeue(t1, 1));  // t1 back at the front, by its id
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_EQ(s.in_flight(), 2u);
  s.count_tasks(queued, running);
  EXPECT_EQ(queued, 1u);
  EXPECT_EQ(running, 1u);
  const auto t3 = s.add(t, 2, 1, "d");  // behind it, never handed out
  EXPECT_TRUE(s.pending_fits(fibra::Resources{}, 10));

  auto mine = s.take_pending_of(t.get());  // fibra::cancel of t: both, in queue order
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0]->id, t1);
  EXPECT_EQ(mine[1]->id, t3);
  EXPECT_EQ(*mine[1]->payload, "d");
  EXPECT_EQ(mine[1]->attempt, 0u);
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.in_flight(), 2u);  // m1 and t2 still run

  // A failed attempt waits again by its id; its call cancelled, it is dropped from there.
  std::unique_ptr<Chunk> none;
  EXPECT_EQ(s.fail(t2, 1, "lost", err("lost"), true, none), Failed::retried);
  EXPECT_EQ(s.pending(), 1u);
  EXPECT_EQ(s.in_flight(), 1u);
  t->cancel();
  EXPECT_TRUE(s.take_batch(1, 1).empty());
  using Dropped = std::vector<std::pair<std::uint64_t, std::uint32_t>>;
  EXPECT_EQ(s.take_dropped(), (Dropped{{t2, 2u}}));
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_EQ(s.in_flight(), 1u);  // m1
  EXPECT_FALSE(s.idle());

  const auto m2 = s.add(m, 2, 2, "e");
  auto all = s.take_all();  // in flight and queued, by id
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->id, m1);
  EXPECT_EQ(all[1]->id, m2);
  EXPECT_EQ(*all[1]->payload, "e");
  EXPECT_TRUE(s.idle());
  EXPECT_FALSE(s.front(front, count));
}

}  // namespace
