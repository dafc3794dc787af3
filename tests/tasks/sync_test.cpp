// Locks, conditions, barriers and shared state across processes (issue 46, fibra/sync.hpp and
// fibra/shared.hpp): counters kept exact by a Lock from 8 processes, a Barrier of 8 that lets
// nobody through before all came, an RLock's owner rules, semaphores' counts, a Condition between
// the driver and a process, a holder SIGKILLed while it holds a lock (its waiters are told, the
// lock is free again), a party killed at a barrier, and a Manager's dict and list filled by
// processes at once. Expected values come from the test (counts, closed forms); every wait on
// another process is bounded.
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/bounded.hpp"

using namespace std::chrono_literals;

namespace {
constexpr auto bound = 60s;

// `rounds` times: takes the lock, reads the counter, writes it one higher, and notes its entry and
// exit in `log` (+pid on entry, -pid on exit). Without the lock, reads of the same value lose
// increments and entries of two processes interleave.
void count_under_lock(fibra::Lock lock, fibra::Value<long> counter, fibra::List<long> log, long rounds) {
  for (long k = 0; k < rounds; ++k) {
    std::lock_guard g(lock);
    log.append(getpid());
    const long v = counter.get();
    std::this_thread::sleep_for(100us);  // room for another process to read the same value
    counter.set(v + 1);
    log.append(-getpid());
  }
}
FIBRA_REMOTE(count_under_lock);

// Marks its slot, waits at the barrier, then reports its arrival index and how many slots were
// marked when it passed (all of them, if nobody passed early).
void meet(fibra::Barrier barrier, fibra::Array<long> marks, long slot, fibra::Queue<std::pair<long, long>> out) {
  marks.set(static_cast<std::uint64_t>(slot), 1);
  const auto index = static_cast<long>(barrier.wait(std::chrono::seconds(50)));
  const auto v = marks.to_vector();
  out.put({index, std::accumulate(v.begin(), v.end(), 0L)});
}
FIBRA_REMOTE(meet);

// Takes the lock, says so with its pid, and holds it until it is killed.
void hold_forever(fibra::Lock lock, fibra::Queue<long> said) {
  lock.acquire();
  said.put(getpid());
  for (;;) std::this_thread::sleep_for(1s);
}
FIBRA_REMOTE(hold_forever);

// Waits at a barrier that will never fill, after saying its pid.
void wait_at(fibra::Barrier barrier, fibra::Queue<long> said) {
  said.put(getpid());
  barrier.wait();
}
FIBRA_REMOTE(wait_at);

// Under the condition's lock, says it waits, waits until `ready` is set, then answers `ready` + 1
// into `answer` (-1 if no notify came within 20 s).
void wait_until_ready(fibra::Condition cond, fibra::Value<long> waiting, fibra::Value<long> ready,
                      fibra::Value<long> answer) {
  std::unique_lock g(cond);
  waiting.set(1);  // (under the lock: the driver takes it only once this process waits)
  const bool notified = cond.wait_for([&] { return ready.get() != 0; }, std::chrono::seconds(20));
  answer.set(notified ? ready.get() + 1 : -1);
}
FIBRA_REMOTE(wait_until_ready);

// Appends writer * 1000 + k for k < n to the list, and sets key "w<writer>" to n in the dict.
void fill(fibra::List<long> list, fibra::Dict<std::string, long> dict, long writer, long n) {
  for (long k = 0; k < n; ++k) list.append(writer * 1000 + k);
  dict.set("w" + std::to_string(writer), n);
  dict.setdefault("first", writer);
}
FIBRA_REMOTE(fill);

void run_all(std::vector<fibra::Process>& ps) {
  for (auto& p : ps) p.start();
  for (auto& p : ps) {
    ASSERT_TRUE(p.join(bound)) << "a process did not end within 60 s";
    ASSERT_EQ(p.exitcode(), 0) << (p.error() ? p.error()->what() : "");
  }
}

TEST(Locks, ACounterUnderALockFromEightProcessesIsExactAndNoTwoHoldItAtOnce) {
  fibra::Lock lock;
  fibra::Value<long> counter(0);
  fibra::List<long> log;
  std::vector<fibra::Process> ps;
  for (int i = 0; i < 8; ++i) ps.emplace_back(count_under_lock, lock, counter, log, 25L);
  run_all(ps);
  EXPECT_EQ(counter.get(), 8 * 25);
  const auto entries = log.to_vector();
  ASSERT_EQ(entries.size(), 2u * 8 * 25);
  for (std::size_t i = 0; i < entries.size(); i += 2) {
    ASSERT_GT(entries[i], 0) << "entry " << i << " is an exit: two held the lock at once";
    ASSERT_EQ(entries[i + 1], -entries[i])
        << "at " << i << ": another process entered before " << entries[i] << " left";
  }
  EXPECT_FALSE(lock.locked());
}

TEST(Locks, ALockIsNotReentrantAndSaysWhenReleasedTooOften) {
  fibra::Lock lock;
  lock.acquire();
  EXPECT_TRUE(lock.locked());
  EXPECT_FALSE(lock.acquire(50ms)) << "a Lock is not an RLock: a second acquire waits";
  lock.release();
  EXPECT_FALSE(lock.locked());
  EXPECT_THROW(lock.release(), fibra::ConfigError);
  EXPECT_TRUE(lock.try_acquire());
  std::thread([&] { lock.release(); }).join();  // any thread may release a Lock
  EXPECT_FALSE(lock.locked());
}

TEST(Locks, AnRLockIsTakenAgainByItsThreadAndReleasedOnlyByIt) {
  fibra::RLock r;
  r.acquire();
  r.acquire();
  EXPECT_TRUE(std::async(std::launch::async, [&] { return r.try_acquire(); }).get() == false);
  EXPECT_THROW(std::async(std::launch::async, [&] { r.release(); }).get(), fibra::ConfigError);
  r.release();
  EXPECT_FALSE(std::async(std::launch::async, [&] { return r.try_acquire(); }).get()) << "held once more";
  r.release();
  EXPECT_THROW(r.release(), fibra::ConfigError);
  bool other = std::async(std::launch::async, [&] {
                 const bool got = r.try_acquire();
                 if (got) r.release();
                 return got;
               }).get();
  EXPECT_TRUE(other);
}

TEST(Locks, SemaphoresCountAndABoundedOneRefusesAReleaseTooMany) {
  fibra::Semaphore s(2);
  EXPECT_EQ(s.get_value(), 2u);
  EXPECT_TRUE(s.try_acquire());
  EXPECT_TRUE(s.try_acquire());
  EXPECT_FALSE(s.try_acquire());
  EXPECT_FALSE(s.acquire(50ms));
  s.release();
  s.release();
  s.release();  // a plain Semaphore may go above its first value
  EXPECT_EQ(s.get_value(), 3u);
  fibra::BoundedSemaphore b(1);
  b.acquire();
  b.release();
  EXPECT_THROW(b.release(), fibra::ConfigError);
  EXPECT_EQ(b.get_value(), 1u);
}

TEST(Barriers, EightProcessesPassOnlyOnceAllCameEachWithItsOwnIndex) {
  fibra::Barrier barrier(8);
  fibra::Array<long> marks(8, 0);
  fibra::Queue<std::pair<long, long>> out;
  std::vector<fibra::Process> ps;
  for (long i = 0; i < 8; ++i) ps.emplace_back(meet, barrier, marks, i, out);
  run_all(ps);
  std::set<long> indexes;
  for (int i = 0; i < 8; ++i) {
    const auto [index, marked] = out.get(std::chrono::seconds(10));
    indexes.insert(index);
    EXPECT_EQ(marked, 8) << "a process passed the barrier before all 8 had come";
  }
  EXPECT_EQ(indexes, (std::set<long>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(barrier.n_waiting(), 0u);
  EXPECT_FALSE(barrier.broken());
}

TEST(Barriers, ATimeoutBreaksItForEveryoneUntilReset) {
  fibra::Barrier barrier(2);
  EXPECT_THROW(barrier.wait(100ms), fibra::BrokenBarrier);
  EXPECT_TRUE(barrier.broken());
  EXPECT_THROW(barrier.wait(100ms), fibra::BrokenBarrier);
  barrier.reset();
  EXPECT_FALSE(barrier.broken());
  auto other = std::async(std::launch::async, [&] { return barrier.wait(std::chrono::seconds(20)); });
  const auto mine = barrier.wait(std::chrono::seconds(20));
  EXPECT_EQ(mine + other.get(), 1u) << "indexes 0 and 1";
  EXPECT_THROW(fibra::Barrier(0), fibra::ConfigError);
}

TEST(Conditions, AProcessWaitsForTheDriversNotify) {
  fibra::Condition cond;
  fibra::Value<long> waiting(0), ready(0), answer(0);
  fibra::Process p(wait_until_ready, cond, waiting, ready, answer);
  p.start();
  const auto until = std::chrono::steady_clock::now() + bound;
  while (waiting.get() == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the process did not take the condition's lock";
    std::this_thread::sleep_for(5ms);
  }
  {  // taken once the process waits (its wait released the lock)
    std::unique_lock g(cond);
    ready.set(41);
    cond.notify_all();
  }
  ASSERT_TRUE(p.join(bound)) << "the process waiting on the condition did not end within 60 s";
  ASSERT_EQ(p.exitcode(), 0) << (p.error() ? p.error()->what() : "");
  EXPECT_EQ(answer.get(), 42) << "-1: the notify was lost";
}

TEST(Conditions, AWaitTimesOutHoldingTheLockAgainAndNeedsTheLock) {
  fibra::Lock lock;
  fibra::Condition cond(lock);
  EXPECT_THROW(cond.wait(10ms), fibra::ConfigError) << "a wait without the lock";
  EXPECT_THROW(cond.notify(), fibra::ConfigError) << "a notify without the lock";
  std::unique_lock g(cond);
  EXPECT_FALSE(cond.wait(100ms));
  EXPECT_TRUE(lock.locked()) << "the wait took the lock again";
}

TEST(HolderDeath, AnAcquireWaitingWhenTheHolderIsKilledIsToldAndTheLockIsFreeAgain) {
  fibra::Lock lock;
  fibra::Queue<long> said;
  fibra::Process p(hold_forever, lock, said);
  p.start();
  const long pid = said.get(std::chrono::seconds(60));
  auto waiting = std::async(std::launch::async, [&]() -> std::string {
    try {
      lock.acquire(std::chrono::seconds(50));
      return "acquired";
    } catch (const fibra::HolderDied& e) {
      return e.what();
    }
  });
  std::this_thread::sleep_for(200ms);  // the acquire waits at the driver
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_EQ(waiting.wait_for(bound), std::future_status::ready) << "the acquire was not told within 60 s";
  const std::string told = waiting.get();
  EXPECT_NE(told.find("died holding it"), std::string::npos) << told;
  EXPECT_TRUE(lock.try_acquire()) << "the dead holder's lock is free again";
  ASSERT_TRUE(p.join(bound));
  EXPECT_EQ(p.exitcode(), -SIGKILL);
}

TEST(HolderDeath, APartyKilledAtABarrierBreaksItForTheOthers) {
  fibra::Barrier barrier(3);
  fibra::Queue<long> said;
  fibra::Process p(wait_at, barrier, said);
  p.start();
  const long pid = said.get(std::chrono::seconds(60));
  auto waiting = std::async(std::launch::async, [&]() -> std::string {
    try {
      barrier.wait(std::chrono::seconds(50));
      return "passed";
    } catch (const fibra::BrokenBarrier& e) {
      return e.what();
    }
  });
  const auto until = std::chrono::steady_clock::now() + bound;
  while (barrier.n_waiting() < 2) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the process and the driver were not both at the barrier";
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_EQ(waiting.wait_for(bound), std::future_status::ready) << "the barrier's waiter was not told within 60 s";
  const std::string told = waiting.get();
  EXPECT_NE(told.find("died"), std::string::npos) << told;
  ASSERT_TRUE(p.join(bound));
}

TEST(SharedState, AManagersDictAndListFilledByFourProcessesHoldEveryItemOnce) {
  fibra::Manager manager;
  auto list = manager.list<long>();
  auto dict = manager.dict<std::string, long>();
  std::vector<fibra::Process> ps;
  for (long w = 1; w <= 4; ++w) ps.emplace_back(fill, list, dict, w, 25L);
  run_all(ps);
  auto items = list.to_vector();
  ASSERT_EQ(items.size(), 100u);
  std::sort(items.begin(), items.end());
  std::vector<long> expected;
  for (long w = 1; w <= 4; ++w)
    for (long k = 0; k < 25; ++k) expected.push_back(w * 1000 + k);
  EXPECT_EQ(items, expected);
  EXPECT_EQ(dict.size(), 5u);
  for (long w = 1; w <= 4; ++w) EXPECT_EQ(dict.get("w" + std::to_string(w)), 25);
  const long first = dict.at("first");
  EXPECT_TRUE(first >= 1 && first <= 4) << first;
  EXPECT_EQ(dict.setdefault("first", 99), first) << "setdefault keeps the value there";
}

TEST(SharedState, DictAndListCallsAsPythonsProxies) {
  fibra::Dict<std::string, std::string> d;
  d.set("b", "2");
  d.set("a", "1");
  d.set("b", "two");
  EXPECT_EQ(d.items(), (std::vector<std::pair<std::string, std::string>>{{"b", "two"}, {"a", "1"}}));
  EXPECT_EQ(d.get("c"), std::nullopt);
  EXPECT_EQ(d.get("c", "none"), "none");
  EXPECT_THROW(d.at("c"), fibra::LookupError);
  EXPECT_EQ(d.pop("b"), "two");
  EXPECT_FALSE(d.erase("b"));
  d.update({{"x", "9"}, {"y", "8"}});
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"a", "x", "y"}));
  d.clear();
  EXPECT_TRUE(d.empty());

