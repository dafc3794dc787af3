// benchmarks/b4_store.cpp: B4, the checkpoint store part. Prints medians of several runs.
//
//   b4_store [--items 1000000] [--chunk 4096] [--runs 5] [--kills 20] [--dir /tmp]
//
// Measures, for double results: create; put + flush of every chunk into the journal (with and
// without fdatasync); put + flush_if_due (a flush per second, default options); finish (compaction
// into the .h5 file); open of the finished file (resume) and of a run whose results are all in the
// journal. The alternatives measured against the journal: each chunk written in place into an HDF5
// dataset then H5Fflush, plain and in SWMR mode, and what a SIGKILL at a random moment leaves of them.
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "fibra/hdf5_io/store.hpp"

namespace {

using namespace fibra::hdf5_io;
using bench::Clock;

double seconds_of(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  return bench::seconds_since(t0);
}

struct Setup {
  std::uint64_t items;
  std::uint64_t chunk;
  std::filesystem::path file;
  std::vector<double> values;
  RunRecord run() const { return RunRecord{"cheap", items, "0123456789abcdef", chunk, "0.1.0"}; }
};

void put_all(Store& store, const Setup& s, bool every_chunk) {
  for (std::uint64_t first = 0; first < s.items; first += s.chunk) {
    const auto count = std::min(s.chunk, s.items - first);
    store.put_values<double>(first, std::span(s.values).subspan(first, count));
    if (every_chunk)
      store.flush();
    else
      store.flush_if_due();
  }
  store.flush();
}

/// The alternatives: one HDF5 file open for the whole run, each chunk written in place, then
/// H5Fflush; `swmr` uses chunked datasets, the latest file format and SWMR write mode.
/// `stop_after` > 0 stops (for the kill probe) after that many chunks, leaving the file open.
void h5_in_place_write(const Setup& s, const std::string& path, bool swmr, std::uint64_t stop_after = 0) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (swmr) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  hsize_t dims[1] = {s.items}, chunk[1] = {s.chunk};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (swmr) H5Pset_chunk(dcpl, 1, chunk);
  hid_t ds = H5Dcreate2(f, "results", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  hid_t done = H5Dcreate2(f, "done", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (swmr) H5Fstart_swmr_write(f);
  std::vector<std::uint8_t> ones(s.chunk, 1);
  std::uint64_t chunks = 0;
  for (std::uint64_t first = 0; first < s.items; first += s.chunk) {
    hsize_t start[1] = {first}, count[1] = {std::min(s.chunk, s.items - first)};
    hid_t mem = H5Screate_simple(1, count, nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, s.values.data() + first);
    H5Dwrite(done, H5T_NATIVE_UINT8, mem, space, H5P_DEFAULT, ones.data());
    H5Sclose(mem);
    H5Fflush(f, H5F_SCOPE_GLOBAL);
    if (++chunks == stop_after) return;  // as if killed: nothing closed
  }
  H5Dclose(done);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Pclose(fapl);
  H5Sclose(space);
  H5Fclose(f);
}

/// SIGKILLs an in-place writer at random moments `trials` times; counts the files left that do
/// not open, and those in which an item marked done does not hold its value.
std::string kill_trials(const Setup& s, bool swmr, int trials) {
  const std::string path = s.file.string() + ".killed.h5";
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  std::mt19937 rng(42);
  int unopenable = 0, wrong = 0;
  std::vector<double> results(s.items);
  std::vector<std::uint8_t> done(s.items);
  for (int t = 0; t < trials; ++t) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      h5_in_place_write(s, path, swmr);
      ::pause();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20'000));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
      ++unopenable;
      continue;
    }
    hid_t r = H5Dopen2(f, "results", H5P_DEFAULT), d = H5Dopen2(f, "done", H5P_DEFAULT);
    bool ok = r >= 0 && d >= 0 && H5Dread(r, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, results.data()) >= 0 &&
              H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, done.data()) >= 0;
    for (std::uint64_t i = 0; ok && i < s.items; ++i) ok = !done[i] || results[i] == s.values[i];
    wrong += !ok;
    if (r >= 0) H5Dclose(r);
    if (d >= 0) H5Dclose(d);
    H5Fclose(f);
  }
  std::filesystem::remove(path);
  return std::to_string(unopenable) + " of " + std::to_string(trials) + " do not open, " + std::to_string(wrong) +
         " open with a done item whose value is wrong or unreadable";
}

