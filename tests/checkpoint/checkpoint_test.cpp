// MapOptions::checkpoint against real spawned workers: a call stopped half-way and rerun returns
// exactly what an uninterrupted call returns, without running done items again; another run's file
// is refused; failed items are not recorded as done. Runs as `./app` and `mpirun -n 1 ./app`.
//
// Executions are counted in a log that every task appends a line to (FIBRA_CKPT_TEST_DIR/exec.log).
#include <fcntl.h>
#include <fibra/fibra.hpp>
#include <fibra/hdf5_io/store.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <ranges>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../common/bounded.hpp"

namespace fs = std::filesystem;
using fibra_test::call_within;

// How long a test waits for a call (a loaded 2-core machine: tens of seconds, far below ctest's timeout).
constexpr std::chrono::seconds bound{60};

namespace {

fs::path test_dir() {
  const char* d = std::getenv("FIBRA_CKPT_TEST_DIR");
  return d ? fs::path(d) : fs::temp_directory_path() / "fibra_ckpt_test";
}

void log_execution() {
  const std::string path = (test_dir() / "exec.log").string();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] auto n = ::write(fd, "x\n", 2);
  ::close(fd);
}

}  // namespace

double twice(double x) {
  log_execution();
  return 2 * x + 0.5;
}
double thrice(double x) { return 3 * x; }
int square(int x) {
  log_execution();
  return x * x;
}
std::array<double, 3> spread(double x) {
  log_execution();
  return {x, x / 2, -x};
}
std::string spell(int x) {
  log_execution();
  return "item-" + std::to_string(x) + std::string(static_cast<std::size_t>(x % 7), '!');
}
int add(int a, int b) {
  log_execution();
  if (a >= 400 && fs::exists(test_dir() / "fail")) throw std::runtime_error("add " + std::to_string(a));
  return a * 1000 + b;
}
// Fails for every 10th item while the file `fail` exists in the test directory.
int flaky(int x) {
  log_execution();
  if (x % 10 == 3 && fs::exists(test_dir() / "fail")) throw std::runtime_error("flaky " + std::to_string(x));
  return x + 1;
}

// Appends its input (an index) to index.log, one O_APPEND write per execution, so a test can
// count how often each item ran.
double indexed(double x) {
  log_execution();
  const std::string line = std::to_string(std::lround(x)) + "\n";
  const std::string path = (test_dir() / "index.log").string();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());
    ::close(fd);
  }
  return x * 0.5 + 1;
}

FIBRA_REMOTE(twice);
FIBRA_REMOTE(indexed);
FIBRA_REMOTE(thrice);
FIBRA_REMOTE(square);
FIBRA_REMOTE(spread);
FIBRA_REMOTE(spell);
FIBRA_REMOTE(add);
FIBRA_REMOTE(flaky);
int executor_pid(int) { return static_cast<int>(::getpid()); }  // not counted in the log
FIBRA_REMOTE(executor_pid);

namespace {

fibra::Pool* g_pool = nullptr;
fibra::Pool& pool() { return *g_pool; }

std::size_t executions() {
  std::ifstream in(test_dir() / "exec.log");
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The count once the tasks of a stopped call have finished: every worker has answered a call made
// after it, and a worker runs the batches it was handed in order (bounded: the test fails if not
// every worker answers within `bound`).
std::size_t settled_executions() {
  std::set<int> answered;
  const auto end = std::chrono::steady_clock::now() + bound;
  while (answered.size() < std::size_t(pool().size()) && std::chrono::steady_clock::now() < end) {
    const auto pids = call_within(bound, "map of executor_pid after a stopped call",
                                  [] { return pool().map(executor_pid, std::vector<int>(8, 0), {.chunksize = 1}); });
    answered.insert(pids.begin(), pids.end());
  }
  EXPECT_EQ(answered.size(), std::size_t(pool().size())) << "workers that answered within " << bound.count() << " s";
  return executions();
}

// fn over each of `in`, computed here in the test process, independently of the pool.
template <class R, class A, class In>
std::vector<R> computed_here(R (*fn)(A), const In& in) {
  std::vector<R> out;
  for (const auto& x : in) out.push_back(fn(x));
  return out;
}

// A fresh checkpoint path and an empty execution log.
std::string fresh(const std::string& name) {
  fs::create_directories(test_dir());
  fs::remove(test_dir() / "exec.log");
  const fs::path p = test_dir() / (name + ".h5");
  for (const char* ext : {"", ".journal", ".tmp", ".lock"}) fs::remove(p.string() + ext);
  return p.string();
}

std::uint64_t done_in(const std::string& path) {
  fibra::detail::wait_for_checkpoints();  // a finished call's checkpoint is folded in the background
  return fibra::hdf5_io::Store::open(path, fibra::hdf5_io::Access::read_only).n_done();
}

template <class T>
std::vector<T> iota_of(int n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), T{});
  return v;
}

