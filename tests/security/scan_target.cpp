// The run that security.scan aims at (tests/security/scan.py): a pool of 2 agents with a join
// listener (FIBRA_JOIN_FILE) and object servers that copy stored objects between them
// (FIBRA_OBJECTS_AS_REMOTE, FIBRA_LANES=0), doing rounds of work until the file named by argv[1]
// appears (at most 150 s): a map of 200 items of 5 ms, and 8 tasks that each read a new stored
// object of 800 KB. Every result is checked against its own formula; the first wrong one ends it
// with "FAIL". Prints "READY" when the pool runs, "ROUND <n> <seconds>" per round, and at the end
// "PASS <rounds> rounds, <copies> copies between agents".
#include <fibra/fibra.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

long slow_square(long i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return i * i + 7;
}
FIBRA_REMOTE(slow_square);

long strided(const std::vector<long>& v, long k) {
  long s = 0;
  for (std::size_t i = std::size_t(k); i < v.size(); i += 8) s += v[i];
  return s;
}
FIBRA_REMOTE(strided);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <stop file>\n", argv[0]);
    return 2;
  }
  // (A probe may hold an agent's MPI for seconds, docs/security.md: not long enough to lose it.)
  fibra::Pool pool(2, {.worker_silence_s = 60, .workers_per_agent = 1});
  std::printf("READY\n");
  std::fflush(stdout);
  std::vector<long> items(200);
  std::iota(items.begin(), items.end(), 0L);
  const auto start = std::chrono::steady_clock::now();
  int rounds = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(150)) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = pool.map(slow_square, items, {.chunksize = 4});
    for (long i = 0; i < 200; ++i)
      if (out[std::size_t(i)] != i * i + 7) {
        std::printf("FAIL: round %d item %ld gave %ld\n", rounds, i, out[std::size_t(i)]);
        return 1;
      }
    std::vector<long> v(100'000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = long(i % 1000) + rounds;
    auto ref = fibra::put(v);
    std::vector<fibra::Future<long>> parts;
    for (long k = 0; k < 8; ++k) parts.push_back(pool.submit(strided, ref, k));
    for (long k = 0; k < 8; ++k) {
      const long got = parts[std::size_t(k)].get(), want = strided(v, k);
      if (got != want) {
        std::printf("FAIL: round %d part %ld gave %ld, not %ld\n", rounds, k, got, want);
        return 1;
      }
    }
    ++rounds;
    std::printf("ROUND %d %.3f\n", rounds,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
    if (::access(argv[1], F_OK) == 0) break;
  }
  std::printf("PASS %d rounds, %llu copies between agents\n", rounds,
              static_cast<unsigned long long>(pool.stats().objects_fetched_from_peers));
  return 0;
}