/// Opens `file` in a fresh process (this program with --open-only), as a resuming run does, and
/// returns the seconds the open took there: a warm process reuses freed memory and is faster.
double open_in_fresh_process(const std::filesystem::path& file) {
  const std::string command = "/proc/" + std::to_string(::getpid()) + "/exe --open-only " + file.string();
  FILE* p = ::popen(command.c_str(), "r");
  double t = -1;
  if (p && std::fscanf(p, "%lf", &t) != 1) t = -1;
  if (p) ::pclose(p);
  return t;
}

void report(const char* what, std::vector<double> t, const Setup& s) {
  const double m = bench::median(t);
  std::printf("%-46s median %9.4f s  (%6.1f M items/s, %zu runs)\n", what, m, double(s.items) / m / 1e6, t.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--open-only") {
    std::printf("%.6f\n", seconds_of([&] { Store::open(argv[2]); }));
    return 0;
  }
  const auto runs = bench::arg(argc, argv, "--runs", 5);
  Setup s{std::uint64_t(bench::arg(argc, argv, "--items", 1'000'000)),
          std::uint64_t(bench::arg(argc, argv, "--chunk", 4096)),
          {},
          {}};
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--dir") dir = argv[i + 1];
  s.file = std::filesystem::path(dir) / ("b4_store_" + std::to_string(::getpid()) + ".h5");
  s.values.resize(s.items);
  for (std::uint64_t i = 0; i < s.items; ++i) s.values[i] = double(i) * 0.5;
  std::printf("B4 store: %llu doubles in chunks of %llu, files in %s\n", static_cast<unsigned long long>(s.items),
              static_cast<unsigned long long>(s.chunk), dir.c_str());

  std::vector<double> create, sync_each, nosync_each, due, finish, resume, resume_journal, direct, swmr;
  for (long r = 0; r < runs; ++r) {
    for (bool sync : {true, false}) {
      StoreOptions o;
      o.sync = sync;
      o.compact_min_bytes = 1ull << 40;  // no compaction: measure the journal alone
      Store store = Store::create(s.file, s.run(), element_type_of<double>(), o);
      (sync ? sync_each : nosync_each).push_back(seconds_of([&] { put_all(store, s, true); }));
    }
    resume_journal.push_back(open_in_fresh_process(s.file));
    std::optional<Store> store;
    create.push_back(seconds_of([&] { store.emplace(Store::create(s.file, s.run(), element_type_of<double>())); }));
    due.push_back(seconds_of([&] { put_all(*store, s, false); }));
    finish.push_back(seconds_of([&] { store->finish(); }));
    store.reset();
    if (Store::open(s.file).n_done() != s.items) std::abort();
    resume.push_back(open_in_fresh_process(s.file));
    const std::string path = s.file.string() + ".direct.h5";
    direct.push_back(seconds_of([&] { h5_in_place_write(s, path, false); }));
    swmr.push_back(seconds_of([&] { h5_in_place_write(s, path, true); }));
  }
  report("create (empty 1M file, fsync, rename)", create, s);
  report("put + flush every chunk, fdatasync", sync_each, s);
  report("put + flush every chunk, no fsync", nosync_each, s);
  report("put + flush_if_due (1 s), default options", due, s);
  report("finish (compaction to .h5)", finish, s);
  report("resume: open finished file (fresh process)", resume, s);
  report("resume: open, all results in journal (fresh)", resume_journal, s);
  report("alternative: H5Dwrite in place + H5Fflush/chunk", direct, s);
  report("alternative: SWMR, chunked, H5Fflush/chunk", swmr, s);
  const int trials = int(bench::arg(argc, argv, "--kills", 20));
  std::printf("SIGKILL at random moments, in-place files: %s\n", kill_trials(s, false, trials).c_str());
  std::printf("SIGKILL at random moments, SWMR files: %s\n", kill_trials(s, true, trials).c_str());
  std::filesystem::remove(s.file);
  std::filesystem::remove(s.file.string() + ".journal");
  std::filesystem::remove(s.file.string() + ".direct.h5");
  return 0;
}
