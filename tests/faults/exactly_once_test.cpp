// A result counts once, and it is the one of the attempt in flight (issue 23): a worker frozen in
// a task (SIGSTOP) is declared lost, its task is retried elsewhere, and then the frozen worker is
// let go on (SIGCONT) and sends its given-up attempt's result while the retry still runs. The
// attempts return different values, so the caller sees which one it got: it must be the retry's.
// Seen to fail with Scheduler::accept taking a result of a stale attempt.
//
// Runs as `./fibra_exactly_once_tests` (singleton), with and without lanes; the same binary is
// started again as agents and executors. A marker file under /tmp/fibra-exactly-once-<pid>/ tells
// a task whether it is the first attempt, and the test which processes run it.
#include <fcntl.h>
#include <fibra/fibra.hpp>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

std::string marker_dir(int run) { return "/tmp/fibra-exactly-once-" + std::to_string(run); }

// Appends a line to `path` (each attempt writes one: how many ran).
void note(const std::string& path, const std::string& line) { std::ofstream(path, std::ios::app) << line << '\n'; }

template <class Pred>
bool within(std::chrono::seconds limit, Pred done) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

}  // namespace

// The first attempt says where it runs (the test freezes it there), then returns 1 after 1.5 s;
// the retry returns 2 after 3 s, so that the first attempt's late result comes while it runs.
int by_attempt(int run) {
  const std::string dir = marker_dir(run);
  const std::string first = dir + "/first";
  const int fd = ::open(first.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  note(dir + "/attempts", std::to_string(::getpid()));
  if (fd >= 0) {
    const std::string pids = std::to_string(::getpid()) + " " + std::to_string(::getppid()) + "\n";
    (void)!::write(fd, pids.data(), pids.size());
    ::close(fd);
    std::this_thread::sleep_for(1500ms);
    return 1;
  }
  std::this_thread::sleep_for(3000ms);
  return 2;
}
FIBRA_REMOTE(by_attempt);

TEST(ExactlyOnce, ALateResultOfAGivenUpAttemptIsDroppedAndTheRetrysValueComes) {
  const int run = static_cast<int>(::getpid());
  const std::string dir = marker_dir(run);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  fibra::Pool pool(2, {.heartbeat_s = 0.2, .worker_silence_s = 1.0, .driver_silence_s = 8});
  auto f = pool.submit(by_attempt, run);

  int executor = 0, agent = 0;
  ASSERT_TRUE(within(20s,
                     [&] {
                       std::ifstream in(dir + "/first");
                       return static_cast<bool>(in >> executor >> agent);
                     }))
      << "the first attempt of by_attempt never started (no " << dir << "/first)";
  ASSERT_GT(executor, 1);
  ASSERT_GT(agent, 1);
  ASSERT_EQ(::kill(executor, SIGSTOP), 0);  // the worker freezes in the first attempt
  ASSERT_EQ(::kill(agent, SIGSTOP), 0);
  const bool lost = within(20s, [&] { return pool.stats().workers_lost >= 1; });
  ::kill(executor, SIGCONT);  // declared lost: now it finishes its attempt and sends the result, late
  ::kill(agent, SIGCONT);
  ASSERT_TRUE(lost) << "the stopped worker (agent " << agent << ") was not declared lost within 20 s";

  ASSERT_TRUE(f.wait_for(30s)) << "by_attempt never returned (neither its retry nor its first attempt)";
  EXPECT_EQ(f.get(), 2) << "the caller got the value of the attempt given up on (1), not the retry's (2)";
  EXPECT_TRUE(within(10s, [&] { return pool.stats().late_results_dropped >= 1; }))
      << "the late result of the first attempt was never read (the test then shows nothing)";
  const auto s = pool.stats();
  EXPECT_EQ(s.chunks_done, 1u) << "one task's outcome was delivered " << s.chunks_done << " times";
  EXPECT_EQ(s.late_results_dropped, 1u);
  std::ifstream attempts(dir + "/attempts");
  int n = 0;
  for (std::string line; std::getline(attempts, line);) ++n;
  EXPECT_EQ(n, 2) << "by_attempt ran " << n << " times: the first attempt and one retry expected";
  ::kill(agent, SIGKILL);  // started by this test's pool; its orphan guard would end it later
  std::filesystem::remove_all(dir);
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);  // in spawned workers this never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
