// hdf5_io/tests/store_test.cpp: round trips, resume and refusals of the checkpoint store.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>
#include <thread>
#include <vector>

#include "fibra/hdf5_io/store.hpp"
#include "journal.hpp"  // internal: to forge a damaged journal
#include "test_dir.hpp"

namespace fibra::hdf5_io {
namespace {

using test::TestDir;

RunRecord sample_run(std::uint64_t n, std::string function = "simulate", std::string fingerprint = "00c0ffee00c0ffee") {
  return RunRecord{std::move(function), n, std::move(fingerprint), 64, "0.1.0"};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no CheckpointError";
}

static_assert(is_native_element<double> && is_native_element<std::array<float, 3>>);
static_assert(!is_native_element<bool> && !is_native_element<std::string> && !is_native_element<long double>);

TEST(ElementTypeTest, MapsArithmeticTypesAndArraysToNativeAndTheRestToBytes) {
  EXPECT_EQ(element_type_of<double>().describe(), "float64");
  EXPECT_EQ(element_type_of<int>().describe(), "int32");
  EXPECT_EQ(element_type_of<std::uint16_t>().describe(), "uint16");
  EXPECT_EQ(element_type_of<long>().describe(), "int64");
  EXPECT_EQ((element_type_of<std::array<float, 3>>().describe()), "float32[3]");
  EXPECT_EQ((element_type_of<std::array<std::array<std::int8_t, 2>, 4>>().describe()), "int8[4][2]");
  EXPECT_EQ((element_type_of<std::array<std::array<std::int8_t, 2>, 4>>().size_bytes()), 8u);
  EXPECT_EQ(element_type_of<std::string>("boost-binary").describe(), "bytes (boost-binary)");
  EXPECT_EQ(element_type_of<bool>().kind, ElementType::Kind::bytes);
}

TEST(FingerprintTest, IsStableAndTellsInputsApart) {
  std::vector<double> a{1, 2, 3}, b{1, 2, 4};
  Fingerprint fa, fa2, fb;
  fa.update(std::as_bytes(std::span(a)));
  fa2.update(std::as_bytes(std::span(a)));
  fb.update(std::as_bytes(std::span(b)));
  EXPECT_EQ(fa.hex(), fa2.hex());
  EXPECT_NE(fa.hex(), fb.hex());
  EXPECT_EQ(fa.hex().size(), 16u);
}

class StoreTest : public TestDir {};

template <class T>
void round_trip(const std::filesystem::path& path, const std::vector<T>& values) {
  const auto n = values.size();
  {
    Store store = Store::create(path, sample_run(n), element_type_of<T>());
    for (std::size_t first = 0; first < n; first += 7) {
      std::size_t count = std::min<std::size_t>(7, n - first);
      store.put_values<T>(first, std::span(values).subspan(first, count));
      if (first % 21 == 0) store.flush();
    }
    store.finish();
  }
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".journal"));
  auto store = Store::open(path);
  EXPECT_EQ(store.n_done(), n);
  EXPECT_TRUE(store.pending_ranges().empty());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(store.template value<T>(i), values[i]) << "item " << i;
  EXPECT_EQ(store.info().state, "complete");
  EXPECT_EQ(store.info().journal_records, 0u);
}

TEST_F(StoreTest, RoundTripsDoubles) {
  std::vector<double> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.5 * double(i) - 3.25;
  round_trip(file("d.h5"), v);
}

TEST_F(StoreTest, RoundTripsInt64) {
  std::vector<std::int64_t> v(333);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::int64_t(i) * -1'000'000'007LL;
  round_trip(file("i.h5"), v);
}

TEST_F(StoreTest, RoundTripsFloatArrays) {
  std::vector<std::array<float, 3>> v(100);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = {float(i), float(i) / 3, -float(i)};
  round_trip(file("a.h5"), v);
}

