// A chaos soak (tests/soak/, ctest security.soak): a mixed workload runs in rounds while a thread
// of this driver SIGKILLs, every 1 to 2.5 s, one of the pool's processes chosen at random (an agent,
// or a process it started: an executor or an actor's process), by pid. Each round: a checkpointed
// map of 200 items, 20 chains of three dependent tasks, and 20 calls on an actor started with
// restarts; two Processes over a Queue (a producer puts 1..50, a consumer sums them and puts the sum
// on a second queue); and a fibra::tune experiment of 4 trials of 5 iterations. Every result is
// checked against its formula: a map or a task must give exactly its value (a lost worker costs a
// retry, never a result); an actor call may fail with ActorDied (its process was killed with the
// call in it) and is then made again, but never gives a wrong value; a Process killed ends with a
// nonzero exit code (the pair is then run again on fresh queues), and a pair that both exit 0 must
// have passed the exact sum; every trial must end done with its closed-form score (a trial whose
// process was killed is retried from its start).
// At the end every process the run started is gone within 20 s (no orphans).
//   soak [seconds]   (FIBRA_SOAK_SECONDS, else 30; by hand: 600 or more)
// Prints "PASS: ..." or "FAIL: ...".
#include <fibra/fibra.hpp>
#include <fibra/tune.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

long triple(long i) {
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return 3 * i + 1;
}
long plus(long a, long b) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return a + b;
}
long times(long a, long b) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return a * b;
}

class Squarer {
 public:
  explicit Squarer(long offset) : offset_(offset) {}
  long square(long x) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return x * x + offset_;
  }

 private:
  long offset_;
};

// The Process pair: the producer puts 1..n then 0 (the end); the consumer sums until the end, each
// get bounded (a producer killed mid-way leaves it waiting: it ends by throwing, a nonzero exit).
void produce(fibra::Queue<long> items, long n) {
  for (long i = 1; i <= n; ++i) {
    items.put(i);
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  items.put(0L);
}
void consume(fibra::Queue<long> items, fibra::Queue<long> sums) {
  long sum = 0;
  for (long x; (x = items.get(std::chrono::seconds(10))) != 0;) sum += x;
  sums.put(sum);
}

// score = v * t at iteration t.
class Line {
 public:
  explicit Line(const fibra::tune::Config& c) : v_(c.number("v")) {}
  fibra::tune::Metrics step() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return {{"score", v_ * double(++t_)}};
  }

 private:
  double v_;
  int t_ = 0;
};
FIBRA_TRAINABLE(Line);

}  // namespace

FIBRA_REMOTE(produce);
FIBRA_REMOTE(consume);
FIBRA_REMOTE(triple);
FIBRA_REMOTE(plus);
FIBRA_REMOTE(times);
FIBRA_ACTOR(Squarer, long);
FIBRA_ACTOR_METHOD(Squarer, square);

