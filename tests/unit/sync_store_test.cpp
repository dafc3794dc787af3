// The driver's store of locks, conditions and barriers (src/driver/sync_store.cpp), called as the
// pool calls it for tasks: holders of other processes (pool, worker, route) and threads (the call's
// token), and their deaths told by forget(). One process, no MPI: what a death frees, who is told,
// and in which order waiters are served.
#include <gtest/gtest.h>

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "driver/sync_store.hpp"
#include "fibra/error.hpp"

namespace {

using fibra::detail::ChannelHolder;
using fibra::detail::ChannelKind;
using fibra::detail::ChannelOp;
using fibra::detail::SyncStore;

// One call's outcome, once its answer came.
struct Outcome {
  bool answered = false;
  std::exception_ptr error;
  fibra::wire::ChannelReply reply;
};

std::shared_ptr<Outcome> call(ChannelOp op, ChannelKind kind, std::uint64_t id, const ChannelHolder& who,
                              std::uint64_t thread = 1, double timeout_s = -1, std::uint64_t n = 1) {
  fibra::wire::ChannelCall c;
  c.op = op;
  c.kind = kind;
  c.id = id;
  c.n = n;
  c.token = thread;
  c.timeout_s = timeout_s;
  auto out = std::make_shared<Outcome>();
  SyncStore::instance().call(std::move(c), who, [out](std::exception_ptr e, fibra::wire::ChannelReply r) {
    out->answered = true;
    out->error = e;
    out->reply = std::move(r);
  });
  return out;
}

std::uint64_t open(ChannelKind kind, std::uint64_t n) {
  return call(ChannelOp::open, kind, 0, ChannelHolder{}, 0, -1, n)->reply.value;
}

template <class E>
bool is(const std::shared_ptr<Outcome>& o) {
  if (!o->error) return false;
  try {
    std::rethrow_exception(o->error);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Each test uses its own pool number: forget() of one does not reach another's holders.
const ChannelHolder driver{};

TEST(SyncStore, AHolderThatDiesFreesTheLockAndItsWaitersAreToldButNotOthers) {
  const ChannelHolder a{101, 1, 1}, b{101, 2, 1};
  const auto lock = open(ChannelKind::lock, 1);
  const auto other = open(ChannelKind::lock, 1);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::lock, lock, a)->reply.flag);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::lock, other, b)->reply.flag);
  auto waiting = call(ChannelOp::acquire, ChannelKind::lock, lock, b);
  auto waiting_other = call(ChannelOp::acquire, ChannelKind::lock, other, driver);
  EXPECT_FALSE(waiting->answered);
  SyncStore::instance().forget(101, 1, 1);
  ASSERT_TRUE(waiting->answered);
  EXPECT_TRUE(is<fibra::HolderDied>(waiting)) << "the waiter is told the holder died";
  EXPECT_FALSE(waiting_other->answered) << "a lock the dead process did not hold is untouched";
  EXPECT_TRUE(call(ChannelOp::acquire, ChannelKind::lock, lock, driver, 1, 0)->reply.flag) << "free again";
}

TEST(SyncStore, ADeadWaiterIsDroppedAndTheNextInLineGetsTheLock) {
  const ChannelHolder a{102, 1, 1}, b{102, 2, 1};
  const auto lock = open(ChannelKind::lock, 1);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::lock, lock, driver)->reply.flag);
  auto first = call(ChannelOp::acquire, ChannelKind::lock, lock, a);
  auto second = call(ChannelOp::acquire, ChannelKind::lock, lock, b);
  SyncStore::instance().forget(102, 1, std::nullopt);  // a's whole worker
  EXPECT_FALSE(second->answered) << "a waiter's death frees nothing";
  EXPECT_FALSE(call(ChannelOp::unlock, ChannelKind::lock, lock, driver)->error);
  ASSERT_TRUE(second->answered);
  EXPECT_TRUE(second->reply.flag);
  EXPECT_FALSE(first->answered) << "the dead waiter is never answered";
}

TEST(SyncStore, ABoundedSemaphoresUnitsOfADeadHolderComeBackAndOnlyTheirs) {
  const ChannelHolder a{103, 1, 1}, b{103, 1, 2};
  const auto sem = open(ChannelKind::bounded_semaphore, 3);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::bounded_semaphore, sem, a)->reply.flag);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::bounded_semaphore, sem, a, 2)->reply.flag);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::bounded_semaphore, sem, b)->reply.flag);
  EXPECT_EQ(call(ChannelOp::info, ChannelKind::bounded_semaphore, sem, driver)->reply.value, 0u);
  SyncStore::instance().forget(103, 1, 1);  // route 1 only: b (route 2) lives
  EXPECT_EQ(call(ChannelOp::info, ChannelKind::bounded_semaphore, sem, driver)->reply.value, 2u);
}

TEST(SyncStore, APlainSemaphoreUsedAsASignalGivesNothingBackWhenItsTakerEnds) {
  const ChannelHolder consumer{106, 1, 1};
  const auto sem = open(ChannelKind::semaphore, 0);
  auto waiting = call(ChannelOp::acquire, ChannelKind::semaphore, sem, consumer);
  EXPECT_FALSE(call(ChannelOp::unlock, ChannelKind::semaphore, sem, driver)->error);  // the producer's signal
  ASSERT_TRUE(waiting->answered && waiting->reply.flag);
  SyncStore::instance().forget(106, 1, std::nullopt);  // the consumer ends, its signal used
  EXPECT_EQ(call(ChannelOp::info, ChannelKind::semaphore, sem, driver)->reply.value, 0u)
      << "a signal nobody sent appeared";
}