std::vector<std::vector<std::byte>> sample_blobs(std::size_t n) {
  std::vector<std::vector<std::byte>> blobs(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < i % 5; ++k) blobs[i].push_back(std::byte(i * 31 + k));  // item 0 mod 5: empty
  return blobs;
}

TEST_F(StoreTest, RoundTripsBytes) {
  const auto blobs = sample_blobs(50);
  {
    auto store = Store::create(file("b.h5"), sample_run(50), ElementType::bytes_of("test"));
    std::vector<std::span<const std::byte>> first_half(blobs.begin(), blobs.begin() + 25);
    std::vector<std::span<const std::byte>> second_half(blobs.begin() + 25, blobs.end());
    store.put_bytes(25, second_half);
    store.flush();
    store.put_bytes(0, first_half);
  }  // the destructor flushes; the second half is in the journal only
  {
    auto store = Store::open(file("b.h5"));
    EXPECT_EQ(store.n_done(), 50u);
    EXPECT_EQ(store.info().journal_records, 2u);
    store.finish();
  }
  auto store = Store::open(file("b.h5"));
  EXPECT_EQ(store.element_type().describe(), "bytes (test)");
  for (std::size_t i = 0; i < 50; ++i) {
    auto got = store.item_bytes(i);
    ASSERT_EQ(std::vector<std::byte>(got.begin(), got.end()), blobs[i]) << "item " << i;
  }
}

TEST_F(StoreTest, ResumesAfterPartialWrites) {
  const auto path = file("r.h5");
  std::vector<double> v(100);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i) * 1.5;
  {
    auto store = Store::open_or_create(path, sample_run(100), element_type_of<double>());
    store.put_values<double>(10, std::span(v).subspan(10, 20));
    store.put_values<double>(50, std::span(v).subspan(50, 5));
    store.flush();
  }
  auto store = Store::open_or_create(path, sample_run(100), element_type_of<double>());
  EXPECT_EQ(store.n_done(), 25u);
  EXPECT_EQ(store.pending_ranges(), (std::vector<ItemRange>{{0, 10}, {30, 20}, {55, 45}}));
  EXPECT_EQ(store.value<double>(29), 29 * 1.5);
  EXPECT_EQ(store.info().state, "running");
  for (auto r : store.pending_ranges()) store.put_values<double>(r.first, std::span(v).subspan(r.first, r.count));
  store.finish();
  EXPECT_EQ(Store::open(path, Access::read_only).info().state, "complete");
}

TEST_F(StoreTest, CompactsTheJournalWhenItGrowsPastTheBound) {
  StoreOptions options;
  options.compact_min_bytes = 4096;
  auto store = Store::create(file("c.h5"), sample_run(2000), element_type_of<double>(), options);
  std::vector<double> v(100, 2.5);
  for (std::uint64_t first = 0; first < 2000; first += 100) {
    store.put_values<double>(first, v);
    store.flush();
  }
  EXPECT_GT(store.info().generation, 1u);  // 16 KB of results bound the journal, not the 4 KiB minimum
  auto again = Store::open(file("c.h5"), Access::read_only);
  EXPECT_EQ(again.n_done(), 2000u);
  EXPECT_EQ(again.value<double>(1999), 2.5);
}

