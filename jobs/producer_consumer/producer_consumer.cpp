// Fiber's producer/consumer, cluster-wide: one writer Process puts 100,000 items into a bounded
// Queue and closes it; two reader Processes take them until the stream ends (QueueClosed) and
// report what they read. The driver checks that every item was read exactly once and that each
// reader read its items in the order they were put. Prints PASS and exits 0 only then.
//
//   ./producer_consumer [--items N] [--workers N]
#include <fibra/fibra.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

void produce(fibra::Queue<long> items, long n) {
  for (long k = 0; k < n; ++k) items.put(k);  // waits while the queue is full
  items.close();                              // the end of the stream: readers stop once it is empty
}
FIBRA_REMOTE(produce);

void consume(fibra::Queue<long> items, fibra::Queue<std::vector<long>> read) {
  std::vector<long> mine;
  try {
    for (;;)
      for (long v : items.get_many(256)) mine.push_back(v);
  } catch (const fibra::QueueClosed&) {  // closed and empty: done
  }
  read.put(mine);
}
FIBRA_REMOTE(consume);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  long n = 100'000;
  int workers = 2;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--items")) n = std::atol(argv[i + 1]);
    if (!std::strcmp(argv[i], "--workers")) workers = std::atoi(argv[i + 1]);
  }
  fibra::Pool pool(workers);
  fibra::Queue<long> items(1000);
  fibra::Queue<std::vector<long>> read;
  fibra::Process writer({.pool = &pool}, produce, items, n);
  fibra::Process a({.pool = &pool, .name = "reader a"}, consume, items, read);
  fibra::Process b({.pool = &pool, .name = "reader b"}, consume, items, read);
  for (auto* p : {&a, &b, &writer}) p->start();
  for (auto* p : {&writer, &a, &b})
    if (!p->join(std::chrono::minutes(5)) || p->exitcode() != 0) {
      std::fprintf(stderr, "FAIL: %s did not end well (exit code %d)%s%s\n", p->name().c_str(),
                   p->exitcode().value_or(-999), p->error() ? ": " : "", p->error() ? p->error()->what() : "");
      return 1;
    }
  std::vector<long> all;
  for (int r = 0; r < 2; ++r) {
    const std::vector<long> got = read.get(std::chrono::seconds(60));
    if (!std::is_sorted(got.begin(), got.end())) {
      std::fprintf(stderr, "FAIL: a reader read its items out of order\n");
      return 1;
    }
    std::printf("a reader read %zu items\n", got.size());
    all.insert(all.end(), got.begin(), got.end());
  }
  std::sort(all.begin(), all.end());
  for (long k = 0; k < n; ++k)
    if (k >= static_cast<long>(all.size()) || all[static_cast<std::size_t>(k)] != k) {
      std::fprintf(stderr, "FAIL: item %ld was not read exactly once (%zu items read for %ld)\n", k, all.size(), n);
      return 1;
    }
  if (static_cast<long>(all.size()) != n) {
    std::fprintf(stderr, "FAIL: %zu items read for %ld\n", all.size(), n);
    return 1;
  }
  std::printf("%ld items, each read exactly once by one of 2 readers\nPASS\n", n);
  return 0;
}