  fibra::List<double> l;
  l.extend({1.5, 2.5, 3.5});
  l.set(1, 9.0);
  EXPECT_EQ(l.get(1), 9.0);
  EXPECT_EQ(l.pop(), 3.5);
  EXPECT_EQ(l.pop(0), 1.5);
  EXPECT_EQ(l.to_vector(), std::vector<double>{9.0});
  EXPECT_THROW(l.get(1), fibra::LookupError);
  EXPECT_THROW(l.set(5, 1.0), fibra::LookupError);
  l.clear();
  EXPECT_THROW(l.pop(), fibra::LookupError);
}

TEST(SharedState, ValueAndArrayKeepTheirSizeAndType) {
  fibra::Value<std::string> name("first");
  name.set("a longer second value");
  EXPECT_EQ(name.get(), "a longer second value");
  fibra::Array<double> a(std::vector<double>{0.5, 1.5, 2.5});
  a.set(2, 7.0);
  a.set(0, std::vector<double>{4.0, 5.0});
  EXPECT_EQ(a.to_vector(), (std::vector<double>{4.0, 5.0, 7.0}));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_THROW(a.get(3), fibra::LookupError);
  EXPECT_THROW(a.set(2, std::vector<double>{1.0, 2.0}), fibra::LookupError);
  EXPECT_EQ(a.to_vector(), (std::vector<double>{4.0, 5.0, 7.0})) << "a refused write changes nothing";
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