// A reader takes no lock: a writer that folds its journal into a new .h5 file while a reader opens
// the checkpoint must not make the reader miss what was flushed before it began. The writer puts 5
// values, flushes and folds, over and over; each open must see at least what was flushed before it.
// Fails when the reader keeps its first .h5 file after finding no journal, or gives up after one retry.
TEST_F(StoreTest, AReaderRacingFoldsSeesEverythingFlushedBeforeItBegan) {
  if (!hdf5_is_threadsafe()) GTEST_SKIP() << "this HDF5 is not thread-safe: one thread may call it at a time";
  const auto path = file("race.h5");
  constexpr std::uint64_t n = 50'000;
  StoreOptions options;
  options.compact_min_bytes = 4096;
  std::atomic<std::uint64_t> flushed{0}, opens{0};
  std::atomic<bool> writing{true};
  std::uint64_t folds = 0;
  auto store = Store::create(path, sample_run(n), element_type_of<double>(), options);
  std::thread writer([&] {
    const std::vector<double> v(5, 1.5);
    // 1.5 s, and on a loaded machine longer, until both sides had enough turns (30 s at most).
    const auto start = std::chrono::steady_clock::now();
    const auto enough = [&] {
      const auto ran = std::chrono::steady_clock::now() - start;
      return ran >= std::chrono::seconds(30) ||
             (ran >= std::chrono::milliseconds(1500) && opens.load() >= 100 && store.info().generation > 150);
    };
    for (std::uint64_t first = 0; first < n && !enough(); first += 5) {
      store.put_values<double>(first, v);
      store.flush();
      flushed.store(first + 5);             // in the journal: a reader must find it there or in the next .h5
      if (first % 10 == 5) store.finish();  // fold every other step, which removes the journal
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    folds = store.info().generation - 1;
    writing.store(false);
  });
  std::uint64_t failures = 0;
  std::string first_failure;
  while (writing.load()) {
    const std::uint64_t before = flushed.load();
    std::string failure;
    try {
      const std::uint64_t seen = Store::open(path, Access::read_only).n_done();
      if (seen < before)
        failure = "saw " + std::to_string(seen) + " done, " + std::to_string(before) + " were flushed before it began";
    } catch (const CheckpointError& e) {
      failure = e.what();
    }
    ++opens;
    if (!failure.empty() && failures++ == 0) first_failure = failure;
  }
  writer.join();
  EXPECT_EQ(failures, 0u) << "of " << opens << " opens; the first: " << first_failure;
  EXPECT_GE(opens.load(), 100u) << "too few opens to race the writer's folds (in 30 s)";
  EXPECT_GT(folds, 100u) << "too few folds to race the reader (in 30 s)";
}

TEST_F(StoreTest, IgnoresATornJournalTail) {
  const auto path = file("t.h5");
  {
    auto store = Store::create(path, sample_run(10), element_type_of<double>());
    std::vector<double> v{1, 2, 3};
    store.put_values<double>(0, v);
    store.flush();
    store.put_values<double>(3, v);
    store.flush();
  }
  const auto journal = path.string() + ".journal";
  std::filesystem::resize_file(journal, std::filesystem::file_size(journal) - 5);  // tear the second record
  {
    auto store = Store::open(path);
    EXPECT_EQ(store.n_done(), 3u);
    EXPECT_EQ(std::filesystem::file_size(journal), 40u + 48u + 24u);  // the torn record was cut off
    std::vector<double> w{9};
    store.put_values<double>(9, w);
    store.flush();
  }
  auto store = Store::open(path);
  EXPECT_EQ(store.n_done(), 4u);
  EXPECT_EQ(store.value<double>(9), 9.0);
}

TEST_F(StoreTest, CreateDiscardsAnOldJournal) {
  const auto path = file("o.h5");
  {
    auto store = Store::create(path, sample_run(10), element_type_of<double>());
    std::vector<double> v{1, 2, 3};
    store.put_values<double>(0, v);
  }  // the destructor flushes into the journal
  ASSERT_TRUE(std::filesystem::exists(path.string() + ".journal"));
  auto store = Store::create(path, sample_run(10), element_type_of<double>());
  EXPECT_EQ(Store::open(path, Access::read_only).n_done(), 0u);
}

TEST_F(StoreTest, ASecondWriterIsRefusedReadersAreNot) {
  const auto path = file("w.h5");
  {
    auto first = Store::create(path, sample_run(3), element_type_of<double>());
    EXPECT_EQ(message_of([&] { Store::open(path); }),
              "fibra: checkpoint '" + path.string() +
                  "' is already open in this process (an unfinished call, or an ImapResults not yet destroyed, "
                  "writes it) — let that call finish first or pass another checkpoint path");
    // Another process is told who holds the file: a forked child tries, and sends back what it got.
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const std::string m = message_of([&] { Store::open(path); });
      [[maybe_unused]] auto n = ::write(fds[1], m.data(), m.size());
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string got;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, std::size_t(n));
    ::close(fds[0]);
    ::waitpid(child, nullptr, 0);
    EXPECT_EQ(got, "fibra: checkpoint '" + path.string() + "' is being written by another process (pid " +
                       std::to_string(::getpid()) + ", which holds '" + path.string() +
                       ".lock') — wait for it to end or pass another checkpoint path");
    EXPECT_EQ(Store::open(path, Access::read_only).n_done(), 0u);
  }
  EXPECT_EQ(Store::open(path).n_done(), 0u);  // the lock ends with its store
}