TEST(SyncStore, AnRLocksDepthIsRestoredAfterAConditionsWait) {
  const ChannelHolder a{104, 1, 1};
  const auto rlock = open(ChannelKind::rlock, 1);
  const auto cond = open(ChannelKind::condition, 0);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::rlock, rlock, a)->reply.flag);
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::rlock, rlock, a)->reply.flag);
  fibra::wire::ChannelCall w;
  auto waited = std::make_shared<Outcome>();
  w.op = ChannelOp::wait;
  w.kind = ChannelKind::condition;
  w.id = cond;
  w.token = 1;
  w.ahead = rlock;
  SyncStore::instance().call(w, a, [waited](std::exception_ptr e, fibra::wire::ChannelReply r) {
    waited->answered = true;
    waited->error = e;
    waited->reply = r;
  });
  ASSERT_FALSE(waited->answered);
  // While it waits, the lock is free: the driver takes it and notifies.
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::rlock, rlock, driver, 7, 0)->reply.flag);
  fibra::wire::ChannelCall n = w;
  n.op = ChannelOp::notify;
  n.n = 1;
  n.token = 7;
  SyncStore::instance().call(
      n, driver, [](std::exception_ptr e, fibra::wire::ChannelReply) { EXPECT_FALSE(e) << "the notify is refused"; });
  EXPECT_FALSE(waited->answered) << "notified, but the driver still holds the lock";
  EXPECT_FALSE(call(ChannelOp::unlock, ChannelKind::rlock, rlock, driver, 7)->error);
  ASSERT_TRUE(waited->answered);
  EXPECT_TRUE(waited->reply.flag) << "notified";
  // It holds the RLock twice again: one release leaves it held.
  EXPECT_FALSE(call(ChannelOp::unlock, ChannelKind::rlock, rlock, a)->error);
  EXPECT_FALSE(call(ChannelOp::acquire, ChannelKind::rlock, rlock, driver, 7, 0)->reply.flag);
  EXPECT_FALSE(call(ChannelOp::unlock, ChannelKind::rlock, rlock, a)->error);
  EXPECT_TRUE(call(ChannelOp::acquire, ChannelKind::rlock, rlock, driver, 7, 0)->reply.flag);
}

TEST(SyncStore, AConditionsWaiterTakesItsLockBackWhenTheHolderDiesAndIsNotTold) {
  const ChannelHolder a{107, 1, 1}, b{107, 2, 1};
  const auto lock = open(ChannelKind::lock, 1);
  const auto cond = open(ChannelKind::condition, 0);
  const auto condition_call = [&](ChannelOp op, const ChannelHolder& who) {
    fibra::wire::ChannelCall c;
    c.op = op;
    c.kind = ChannelKind::condition;
    c.id = cond;
    c.n = 1;
    c.token = 1;
    c.ahead = lock;
    auto out = std::make_shared<Outcome>();
    SyncStore::instance().call(c, who, [out](std::exception_ptr e, fibra::wire::ChannelReply r) {
      out->answered = true;
      out->error = e;
      out->reply = std::move(r);
    });
    return out;
  };
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::lock, lock, b)->reply.flag);
  auto waiting = condition_call(ChannelOp::wait, b);  // releases the lock while it waits
  ASSERT_TRUE(call(ChannelOp::acquire, ChannelKind::lock, lock, a)->reply.flag);
  EXPECT_FALSE(condition_call(ChannelOp::notify, a)->error);  // b now waits for the lock a holds
  auto other = call(ChannelOp::acquire, ChannelKind::lock, lock, driver);
  SyncStore::instance().forget(107, 1, std::nullopt);  // a dies holding it
  ASSERT_TRUE(waiting->answered);
  EXPECT_FALSE(waiting->error) << "the waiter holds its lock again, as its wait promised";
  EXPECT_TRUE(waiting->reply.flag) << "it was notified";
  ASSERT_TRUE(other->answered);
  EXPECT_TRUE(is<fibra::HolderDied>(other)) << "a plain acquire waiting then is told";
  EXPECT_FALSE(call(ChannelOp::acquire, ChannelKind::lock, lock, driver, 1, 0)->reply.flag) << "b holds it";
}

TEST(SyncStore, ABarrierGivesIndexesInArrivalOrderAndBreaksWhenAPartyDies) {
  const ChannelHolder a{105, 1, 1}, b{105, 2, 1};
  const auto barrier = open(ChannelKind::barrier, 3);
  auto first = call(ChannelOp::wait, ChannelKind::barrier, barrier, a);
  auto second = call(ChannelOp::wait, ChannelKind::barrier, barrier, b);
  auto third = call(ChannelOp::wait, ChannelKind::barrier, barrier, driver);
  ASSERT_TRUE(first->answered && second->answered && third->answered);
  EXPECT_EQ(first->reply.value, 0u);
  EXPECT_EQ(second->reply.value, 1u);
  EXPECT_EQ(third->reply.value, 2u);
  auto again = call(ChannelOp::wait, ChannelKind::barrier, barrier, b);
  SyncStore::instance().forget(105, 1, std::nullopt);
  EXPECT_FALSE(again->answered) << "the dead process does not wait there now";
  auto mine = call(ChannelOp::wait, ChannelKind::barrier, barrier, a);
  SyncStore::instance().forget(105, 1, std::nullopt);
  ASSERT_TRUE(again->answered);
  EXPECT_TRUE(is<fibra::BrokenBarrier>(again));
  EXPECT_TRUE(is<fibra::BrokenBarrier>(call(ChannelOp::wait, ChannelKind::barrier, barrier, driver)));
  EXPECT_FALSE(mine->answered) << "a dead party's own wait is not answered";
}

}  // namespace
