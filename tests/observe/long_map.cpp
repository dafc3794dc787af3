// The driver of observe.killed_driver: a map of 3,000 tasks of 20 ms on 2 workers (about 30 s),
// long enough to be SIGKILLed in its middle. Its event log's folder comes from FIBRA_EVENTS.
#include <fibra/fibra.hpp>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

int slow(int i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return i;
}
FIBRA_REMOTE(slow);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::Pool pool(2);
  std::vector<int> in(3000);
  std::iota(in.begin(), in.end(), 0);
  const auto out = pool.map(slow, in, {.chunksize = 1});
  std::printf("long_map: %zu results (it was meant to be killed before)\n", out.size());
  return 0;
}