TEST_F(StoreTest, AnEmptyRunIsCompleteFromTheStart) {
  {
    auto store = Store::create(file("e.h5"), sample_run(0), element_type_of<double>());
    EXPECT_TRUE(store.pending_ranges().empty());
    store.finish();
  }
  auto store = Store::open(file("e.h5"));
  EXPECT_EQ(store.info().state, "complete");
  EXPECT_EQ(store.n_done(), 0u);
}

TEST_F(StoreTest, ReadOnlyStoresRefusePuts) {
  Store::create(file("ro.h5"), sample_run(3), element_type_of<double>());
  auto store = Store::open(file("ro.h5"), Access::read_only);
  std::vector<double> v{1};
  EXPECT_EQ(message_of([&] { store.put_values<double>(0, v); }),
            "fibra: checkpoint '" + file("ro.h5").string() + "' was opened read-only");
}

TEST_F(StoreTest, RefusesPutsOutsideTheRunOrOfTheWrongType) {
  const auto path = file("p.h5");
  auto store = Store::create(path, sample_run(3), element_type_of<double>());
  std::vector<double> v{1, 2};
  EXPECT_EQ(message_of([&] { store.put_values<double>(2, v); }),
            "fibra: checkpoint '" + path.string() + "': items [2, 4) are outside its 3 inputs");
  std::vector<float> f{1};
  EXPECT_EQ(message_of([&] { store.put_values<float>(0, f); }),
            "fibra: checkpoint '" + path.string() + "' holds float64 results, not a 4-byte type");
}

// ---- refusals a user reads ------------------------------------------------------------------

class RefusalTest : public TestDir {
 protected:
  void SetUp() override {
    TestDir::SetUp();
    path_ = file("run.h5");
    Store::create(path_, sample_run(10000), element_type_of<double>());
  }
  std::string resume(const RunRecord& run, const ElementType& type = element_type_of<double>()) {
    return message_of([&] { Store::open_or_create(path_, run, type); });
  }
  std::filesystem::path path_;
};

TEST_F(RefusalTest, AnotherFunctionOrInputCount) {
  const std::string p = path_.string();
  EXPECT_EQ(resume(sample_run(5000, "rollout")),
            "fibra: cannot resume '" + p +
                "': it was written for 'simulate' over 10000 inputs, this run maps 'rollout' "
                "over 5000 — delete the file or pass another checkpoint path");
  EXPECT_EQ(resume(sample_run(10001)),
            "fibra: cannot resume '" + p +
                "': it was written for 'simulate' over 10000 inputs, this run maps 'simulate' "
                "over 10001 — delete the file or pass another checkpoint path");
}

TEST_F(RefusalTest, OtherInputs) {
  EXPECT_EQ(resume(sample_run(10000, "simulate", "1111222233334444")),
            "fibra: cannot resume '" + path_.string() +
                "': it was written for 'simulate' over 10000 inputs with fingerprint "
                "00c0ffee00c0ffee, this run's inputs have fingerprint 1111222233334444 — delete the file or pass "
                "another checkpoint path");
}

