// Two reader Processes on different virtual nodes take items from one Queue (tests/multinode/run.sh
// queue_readers); mid-stream the node of the reader that is not on the driver's node is cut off
// (by run.sh, asked through a file; a node killed outright ends the whole job with Open MPI 4.1).
// Its worker is declared lost after worker_silence_s, and the other reader must get every item the
// lost one had not received: each reader writes every item it takes to a file of its own the moment
// it has it (the files are on this machine's disk, which the cut does not reach), and the lost
// reader's file plus the survivor's items must hold every item, the survivor's each once.
//
//   queue_readers <work dir>      prints the counts and PASS
#include <fcntl.h>
#include <fibra/fibra.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

// Takes items one at a time until the stream ends, writing each to <work>/read-<pid> as it comes
// (a write(2), straight to this machine's disk). No pause between gets: when the cut comes, a get
// is almost always on its way, its item owed to a reader that will never acknowledge it.
void read_items(fibra::Queue<long> items, std::string work, fibra::Queue<std::vector<long>> done) {
  const std::string path = work + "/read-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  std::vector<long> mine;
  try {
    for (;;) {
      const long v = items.get();
      const std::string line = std::to_string(v) + "\n";
      if (::write(fd, line.data(), line.size()) < 0) return;
      mine.push_back(v);
    }
  } catch (const fibra::QueueClosed&) {
  }
  ::close(fd);
  done.put(mine);
}
FIBRA_REMOTE(read_items);

// Asks run.sh (outside the virtual nodes) to cut node `node` off and waits for it, at most 30 s.
bool ask_cut(const std::string& work, int node) {
  std::ofstream(work + "/cut-now") << node;
  for (int i = 0; i < 300; ++i) {
    if (std::filesystem::exists(work + "/cut-done")) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every verdict reaches the job's output, even if the end hangs
  const std::string work = argc > 1 ? argv[1] : ".";
  const long n = 40000;
  fibra::Pool pool(6, {.heartbeat_s = 0.5, .worker_silence_s = 3, .driver_silence_s = 20});
  fibra::Queue<long> items;
  fibra::Queue<std::vector<long>> done;
  fibra::Process a({.pool = &pool, .name = "reader a"}, read_items, items, work, done);
  fibra::Process b({.pool = &pool, .name = "reader b"}, read_items, items, work, done);
  a.start();
  b.start();
  const std::string host_a = a.host(), host_b = b.host();
  std::printf("reader a (pid %ld) on %s, reader b (pid %ld) on %s\n", a.pid(), host_a.c_str(), b.pid(), host_b.c_str());
  char mine[256] = {};
  ::gethostname(mine, sizeof mine - 1);
  fibra::Process* victim = host_a != mine ? &a : host_b != mine ? &b : nullptr;
  fibra::Process* survivor = victim == &a ? &b : &a;
  if (!victim || host_a == host_b) {
    std::printf("FAIL: the readers are not on two nodes, one of them not the driver's (%s)\n", mine);
    return 1;
  }
  const std::string victim_host = victim == &a ? host_a : host_b;
  const long victim_pid = victim->pid();
  for (long k = 0; k < n; k += 1000) {
    std::vector<long> batch;
    for (long j = k; j < k + 1000; ++j) batch.push_back(j);
    items.put_many(batch);
  }
  while (items.qsize() > static_cast<std::size_t>(n * 7 / 10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int node = victim_host.back() - '0';
  std::printf("cutting %s (node %d) off with %zu items left in the queue\n", victim_host.c_str(), node, items.qsize());
  std::fflush(stdout);
  if (!ask_cut(work, node)) return std::printf("FAIL: %s was not cut off within 30 s\n", victim_host.c_str()), 1;
  items.close();
  if (!survivor->join(std::chrono::seconds(120)) || survivor->exitcode() != 0)
    return std::printf("FAIL: the surviving reader did not end well (exit code %d)\n",
                       survivor->exitcode().value_or(-999)),
           1;
  if (!victim->join(std::chrono::seconds(60)))
    return std::printf("FAIL: the cut-off reader was never declared lost\n"), 1;
  const std::vector<long> got = done.get(std::chrono::seconds(30));
  std::set<long> survivor_items(got.begin(), got.end()), dead_items;
  std::ifstream in(work + "/read-" + std::to_string(victim_pid));
  for (long v; in >> v;) dead_items.insert(v);
  long missing = 0, both = 0;
  for (long k = 0; k < n; ++k) {
    const bool s = survivor_items.count(k) > 0, d = dead_items.count(k) > 0;
    missing += !s && !d;
    both += s && d;
  }
  std::printf(
      "the cut-off reader (exit code %d) had read %zu items, the survivor %zu (%zu distinct); %ld read by "
      "both, %ld by neither\n",
      victim->exitcode().value_or(-999), dead_items.size(), got.size(), survivor_items.size(), both, missing);
  // The lost reader's last item may have been received with its acknowledgement cut off on the way
  // (then given again: read by both): at most one item. None may be read by neither (it was
  // written before the next get; the cut stops no process).
  if (survivor_items.size() != got.size()) return std::printf("FAIL: the survivor read an item twice\n"), 1;
  if (missing > 0 || both > 1) return std::printf("FAIL: items lost or given twice\n"), 1;
  if (victim->exitcode() != -9) return std::printf("FAIL: the lost reader's exit code is not -9\n"), 1;
  std::printf("PASS\n");
  return 0;
}
