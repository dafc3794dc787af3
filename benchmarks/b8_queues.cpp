// B8 (issue 25): queues, pipes and processes. One writer Process to one reader Process through a
// Queue (8-byte items, single puts and gets, then put_many/get_many batches), a Pipe round trip
// between the driver and a Process, a Process's start to its end (a no-op), and the pool's
// apply_async round trip beside them (same pool, same run). Every item is checked (count and sum).
//
//   b8_queues [--workers N] [--items N] [--batch N] [--roundtrips N] [--starts N] [--repeats R]
//             [--batched-items N] [--spare-processes N] [--large-mb N]
//
// --items: single items (default 200,000); --batched-items: items in batches (default 10 x --items),
// both as put_many/get_many of single items and as vectors of --batch, one queue item each (what
// multiprocessing's batches are: lists).
// The batched rows come twice: from starting both Processes to the reader's report, and from the
// reader's first get to its last (the queue's own rate; a Process's start has a row of its own).
// --spare-processes: PoolOptions::spare_processes (default: the pool's own default).
// --large-mb: one block of this many MB (default 100; 0: none) from the driver to a Process and back
// through a Pipe, and put by a Process into a Queue for the driver's get (the large_* rows).
// Prints the rows of benchmarks/README.md (benchmark,metric,value,unit; medians of R runs).
#include <fibra/fibra.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.hpp"

namespace {

// Calls `send` with 0 .. n-1 in vectors of `batch` numbers, in order.
template <class Send>
void in_batches(long n, long batch, Send send) {
  std::vector<long> b;
  for (long k = 0; k < n; k += batch) {
    b.clear();
    for (long j = k; j < std::min(n, k + batch); ++j) b.push_back(j);
    send(b);
  }
}

void write_items(fibra::Queue<long> q, long n, long batch) {
  if (batch <= 1) {
    for (long k = 0; k < n; ++k) q.put(k);
    return;
  }
  in_batches(n, batch, [&](const std::vector<long>& b) { q.put_many(b); });
}
FIBRA_REMOTE(write_items);

// As multiprocessing's batches are: each item of the queue a vector of `batch` numbers.
void write_lists(fibra::Queue<std::vector<long>> q, long n, long batch) {
  in_batches(n, batch, [&](const std::vector<long>& b) { q.put(b); });
}
FIBRA_REMOTE(write_lists);

// The reader's report: {count, sum, items after its first get, ns from its first get to its last}.
struct Stream {
  long count = 0, sum = 0, after_first = 0;
  std::chrono::steady_clock::time_point first;
  void got_one_get(long items) {
    if (count == items) first = std::chrono::steady_clock::now();  // (count includes this get's)
  }
  std::vector<long> report() const {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - first);
    return {count, sum, after_first, static_cast<long>(ns.count())};
  }
};

void read_lists(fibra::Queue<std::vector<long>> q, long n, fibra::Queue<std::vector<long>> report) {
  Stream s;
  while (s.count < n) {
    const std::vector<long> got = q.get();
    for (long v : got) s.sum += v;
    s.count += static_cast<long>(got.size());
    s.got_one_get(static_cast<long>(got.size()));
    if (s.count != static_cast<long>(got.size())) s.after_first += static_cast<long>(got.size());
  }
  report.put(s.report());
}
FIBRA_REMOTE(read_lists);

void read_items(fibra::Queue<long> q, long n, long batch, fibra::Queue<std::vector<long>> report) {
  Stream s;
  while (s.count < n) {
    long k = 1;
    if (batch <= 1) {
      s.sum += q.get();
    } else {
      const std::vector<long> got = q.get_many(static_cast<std::size_t>(batch));
      for (long v : got) s.sum += v;
      k = static_cast<long>(got.size());
    }
    s.count += k;
    s.got_one_get(k);
    if (s.count != k) s.after_first += k;
  }
  report.put(s.report());
}
FIBRA_REMOTE(read_items);

void echo_until_closed(fibra::Connection<long> end) {
  try {
    for (;;) end.send(end.recv() + 1);
  } catch (const fibra::PipeClosed&) {
  }
}
FIBRA_REMOTE(echo_until_closed);

// Sends back each block it receives, until the driver closes its end.
void echo_blocks(fibra::Connection<std::string> end) {
  try {
    for (;;) end.send(end.recv());
  } catch (const fibra::PipeClosed&) {
  }
}
FIBRA_REMOTE(echo_blocks);

