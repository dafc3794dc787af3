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
#include <vector>

std::string where(int i) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " " + std::to_string(long(i) * i);
}
FIBRA_REMOTE(where);
long square(int i) { return long(i) * i; }
FIBRA_REMOTE(square);

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
  const bool ok = wrong == 0 && bad == 0 && balanced && task_hosts.size() == nodes && agent_hosts.size() == nodes;
  std::printf(ok ? "PASS\n" : "FAIL: expected workers on %zu nodes\n", nodes);
  return ok ? 0 : 1;
}
