// hdf5_io/tests/crash_test.cpp: a SIGKILL at random moments never leaves an unresumable checkpoint.
//
// A child process resumes the checkpoint and writes and flushes in a loop (one loop in 50 ends with
// finish(), which rewrites the .h5 file); the parent SIGKILLs it after a random delay, reopens the checkpoint
// and checks: it opens, every done item holds its exact value, nothing the child reported as flushed
// is missing, and the done set only grew.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "fibra/hdf5_io/store.hpp"
#include "test_dir.hpp"

namespace fibra::hdf5_io {
namespace {

constexpr std::uint64_t n_items = 50'000;

double expected(std::uint64_t i) { return std::sin(double(i)) * 1e6 + double(i); }

RunRecord crash_run() { return RunRecord{"crash", n_items, "fedcba9876543210", 50, "0.1.0"}; }

/// The child: resume, then put random pending ranges and flush, reporting n_done after each flush.
[[noreturn]] void write_until_killed(const std::filesystem::path& path, int report_fd, unsigned seed, bool sync) {
  try {
    StoreOptions options;
    options.sync = sync;
    options.compact_min_bytes = 16 * 1024;  // the 400 KB of results bound the journal
    auto store = Store::open_or_create(path, crash_run(), element_type_of<double>(), options);
    std::mt19937_64 rng(seed);
    std::vector<double> values;
    for (;;) {
      auto pending = store.pending_ranges();
      if (pending.empty()) {
        store.finish();
        pause();  // wait for the kill
      }
      for (int k = 0; k < 3; ++k) {
        const auto r = pending[rng() % pending.size()];
        const auto first = r.first + rng() % r.count;
        const auto count = std::min<std::uint64_t>(1 + rng() % 8, r.first + r.count - first);
        values.resize(count);
        for (std::uint64_t i = 0; i < count; ++i) values[i] = expected(first + i);
        store.put_values<double>(first, values);
      }
      if (rng() % 50 == 0)
        store.finish();  // a compaction: the .h5 file is rewritten and renamed in place
      else
        store.flush();
      const std::uint64_t done = store.n_done();
      if (::write(report_fd, &done, sizeof done) != sizeof done) _exit(4);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    _exit(3);
  }
}

/// Runs one child, kills it after `delay`; returns the largest n_done it reported as flushed.
std::uint64_t run_and_kill(const std::filesystem::path& path, unsigned seed, bool sync,
                           std::chrono::microseconds delay) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    write_until_killed(path, fds[1], seed, sync);
  }
  ::close(fds[1]);
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "the child ended by itself with status " << status;
  std::uint64_t reported = 0, value = 0;
  while (::read(fds[0], &value, sizeof value) == sizeof value) reported = std::max(reported, value);
  ::close(fds[0]);
  return reported;
}

class CrashTest : public test::TestDir {};

TEST_F(CrashTest, SigkillAtRandomMomentsNeverLeavesAnUnresumableCheckpoint) {
  const auto path = file("crash.h5");
  constexpr int rounds = 80;
  std::mt19937 rng(20261130);
  std::vector<std::uint8_t> previous(n_items, 0);
  bool existed = false;
  int killed_in_rewrite = 0;  // rounds that left a new .tmp: the kill hit a rewrite of the .h5 file
  std::filesystem::file_time_type tmp_time{};
  std::uint64_t last_generation = 0;
  for (int round = 0; round < rounds; ++round) {
    const bool sync = round % 3 == 0;
    const auto delay = std::chrono::microseconds(rng() % 30'000);
    const std::uint64_t reported = run_and_kill(path, rng(), sync, delay);
    std::error_code ec;
    const auto t = std::filesystem::last_write_time(path.string() + ".tmp", ec);
    if (!ec && t != tmp_time) ++killed_in_rewrite, tmp_time = t;
    if (!std::filesystem::exists(path)) {
      ASSERT_FALSE(existed) << "round " << round << ": the checkpoint vanished";
      ASSERT_EQ(reported, 0u) << "round " << round;
      continue;
    }
    existed = true;
    auto store = Store::open(path, Access::read_only);  // throws if unresumable
    ASSERT_GE(store.n_done(), reported) << "round " << round << ": flushed results were lost";
    for (std::uint64_t i = 0; i < n_items; ++i) {
      ASSERT_FALSE(previous[i] && !store.is_done(i)) << "round " << round << ": item " << i << " is no longer done";
      if (store.is_done(i)) ASSERT_EQ(store.value<double>(i), expected(i)) << "round " << round << ", item " << i;
    }
    previous.assign(store.done().begin(), store.done().end());
    last_generation = store.info().generation;
  }
  std::printf("%d kills, %d of them during a rewrite of the .h5 file; last generation %llu\n", rounds,
              killed_in_rewrite, static_cast<unsigned long long>(last_generation));
  EXPECT_GT(last_generation, 1u) << "no compaction happened: the test did not cover it";
  EXPECT_GT(killed_in_rewrite, 0) << "no kill hit a rewrite of the .h5 file: the test did not cover it";
}

}  // namespace
}  // namespace fibra::hdf5_io
