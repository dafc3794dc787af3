// The driver of observe.dashboard: a pool with the live page (FIBRA_DASHBOARD, FIBRA_EVENTS) maps
// 240 items in 120 chunks of 2, prints "mapped" and keeps its pool (and page) until its stdin
// closes, or for at most 120 s.
#include <fibra/fibra.hpp>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <numeric>
#include <vector>

int twice(int i) { return 2 * i; }
FIBRA_REMOTE(twice);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::Pool pool(2);
  std::vector<int> in(240);
  std::iota(in.begin(), in.end(), 0);
  const auto out = pool.map(twice, in, {.chunksize = 2});
  long sum = 0;
  for (int v : out) sum += v;
  std::printf("mapped %zu items, sum %ld\n", out.size(), sum);
  std::fflush(stdout);
  pollfd p{STDIN_FILENO, POLLIN, 0};
  ::poll(&p, 1, 120'000);  // until the test closes our stdin (or 120 s)
  return 0;
}