TEST_F(RefusalTest, AnotherResultType) {
  EXPECT_EQ(resume(sample_run(10000), element_type_of<int>()),
            "fibra: cannot resume '" + path_.string() +
                "': it holds float64 results of 'simulate', this run's results are "
                "int32 — delete the file or pass another checkpoint path");
}

TEST_F(RefusalTest, TheSameRunResumes) {
  auto run = sample_run(10000);
  run.chunksize = 7;  // chunking and fibra version are informative: they may change between runs
  run.fibra_version = "0.2.0";
  EXPECT_EQ(resume(run), "no CheckpointError");
}

TEST_F(RefusalTest, NotAnHdf5File) {
  std::ofstream(path_) << "x,y\n1,2\n";
  EXPECT_EQ(resume(sample_run(10000)), "fibra: cannot use '" + path_.string() +
                                           "' as a checkpoint: it is not an HDF5 file — pass another checkpoint path");
  EXPECT_FALSE(std::filesystem::exists(path_.string() + ".lock"));  // refused files get no lock file next to them
}

TEST_F(RefusalTest, ADirectory) {
  const auto dir = file("results");
  std::filesystem::create_directory(dir);
  const std::string d = dir.string();
  const std::string advice = " — pass the path of a checkpoint file, such as '" + (dir / "run.h5").string() + "'";
  EXPECT_EQ(message_of([&] { Store::open_or_create(dir, sample_run(10), element_type_of<double>()); }),
            "fibra: cannot use '" + d + "' as a checkpoint: it is a directory" + advice);
  EXPECT_EQ(message_of([&] { Store::open(dir, Access::read_only); }),
            "fibra: cannot use '" + d + "' as a checkpoint: it is a directory" + advice);
  EXPECT_EQ(message_of([&] { Store::create(dir, sample_run(10), element_type_of<double>()); }),
            "fibra: cannot create checkpoint '" + d + "': it is a directory" + advice);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  EXPECT_FALSE(std::filesystem::exists(d + ".lock"));
}

TEST_F(RefusalTest, AnHdf5FileThatIsNotACheckpoint) {
  std::filesystem::remove(path_);
  hid_t f = H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);  // another program's file
  ASSERT_GE(f, 0);
  H5Fclose(f);
  EXPECT_EQ(resume(sample_run(10000)),
            "fibra: cannot use '" + path_.string() +
                "' as a checkpoint: it is an HDF5 file but not a fibra checkpoint (no "
                "root attribute format = \"fibra-checkpoint\") — pass another checkpoint path");
}

TEST_F(RefusalTest, ATruncatedFile) {
  std::filesystem::resize_file(path_, 3000);
  const std::string msg = resume(sample_run(10000));
  const std::string head =
      "fibra: cannot use '" + path_.string() + "' as a checkpoint: the file is damaged (HDF5 call ";
  EXPECT_EQ(msg.substr(0, head.size()), head) << msg;
  const std::string tail = ") — delete it to start the run over";
  EXPECT_EQ(msg.substr(msg.size() - tail.size()), tail) << msg;
}

// A file another program holds open for writing is not "damaged": HDF5 refuses the lock, and the
// message says so instead of advising to delete the file. HDF5 1.10's writer lock is an exclusive
// flock(2) on the file, which the test takes itself.
TEST_F(RefusalTest, AFileLockedByAnotherWriter) {
  const int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string msg = resume(sample_run(10000));
  ::close(fd);
  const std::string head =
      "fibra: cannot use '" + path_.string() + "' as a checkpoint: HDF5 cannot lock it (HDF5 call ";
  EXPECT_EQ(msg.substr(0, head.size()), head) << msg;
  const std::string tail =
      ") — another program may have it open for writing (wait for it to end); on a file system "
      "without file locks (some NFS or Lustre mounts) set HDF5_USE_FILE_LOCKING=FALSE";
  ASSERT_GE(msg.size(), tail.size());
  EXPECT_EQ(msg.substr(msg.size() - tail.size()), tail) << msg;
  EXPECT_EQ(resume(sample_run(10000)), "no CheckpointError");  // the lock ends with the other program
}

