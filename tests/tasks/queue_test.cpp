// Queues, pipes and events shared by the driver and tasks (issue 25, fibra/queue.hpp): FIFO order
// for each writer, every item delivered to exactly one get, maxsize and timeouts with their own
// errors, close() as the end of a stream, pulled delivery (a reader killed while it waits strands
// nothing), a pipe whose sender dies, and an event that stops tasks. Expected values come from the
// test (the items it put, counts, closed forms). Every wait on another process is bounded.
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"
#include "../common/errors.hpp"

using namespace std::chrono_literals;
using fibra_test::error_of;
using fibra_test::get_within;

namespace {
constexpr auto bound = 60s;

// Puts writer * 1'000'000 + k for k in [0, n): single puts, or put_many batches of 100.
long produce(fibra::Queue<long> q, long writer, long n, bool batches) {
  if (!batches) {
    for (long k = 0; k < n; ++k) q.put(writer * 1'000'000 + k);
    return n;
  }
  for (long k = 0; k < n; k += 100) {
    std::vector<long> b;
    for (long j = k; j < std::min(n, k + 100); ++j) b.push_back(writer * 1'000'000 + j);
    q.put_many(b);
  }
  return n;
}
FIBRA_REMOTE(produce);

// Fills a queue of one, puts a second item (which waits at the driver for room), then takes both
// back: the get goes out behind the put, makes room for it, and the next get finds it.
long put_two_into_one_then_get(fibra::Queue<long> q) {
  q.put(7);
  q.put(8);  // no timeout: the task goes on while it waits for room
  const long first = q.get(std::chrono::seconds(20));
  const long second = q.get(std::chrono::seconds(20));
  return first * 10 + second;
}
FIBRA_REMOTE(put_two_into_one_then_get);

// Takes items until the queue is closed and empty (QueueClosed), in batches or one by one.
std::vector<long> consume(fibra::Queue<long> q, bool batches) {
  std::vector<long> got;
  try {
    for (;;) {
      if (batches) {
        for (long v : q.get_many(7, std::chrono::seconds(30))) got.push_back(v);
      } else {
        got.push_back(q.get(std::chrono::seconds(30)));
      }
    }
  } catch (const fibra::QueueClosed&) {
  }
  return got;
}
FIBRA_REMOTE(consume);

// What a task's get finds on an empty queue within `ms`: the error's type, as the task saw it.
std::string get_on_empty(fibra::Queue<long> q, long ms) {
  try {
    q.get(std::chrono::milliseconds(ms));
    return "an item";
  } catch (const fibra::QueueEmpty&) {
    return "QueueEmpty";
  } catch (const fibra::QueueClosed& e) {
    return std::string("QueueClosed: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}
FIBRA_REMOTE(get_on_empty);

// Says its pid on `pids`, then waits for an item of `q` (for ever): it is killed meanwhile.
long reader_that_dies(fibra::Queue<long> q, fibra::Queue<long> pids) {
  pids.put(static_cast<long>(::getpid()));
  return q.get();
}
FIBRA_REMOTE(reader_that_dies);

// Its pid and the item it gets.
std::vector<long> reader(fibra::Queue<long> q) {
  return {static_cast<long>(::getpid()), q.get(std::chrono::seconds(30))};
}
FIBRA_REMOTE(reader);

// Answers each value with value + 1 until the other end is closed; returns how many it answered.
long echo(fibra::Connection<long> end) {
  long n = 0;
  try {
    for (;;) {
      end.send(end.recv(std::chrono::seconds(30)) + 1);
      ++n;
    }
  } catch (const fibra::PipeClosed&) {
  }
  return n;
}
FIBRA_REMOTE(echo);

// Sends 1, 2, 3 and dies.
long send_three_and_die(fibra::Connection<long> end) {
  for (long v : {1L, 2L, 3L}) end.send(v);
  std::abort();
}
FIBRA_REMOTE(send_three_and_die);

// Puts 1 a millisecond until `stop` is set; returns how many it put.
long until_stopped(fibra::Event stop, fibra::Queue<long> out) {
  long n = 0;
  while (!stop.wait(std::chrono::milliseconds(1))) {
    out.put(1);
    ++n;
  }
  return n;
}
FIBRA_REMOTE(until_stopped);

// Makes a queue of its own, fills it and returns it.
fibra::Queue<long> make_filled(long n) {
  fibra::Queue<long> q;
  for (long k = 0; k < n; ++k) q.put(k * k);
  return q;
}
FIBRA_REMOTE(make_filled);

// Waits, then uses a queue whose driver handle may be gone by then.
std::string late_get(fibra::Queue<long> q, long ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return get_on_empty(q, 100);
}
FIBRA_REMOTE(late_get);

// Puts into a queue that was closed: the put goes out without waiting, and its failure is thrown
// by the next call on a queue at the latest.
// ... as an Error of its own: a reader loop's `catch (QueueClosed&)` must not take it for the end
// of a stream.
std::string put_after_close(fibra::Queue<long> q) {
  try {
    q.put(1);
    (void)q.qsize();
    return "no error";
  } catch (const fibra::QueueClosed&) {
    return "QueueClosed";
  } catch (const fibra::Error& e) {
    return e.what();
  }
}
FIBRA_REMOTE(put_after_close);

// Takes `n` items and marks each done.
long take_and_mark(fibra::JoinableQueue<long> q, long n) {
  long sum = 0;
  for (long k = 0; k < n; ++k) {
    sum += q.get(std::chrono::seconds(30));
    q.task_done();
  }
  return sum;
}
FIBRA_REMOTE(take_and_mark);

// Takes `n` items with single gets (its later gets read ahead), tells them on `taken` with its
// pid, then holds on until `release` is set, with what it read ahead and did not take.
long take_then_hold(fibra::Queue<long> q, long n, fibra::Queue<long> taken, fibra::Event release) {
  std::vector<long> got{static_cast<long>(::getpid())};
  for (long k = 0; k < n; ++k) got.push_back(q.get(std::chrono::seconds(30)));
  taken.put_many(got);
  release.wait(std::chrono::seconds(60));
  return n;
}
FIBRA_REMOTE(take_then_hold);

// Takes `gets` x get_many(`per_get`) (the second on read ahead: as many again, then four times
// as many), tells them on `taken` with its pid, then holds on until `release` is set, with what it
// read ahead and did not take.
long take_many_then_hold(fibra::Queue<long> q, long gets, long per_get, fibra::Queue<long> taken,
                         fibra::Event release) {
  std::vector<long> got{static_cast<long>(::getpid())};
  for (long k = 0; k < gets; ++k) {
    const std::vector<long> v = q.get_many(static_cast<std::size_t>(per_get), std::chrono::seconds(30));
    got.insert(got.end(), v.begin(), v.end());
  }
  taken.put_many(got);
  release.wait(std::chrono::seconds(60));
  return gets;
}
FIBRA_REMOTE(take_many_then_hold);

// Takes `n` items with single gets and returns them.
std::vector<long> take_some(fibra::Queue<long> q, long n) {
  std::vector<long> got;
  for (long k = 0; k < n; ++k) got.push_back(q.get(std::chrono::seconds(30)));
  return got;
}
FIBRA_REMOTE(take_some);

std::vector<long> iota_from(long from, long to) {
  std::vector<long> v(static_cast<std::size_t>(to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// Puts from .. to-1 in put_many batches of 7: the driver keeps each batch as one block, so what a
// reader takes (and what comes back from it) starts and ends inside blocks and spans several.
void put_in_sevens(fibra::Queue<long>& q, long from, long to) {
  for (long k = from; k < to; k += 7) q.put_many(iota_from(k, std::min(to, k + 7)));
}

// An actor whose calls run at once: one fills a small queue, another empties it.
class Relay {
 public:
  long fill(fibra::Queue<long> q, long n) {
    for (long k = 0; k < n; ++k) q.put(k);
    return n;
  }
  long drain(fibra::Queue<long> q, long n) {
    long sum = 0;
    for (long k = 0; k < n; ++k) sum += q.get(std::chrono::seconds(30));
    return sum;
  }
};
FIBRA_ACTOR(Relay);
FIBRA_ACTOR_METHOD(Relay, fill);
FIBRA_ACTOR_METHOD(Relay, drain);

}  // namespace

// Two calls of one threaded actor: the reader's gets do not wait for the writer's puts (each call
// has its own), which wait for the reader. Seen to hang with one list of puts per process.
TEST(Queues, AWriterAndAReaderInOneThreadedActor) {
  fibra::Pool pool(2);
  auto relay = fibra::Actor<Relay>::start({.max_concurrency = 2, .pool = &pool});
  fibra::Queue<long> q(10);
  auto filled = relay.call(&Relay::fill, q, 600L);
  auto drained = relay.call(&Relay::drain, q, 600L);
  EXPECT_EQ(get_within(filled, bound, "Relay::fill"), 600);
  EXPECT_EQ(get_within(drained, bound, "Relay::drain"), 600L * 599 / 2);
}

// ---- in the driver alone --------------------------------------------------------------------

TEST(Queues, FifoSizesAndTimeoutsInTheDriver) {
  fibra::Queue<long> q;
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(q.try_get().has_value());
  for (long k = 0; k < 1000; ++k) q.put(k);
  EXPECT_EQ(q.qsize(), 1000u);
  EXPECT_FALSE(q.full());  // no maxsize
  for (long k = 0; k < 1000; ++k) ASSERT_EQ(q.get(), k);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(q.get(200ms), fibra::QueueEmpty);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 190ms);
  q.put_many({1, 2, 3, 4, 5});
  EXPECT_EQ(q.get_many(3), (std::vector<long>{1, 2, 3}));
  EXPECT_EQ(q.get_many(10), (std::vector<long>{4, 5}));  // what there is, not 10
  EXPECT_THROW(q.get_many(10, 50ms), fibra::QueueEmpty);
  q.put_many({6, 7, 8});  // a get across the batches items were put in, and from inside one
  q.put(9);
  q.put_many({10, 11});
  EXPECT_EQ(q.get(), 6);
  EXPECT_EQ(q.get_many(4), (std::vector<long>{7, 8, 9, 10}));
  EXPECT_EQ(q.get_many(4), (std::vector<long>{11}));
}

TEST(Queues, MaxsizeBlocksPutsAndRefusesWhatCanNeverFit) {
  fibra::Queue<long> q(2);
  q.put(1);
  q.put(2);
  EXPECT_TRUE(q.full());
  EXPECT_THROW(q.put(3, 100ms), fibra::QueueFull);
  const std::string why = error_of([&] { q.put_many({7, 8, 9}); });
  EXPECT_NE(why.find("holds at most 2"), std::string::npos) << why;
  // A put that waits for room goes in once a get makes it, after what was there.
  std::thread writer([&] { q.put(3); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(q.qsize(), 2u);
  EXPECT_EQ(q.get(5s), 1);
  writer.join();
  EXPECT_EQ(q.get(5s), 2);
  EXPECT_EQ(q.get(5s), 3);
}

TEST(Queues, CloseEndsTheStreamAfterTheItemsInIt) {
  fibra::Queue<long> q;
  q.put(1);
  q.close();
  EXPECT_TRUE(q.closed());
  EXPECT_THROW(q.put(2), fibra::QueueClosed);
  EXPECT_EQ(q.get(5s), 1);
  EXPECT_THROW(q.get(5s), fibra::QueueClosed);
  EXPECT_THROW(q.try_get(), fibra::QueueClosed);
  // A get that waits is woken by close().
  fibra::Queue<long> r;
  std::string seen;
  std::thread waiter([&] { seen = error_of([&] { r.get(30s); }); });
  std::this_thread::sleep_for(100ms);
  r.close();
  waiter.join();
  EXPECT_NE(seen.find("was closed"), std::string::npos) << seen;
}

TEST(Queues, JoinableQueueEventAndPipeInTheDriver) {
  fibra::JoinableQueue<long> j;
  j.put_many({1, 2});
  EXPECT_FALSE(j.join(50ms));
  (void)j.get(5s);
  j.task_done();
  EXPECT_FALSE(j.join(50ms));
  (void)j.get(5s);
  j.task_done();
  EXPECT_TRUE(j.join(5s));
  const std::string why = error_of([&] { j.task_done(); });
  EXPECT_NE(why.find("more times than items were put"), std::string::npos) << why;

  fibra::Event e;
  EXPECT_FALSE(e.is_set());
  EXPECT_FALSE(e.wait(50ms));
  e.set();
  EXPECT_TRUE(e.is_set());
  EXPECT_TRUE(e.wait(5s));
  e.clear();
  EXPECT_FALSE(e.wait(10ms));

  auto [a, b] = fibra::Pipe<std::string>();
  a.send("ping");
  EXPECT_TRUE(b.poll());
  EXPECT_EQ(b.recv(5s), "ping");
  EXPECT_FALSE(b.poll());
  b.send("pong");
  EXPECT_EQ(a.recv(5s), "pong");
  a.send("last");
  a.close();
  EXPECT_EQ(b.recv(5s), "last");
  EXPECT_THROW(b.recv(5s), fibra::PipeClosed);
  EXPECT_THROW(b.send("x"), fibra::PipeClosed);  // its receiver closed that direction

  auto [in, out] = fibra::Pipe<long>(false);
  out.send(5);
  EXPECT_EQ(in.recv(5s), 5);
  const std::string wrong = error_of([&] { in.send(1); });
  EXPECT_NE(wrong.find("one-way Pipe"), std::string::npos) << wrong;
}

// ---- shared with tasks ----------------------------------------------------------------------

// Two writers, one with single puts and one with batches: the driver reads every item once, and
// each writer's items in the order it put them.
TEST(Queues, ItemsFromTasksArriveOnceAndInEachWritersOrder) {
  fibra::Pool pool(2);
  fibra::Queue<long> q(500);  // the writers wait for room now and then
  const long n = 3000;
  auto a = pool.submit(produce, q, 1L, n, false);
  auto b = pool.submit(produce, q, 2L, n, true);
  std::vector<long> last = {-1, -1, -1};
  std::set<long> seen;
  for (long i = 0; i < 2 * n; ++i) {
    const long v = q.get(std::chrono::seconds(bound));
    const long w = v / 1'000'000, k = v % 1'000'000;
    ASSERT_TRUE(w == 1 || w == 2) << v;
    ASSERT_EQ(k, last[w] + 1) << "writer " << w << " out of order";
    last[w] = k;
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), std::size_t(2 * n));
  EXPECT_EQ(get_within(a, bound, "produce(1)"), n);
  EXPECT_EQ(get_within(b, bound, "produce(2)"), n);
  EXPECT_FALSE(q.try_get().has_value());
}

// A task's get does not wait for its own put that waits for room: it makes the room (before, it
// waited for that put's answer, which never came).
TEST(Queues, AGetMakesRoomForItsOwnTasksWaitingPut) {
  fibra::Pool pool(1);
  fibra::Queue<long> q(1);
  auto f = pool.submit(put_two_into_one_then_get, q);
  EXPECT_EQ(get_within(f, 30s, "put_two_into_one_then_get (its get waited for its own put, which waits for room)"), 78);
  EXPECT_FALSE(q.try_get().has_value());
}

// The driver fills a queue and closes it; two readers, one by batches, take everything: each item
// once, each reader's in queue order, both ended by QueueClosed.
TEST(Queues, ReadersInTasksShareTheItemsAndStopAtClose) {
  fibra::Pool pool(2);
  fibra::Queue<long> q;
  const long n = 5000;
  auto a = pool.submit(consume, q, false);
  auto b = pool.submit(consume, q, true);
  for (long k = 0; k < n; k += 500) {
    std::vector<long> batch(500);
    std::iota(batch.begin(), batch.end(), k);
    q.put_many(batch);
  }
  q.close();
  std::vector<long> all;
  for (auto* f : {&a, &b}) {
    const std::vector<long> got = get_within(*f, bound, "consume");
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    all.insert(all.end(), got.begin(), got.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<long> want(n);
  std::iota(want.begin(), want.end(), 0L);
  EXPECT_EQ(all, want);
}

TEST(Queues, ATasksTimeoutAndAGoneQueueHaveTheirOwnErrors) {
  fibra::Pool pool(2);
  fibra::Queue<long> q;
  EXPECT_EQ(get_within(pool.submit(get_on_empty, q, 200L), bound, "get_on_empty"), "QueueEmpty");
  fibra::Future<std::string> late;
  {
    fibra::Queue<long> dropped;
    late = pool.submit(late_get, dropped, 500L);
  }  // the driver's last handle goes: the queue with it
  const std::string text = get_within(late, bound, "late_get");
  EXPECT_NE(text.find("QueueClosed: fibra: queue #"), std::string::npos) << text;
  EXPECT_NE(text.find("is gone"), std::string::npos) << text;
  fibra::Queue<long> shut;
  shut.close();
  const std::string failed = get_within(pool.submit(put_after_close, shut), bound, "put_after_close");
  EXPECT_NE(failed.find("an earlier put of this task"), std::string::npos) << failed;
  EXPECT_NE(failed.find("was closed"), std::string::npos) << failed;
  // A queue made in a task, returned to the driver, holds what the task put.
  fibra::Queue<long> made = get_within(pool.submit(make_filled, 4L), bound, "make_filled");
  EXPECT_EQ(made.get_many(10, 5s), (std::vector<long>{0, 1, 4, 9}));
}

// Pulled delivery: a reader killed while it waits takes nothing with it. Without it, the item put
// after the kill went to the dead reader's wait and the next reader found nothing.
TEST(Queues, AReaderKilledWhileItWaitsStrandsNothing) {
  fibra::Pool pool(2);
  fibra::Queue<long> q, pids;
  auto doomed = pool.submit(fibra::TaskOptions{.retries = 0}, reader_that_dies, q, pids);
  const long pid = pids.get(std::chrono::seconds(bound));
  std::this_thread::sleep_for(300ms);  // its get has reached the driver
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  EXPECT_THROW(get_within(doomed, bound, "reader_that_dies"), fibra::Error);
  q.put(42);
  const std::vector<long> got = get_within(pool.submit(reader, q), bound, "reader");
  EXPECT_NE(got[0], pid);
  EXPECT_EQ(got[1], 42);
}

// Read ahead: a task's single gets take the next items along. A reader that holds some and
// computes is asked for them back when another get waits, which then gets them first, in order,
// even with no time to wait (try_get). Without the recall the driver's get timed out; without
// gets waiting behind what was read ahead, it got item 65 first.
TEST(ReadAhead, ASlowReadersItemsComeBackInOrderForAnotherGet) {
  fibra::Pool pool(1);
  fibra::Queue<long> q, taken;
  fibra::Event release;
  q.put_many(iota_from(0, 1000));
  auto f = pool.submit(take_then_hold, q, 30L, taken, release);
  const std::vector<long> first = taken.get_many(31, bound);
  ASSERT_EQ(first.size(), 31u);
  EXPECT_EQ(std::vector<long>(first.begin() + 1, first.end()), iota_from(0, 30));
  const std::optional<long> next =
      fibra_test::call_within(bound, "try_get behind a reader's read-ahead", [&] { return q.try_get(); });
  ASSERT_TRUE(next.has_value()) << "try_get found nothing while the reader held items it read ahead";
  EXPECT_EQ(*next, 30);
  for (long k = 31; k < 1000; ++k) ASSERT_EQ(q.get(10s), k);
  release.set();
  EXPECT_EQ(get_within(f, bound, "take_then_hold"), 30);
  EXPECT_FALSE(q.try_get().has_value());
}

// Two calls of one threaded actor read one queue at once: each get of the process may read ahead
// while the other's delivery is held. Every item is read once, and the driver gets the rest; a
// second delivery that overwrote the first stranded its items (the drains never ended).
TEST(ReadAhead, TwoThreadsOfOneProcessReadOneQueueAtOnce) {
  fibra::Pool pool(1);
  auto relay = fibra::Actor<Relay>::start({.max_concurrency = 2, .pool = &pool});
  fibra::Queue<long> q;
  const long n = 20000;
  q.put_many(iota_from(0, n));
  auto a = relay.call(&Relay::drain, q, 5000L);
  auto b = relay.call(&Relay::drain, q, 5000L);
  const long sum = get_within(a, bound, "Relay::drain (a)") + get_within(b, bound, "Relay::drain (b)");
  std::vector<long> rest;
  while (rest.size() < 10000u) {
    const auto got = fibra_test::call_within(bound, "the 10,000 items the drains left", [&] { return q.get_many(n); });
    rest.insert(rest.end(), got.begin(), got.end());
  }
  EXPECT_EQ(rest.size(), 10000u);
  EXPECT_EQ(sum + std::accumulate(rest.begin(), rest.end(), 0L), n * (n - 1) / 2);
  EXPECT_FALSE(q.try_get().has_value());
}

// A chunk gives back what it read ahead before its result reaches the driver: the queue holds
// every item it did not take as soon as its Future is ready (935 of 970 without the give-back).
TEST(ReadAhead, AChunkGivesBackWhatItDidNotTakeWhenItReturns) {
  fibra::Pool pool(1);
  fibra::Queue<long> q;
  put_in_sevens(q, 0, 1000);
  EXPECT_EQ(get_within(pool.submit(take_some, q, 30L), bound, "take_some"), iota_from(0, 30));
  EXPECT_EQ(q.qsize(), 970u);
  EXPECT_EQ(get_within(pool.submit(take_some, q, 70L), bound, "take_some"), iota_from(30, 100));
  EXPECT_EQ(q.qsize(), 900u);
  EXPECT_EQ(q.get_many(1000, 5s), iota_from(100, 1000));
}

// A reader killed while it holds items it read ahead: they come back to the front, in order (from
// inside the batches they were put in).
TEST(ReadAhead, AKilledReadersItemsComeBackInOrder) {
  fibra::Pool pool(1);
  fibra::Queue<long> q, taken;
  fibra::Event release;
  put_in_sevens(q, 0, 1000);
  auto f = pool.submit(fibra::TaskOptions{.retries = 0}, take_then_hold, q, 30L, taken, release);
  const std::vector<long> first = taken.get_many(31, bound);
  ASSERT_EQ(first.size(), 31u);
  ASSERT_EQ(::kill(static_cast<pid_t>(first[0]), SIGKILL), 0);
  EXPECT_THROW(get_within(f, bound, "take_then_hold"), fibra::Error);
  EXPECT_EQ(q.get_many(1000, 10s), iota_from(30, 1000));
}

// A get_many reads ahead too (its second takes as many again along): a reader killed while it
// holds them gives them back to the front, in order, from inside the batches they were put in
// (without the give-back: the queue's next items were 30 on, and 20-29 were lost).
TEST(ReadAhead, AKilledGetManyReadersItemsComeBackInOrder) {
  fibra::Pool pool(1);
  fibra::Queue<long> q, taken;
  fibra::Event release;
  put_in_sevens(q, 0, 1000);
  auto f = pool.submit(fibra::TaskOptions{.retries = 0}, take_many_then_hold, q, 2L, 10L, taken, release);
  const std::vector<long> first = taken.get_many(21, bound);
  ASSERT_EQ(first.size(), 21u);
  EXPECT_EQ(std::vector<long>(first.begin() + 1, first.end()), iota_from(0, 20));
  const char* lanes = std::getenv("FIBRA_LANES");  // 0: through the agents, where nothing is read ahead
  const bool reads_ahead = !(lanes && std::string_view(lanes) == "0");
  EXPECT_EQ(q.qsize(), reads_ahead ? 970u : 980u) << "the reader's second get_many took 10 more along only with lanes";
  ASSERT_EQ(::kill(static_cast<pid_t>(first[0]), SIGKILL), 0);
  EXPECT_THROW(get_within(f, bound, "take_many_then_hold"), fibra::Error);
  EXPECT_EQ(q.get_many(1000, 10s), iota_from(20, 1000));
}

// What a get_many read ahead is asked back when another get waits, which gets it first, in order.
TEST(ReadAhead, AGetManysItemsComeBackForAnotherGet) {
  fibra::Pool pool(1);
  fibra::Queue<long> q, taken;
  fibra::Event release;
  put_in_sevens(q, 0, 1000);
  auto f = pool.submit(take_many_then_hold, q, 2L, 10L, taken, release);
  ASSERT_EQ(taken.get_many(21, bound).size(), 21u);
  const std::optional<long> next =
      fibra_test::call_within(bound, "try_get behind a get_many's read-ahead", [&] { return q.try_get(); });
  ASSERT_TRUE(next.has_value()) << "try_get found nothing while the reader held items it read ahead";
  EXPECT_EQ(*next, 20);
  EXPECT_EQ(q.get_many(1000, 10s), iota_from(21, 1000));
  release.set();
  EXPECT_EQ(get_within(f, bound, "take_many_then_hold"), 2);
}

TEST(Queues, JoinableQueueJoinsWhenTasksMarkEveryItem) {
  fibra::Pool pool(2);
  fibra::JoinableQueue<long> q;
  for (long k = 1; k <= 100; ++k) q.put(k);
  auto a = pool.submit(take_and_mark, q, 60L);
  auto b = pool.submit(take_and_mark, q, 40L);
  EXPECT_TRUE(q.join(std::chrono::seconds(bound)));
  EXPECT_EQ(get_within(a, bound, "take_and_mark") + get_within(b, bound, "take_and_mark"), 5050);
}

TEST(Pipes, PingPongWithATaskThenCloseEndsIt) {
  fibra::Pool pool(2);
  auto [mine, theirs] = fibra::Pipe<long>();
  auto answered = pool.submit(echo, theirs);
  for (long v = 0; v < 1000; ++v) {
    mine.send(v);
    ASSERT_EQ(mine.recv(std::chrono::seconds(bound)), v + 1);
  }
  mine.close();
  EXPECT_EQ(get_within(answered, bound, "echo"), 1000);
}

// The sender's process dies: what it sent is received, then PipeClosed (not a wait for ever).
TEST(Pipes, ASendersDeathClosesThePipeAfterWhatItSent) {
  fibra::Pool pool(2);
  auto [mine, theirs] = fibra::Pipe<long>();
  auto dead = pool.submit(fibra::TaskOptions{.retries = 0}, send_three_and_die, theirs);
  for (long v : {1L, 2L, 3L}) EXPECT_EQ(mine.recv(std::chrono::seconds(bound)), v);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(mine.recv(std::chrono::seconds(bound)), fibra::PipeClosed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_THROW(get_within(dead, bound, "send_three_and_die"), fibra::Error);
}

TEST(Events, AnEventStopsTasks) {
  fibra::Pool pool(2);
  fibra::Event stop;
  fibra::Queue<long> out;
  auto a = pool.submit(until_stopped, stop, out);
  auto b = pool.submit(until_stopped, stop, out);
  long got = 0;
  while (got < 100) got += out.get(std::chrono::seconds(bound));
  stop.set();
  const long put = get_within(a, bound, "until_stopped") + get_within(b, bound, "until_stopped");
  while (auto v = out.try_get()) got += *v;
  EXPECT_EQ(got, put);
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