namespace {

std::atomic<bool> failed{false};
// What the round does now, for the watchdog's message (a part that never ends names itself).
std::atomic<const char*> phase{"starting the pool"};
std::atomic<long> phase_since_ms{0};
std::atomic<int> current_round{0};
std::atomic<int> kills_agent{0}, kills_child{0};  // by the killer thread
long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
void enter(const char* what) {
  phase = what;
  phase_since_ms = now_ms();
}

void fail(const std::string& why) {
  std::printf("FAIL: %s\n", why.c_str());
  std::fflush(stdout);
  failed = true;
}

// pid -> parent pid, of every process.
std::map<long, long> parents() {
  std::map<long, long> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in("/proc/" + name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld", &state, &ppid) == 2 && state != 'Z')
      out[std::stol(name)] = ppid;
  }
  ::closedir(d);
  return out;
}

// The pool's agents and the processes they started (executors, actors' processes).
std::vector<std::pair<long, bool>> victims(fibra::Pool& pool) {
  std::set<long> agents;
  for (const auto& w : pool.workers())
    if (w.pid > 0) agents.insert(w.pid);
  std::vector<std::pair<long, bool>> out;
  for (const auto& [pid, ppid] : parents()) {
    if (agents.count(pid))
      out.push_back({pid, true});
    else if (agents.count(ppid))
      out.push_back({pid, false});
  }
  return out;
}

bool alive(long pid) { return ::kill(pid_t(pid), 0) == 0 || errno != ESRCH; }

// A process's start time (/proc/<pid>/stat's 22nd field), "" once it is gone.
std::string start_time(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const auto close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it is printed, also into a pipe
  std::optional<fibra::Runtime> rt;
  rt.emplace(argc, argv);
  const char* env = std::getenv("FIBRA_SOAK_SECONDS");
  const double seconds = argc > 1 ? std::atof(argv[1]) : env ? std::atof(env) : 30.0;
  const std::string dir = "/tmp/fibra-soak-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::map<long, std::string> seen;  // every process of the run and its start time, to find orphans at the end
  std::mutex seen_mu;
  int rounds = 0, actor_retries = 0, process_reruns = 0, trial_retries = 0;
  long results = 0;
  {
    fibra::Pool pool(3, {.heartbeat_s = 0.2, .worker_silence_s = 1.5, .retries = 50});
    auto actor = fibra::Actor<Squarer>::start({.max_restarts = 1000, .pool = &pool}, 7L);
    std::atomic<bool> stop{false};
    enter("the first round's start");
    // Every wait below is on other processes: one part of a round, or of the run's end, that takes
    // over 90 s (a round takes about 2 s) ends the test saying which, rather than ctest's timeout
    // saying nothing. It watches until main returns (the pool's end, and MPI_Finalize in ~Runtime).
    std::thread([] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (now_ms() - phase_since_ms.load() > 90'000) {
          std::printf(
              "FAIL: round %d: %s did not end within 90 s (%d agents and %d of their processes killed so far)\n",
              current_round.load(), phase.load(), kills_agent.load(), kills_child.load());
          std::fflush(stdout);
          std::_Exit(1);
        }
      }
    }).detach();
    std::thread killer([&] {
      std::mt19937 rng(12345);
      std::uniform_real_distribution<double> gap(1.0, 2.5);
      while (!stop) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(gap(rng));
        while (!stop && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (stop) break;
        const auto v = victims(pool);
        {
          std::lock_guard lk(seen_mu);
          for (const auto& [pid, agent] : v) seen.emplace(pid, start_time(pid));
        }
        if (v.empty()) continue;
        const auto [pid, agent] = v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
        if (::kill(pid_t(pid), SIGKILL) == 0) ++(agent ? kills_agent : kills_child);
      }
    });
    const auto start = std::chrono::steady_clock::now();
    std::vector<long> items(200);
    std::iota(items.begin(), items.end(), 0L);
    while (!failed && std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds)) {
      const std::string ckpt = dir + "/round" + std::to_string(rounds) + ".h5";
      current_round = rounds + 1;
      enter("the checkpointed map");
      const auto out = pool.map(triple, items, {.chunksize = 2, .checkpoint = ckpt});
      for (long i = 0; i < 200 && !failed; ++i)
        if (out[std::size_t(i)] != 3 * i + 1)
          fail("round " + std::to_string(rounds) + ": map item " + std::to_string(i) + " gave " +
               std::to_string(out[std::size_t(i)]));
      results += 200;
      enter("the chains of tasks");
      std::vector<fibra::Future<long>> chains;
      for (long i = 0; i < 20; ++i) {
        auto a = pool.submit(plus, i, 1L);
        auto b = pool.submit(times, a, 2L);
        chains.push_back(pool.submit(plus, b, 5L));
      }
      for (long i = 0; i < 20 && !failed; ++i) {
        const long got = chains[std::size_t(i)].get();
        if (got != (i + 1) * 2 + 5)
          fail("round " + std::to_string(rounds) + ": chain " + std::to_string(i) + " gave " + std::to_string(got));
        ++results;
      }
      enter("the actor's calls");
      for (long x = 0; x < 20 && !failed; ++x) {
        for (int attempt = 0;; ++attempt) {
          try {
            const long got = actor.call(&Squarer::square, x).get();
            if (got != x * x + 7) fail("actor call square(" + std::to_string(x) + ") gave " + std::to_string(got));
            ++results;
            break;
          } catch (const fibra::ActorDied& e) {
            ++actor_retries;
            if (attempt == 20) {
              fail(std::string("an actor call failed 20 times: ") + e.what());
              break;
            }
          }
        }
      }
      enter("the Processes over a Queue");
      for (int attempt = 0; !failed; ++attempt) {
        fibra::Queue<long> items, sums;
        fibra::Process producer(fibra::ProcessOptions{.pool = &pool}, produce, items, 50L);
        fibra::Process consumer(fibra::ProcessOptions{.pool = &pool}, consume, items, sums);
        producer.start();
        consumer.start();
        if (!producer.join(std::chrono::seconds(60)) || !consumer.join(std::chrono::seconds(60))) {
          fail("round " + std::to_string(rounds) + ": a Process of the queue pair did not end within 60 s");
          break;
        }
        if (producer.exitcode() == 0 && consumer.exitcode() == 0) {
          const long sum = sums.get(std::chrono::seconds(10));
          if (sum != 50 * 51 / 2)
            fail("round " + std::to_string(rounds) + ": the consumer summed " + std::to_string(sum));
          ++results;
          break;
        }
        ++process_reruns;  // one was killed (or its queue's producer was): a nonzero exit code says so
        if (attempt == 20)
          fail("the Process pair failed 20 times; the last: producer exit code " +
               std::to_string(producer.exitcode().value_or(999)) + ", consumer " +
               std::to_string(consumer.exitcode().value_or(999)));
      }
      enter("the tune run");
      try {
        const auto grid =
            fibra::tune::run<Line>({{"v", fibra::tune::grid({1, 2, 3, 4})}}, {.metric = "score",
                                                                              .stop = {{"training_iteration", 5}},
                                                                              .max_failures = 50,
                                                                              .progress_interval_s = 0,
                                                                              .pool = &pool});
        for (const auto& t : grid.trials()) {
          trial_retries += t.failures;
          if (t.status != fibra::tune::TrialStatus::done || t.iterations != 5 ||
              t.last.at("score") != 5 * t.config.number("v"))
            fail("round " + std::to_string(rounds) + ": trial " + std::to_string(t.id) + " (" + t.config.str() +
                 ") ended " + fibra::tune::to_string(t.status) + " after " + std::to_string(t.iterations) +
                 " iterations: " + t.error);
          ++results;
        }
      } catch (const std::exception& e) {
        fail("round " + std::to_string(rounds) + ": the tune run failed: " + e.what());
      }
      std::filesystem::remove(ckpt);
      ++rounds;
      std::printf("round %d: %ld results exact, %d agents and %d of their processes killed so far\n", rounds, results,
                  kills_agent.load(), kills_child.load());
      std::fflush(stdout);
    }
    stop = true;
    enter("the killer's end");
    killer.join();
    for (const auto& [pid, agent] : victims(pool)) seen.emplace(pid, start_time(pid));
    enter("the pool's end (~Actor, ~Pool)");
  }  // the pool ends: every process it started must go
  enter("the wait for the run's processes to end");
  std::vector<long> left;
  for (int i = 0; i < 200; ++i) {
    left.clear();
    for (const auto& [pid, started] : seen)  // (the same pid and start time: not a new process that reused it)
      if (alive(pid) && start_time(pid) == started) left.push_back(pid);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::filesystem::remove_all(dir);
  if (!left.empty()) {
    std::string pids;
    for (long p : left) pids += " " + std::to_string(p);
    fail("processes of the run still alive 20 s after its pool ended:" + pids);
  }
  enter("the runtime's end (~Runtime, MPI_Finalize)");
  rt.reset();
  if (failed) return 1;
  if (kills_agent + kills_child < 3) {
    fail("fewer than 3 processes were killed: the soak tested nothing");
    return 1;
  }
  std::printf(
      "PASS: %d rounds in %.0f s, %ld results exact, %d agents and %d of their processes SIGKILLed, %d actor "
      "calls made again after ActorDied, %d Process pairs run again, %d trial failures retried, no process left\n",
      rounds, seconds, results, kills_agent.load(), kills_child.load(), actor_retries, process_reruns, trial_retries);
  return 0;
}