// Makes a block of `bytes` (byte k is k % 251), waits for the driver's word, then puts it.
void put_block(fibra::Queue<std::string> q, fibra::Connection<long> go, long bytes) {
  std::string block(static_cast<std::size_t>(bytes), '\0');
  for (std::size_t k = 0; k < block.size(); ++k) block[k] = static_cast<char>(k % 251);
  (void)go.recv();
  q.put(block);
}
FIBRA_REMOTE(put_block);

void nothing() {}
FIBRA_REMOTE(nothing);

int noop(int x) { return x; }
FIBRA_REMOTE(noop);

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

// Items per second from a writer Process to a reader Process, from starting both to the reader's
// report (`whole`), and as the reader saw them come, from its first get to its last (`stream`: the
// queue's own rate, without the processes' starts); `lists`: in vectors of `batch`, one queue item
// each (at most 10 in the queue, as multiprocessing's lists).
struct Rates {
  double whole = 0, stream = 0;
};
Rates stream_rate(fibra::Pool& pool, long n, long batch, bool lists = false) {
  fibra::Queue<long> q(static_cast<std::size_t>(std::max(10'000L, 10 * batch)));
  fibra::Queue<std::vector<long>> ql(static_cast<std::size_t>(std::max(10'000L, 10 * batch) / batch));
  fibra::Queue<std::vector<long>> report;
  fibra::Process reader = lists ? fibra::Process({.pool = &pool}, read_lists, ql, n, report)
                                : fibra::Process({.pool = &pool}, read_items, q, n, batch, report);
  fibra::Process writer = lists ? fibra::Process({.pool = &pool}, write_lists, ql, n, batch)
                                : fibra::Process({.pool = &pool}, write_items, q, n, batch);
  const auto t0 = Clock::now();
  reader.start();
  writer.start();
  const std::vector<long> r = report.get(std::chrono::seconds(600));
  const double s = seconds_since(t0);
  writer.join();
  reader.join();
  if (r.size() != 4 || r[0] != n || r[1] != n * (n - 1) / 2 || writer.exitcode() != 0 || reader.exitcode() != 0) {
    std::fprintf(stderr, "b8_queues: the reader got %ld items summing to %ld, expected %ld and %ld\n",
                 r.empty() ? -1 : r[0], r.size() < 2 ? -1 : r[1], n, n * (n - 1) / 2);
    std::exit(1);
  }
  return {n / s, r[3] > 0 ? r[2] / (r[3] * 1e-9) : 0.0};
}

// Whether `block` is `bytes` long with byte k equal to k % 251 (as put_block makes it).
bool is_block(const std::string& block, long bytes) {
  if (block.size() != static_cast<std::size_t>(bytes)) return false;
  for (std::size_t k = 0; k < block.size(); k += 4093)
    if (block[k] != static_cast<char>(k % 251)) return false;
  return block.empty() || block.back() == static_cast<char>((block.size() - 1) % 251);
}

// Seconds for one block of `bytes` from the driver to a Process and back through a Pipe, and for
// one put by a Process into a Queue and the driver's get (from the driver's word to the Process,
// which had made the block already).
std::pair<double, double> large_items(fibra::Pool& pool, long bytes) {
  auto [mine, theirs] = fibra::Pipe<std::string>();
  fibra::Process echo({.pool = &pool}, echo_blocks, theirs);
  echo.start();
  std::string block(static_cast<std::size_t>(bytes), '\0');
  for (std::size_t k = 0; k < block.size(); ++k) block[k] = static_cast<char>(k % 251);
  mine.send(std::string("warm"));
  (void)mine.recv(std::chrono::seconds(60));
  auto t = Clock::now();
  mine.send(block);
  const std::string back = mine.recv(std::chrono::seconds(600));
  const double pipe_s = seconds_since(t);
  mine.close();
  echo.join();
  if (!is_block(back, bytes)) {
    std::fprintf(stderr, "b8_queues: the pipe's echo of %ld bytes was wrong\n", bytes);
    std::exit(1);
  }
  fibra::Queue<std::string> q;
  auto [go, their_go] = fibra::Pipe<long>();
  fibra::Process writer({.pool = &pool}, put_block, q, their_go, bytes);
  writer.start();
  go.send(1);
  t = Clock::now();
  const std::string got = q.get(std::chrono::seconds(600));
  const double queue_s = seconds_since(t);
  writer.join();
  if (!is_block(got, bytes) || writer.exitcode() != 0) {
    std::fprintf(stderr, "b8_queues: the queue's block of %ld bytes was wrong\n", bytes);
    std::exit(1);
  }
  return {pipe_s, queue_s};
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(arg(argc, argv, "--workers", 2));
  const long items = arg(argc, argv, "--items", 200'000);
  const long batch = arg(argc, argv, "--batch", 1'000);
  const long batched_items = arg(argc, argv, "--batched-items", 10 * items);
  const long roundtrips = arg(argc, argv, "--roundtrips", 2'000);
  const long starts = arg(argc, argv, "--starts", 20);
  const int repeats = static_cast<int>(arg(argc, argv, "--repeats", 1));
  const long large_mb = arg(argc, argv, "--large-mb", 100);
  std::printf(
      "# fibra %s, %d workers, %ld items (batches of %ld), %ld pipe round trips, %ld process starts, "
      "medians of %d runs\n",
      fibra::version, workers, items, batch, roundtrips, starts, repeats);
  fibra::PoolOptions options;
  options.spare_processes = static_cast<int>(arg(argc, argv, "--spare-processes", options.spare_processes));
  fibra::Pool pool(workers, options);
  (void)pool.map(noop, std::vector<int>(64, 1));  // every worker up

  std::vector<double> single, batched, listed, batched_stream, listed_stream, pipe_us, start_ms, async_us, large_pipe_s,
      large_queue_s;
  for (int r = 0; r < repeats; ++r) {
    single.push_back(stream_rate(pool, items, 1).whole);
    const Rates b = stream_rate(pool, batched_items, batch);
    batched.push_back(b.whole);
    batched_stream.push_back(b.stream);
    const Rates l = stream_rate(pool, batched_items, batch, true);
    listed.push_back(l.whole);
    listed_stream.push_back(l.stream);

    auto [mine, theirs] = fibra::Pipe<long>();
    fibra::Process echo({.pool = &pool}, echo_until_closed, theirs);
    echo.start();
    mine.send(0);
    (void)mine.recv();  // warm
    std::vector<double> trips;
    for (long i = 0; i < roundtrips; ++i) {
      const auto t = Clock::now();
      mine.send(i);
      if (mine.recv() != i + 1) {
        std::fprintf(stderr, "b8_queues: the pipe's echo of %ld was wrong\n", i);
        return 1;
      }
      trips.push_back(seconds_since(t) * 1e6);
    }
    mine.close();
    echo.join();
    pipe_us.push_back(median(trips));

    std::vector<double> s;
    for (long i = 0; i < starts; ++i) {
      const auto t = Clock::now();
      fibra::Process p({.pool = &pool}, nothing);
      p.start();
      p.join();
      s.push_back(seconds_since(t) * 1e3);
      if (p.exitcode() != 0) {
        std::fprintf(stderr, "b8_queues: a no-op Process ended with %d\n", p.exitcode().value_or(-999));
        return 1;
      }
    }
    start_ms.push_back(median(s));

    std::vector<double> a;
    for (long i = 0; i < roundtrips; ++i) {
      const auto t = Clock::now();
      if (pool.apply_async(noop, 7).get() != 7) return 1;
      a.push_back(seconds_since(t) * 1e6);
    }
    async_us.push_back(median(a));

    if (large_mb > 0) {
      const auto [p, q] = large_items(pool, large_mb * 1'000'000);
      large_pipe_s.push_back(p);
      large_queue_s.push_back(q);
    }
  }
  std::printf("benchmark,metric,value,unit\n");
  std::printf("b8,queue_single_items_per_s,%.0f,items/s\n", median(single));
  std::printf("b8,queue_batch_items_per_s,%.0f,items/s\n", median(batched));
  std::printf("b8,queue_list_items_per_s,%.0f,items/s\n", median(listed));
  std::printf("b8,queue_batch_stream_items_per_s,%.0f,items/s\n", median(batched_stream));
  std::printf("b8,queue_list_stream_items_per_s,%.0f,items/s\n", median(listed_stream));
  std::printf("b8,pipe_roundtrip_us,%.1f,us\n", median(pipe_us));
  std::printf("b8,process_start_join_ms,%.2f,ms\n", median(start_ms));
  std::printf("b8,apply_async_roundtrip_us,%.1f,us\n", median(async_us));
  if (large_mb > 0) {
    std::printf("b8,large_pipe_roundtrip_s,%.3f,s\n", median(large_pipe_s));
    std::printf("b8,large_queue_put_get_s,%.3f,s\n", median(large_queue_s));
  }
  return 0;
}