// Runs imap over `in` and stops after `take` results: the checkpoint keeps what had arrived.
template <class R, class A, class In>
void run_partly(R (*fn)(A), const In& in, const std::string& path, std::size_t take) {
  call_within(bound, "imap stopped after " + std::to_string(take) + " results", [&] {
    std::size_t k = 0;
    for (auto&& r : pool().imap(fn, in, {.chunksize = 16, .checkpoint = path})) {
      (void)r;
      if (++k == take) break;
    }
  });
}

// A partial run, then a resumed map: identical results; the done items did not run again.
template <class R, class A, class In>
void expect_resume_identical(R (*fn)(A), const In& in, const std::string& name) {
  const auto path = fresh(name);
  const auto expected = computed_here(fn, in);
  fs::remove(test_dir() / "exec.log");  // fn logged its executions here too
  run_partly(fn, in, path, in.size() / 3);
  const auto before = settled_executions();
  const auto done = done_in(path);
  EXPECT_GE(done, in.size() / 3);
  EXPECT_LT(done, in.size());
  EXPECT_EQ(
      call_within(bound, "the resumed map", [&] { return pool().map(fn, in, {.chunksize = 10, .checkpoint = path}); }),
      expected);
  EXPECT_EQ(executions() - before, in.size() - done) << "resumed items were sent to workers";
  EXPECT_EQ(done_in(path), in.size());
  EXPECT_EQ(
      call_within(bound, "a map over a finished checkpoint", [&] { return pool().map(fn, in, {.checkpoint = path}); }),
      expected);  // all done: nothing runs
  EXPECT_EQ(executions() - before, in.size() - done);
}

TEST(Resume, DoubleResults) { expect_resume_identical(twice, iota_of<double>(3000), "double"); }
TEST(Resume, IntResults) { expect_resume_identical(square, iota_of<int>(2000), "int"); }
TEST(Resume, ArrayResults) { expect_resume_identical(spread, iota_of<double>(1500), "array"); }
TEST(Resume, StringResultsStoredAsBytes) { expect_resume_identical(spell, iota_of<int>(1500), "string"); }

// A resumed call runs exactly the items the checkpoint does not hold, each once, and none of the
// others: executions are counted per index, the done set is read from the file by the store.
TEST(Resume, RunsExactlyTheItemsNotDone) {
  const auto path = fresh("by_index");
  const auto in = iota_of<double>(2000);
  run_partly(indexed, in, path, 700);
  settled_executions();  // the chunks still out when the call stopped have finished
  fibra::detail::wait_for_checkpoints();
  std::vector<bool> done(in.size());
  {
    auto store = fibra::hdf5_io::Store::open(path, fibra::hdf5_io::Access::read_only);
    for (std::size_t i = 0; i < in.size(); ++i) done[i] = store.is_done(i);
  }
  const auto n_done = std::count(done.begin(), done.end(), true);
  ASSERT_GE(n_done, 700);
  ASSERT_LT(n_done, 2000);
  fs::remove(test_dir() / "index.log");
  const auto out = call_within(bound, "map of indexed",
                               [&] { return pool().map(indexed, in, {.chunksize = 10, .checkpoint = path}); });
  std::vector<int> runs(in.size(), 0);
  std::ifstream log(test_dir() / "index.log");
  for (long i; log >> i;) {
    ASSERT_GE(i, 0);
    ASSERT_LT(i, 2000);
    ++runs[static_cast<std::size_t>(i)];
  }
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(runs[i], done[i] ? 0 : 1) << "item " << i << (done[i] ? ", done before," : ", not done before,")
                                        << " ran " << runs[i] << " times in the resumed call";
    ASSERT_EQ(out[i], double(i) * 0.5 + 1) << "item " << i;  // exact in binary: halves of integers
  }
}

