// B7 (issue 11): remote tasks and actors. The throughput of fibra::submit of no-op tasks from one
// driver thread, the round trip of one actor call beside the pool's apply_async round trip (same
// pool, same run), and the time to resolve a chain of dependent tasks. Threaded actors
// (ActorOptions::max_concurrency = 8): --naps calls that each sleep 20 ms, against one at a time,
// and the round trip of one call (through its agent: such an actor does not use its lane).
//
//   b7_tasks [--workers N] [--submits N] [--roundtrips N] [--chain N] [--payload-mb M] [--naps N] [--repeats R]
//            [--held-futures N]
//
// --held-futures: what a future costs the driver, in bytes of resident memory each: N no-op tasks
// submitted while every worker is held (queued), then once all their results are in (done, held).
// Prints one line per figure, as CSV: benchmark,metric,value,unit (medians of R runs).
#include <fibra/fibra.hpp>

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "bench_common.hpp"

int noop(int x) { return x; }
FIBRA_REMOTE(noop);
void hold_ms(long ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
FIBRA_REMOTE(hold_ms);

// The driver's resident memory, in bytes (/proc/self/statm).
double resident_bytes() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return double(resident) * double(::sysconf(_SC_PAGESIZE));
}

// What one future costs in the driver: `n` no-op tasks submitted while every worker is held by a
// long task (queued: bytes each), then the same futures once every result is in (done and held).
std::pair<double, double> bytes_per_future(fibra::Pool& pool, int workers, long n) {
  std::vector<fibra::Future<void>> gates;
  for (int w = 0; w < workers; ++w) gates.push_back(pool.submit(hold_ms, 3000L));
  std::vector<fibra::Future<int>> fs;
  fs.reserve(static_cast<std::size_t>(n));  // (its 16 bytes a future counted in both figures)
  ::malloc_trim(0);
  const double before = resident_bytes();
  for (long i = 0; i < n; ++i) fs.push_back(pool.submit(noop, 1));
  const double queued = (resident_bytes() - before) / double(n);
  for (auto& g : gates) g.get();
  for (auto& f : fs) f.wait();
  ::malloc_trim(0);
  const double done = (resident_bytes() - before) / double(n);
  return {queued, done};
}
long inc(long x) { return x + 1; }
FIBRA_REMOTE(inc);

std::vector<double> echo_vec(std::vector<double> v) { return v; }
FIBRA_REMOTE(echo_vec);

struct Echo {
  int echo(int x) const { return x; }
  std::vector<double> echo_vec(std::vector<double> v) const { return v; }
};
FIBRA_ACTOR(Echo);
FIBRA_ACTOR_METHOD(Echo, echo);
FIBRA_ACTOR_METHOD(Echo, echo_vec);

struct Napper {
  long nap(long ms) const {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ms;
  }
  int echo(int x) const { return x; }
};
FIBRA_ACTOR(Napper);
FIBRA_ACTOR_METHOD(Napper, nap);
FIBRA_ACTOR_METHOD(Napper, echo);

