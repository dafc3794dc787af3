// The run's end after agents were lost while they live on, stopped (SIGSTOP): the pool ends, then
// ~Runtime calls MPI_Finalize. Open MPI 4.1's MPI_Finalize disconnects from the agents of every
// dynamic communicator the driver has not freed (when there are two or more), and an agent that
// never answers holds it there for good: the soak's driver was seen so, after agents were killed.
// An agent, its replacement (spawned alone) and that one's are stopped in turn until lost; the run
// must still end, its results exact. Prints PASS or FAIL (naming the part that did not end); ends by itself.
#include <fibra/fibra.hpp>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

long square(long x) { return x * x; }
FIBRA_REMOTE(square);
double total(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return t;
}
FIBRA_REMOTE(total);

namespace {

std::atomic<const char*> part{"the runtime's start"};
std::atomic<long> part_since_s{0};  // (globals: the watchdog, detached, may outlive main's frame)
constexpr long part_bound_s = 30;   // each part takes a few seconds; ctest gives the whole 120

long now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void enter(const char* what) {
  part = what;
  part_since_s = now_s();
}
std::vector<long> stopped;  // written before the watchdog could read it (under `stopped_count`)
std::atomic<std::size_t> stopped_count{0};

void end_stopped() {
  for (std::size_t i = 0; i < stopped_count.load(); ++i) ::kill(pid_t(stopped[i]), SIGKILL);  // ours: our pool's agents
}

[[noreturn]] void fail(const std::string& why) {
  std::printf("FAIL: %s\n", why.c_str());
  std::fflush(stdout);
  end_stopped();
  std::_Exit(1);
}

// Arguments of 2.4 MB: sent through MPI in the rendezvous protocol (over 1 MiB, not in a lane),
// so that a send to a stopped agent stays pending; such a request keeps its communicator in Open
// MPI's table after it is freed, which is what made MPI_Finalize wait for the others.
bool big_map_exact(fibra::Pool& pool) {
  std::vector<std::vector<double>> in(6, std::vector<double>(300'000));
  for (std::size_t k = 0; k < in.size(); ++k)
    for (std::size_t i = 0; i < in[k].size(); ++i) in[k][i] = double(k + 1);
  const auto out = pool.map(total, in, {.chunksize = 1});
  for (std::size_t k = 0; k < in.size(); ++k)
    if (out[k] != 300'000.0 * double(k + 1)) return false;
  return true;
}

bool map_exact(fibra::Pool& pool) {
  std::vector<long> in(60);
  for (long i = 0; i < 60; ++i) in[std::size_t(i)] = i;
  const auto out = pool.map(square, in, {.chunksize = 1});
  for (long i = 0; i < 60; ++i)
    if (out[std::size_t(i)] != i * i) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::optional<fibra::Runtime> rt;
  rt.emplace(argc, argv);
  stopped.reserve(8);
  // Every part waits on other processes: 30 s in one ends the test saying which.
  enter("the pool's start");
  std::thread([] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (now_s() - part_since_s.load() > part_bound_s)
        fail(std::string(part.load()) + " did not end within " + std::to_string(part_bound_s) + " s");
    }
  }).detach();
  {
    fibra::Pool pool(2, {.heartbeat_s = 0.2, .worker_silence_s = 1.5});
    enter("the first map");
    if (!map_exact(pool)) fail("the first map's results are wrong");
    std::set<long> first;
    for (const auto& w : pool.workers()) first.insert(w.pid);
    // The agents spawned together share one communicator, freed when the last of them says bye:
    // one of them stopped leaves nothing open at the end. Its replacement is spawned alone, and so
    // is the replacement's: those two, stopped in turn, leave two.
    for (int k = 1; k <= 3; ++k) {
      enter("the wait for a replacement agent");
      long victim = k == 1 ? *first.begin() : 0;
      while (victim == 0) {
        for (const auto& w : pool.workers())
          if (w.state == "ready" && !first.count(w.pid)) victim = w.pid;
        if (victim == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      first.insert(victim);
      stopped.push_back(victim);
      ++stopped_count;
      if (::kill(pid_t(victim), SIGSTOP) != 0) fail("could not stop agent " + std::to_string(victim));
      if (k == 1) {
        enter("a map of large arguments while an agent is stopped");
        if (!big_map_exact(pool)) fail("the map of large arguments gave wrong results");
      }
      enter("the wait for the stopped agent to be declared lost");
      while (pool.stats().workers_lost < std::uint64_t(k)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      enter("a map after the loss");
      if (!map_exact(pool)) fail("a map after agent " + std::to_string(victim) + "'s loss gave wrong results");
    }
    if (stopped.size() != 3) fail("fewer than 3 agents were stopped");
    enter("the pool's end");
  }
  enter("the runtime's end (~Runtime, MPI_Finalize), with 3 lost agents stopped");
  rt.reset();
  end_stopped();
  std::printf("PASS: the run ended with 3 lost agents stopped (pids %ld, %ld, %ld); every result exact\n", stopped[0],
              stopped[1], stopped[2]);
  return 0;
}