TEST(Resume, ImapYieldsResumedItemsInOrder) {
  const auto in = iota_of<int>(2000);
  const auto path = fresh("imap");
  run_partly(square, in, path, 500);
  const auto before = settled_executions();
  const auto done = done_in(path);
  std::vector<int> got;
  call_within(bound, "resumed imap of square", [&] {
    for (int r : pool().imap(square, in, {.chunksize = 7, .checkpoint = path})) got.push_back(r);
  });
  ASSERT_EQ(got.size(), in.size());
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(got[i], i * i) << i;
  EXPECT_EQ(executions() - before, in.size() - done) << "only pending items run on resume";
}

TEST(Resume, ImapUnorderedYieldsEveryItemOnce) {
  const auto in = iota_of<int>(2000);
  const auto path = fresh("imap_unordered");
  run_partly(square, in, path, 700);
  std::map<std::size_t, int> got;
  call_within(bound, "resumed imap_unordered of square", [&] {
    for (auto&& [i, r] : pool().imap_unordered(square, in, {.chunksize = 9, .checkpoint = path})) {
      EXPECT_TRUE(got.emplace(i, r).second) << "item " << i << " came twice";
    }
  });
  ASSERT_EQ(got.size(), in.size());
  for (auto& [i, r] : got) ASSERT_EQ(r, int(i * i)) << i;
}

TEST(Resume, Starmap) {
  std::vector<std::tuple<int, int>> in;
  for (int i = 0; i < 1200; ++i) in.emplace_back(i, i % 17);
  const auto path = fresh("starmap");
  std::vector<int> expected;  // computed here, independently of the pool (add logs these 1200 too)
  for (const auto& [a, b] : in) expected.push_back(add(a, b));
  std::ofstream(test_dir() / "fail") << "fail\n";  // items from 400 on fail in the first run
  std::vector<fibra::ItemError> errors;
  call_within(bound, "starmap of add",
              [&] { return pool().starmap(add, in, {.chunksize = 50, .errors = &errors, .checkpoint = path}); });
  fs::remove(test_dir() / "fail");
  EXPECT_EQ(errors.size(), 800u);
  EXPECT_EQ(done_in(path), 400u);
  const auto before = settled_executions();
  EXPECT_EQ(call_within(bound, "starmap of add",
                        [&] { return pool().starmap(add, in, {.chunksize = 30, .checkpoint = path}); }),
            expected);
  EXPECT_EQ(executions() - before, 800u);
  EXPECT_EQ(call_within(bound, "starmap of add",
                        [&] { return pool().starmap(add, in, {.chunksize = 50, .checkpoint = path}); }),
            expected);
  EXPECT_EQ(executions() - before, 800u) << "a finished checkpoint runs nothing again";
}

TEST(Refuse, AnotherFunction) {
  const auto in = iota_of<double>(100);
  const auto path = fresh("other_fn");
  call_within(bound, "map of twice", [&] { return pool().map(twice, in, {.checkpoint = path}); });
  try {
    pool().map(thrice, in, {.checkpoint = path});
    FAIL() << "no error";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()), "fibra: cannot resume '" + path +
                                         "': it was written for 'twice' over 100 inputs, this run maps 'thrice' "
                                         "over 100 — delete the file or pass another checkpoint path");
  }
}

TEST(Refuse, OtherInputs) {
  auto in = iota_of<double>(100);
  const auto path = fresh("other_inputs");
  call_within(bound, "map of twice", [&] { return pool().map(twice, in, {.checkpoint = path}); });
  fibra::detail::wait_for_checkpoints();
  const std::string old_fp =
      fibra::hdf5_io::Store::open(path, fibra::hdf5_io::Access::read_only).run().inputs_fingerprint;
  in[57] = -1;
  fibra::detail::InputsDigest d;
  d.add(std::string_view(reinterpret_cast<const char*>(in.data()), in.size() * sizeof(double)));
  const std::string new_fp = d.hex();
  ASSERT_NE(old_fp, new_fp);
  try {
    pool().map(twice, in, {.checkpoint = path});
    FAIL() << "no error";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()), "fibra: cannot resume '" + path +
                                         "': it was written for 'twice' over 100 inputs with fingerprint " + old_fp +
                                         ", this run's inputs have fingerprint " + new_fp +
                                         " — delete the file or pass another checkpoint path");
  }
}

