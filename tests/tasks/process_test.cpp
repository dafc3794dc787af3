// fibra::Process (issue 25, fibra/process.hpp): a registered function (void ones too) in a process
// of its own on a pool's worker, with multiprocessing's exit codes (0 returned, 1 threw, -N killed
// by signal N, N exited with status N), terminate and kill, and the producer/consumer of Fiber's
// docs: one writer and two readers, every item read exactly once. Expected values come from the
// test (the items it asked for, closed-form sums, signal numbers). Every wait is bounded.
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"
#include "../common/errors.hpp"

using namespace std::chrono_literals;
using fibra_test::error_of;
using fibra_test::get_within;

namespace {
constexpr auto bound = 60s;

void write_range(fibra::Queue<long> q, long n) {
  for (long k = 0; k < n; k += 1000) {
    std::vector<long> b;
    for (long j = k; j < std::min(n, k + 1000); ++j) b.push_back(j);
    q.put_many(b);
  }
  q.close();  // the end of the stream: the readers stop
}
FIBRA_REMOTE(write_range);

// Reads until the stream ends; reports how many items, their sum, and whether they came in order.
void read_all(fibra::Queue<long> q, fibra::Queue<std::vector<long>> report) {
  long count = 0, sum = 0, last = -1, ordered = 1;
  try {
    for (;;)
      for (long v : q.get_many(100)) {
        ++count;
        sum += v;
        ordered &= v > last;
        last = v;
      }
  } catch (const fibra::QueueClosed&) {
  }
  report.put({count, sum, ordered, static_cast<long>(::getpid())});
}
FIBRA_REMOTE(read_all);

void fail_loudly(std::string why) { throw std::invalid_argument(why); }
FIBRA_REMOTE(fail_loudly);

void exit_with(int status) { std::exit(status); }
FIBRA_REMOTE(exit_with);

void wait_for(fibra::Event e) { e.wait(); }
FIBRA_REMOTE(wait_for);

void ignore_term_and_wait(fibra::Event e) {
  ::signal(SIGTERM, SIG_IGN);
  e.wait();
}
FIBRA_REMOTE(ignore_term_and_wait);

long twice(long x) { return 2 * x; }
FIBRA_REMOTE(twice);

void nothing() {}
FIBRA_REMOTE(nothing);

// A write through a null pointer (issue 46, case 1), and the same signal raised. The pointer is read
// at run time: `*static_cast<volatile int*>(nullptr) = 1`, as the case was written, is undefined
// behaviour that gcc -O2 deletes with the call inlined into its caller (the function then returns).
int* volatile null_pointer = nullptr;
void segfault_now() { *null_pointer = 1; }
FIBRA_REMOTE(segfault_now);
void raise_segv() { ::raise(SIGSEGV); }
FIBRA_REMOTE(raise_segv);

// A task may not start a Process (they are the driver's): it gets a ConfigError saying so.
std::string start_inside() {
  fibra::Process p(nothing);
  try {
    p.start();
    return "started";
  } catch (const fibra::ConfigError& e) {
    return e.what();
  }
}
FIBRA_REMOTE(start_inside);

// An actor made with a queue, which its method puts into: handles travel to constructors too.
class Sink {
 public:
  explicit Sink(fibra::Queue<long> q) : q_(std::move(q)) {}
  long push(long v) {
    q_.put(v);
    return v;
  }

 private:
  fibra::Queue<long> q_;
};
FIBRA_ACTOR(Sink, fibra::Queue<long>);
FIBRA_ACTOR_METHOD(Sink, push);

// Puts 0, 1, 2, ... into `q` one at a time, for ever, and after each put returns stores its item in
// the shared memory of `at`: the test kills it meanwhile.
void put_and_record(fibra::Queue<long> q, std::string at) {
  const int fd = ::open(at.c_str(), O_RDWR);
  void* m = fd < 0 ? MAP_FAILED : ::mmap(nullptr, sizeof(long), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) throw std::runtime_error("cannot map " + at);
  auto* returned = static_cast<std::atomic<long>*>(m);
  for (long k = 0;; ++k) {
    q.put(k);
    returned->store(k, std::memory_order_release);
  }
}
FIBRA_REMOTE(put_and_record);

}  // namespace

