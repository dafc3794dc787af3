// A map spread over the nodes of a Slurm allocation (tests/multinode/run.sh starts it inside a job
// on the virtual cluster). Each task says where it ran; every result is checked.
//
//   spread <workers> <nodes expected> [spread|pack]
//       prints PASS when every result is right and the agents and tasks ran on exactly that many
//       nodes (spread: every node of the allocation; pack: the first nodes, each filled first)
#include <fibra/fibra.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

std::string where(int i) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " " + std::to_string(long(i) * i);
}
FIBRA_REMOTE(where);
long square(int i) { return long(i) * i; }
FIBRA_REMOTE(square);

// The object store across nodes: a task's 8 MB result, kept on the node that made it, and a value
// put in the driver, each read by 24 tasks on every node. v[i] = i, so a part's sum has a closed form.
std::vector<double> make_counts(int wait_ms, int n) {
  std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  std::vector<double> v(std::size_t(n), 0.0);
  for (int i = 0; i < n; ++i) v[std::size_t(i)] = i;
  return v;
}
FIBRA_REMOTE(make_counts);
int wait_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return ms;
}
FIBRA_REMOTE(wait_ms);
// Every `stride`-th element from `from`, summed, after 50 ms (so that the parts spread over every
// worker); with the host it ran on.
std::pair<double, std::string> part_sum(std::vector<double> v, int from, int stride) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  double s = 0;
  for (std::size_t i = std::size_t(from); i < v.size(); i += std::size_t(stride)) s += v[i];
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return {s, host};
}
FIBRA_REMOTE(part_sum);