TEST(Refuse, NotACheckpoint) {
  const auto path = fresh("not_a_checkpoint");
  std::ofstream(path) << "these are notes, not a checkpoint\n";
  try {
    pool().map(twice, iota_of<double>(10), {.checkpoint = path});
    FAIL() << "no error";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()), "fibra: cannot use '" + path +
                                         "' as a checkpoint: it is not an HDF5 file — pass another checkpoint path");
  }
}

TEST(Refuse, MissingFolder) {
  const std::string path = (fs::path(fresh("unused")).parent_path() / "no_such_folder" / "run.h5").string();
  try {
    pool().map(twice, iota_of<double>(10), {.checkpoint = path});
    FAIL() << "no error";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()), "fibra: cannot create checkpoint '" + path + "': the folder '" +
                                         fs::path(path).parent_path().string() +
                                         "' does not exist — create it first or pass another checkpoint path");
  }
}

TEST(Refuse, ADirectory) {
  const fs::path dir = test_dir() / "a_folder";
  fs::create_directories(dir);
  const std::string advice = " — pass the path of a checkpoint file, such as '" + (dir / "run.h5").string() + "'";
  try {
    pool().map(twice, iota_of<double>(10), {.checkpoint = dir.string()});
    FAIL() << "no error";
  } catch (const fibra::CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()),
              "fibra: cannot use '" + dir.string() + "' as a checkpoint: it is a directory" + advice);
  }
  EXPECT_TRUE(fs::is_empty(dir));
}

// A flush interval outside (0, 86400] s is the caller's error, named with its value and range,
// before any file is made.
TEST(Refuse, AFlushIntervalOutOfRange) {
  const std::pair<double, const char*> cases[] = {{0.0, "0.000000"}, {-1.0, "-1.000000"}, {86401.0, "86401.000000"}};
  for (auto [bad, shown] : cases) {
    const auto path = fresh("flush");
    try {
      pool().map(twice, iota_of<double>(10), {.checkpoint = path, .checkpoint_flush_s = bad});
      ADD_FAILURE() << "no error for " << shown;
    } catch (const fibra::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("fibra: MapOptions::checkpoint_flush_s must be between 0 and 86400 "
                                                   "seconds (got ") +
                                           shown + ")");
    }
    EXPECT_FALSE(fs::exists(path)) << shown;
  }
}

TEST(Refuse, UnsizedInput) {
  auto in = iota_of<int>(50);
  auto odd = in | std::views::filter([](int x) { return x % 2 == 1; });
  try {
    for (int r : pool().imap(square, odd, {.checkpoint = "unused.h5"})) (void)r;
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra: imap() with checkpoint 'unused.h5' needs a sized input range (a checkpoint records the "
                 "number of inputs before the run starts); this one is not sized: collect the inputs into a "
                 "std::vector first");
  }
  EXPECT_FALSE(fs::exists("unused.h5"));
}

TEST(Errors, FailedItemsAreNotDoneAndRunOnResume) {
  const auto in = iota_of<int>(500);
  const auto path = fresh("errors");
  std::ofstream(test_dir() / "fail") << "fail\n";
  std::vector<fibra::ItemError> errors;
  auto first = call_within(bound, "map of flaky", [&] {
    return pool().map(flaky, in, {.chunksize = 25, .errors = &errors, .checkpoint = path});
  });
  ASSERT_EQ(errors.size(), 50u);
  EXPECT_EQ(first[3], 0);  // R{} in the place of a failed item
  EXPECT_EQ(done_in(path), 450u);
  fs::remove(test_dir() / "fail");
  const auto before = executions();
  errors.clear();
  auto second = call_within(bound, "map of flaky", [&] {
    return pool().map(flaky, in, {.chunksize = 25, .errors = &errors, .checkpoint = path});
  });
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(executions() - before, 50u) << "only the failed items run again";
  for (int i = 0; i < 500; ++i) ASSERT_EQ(second[i], i + 1) << i;
  EXPECT_EQ(done_in(path), 500u);
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);  // in spawned workers this never returns
  ::testing::InitGoogleTest(&argc, argv);
  fs::create_directories(test_dir());
  fibra::Pool p(2);
  g_pool = &p;
  return RUN_ALL_TESTS();
}