std::uint64_t uint_attribute(const std::filesystem::path& file, const char* name) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  std::uint64_t v = 0;
  H5Aread(a, H5T_NATIVE_UINT64, &v);
  H5Aclose(a);
  H5Fclose(f);
  return v;
}

TEST_F(RefusalTest, AJournalRecordOutsideTheInputs) {
  // A record with a valid checksum for this run that names items past n_inputs: written by a bug.
  detail::JournalWriter journal(path_.string() + ".journal",
                                {uint_attribute(path_, "run_id"), uint_attribute(path_, "generation")});
  std::vector<double> v{1, 2};
  journal.append(9999, 2, std::as_bytes(std::span(v)));
  journal.flush(false);
  const std::string p = path_.string();
  EXPECT_EQ(resume(sample_run(10000)), "fibra: cannot use '" + p + "' as a checkpoint: its journal '" + p +
                                           ".journal' is damaged (a record for "
                                           "items beyond n_inputs = 10000) — delete both files to start the run over");
}

// ---- damaged files that are still valid HDF5 (or a journal whose records are whole) -----------
// Each is written with HDF5's C API over a checkpoint the store wrote, then refused on open.

std::string damaged(const std::filesystem::path& p, const std::string& why) {
  return "fibra: cannot use '" + p.string() + "' as a checkpoint: the file is damaged (" + why +
         ") — delete it to start the run over";
}

TEST_F(RefusalTest, ADoneDatasetOfTheWrongSize) {
  {
    hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Ldelete(f, "done", H5P_DEFAULT), 0);
    const hsize_t dims[1] = {9999};  // n_inputs is 10000
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t ds = H5Dcreate2(f, "done", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(f);
  }
  EXPECT_EQ(resume(sample_run(10000)), damaged(path_, "dataset 'done' does not have n_inputs = 10000 items"));
  EXPECT_EQ(message_of([&] { Store::open(path_, Access::read_only); }),
            damaged(path_, "dataset 'done' does not have n_inputs = 10000 items"));
}

TEST_F(RefusalTest, BytesOffsetsOutOfOrder) {
  const auto type = element_type_of<std::string>("boost-binary");
  {
    auto store = Store::create(path_, sample_run(4), type);
    const std::vector<std::byte> a(3, std::byte{1}), b(5, std::byte{2});
    const std::vector<std::span<const std::byte>> blobs{a, b, a, b};
    store.put_bytes(0, blobs);
    store.finish();
  }
  {  // offsets 0 3 8 11 16 become 0 8 3 11 16: item 0 would end after item 1 begins
    hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t ds = H5Dopen2(f, "offsets", H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    std::uint64_t offsets[5] = {};
    ASSERT_GE(H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets), 0);
    ASSERT_EQ(offsets[1], 3u);
    ASSERT_EQ(offsets[2], 8u);
    std::swap(offsets[1], offsets[2]);
    ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets), 0);
    H5Dclose(ds);
    H5Fclose(f);
  }
  EXPECT_EQ(message_of([&] { Store::open_or_create(path_, sample_run(4), type); }),
            damaged(path_, "dataset 'offsets' is not ascending"));
}