// Issue 25's failure semantics: a writer killed mid-stream leaves every item whose put returned
// in the queue, in order, once. Its puts do not wait for the driver (they go into its lane's ring,
// or to its agent): what the killed process had written there is still read.
// A full queue too: the puts that returned wait at the driver for room, and go in once there is some.
void kill_a_writer_mid_stream(fibra::Queue<long> q, long returned_at_least) {
  fibra::Pool pool(1);
  char path[] = "/dev/shm/fibra-test-returned-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  void* m = ::mmap(nullptr, sizeof(long), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* returned = static_cast<std::atomic<long>*>(m);
  returned->store(-1);
  fibra::Process writer({.pool = &pool}, put_and_record, q, std::string(path));
  writer.start();
  const long pid = writer.pid();
  const auto until = std::chrono::steady_clock::now() + bound;
  while (returned->load() < returned_at_least && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  ASSERT_GE(returned->load(), returned_at_least)
      << "the writer's puts returned only up to item " << returned->load() << " in " << bound.count() << " s";
  std::this_thread::sleep_for(20ms);  // (a full queue's writer: its last puts in flight reach the driver)
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_TRUE(writer.join(bound)) << "the killed writer did not end";
  EXPECT_EQ(writer.exitcode(), -9);
  const long last = returned->load();
  long next = 0;
  while (auto v = q.try_get()) {
    ASSERT_EQ(*v, next) << "the queue's items out of order, or one twice or missing";
    ++next;
  }
  EXPECT_GT(next, last) << "the queue holds items 0 to " << next - 1 << ", but the put of item " << last
                        << " had returned before the writer was killed";
  ::munmap(m, sizeof(long));
  ::close(fd);
  ::unlink(path);
}

// Items of 1 MiB or more skip the lane's ring (a memfd, docs/processes-and-queues.md): byte k of a
// block is (k * 7) % 253, so a byte moved, lost or repeated shows.
std::string block_of(long bytes) {
  std::string b(static_cast<std::size_t>(bytes), '\0');
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<char>((k * 7) % 253);
  return b;
}
void echo_twice(fibra::Connection<std::string> end) {
  for (int i = 0; i < 2; ++i) end.send(end.recv(std::chrono::seconds(60)));
}
FIBRA_REMOTE(echo_twice);
// Puts two blocks and a small item, and ends at once: each put returned, so each is in the queue.
void put_blocks_and_end(fibra::Queue<std::string> q, long bytes) {
  q.put(block_of(bytes));
  q.put("small");
  q.put(block_of(2 * bytes));
}
FIBRA_REMOTE(put_blocks_and_end);

TEST(Processes, LargeItemsArriveWholeThroughAPipeAndAQueue) {
  const long mb = 3'000'000;
  auto [mine, theirs] = fibra::Pipe<std::string>();
  fibra::Process echo(echo_twice, theirs);
  echo.start();
  mine.send("warm");  // its first call opens its ring; the block then takes the memfd both ways
  EXPECT_EQ(mine.recv(std::chrono::seconds(60)), "warm");
  mine.send(block_of(mb));
  EXPECT_TRUE(mine.recv(std::chrono::seconds(60)) == block_of(mb)) << "the 3 MB block came back changed";
  ASSERT_TRUE(echo.join(bound));
  fibra::Queue<std::string> q;
  fibra::Process writer(put_blocks_and_end, q, mb);
  writer.start();
  ASSERT_TRUE(writer.join(bound));
  ASSERT_EQ(writer.exitcode(), 0) << (writer.error() ? writer.error()->what() : "");
  ASSERT_EQ(q.qsize(), 3u) << "a put that returned in a process that ended at once is in the queue";
  EXPECT_TRUE(q.get(std::chrono::seconds(10)) == block_of(mb));
  EXPECT_EQ(q.get(std::chrono::seconds(10)), "small");
  EXPECT_TRUE(q.get(std::chrono::seconds(10)) == block_of(2 * mb));
}

TEST(Processes, AWriterKilledMidStreamLeavesEveryPutThatReturned) {
  {
    SCOPED_TRACE("an unbounded queue");
    kill_a_writer_mid_stream(fibra::Queue<long>(), 20000);
  }
  {
    // 100 items fit; the next 256 puts return (they do not wait for their answers) and wait at
    // the driver. Dropped with their dead writer, the queue would hold items 0 to 99 only.
    SCOPED_TRACE("a full queue");
    kill_a_writer_mid_stream(fibra::Queue<long>(100), 300);
  }
}

TEST(Processes, OneWriterTwoReadersEveryItemOnce) {
  fibra::Pool pool(2);
  const long n = 100'000;
  fibra::Queue<long> q(10'000);
  fibra::Queue<std::vector<long>> reports;
  fibra::Process writer({.pool = &pool}, write_range, q, n);
  fibra::Process a({.pool = &pool}, read_all, q, reports);
  fibra::Process b({.pool = &pool}, read_all, q, reports);
  for (auto* p : {&a, &b, &writer}) p->start();
  for (auto* p : {&writer, &a, &b}) {
    ASSERT_TRUE(p->join(bound)) << p->name();
    EXPECT_EQ(p->exitcode(), 0) << p->name();
  }
  long count = 0, sum = 0;
  std::vector<long> pids;
  for (int r = 0; r < 2; ++r) {
    const auto rep = reports.get(bound);
    count += rep[0];
    sum += rep[1];
    EXPECT_EQ(rep[2], 1) << "a reader's items came out of order";
    pids.push_back(rep[3]);
  }
  EXPECT_EQ(count, n);
  EXPECT_EQ(sum, n * (n - 1) / 2);
  EXPECT_NE(pids[0], pids[1]);  // each Process a process of its own
  EXPECT_NE(pids[0], static_cast<long>(::getpid()));
}

TEST(Processes, ExitCodesAndErrorsAsInPython) {
  fibra::Pool pool(2);
  fibra::Process ok({.pool = &pool}, nothing);
  EXPECT_FALSE(ok.exitcode().has_value());
  EXPECT_FALSE(ok.is_alive());
  ok.start();
  ASSERT_TRUE(ok.join(bound));
  EXPECT_EQ(ok.exitcode(), 0);
  EXPECT_FALSE(ok.error().has_value());
  EXPECT_FALSE(ok.is_alive());
  EXPECT_NE(error_of([&] { ok.start(); }).find("started already"), std::string::npos);

  fibra::Process threw({.pool = &pool}, fail_loudly, std::string("bad seed"));
  threw.start();
  ASSERT_TRUE(threw.join(bound));
  EXPECT_EQ(threw.exitcode(), 1);
  ASSERT_TRUE(threw.error().has_value());
  EXPECT_EQ(threw.error()->type_name(), "std::invalid_argument");
  EXPECT_EQ(threw.error()->remote_message(), "bad seed");

  fibra::Process exited({.pool = &pool}, exit_with, 3);
  exited.start();
  ASSERT_TRUE(exited.join(bound));
  EXPECT_EQ(exited.exitcode(), 3);
}

// A Process whose function faults ends as multiprocessing's does, -11, however the signal came
// (issue 46, case 1: a fault ended with exitcode 0 and no error), and its error names the user's
// function and how the process ended, not fibra's ProcessHost (case 2).
TEST(Processes, ASegfaultEndsWithMinusElevenAndAnErrorNamingTheFunction) {
  fibra::Pool pool(2);
  for (const bool fault : {true, false}) {
    fibra::Process p({.pool = &pool}, fault ? segfault_now : raise_segv);
    p.start();
    ASSERT_TRUE(p.join(bound)) << p.name() << " did not end within " << bound.count() << " s";
    EXPECT_EQ(p.exitcode(), -SIGSEGV) << p.name();
    ASSERT_TRUE(p.error().has_value()) << p.name();
    const std::string what = p.error()->what();
    EXPECT_NE(what.find(fault ? "segfault_now" : "raise_segv"), std::string::npos) << what;
    EXPECT_NE(what.find("was killed by signal 11"), std::string::npos) << what;
    EXPECT_EQ(what.find("ProcessHost"), std::string::npos) << what;
    EXPECT_EQ(p.error()->type_name(), "signal") << what;
  }
}

TEST(Processes, KilledFromOutsideTerminatedOrKilled) {
  fibra::Pool pool(2);
  fibra::Event never;
  fibra::Process outside({.pool = &pool}, wait_for, never);
  outside.start();
  const long pid = outside.pid();
  EXPECT_NE(pid, static_cast<long>(::getpid()));
  EXPECT_FALSE(outside.host().empty());
  EXPECT_TRUE(outside.is_alive());
  EXPECT_FALSE(outside.join(200ms));
  ASSERT_EQ(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
  ASSERT_TRUE(outside.join(bound));
  EXPECT_EQ(outside.exitcode(), -9);

  fibra::Process term({.pool = &pool}, wait_for, never);
  term.start();
  (void)term.pid();  // running
  term.terminate();
  ASSERT_TRUE(term.join(bound));
  EXPECT_EQ(term.exitcode(), -15);

  // One that ignores SIGTERM is killed 2 s later.
  fibra::Process stubborn({.pool = &pool}, ignore_term_and_wait, never);
  stubborn.start();
  (void)stubborn.pid();
  std::this_thread::sleep_for(200ms);  // its handler is set
  const auto t0 = std::chrono::steady_clock::now();
  stubborn.terminate();
  ASSERT_TRUE(stubborn.join(bound));
  EXPECT_EQ(stubborn.exitcode(), -9);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1500ms);

  fibra::Process killed({.pool = &pool}, wait_for, never);
  killed.start();
  killed.kill();  // before it runs, perhaps: the signal waits for its process
  ASSERT_TRUE(killed.join(bound));
  EXPECT_EQ(killed.exitcode(), -9);
}

// The worker under a Process is lost (its agent killed): the process shows -9, as Python's does
// for a process killed by SIGKILL.
TEST(Processes, AProcessWhoseWorkerIsLostShowsMinusNine) {
  fibra::Pool pool(1, {.heartbeat_s = 0.5, .worker_silence_s = 3});
  fibra::Event never;
  fibra::Process p({.pool = &pool}, wait_for, never);
  p.start();
  (void)p.pid();  // running
  const auto agents = pool.workers();
  ASSERT_FALSE(agents.empty());
  ASSERT_EQ(::kill(static_cast<pid_t>(agents[0].pid), SIGKILL), 0);
  ASSERT_TRUE(p.join(bound));
  EXPECT_EQ(p.exitcode(), -9);
  ASSERT_TRUE(p.error().has_value());
}

TEST(Processes, AnActorConstructedWithAQueuePutsIntoIt) {
  fibra::Pool pool(1);
  fibra::Queue<long> q;
  auto sink = fibra::Actor<Sink>::start({.pool = &pool}, q);
  for (long v = 1; v <= 3; ++v) EXPECT_EQ(get_within(sink.call(&Sink::push, v), bound, "Sink::push"), v);
  EXPECT_EQ(q.get_many(10, 5s), (std::vector<long>{1, 2, 3}));
}

TEST(Processes, OnlyTheDriverStartsThem) {
  fibra::Pool pool(1);
  const std::string why = get_within(pool.submit(start_inside), bound, "start_inside");
  EXPECT_NE(why.find("was started inside a task"), std::string::npos) << why;
  fibra::Process a({.pool = &pool}, nothing);
  fibra::Process b(std::move(a));
  EXPECT_NE(error_of([&] { a.start(); }).find("moved from"), std::string::npos);
  b.start();
  ASSERT_TRUE(b.join(bound));
  EXPECT_EQ(b.exitcode(), 0);
}

// FIBRA_REMOTE takes void functions: submit gives a Future<void>.
TEST(Processes, VoidFunctionsAreSubmittedToo) {
  fibra::Pool pool(1);
  fibra::Future<void> f = pool.submit(nothing);
  get_within(f, bound, "nothing()");
  const std::string why = error_of([&] { get_within(pool.submit(fail_loudly, std::string("no")), bound, "fail"); });
  EXPECT_NE(why.find("no"), std::string::npos) << why;
  EXPECT_EQ(get_within(pool.submit(twice, 21L), bound, "twice"), 42);
}

namespace {
// When a process started, in clock ticks since boot (/proc/<pid>/stat, field 22); -1 if unreadable.
long started_at_tick(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return std::stol(field);
  return -1;
}

// The clock /proc's start times count, now, in the same ticks.
long now_tick() {
  timespec t{};
  ::clock_gettime(CLOCK_BOOTTIME, &t);
  const long hz = ::sysconf(_SC_CLK_TCK);
  return t.tv_sec * hz + t.tv_nsec / (1'000'000'000L / hz);
}

// How long ago (in ticks) the process of a Process started when its start() was called: that
// Process is started 300 ms after another one ended, which had its agent keep a spare. It runs
// until its start time is read (an Event), so that its /proc entry is there to read.
long age_at_start(const fibra::PoolOptions& options) {
  fibra::Pool pool(1, options);
  fibra::Process first({.pool = &pool}, nothing);
  first.start();
  EXPECT_TRUE(first.join(bound));
  std::this_thread::sleep_for(300ms);
  fibra::Event read;
  fibra::Process second({.pool = &pool}, wait_for, read);
  const long at = now_tick();
  second.start();
  const long pid = second.pid();
  const long started = pid > 0 ? started_at_tick(pid) : -1;
  read.set();
  EXPECT_TRUE(second.join(bound));
  EXPECT_EQ(second.exitcode(), 0);
  EXPECT_GE(started, 0) << "no start time in /proc for the second Process's process (pid " << pid << ")";
  return at - started;
}
}  // namespace

// PoolOptions::spare_processes: from its first actor (a Process) on, an agent keeps a process
// started ahead of need, and the next Process runs in it; with 0, in a process started for it.
TEST(Processes, AnAgentKeepsASpareProcessForTheNext) {
  const long hz = ::sysconf(_SC_CLK_TCK);
  const long spare_age = age_at_start({});
  EXPECT_GE(spare_age, hz / 10) << "the second Process's process started " << spare_age << " ticks (of " << hz
                                << " a second) before its start(), not with the spare made 300 ms before";
  const long fresh_age = age_at_start({.spare_processes = 0});
  EXPECT_LE(fresh_age, 1) << "with spare_processes 0, the second Process ran in a process started " << fresh_age
                          << " ticks before its start()";
  EXPECT_THROW(fibra::Pool(1, {.spare_processes = -1}), fibra::ConfigError);
  const std::string why = error_of([] { fibra::Pool(1, {.spare_processes = 65}); });
  EXPECT_NE(why.find("spare_processes must be 0 to 64, got 65"), std::string::npos) << why;
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