using bench::arg;
using bench::Clock;
using bench::median;
using bench::seconds_since;

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(arg(argc, argv, "--workers", 2));
  const long submits = arg(argc, argv, "--submits", 200'000);
  const long roundtrips = arg(argc, argv, "--roundtrips", 2'000);
  const long chain = arg(argc, argv, "--chain", 1'000);
  const int repeats = static_cast<int>(arg(argc, argv, "--repeats", 5));
  const long payload_mb = arg(argc, argv, "--payload-mb", 100);  // a large argument and result
  const long naps = arg(argc, argv, "--naps", 32);
  const long held = arg(argc, argv, "--held-futures", 200'000);
  std::printf("# fibra %s, %u hardware threads, %d workers, medians of %d runs\n", fibra::version,
              std::thread::hardware_concurrency(), workers, repeats);
  std::printf("benchmark,metric,value,unit\n");
  fibra::Pool& pool = fibra::default_pool(workers);
  auto actor = fibra::Actor<Echo>::start();
  actor.call(&Echo::echo, 0).get();  // started
  auto serial = fibra::Actor<Napper>::start();
  auto threaded = fibra::Actor<Napper>::start(fibra::ActorOptions{.max_concurrency = 8});
  serial.call(&Napper::echo, 0).get();
  threaded.call(&Napper::echo, 0).get();
  // `n` calls of nap(20) made at once, until the last is back: seconds.
  auto nap_all = [&](fibra::Actor<Napper>& a, long n) {
    const auto t = Clock::now();
    std::vector<fibra::Future<long>> fs;
    for (long i = 0; i < n; ++i) fs.push_back(a.call(&Napper::nap, 20L));
    for (auto& f : fs) f.get();
    return seconds_since(t);
  };

  std::vector<double> rate, actor_rtt, async_rtt, chain_s, actor_big, async_big, naps_1, naps_8, threaded_rtt;
  const std::vector<double> big(std::size_t(payload_mb) * 1'000'000 / sizeof(double), 0.25);
  for (int r = 0; r < repeats; ++r) {
    auto t = Clock::now();
    std::vector<fibra::Future<int>> fs;
    fs.reserve(static_cast<std::size_t>(submits));
    for (long i = 0; i < submits; ++i) fs.push_back(fibra::submit(noop, static_cast<int>(i)));
    long ok = 0;
    for (long i = 0; i < submits; ++i) ok += fs[static_cast<std::size_t>(i)].get() == i;
    rate.push_back(double(submits) / seconds_since(t));
    if (ok != submits) return std::fprintf(stderr, "b7: submit returned wrong results\n"), 1;

    std::vector<double> a, p;  // alternating, so that both see the same machine
    for (long i = 0; i < roundtrips; ++i) {
      t = Clock::now();
      const int x = actor.call(&Echo::echo, static_cast<int>(i)).get();
      a.push_back(seconds_since(t) * 1e6);
      t = Clock::now();
      const int y = pool.apply_async(noop, static_cast<int>(i)).get();
      p.push_back(seconds_since(t) * 1e6);
      if (x != i || y != i) return std::fprintf(stderr, "b7: a round trip returned a wrong result\n"), 1;
    }
    actor_rtt.push_back(median(a));
    async_rtt.push_back(median(p));
    std::vector<double> tr;
    for (long i = 0; i < roundtrips; ++i) {
      t = Clock::now();
      if (threaded.call(&Napper::echo, static_cast<int>(i)).get() != i)
        return std::fprintf(stderr, "b7: a threaded actor's round trip returned a wrong result\n"), 1;
      tr.push_back(seconds_since(t) * 1e6);
    }
    threaded_rtt.push_back(median(tr));
    if (naps > 0) {
      naps_1.push_back(nap_all(serial, naps));
      naps_8.push_back(nap_all(threaded, naps));
    }

    t = Clock::now();
    auto f = fibra::submit(inc, 0L);
    for (long i = 1; i < chain; ++i) f = fibra::submit(inc, f);
    if (f.get() != chain) return std::fprintf(stderr, "b7: the chain returned a wrong result\n"), 1;
    chain_s.push_back(seconds_since(t));

    if (payload_mb > 0) {  // the same large argument and result through an actor and apply_async
      t = Clock::now();
      if (actor.call(&Echo::echo_vec, big).get() != big)
        return std::fprintf(stderr, "b7: the actor's echo differs\n"), 1;
      actor_big.push_back(seconds_since(t));
      t = Clock::now();
      if (pool.apply_async(echo_vec, big).get() != big)
        return std::fprintf(stderr, "b7: apply_async's echo differs\n"), 1;
      async_big.push_back(seconds_since(t));
    }
  }
  std::printf("b7,submit_noop_tasks_per_s,%.0f,tasks/s\n", median(rate));
  std::printf("b7,actor_call_roundtrip_us,%.1f,us\n", median(actor_rtt));
  std::printf("b7,apply_async_roundtrip_us,%.1f,us\n", median(async_rtt));
  std::printf("b7,threaded_actor_call_roundtrip_us,%.1f,us\n", median(threaded_rtt));
  if (naps > 0) {
    std::printf("b7,actor_%ld_naps_of_20ms_one_at_a_time_s,%.3f,s\n", naps, median(naps_1));
    std::printf("b7,actor_%ld_naps_of_20ms_8_at_once_s,%.3f,s\n", naps, median(naps_8));
  }
  std::printf("b7,chain_%ld_tasks_s,%.4f,s\n", chain, median(chain_s));
  std::printf("b7,chain_per_task_us,%.1f,us\n", median(chain_s) / double(chain) * 1e6);
  if (payload_mb > 0) {
    std::printf("b7,actor_call_%ldmb_roundtrip_s,%.3f,s\n", payload_mb, median(actor_big));
    std::printf("b7,apply_async_%ldmb_roundtrip_s,%.3f,s\n", payload_mb, median(async_big));
  }
  if (held > 0) {
    const auto [queued, done] = bytes_per_future(pool, workers, held);
    std::printf("b7,future_queued_bytes,%.0f,bytes\n", queued);
    std::printf("b7,future_done_bytes,%.0f,bytes\n", done);
  }
  return 0;
}