// Replay stops at a torn tail (the last record) quietly; a record that fails its checksum with a
// valid record after it is damage, and refused: resuming would silently drop the records after it.
class MiddleRecordTest : public RefusalTest {
 protected:
  static constexpr std::uint64_t record_bytes = 48 + 24;  // header and three doubles
  void SetUp() override {
    RefusalTest::SetUp();
    auto store = Store::open_or_create(path_, sample_run(10000), element_type_of<double>());
    for (std::uint64_t first : {0u, 3u, 6u}) {
      const std::vector<double> v{1.0 + first, 2.0 + first, 3.0 + first};
      store.put_values<double>(first, v);
      store.flush();
    }
  }
  std::string journal() const { return path_.string() + ".journal"; }
  void flip(std::streamoff at, char bits) const {
    std::fstream f(journal(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(char(c ^ bits));
  }
  std::string refusal(const std::string& damage) const {
    const std::string p = path_.string(), j = journal();
    return "fibra: cannot use '" + p + "' as a checkpoint: its journal '" + j + "' is damaged (record 2 " + damage +
           ", but valid records follow it, so it is no torn tail from a crash) — remove '" + j + "' to resume from '" +
           p +
           "' alone, losing the 6 results recorded in the journal (3 of them after the "
           "damaged record), or delete both files to start the run over";
  }
};

TEST_F(MiddleRecordTest, ABadChecksumIsRefusedAndTheSameInTheLastRecordIsATornTail) {
  ASSERT_EQ(std::filesystem::file_size(journal()), 40u + 3 * record_bytes);
  flip(40 + record_bytes + 48 + 10, 0x10);  // one bit of the second record's payload
  EXPECT_EQ(resume(sample_run(10000)), refusal("fails its checksum"));
  EXPECT_EQ(message_of([&] { Store::open(path_, Access::read_only); }), refusal("fails its checksum"));
  EXPECT_EQ(std::filesystem::file_size(journal()), 40u + 3 * record_bytes);  // refused, not cut
  // The same damage in the last record is a torn tail: the records before it are resumed.
  std::filesystem::resize_file(journal(), 40u + 2 * record_bytes);
  {
    auto store = Store::open(path_, Access::read_only);
    EXPECT_EQ(store.n_done(), 3u);
    EXPECT_EQ(store.value<double>(2), 3.0);
    EXPECT_FALSE(store.is_done(3));
  }
  // And the advice holds: without the journal the .h5 file alone resumes (with nothing done).
  std::filesystem::resize_file(journal(), 40u + 3 * record_bytes);
  std::filesystem::remove(journal());
  auto store = Store::open_or_create(path_, sample_run(10000), element_type_of<double>());
  EXPECT_EQ(store.n_done(), 0u);
}

// Damage to the length in a record's header hides where the next record starts: still refused.
TEST_F(MiddleRecordTest, ADamagedLengthIsRefused) {
  flip(40 + record_bytes + 24 + 6, 0x01);  // payload bytes 24 + 2^48: beyond the end of the file
  EXPECT_EQ(resume(sample_run(10000)), refusal("is longer than the rest of the file"));
  flip(40 + record_bytes + 24 + 6, 0x01);
  flip(40 + record_bytes + 24, 0x08);  // payload bytes 16: ends inside the record, fails its checksum
  EXPECT_EQ(resume(sample_run(10000)), refusal("fails its checksum"));
  flip(40 + record_bytes + 24, 0x08);
  flip(40 + record_bytes, 0x01);  // the record marker
  EXPECT_EQ(resume(sample_run(10000)), refusal("does not start with a record marker"));
  flip(40 + record_bytes, 0x01);
  EXPECT_EQ(Store::open(path_, Access::read_only).n_done(), 9u);  // restored: every record replays
}

TEST_F(RefusalTest, AnotherRunsJournalIsIgnored) {
  {
    auto small = Store::create(file("small.h5"), sample_run(20000), element_type_of<double>());
    std::vector<double> v{1};
    small.put_values<double>(15000, v);
  }
  // Graft the other run's journal onto run.h5 under run.h5's identity: its record names item 15000.
  std::filesystem::copy_file(file("small.h5").string() + ".journal", path_.string() + ".journal");
  EXPECT_EQ(Store::open(path_).n_done(), 0u);  // another run's journal: ignored, not replayed
}

}  // namespace
}  // namespace fibra::hdf5_io
