// Counters under a Lock and a Barrier of 8, from 8 Processes on two virtual nodes
// (tests/multinode/run.sh locks; issue 46): the counter is exact, no two processes held the lock at
// once (each notes its entry and exit in a List, which must alternate), and nobody passed the
// barrier before all 8 had marked their slot of an Array.
//
//   locks      prints the hosts, the counts and PASS
#include <fibra/fibra.hpp>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

// `rounds` times under the lock: reads the counter, waits a moment, writes it one higher; notes
// +pid on entry and -pid on exit. Then marks its slot, meets the others at the barrier, and reports
// its host, its arrival index and how many slots were marked when it passed.
void count_and_meet(fibra::Lock lock, fibra::Value<long> counter, fibra::List<long> log, fibra::Barrier barrier,
                    fibra::Array<long> marks, long slot, long rounds, fibra::Queue<std::string> out) {
  for (long k = 0; k < rounds; ++k) {
    std::lock_guard g(lock);
    log.append(::getpid());
    const long v = counter.get();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    counter.set(v + 1);
    log.append(-::getpid());
  }
  marks.set(static_cast<std::uint64_t>(slot), 1);
  const auto index = barrier.wait(std::chrono::seconds(120));
  const auto v = marks.to_vector();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  out.put(std::string(host) + " " + std::to_string(index) + " " +
          std::to_string(std::accumulate(v.begin(), v.end(), 0L)));
}
FIBRA_REMOTE(count_and_meet);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const long parties = 8, rounds = 20;
  fibra::Pool pool(4);
  fibra::Lock lock;
  fibra::Value<long> counter(0);
  fibra::List<long> log;
  fibra::Barrier barrier(parties);
  fibra::Array<long> marks(parties, 0);
  fibra::Queue<std::string> out;
  std::vector<fibra::Process> ps;
  for (long i = 0; i < parties; ++i)
    ps.emplace_back(fibra::ProcessOptions{.pool = &pool}, count_and_meet, lock, counter, log, barrier, marks, i, rounds,
                    out);
  for (auto& p : ps) p.start();
  for (auto& p : ps)
    if (!p.join(std::chrono::seconds(180)) || p.exitcode() != 0)
      return std::printf("FAIL: a process did not end well: %s\n", p.error() ? p.error()->what() : "no error"), 1;
  std::set<std::string> hosts;
  std::set<long> indexes;
  for (long i = 0; i < parties; ++i) {
    char host[256] = {};
    long index = -1, marked = -1;
    const std::string line = out.get(std::chrono::seconds(30));
    if (std::sscanf(line.c_str(), "%255s %ld %ld", host, &index, &marked) != 3)
      return std::printf("FAIL: a report does not read: %s\n", line.c_str()), 1;
    hosts.insert(host);
    indexes.insert(index);
    if (marked != parties) return std::printf("FAIL: %s passed the barrier with %ld of 8 marked\n", host, marked), 1;
  }
  const auto entries = log.to_vector();
  for (std::size_t i = 0; i + 1 < entries.size(); i += 2)
    if (entries[i] <= 0 || entries[i + 1] != -entries[i])
      return std::printf("FAIL: two processes held the lock at once (at entry %zu)\n", i), 1;
  std::printf("processes on %zu hosts; counter %ld of %ld; %zu entries; %zu distinct barrier indexes\n", hosts.size(),
              counter.get(), parties * rounds, entries.size(), indexes.size());
  if (hosts.size() < 2) return std::printf("FAIL: the processes ran on one host only\n"), 1;
  if (counter.get() != parties * rounds || entries.size() != std::size_t(2 * parties * rounds))
    return std::printf("FAIL: increments were lost\n"), 1;
  if (indexes.size() != std::size_t(parties) || *indexes.rbegin() != parties - 1)
    return std::printf("FAIL: the barrier's indexes are not 0 to 7\n"), 1;
  std::printf("PASS\n");
  return 0;
}
