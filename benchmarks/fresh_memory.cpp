// What a fresh std::vector<double> filled from shared memory costs on this machine: the floor under
// fibra's large payloads, which hand the function a fresh argument and the caller a fresh result
// (docs/benchmarks.md, "64 MiB without the needless copies"). No fibra, no MPI.
//
//   fresh_memory [--bytes 67108864] [--repeats 15]
//
// The source is a memfd mapping (like a lane's slot), written once before. Each way of filling a
// fresh vector of --bytes from it is timed --repeats times; the medians are printed as CSV
// (benchmark,metric,value,unit), together with a copy into memory already faulted in:
//   fresh_memory,assign_ms              reserve (huge pages advised), then vector::assign: one copy
//   fresh_memory,resize_split_copy_ms   reserve, resize (zero fill), then a copy split over 2 threads
//   fresh_memory,prefault_split_copy_ms the pages faulted in by 2 threads first, then as above
//   fresh_memory,warm_copy_ms           memcpy into a buffer used before (no page faults)
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "bench_common.hpp"

namespace {

using bench::Clock;
using bench::median;

void advise_huge(void* p, std::size_t n) {
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) & ~(huge - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// Runs f(offset, length) over [0, n) in two halves, one on a second thread.
template <class F>
void in_two(std::size_t n, F f) {
  const std::size_t half = (n / 2 + 4095) & ~std::size_t(4095);
  std::thread t([&] { f(half, n - half); });
  f(0, half);
  t.join();
}

double ms_since(Clock::time_point t) { return bench::seconds_since(t) * 1e3; }

// Resizes `v` to `count` (a zero fill), then copies as many doubles' bytes from `src` over it in
// two halves.
void resize_and_copy_in_two(std::vector<double>& v, const char* src, std::size_t count) {
  v.resize(count);
  auto* d = reinterpret_cast<char*>(v.data());
  in_two(v.size() * sizeof(double), [&](std::size_t at, std::size_t len) { std::memcpy(d + at, src + at, len); });
}

// An empty vector with room for `count` doubles, huge pages advised, not touched yet.
std::vector<double> fresh(std::size_t count) {
  std::vector<double> v;
  v.reserve(count);
  advise_huge(v.data(), count * sizeof(double));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const long bytes = bench::arg(argc, argv, "--bytes", 64L * 1024 * 1024);
  const int repeats = int(bench::arg(argc, argv, "--repeats", 15));
  if (bytes < (8 << 20) || bytes % 8 != 0 || repeats < 1) {
    std::fprintf(stderr, "fresh_memory: --bytes must be a multiple of 8 of at least 8 MiB; --repeats at least 1\n");
    return 1;
  }
  const std::size_t n = std::size_t(bytes), count = n / sizeof(double);
  const int fd = ::memfd_create("fibra-fresh-memory", 0);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(n)) != 0) {
    std::perror("fresh_memory: memfd");
    return 1;
  }
  void* map = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    std::perror("fresh_memory: mmap");
    return 1;
  }
  auto* src = static_cast<char*>(map);
  for (std::size_t i = 0; i < count; ++i) reinterpret_cast<double*>(src)[i] = double(i);
  const auto* first = reinterpret_cast<const double*>(src);

  std::vector<double> assign, split, prefault, warm;
  std::vector<char> used(n, 1);
  double check = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t = Clock::now();
    {
      std::vector<double> v = fresh(count);
      v.assign(first, first + count);
      check += v[count / 2];
    }
    assign.push_back(ms_since(t));

    t = Clock::now();
    {
      std::vector<double> v = fresh(count);
      resize_and_copy_in_two(v, src, count);
      check += v[count / 2];
    }
    split.push_back(ms_since(t));

    t = Clock::now();
    {
      std::vector<double> v = fresh(count);
      auto* d = reinterpret_cast<volatile char*>(v.data());
      in_two(n, [&](std::size_t at, std::size_t len) {
        for (std::size_t i = 0; i < len; i += 4096) d[at + i] = 0;
      });
      resize_and_copy_in_two(v, src, count);
      check += v[count / 2];
    }
    prefault.push_back(ms_since(t));

    t = Clock::now();
    std::memcpy(used.data(), src, n);
    warm.push_back(ms_since(t));
    check += used[n / 2];
  }
  if (check == -1) std::puts("");  // keeps the copies from being optimised away

  std::printf("# %ld bytes from a memfd mapping into a fresh std::vector<double>, medians of %d\n", bytes, repeats);
  std::printf("benchmark,metric,value,unit\n");
  std::printf("fresh_memory,assign_ms,%.2f,ms\n", median(assign));
  std::printf("fresh_memory,resize_split_copy_ms,%.2f,ms\n", median(split));
  std::printf("fresh_memory,prefault_split_copy_ms,%.2f,ms\n", median(prefault));
  std::printf("fresh_memory,warm_copy_ms,%.2f,ms\n", median(warm));
  return 0;
}
