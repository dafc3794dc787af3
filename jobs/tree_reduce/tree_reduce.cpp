// A dynamic task graph: a sum of 64 partial results reduced as they finish. Whenever two partial
// results are ready (fibra::wait), a task merging them is submitted with their Futures as its
// arguments, so the tree's shape follows the order in which tasks finish, run to run.
//
//   ./tree_reduce   or   mpirun -n 1 ./tree_reduce     Exit status 0 and "PASS" when the sum is exact.
#include <fibra/fibra.hpp>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

// The sum of i*i over [lo, hi), taking a time that varies with the range.
long long leaf(long long lo, long long hi) {
  std::this_thread::sleep_for(std::chrono::milliseconds((lo * 7) % 13));
  long long s = 0;
  for (long long i = lo; i < hi; ++i) s += i * i;
  return s;
}
FIBRA_REMOTE(leaf);

long long merge(long long a, long long b) { return a + b; }
FIBRA_REMOTE(merge);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::default_pool(2);
  const long long n = 64000, leaves = 64, step = n / leaves;
  std::vector<fibra::Future<long long>> pending;
  for (long long k = 0; k < leaves; ++k) pending.push_back(fibra::submit(leaf, k * step, (k + 1) * step));
  int merges = 0;
  while (pending.size() > 1) {
    auto [ready, rest] = fibra::wait(pending, 2);  // the two that finish first, whichever they are
    rest.push_back(fibra::submit(merge, ready[0], ready[1]));
    ++merges;
    pending = std::move(rest);
  }
  const long long got = pending[0].get();
  const long long expect = (n - 1) * n * (2 * n - 1) / 6;  // sum of i*i for i < n, in closed form
  std::printf("sum of squares below %lld: %lld (expected %lld), %d merges\n", n, got, expect, merges);
  const bool ok = got == expect && merges == leaves - 1;
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