// Checks 24 parts of counts(n) in closed form; returns the number of wrong ones, and the hosts.
long check_parts(std::vector<fibra::Future<std::pair<double, std::string>>>& parts, long n,
                 std::set<std::string>& hosts) {
  long wrong = 0;
  const long stride = long(parts.size());
  for (long k = 0; k < stride; ++k) {
    const auto [sum, host] = parts[std::size_t(k)].get();
    const long m = (n - k + stride - 1) / stride;  // sum over j < m of (k + stride j)
    wrong += sum != double(k * m + stride * m * (m - 1) / 2);
    hosts.insert(host);
  }
  return wrong;
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = argc > 1 ? std::atoi(argv[1]) : 6;
  const std::size_t nodes = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 3;
  const std::string placement = argc > 3 ? argv[3] : "spread";
  const auto t0 = std::chrono::steady_clock::now();
  fibra::Pool pool(workers, {.placement = placement});
  const double startup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("Pool(%d) ready in %.2f s\n", workers, startup);
  std::set<std::string> agent_hosts;
  std::map<std::string, int> agents_on;
  for (const auto& w : pool.workers()) {
    ++agents_on[w.host];
    std::printf("agent %d: %d worker(s) on %s, pid %ld, %s\n", w.slot, w.workers, w.host.c_str(), w.pid,
                w.state.c_str());
    agent_hosts.insert(w.host);
  }
  std::vector<int> xs(600);
  for (int i = 0; i < 600; ++i) xs[i] = i;
  auto out = pool.map(where, xs, {.chunksize = 5});
  // Throughput: a map of 1,000,000 cheap tasks at the automatic chunk size (every result checked).
  std::vector<int> many(1000000);
  for (int i = 0; i < 1000000; ++i) many[i] = i;
  const auto t1 = std::chrono::steady_clock::now();
  const auto sq = pool.map(square, many);
  const double map_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  long bad = 0;
  for (int i = 0; i < 1000000; ++i) bad += sq[i] != long(i) * i;
  std::printf("map of 1,000,000 tasks: %.3f s, %.0f tasks/s, %ld wrong\n", map_s, 1e6 / map_s, bad);
  std::set<std::string> task_hosts;
  long wrong = 0;
  for (int i = 0; i < 600; ++i) {
    const auto sp = out[i].find(' ');
    task_hosts.insert(out[i].substr(0, sp));
    wrong += out[i].substr(sp + 1) != std::to_string(long(i) * i);
  }
  std::printf("tasks ran on %zu host(s):", task_hosts.size());
  for (auto& h : task_hosts) std::printf(" %s", h.c_str());
  std::printf("; %ld wrong result(s)\n", wrong);
  // The object store across nodes: neither value leaves the driver more than once (without copies
  // between agents, each agent on another node would be sent its own).
  bool objects_ok = true;
  if (placement == "spread") {
    // FIBRA_MN_OBJECT_MB: the values' size for a measurement (docs/benchmarks.md); 8 MB by default.
    const char* mb = std::getenv("FIBRA_MN_OBJECT_MB");
    const long n = (mb ? std::atol(mb) : 8) * 131072;  // doubles
    std::set<std::string> kept_hosts, put_hosts;
    const auto t_kept = std::chrono::steady_clock::now();
    std::vector<fibra::Future<std::pair<double, std::string>>> parts;
    auto made = pool.submit(make_counts, pool.submit(wait_ms, 200), int(n));
    for (int k = 0; k < 24; ++k) parts.push_back(pool.submit(part_sum, made, k, 24));
    const long kept_wrong = check_parts(parts, n, kept_hosts);
    const double kept_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_kept).count();
    const auto after_kept = pool.stats();
    parts.clear();
    const auto t_put = std::chrono::steady_clock::now();
    {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (long i = 0; i < n; ++i) v[std::size_t(i)] = double(i);
      auto ref = fibra::put(std::move(v));
      for (int k = 0; k < 24; ++k) parts.push_back(pool.submit(part_sum, ref, k, 24));
    }
    const long put_wrong = check_parts(parts, n, put_hosts);
    const double put_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_put).count();
    std::printf(
        "object store, %ld MB: a result made and read by 24 tasks in %.3f s; a value put and read by 24 "
        "tasks in %.3f s\n",
        n / 131072, kept_s, put_s);
    const auto s = pool.stats();
    std::printf(
        "object store: a kept result read on %zu node(s), %ld wrong: results_kept %llu, sent %llu, "
        "copied between agents %llu; a put value read on %zu node(s), %ld wrong: sent %llu, copied %llu\n",
        kept_hosts.size(), kept_wrong, (unsigned long long)after_kept.results_kept,
        (unsigned long long)after_kept.objects_sent, (unsigned long long)after_kept.objects_fetched_from_peers,
        put_hosts.size(), put_wrong, (unsigned long long)(s.objects_sent - after_kept.objects_sent),
        (unsigned long long)(s.objects_fetched_from_peers - after_kept.objects_fetched_from_peers));
    objects_ok = kept_wrong == 0 && put_wrong == 0 && kept_hosts.size() == nodes && put_hosts.size() == nodes &&
                 after_kept.results_kept == 1 && after_kept.objects_sent <= 1 &&
                 s.objects_sent - after_kept.objects_sent == 1 &&
                 after_kept.objects_fetched_from_peers +
                         (s.objects_fetched_from_peers - after_kept.objects_fetched_from_peers) >=
                     nodes - 2;
    if (!objects_ok) std::printf("FAIL: the object store across nodes\n");
  }
  // "spread" places agent k on host k mod n: the hosts' counts of agents differ by at most one.
  bool balanced = true;
  if (placement == "spread" && !agents_on.empty()) {
    const auto [few, many] = std::minmax_element(agents_on.begin(), agents_on.end(),
                                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    balanced = many->second - few->second <= 1;
    if (!balanced)
      std::printf("FAIL: spread is not even: %d agent(s) on %s, %d on %s\n", many->second, many->first.c_str(),
                  few->second, few->first.c_str());
  }
  const bool ok =
      wrong == 0 && bad == 0 && balanced && objects_ok && task_hosts.size() == nodes && agent_hosts.size() == nodes;
  std::printf(ok ? "PASS\n" : "FAIL: expected workers on %zu nodes\n", nodes);
  return ok ? 0 : 1;
}
