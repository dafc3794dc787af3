#include <gtest/gtest.h>

#include "fibra/remote.hpp"
#include "scheduler.hpp"

namespace {
int ident(int x) { return x; }
}  // namespace
FIBRA_REMOTE(ident);

namespace {

using namespace fibra::detail;

std::shared_ptr<JobState> job() {
  return std::make_shared<JobState>(function_by_address(reinterpret_cast<const void*>(&ident), "map"),
                                    CallMode::single);
}

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
  EXPECT_EQ(b[0]->attempt, 1u);
  EXPECT_EQ(b[0]->worker, 2);
}

TEST(Scheduler, CancelledJobsAreDroppedBeforeTheyRun) {
  Scheduler s;
  auto j = job();
  auto k = job();
  s.add(j, 0, 1000, "p");
  s.add(k, 0, 1000, "p");
  j->cancel();
  auto b = s.take_batch(1, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]->job, k);
  EXPECT_EQ(s.pending(), 0u);
}

TEST(Scheduler, TakesWhatAWorkerOwnsAndEverything) {
  Scheduler s;
  auto j = job();
  for (int i = 0; i < 3; ++i) s.add(j, i * 1000, 1000, "p");
  s.take_batch(1, 2);
  s.take_batch(2, 2);
  auto mine = s.take_owned_by(1);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0]->first, 0u);
  EXPECT_EQ(s.take_all().size(), 2u);
  EXPECT_TRUE(s.idle());
}

}  // namespace
