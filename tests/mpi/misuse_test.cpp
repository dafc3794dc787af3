// Programs that misuse fibra or die; each mode prints what it checks and exits non-zero on failure.
//   too_few_slots   Pool bigger than the slots with oversubscription off: a clear MpiError
//   two_ranks       re-runs itself under `mpirun -n 2`: a clear ConfigError on each rank
//   lost_full_slots every slot is taken (driver + workers, oversubscription off) and a worker
//                   agent is killed mid-map: its replacement takes the freed slot, the map is exact
//   second_runtime  a second Runtime while the first lives, then one after it ended: ConfigErrors
//                   that say so (MPI cannot be initialised twice; Open MPI would abort the process)
//   build_mismatch  the workers register one remote function more than the driver (as a worker
//                   binary of another build would): Pool() throws ConfigError saying so, exactly
//   orphan <file> <how>  starts a pool, writes agent and executor pids, then dies by <how>:
//                   sigkill (waits to be killed), throw (uncaught exception), return
#include <fibra/fibra.hpp>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/bounded.hpp"

using fibra_test::call_within;

// How long a program waits for a call (a loaded 2-core machine: tens of seconds, far below ctest's timeout).
constexpr std::chrono::seconds bound{40};

long pids(int) { return long(::getppid()) * 1'000'000 + ::getpid(); }  // agent, executor
FIBRA_REMOTE(pids);

namespace {

// The slots mpirun gives (this machine's cores): the driver takes one.
int slots() {
  int* size = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &size, &flag);
  return flag && size ? *size : 0;
}

int too_few_slots() {
  const int n = slots();  // one worker more than fits beside the driver
  try {
    fibra::Pool p(n);
    std::puts("FAIL: a pool larger than the slots started");
    return 1;
  } catch (const fibra::MpiError& e) {
    const std::string m = e.what();
    std::printf("got: %s\n", m.c_str());
    const std::string want =
        "fibra: MPI_Comm_spawn could not start worker " + std::to_string(n) + " of " + std::to_string(n) + ": ";
    const bool ok = m.find(want) == 0 && m.find("set FIBRA_OVERSUBSCRIBE=1") != std::string::npos;
    std::puts(ok ? "PASS" : "FAIL: wrong message");
    return ok ? 0 : 1;
  }
}

// Kills its own agent (the executor's parent) once, at item 300: the marker file says it happened.
long kill_agent_once(long i) {
  const char* marker = std::getenv("FIBRA_TEST_MARKER");
  std::FILE* f = i == 300 && marker ? std::fopen(marker, "wx") : nullptr;
  if (f) {
    std::fclose(f);
    ::kill(::getppid(), SIGKILL);
    ::pause();  // dies with the agent (PR_SET_PDEATHSIG)
  }
  return 3 * i + 1;
}
FIBRA_REMOTE(kill_agent_once);

// Every slot is in use, one worker is lost: before the fix, the replacement's spawn still saw the
// lost worker's slot as taken and every waiting call failed with WorkerLost.
int lost_full_slots() {
  // Set by ctest for mpirun, which passes it on to the workers it spawns.
  const char* env = std::getenv("FIBRA_TEST_MARKER");
  if (!env) {
    std::puts("FAIL: FIBRA_TEST_MARKER is not set");
    return 1;
  }
  const std::string marker = env;
  std::remove(marker.c_str());
  const int workers = slots() - 1;
  if (workers < 1) {
    std::puts("SKIP: mpirun gives fewer than 2 slots here, so a worker cannot fill the last one");
    return 0;
  }
  fibra::Pool p(workers);
  std::vector<long> in(2000);
  for (long i = 0; i < 2000; ++i) in[std::size_t(i)] = i;
  std::vector<long> r;
  try {
    r = call_within(bound, "map of kill_agent_once over 2000 items",
                    [&] { return p.map(kill_agent_once, in, {.chunksize = 10}); });
  } catch (const fibra::Error& e) {
    std::printf("FAIL: the map failed: %s\n", e.what());
    std::remove(marker.c_str());
    return 1;
  }
  const bool killed = std::remove(marker.c_str()) == 0;
  for (long i = 0; i < 2000; ++i)
    if (r[std::size_t(i)] != 3 * i + 1) {
      std::printf("FAIL: item %ld is %ld\n", i, r[std::size_t(i)]);
      return 1;
    }
  const auto st = p.stats();
  std::printf("workers %d (slots %d), lost %llu, started %llu\n", workers, slots(),
              static_cast<unsigned long long>(st.workers_lost), static_cast<unsigned long long>(st.workers_started));
  const bool ok = killed && st.workers_lost == 1 && st.workers_started == static_cast<std::uint64_t>(workers) + 1;
  std::puts(ok ? "PASS" : "FAIL: no agent was lost and replaced");
  return ok ? 0 : 1;
}

// The pool grows past the slots: resize() reports it, and the pool carries on with what it has.
int resize_no_slots() {
  fibra::Pool p(1);
  const int n = slots();
  try {
    p.resize(n);
    std::puts("FAIL: resize past the slots succeeded");
    return 1;
  } catch (const fibra::MpiError& e) {
    const std::string m = e.what();
    std::printf("got: %s\n", m.c_str());
    if (m.find("fibra: Pool::resize(" + std::to_string(n) +
               ") could not start every new worker (MPI_Comm_spawn could not start worker " + std::to_string(n)) != 0 ||
        m.find("the pool carries on with 1 worker(s)") == std::string::npos) {
      std::puts("FAIL: wrong message");
      return 1;
    }
  }
  auto r =
      call_within(bound, "map of pids after the failed resize", [&] { return p.map(pids, std::vector<int>(100, 0)); });
  if (r.size() != 100 || p.size() != 1) {
    std::puts("FAIL: the pool did not carry on");
    return 1;
  }
  std::puts("PASS");
  return 0;
}

// Starts and stops `n` pools in a row (a stress test of MPI_Comm_spawn, not part of ctest).
int churn(int n) {
  for (int i = 0; i < n; ++i) {
    fibra::Pool p(2);
    auto r = call_within(bound, "map of pids", [&] { return p.map(pids, std::vector<int>(10, 0), {.chunksize = 1}); });
    std::printf("pool %d ok (%zu results)\n", i, r.size());
    std::fflush(stdout);
  }
  std::puts("PASS");
  return 0;
}

int orphan(const char* file, const char* how) {
  fibra::Pool p(2);
  {
    std::ofstream out(std::string(file) + ".tmp");
    auto r = call_within(bound, "map of pids before the driver dies",
                         [&] { return p.map(pids, std::vector<int>(8, 0), {.chunksize = 1}); });
    for (long v : r) out << v / 1'000'000 << "\n" << v % 1'000'000 << "\n";
  }
  std::rename((std::string(file) + ".tmp").c_str(), file);
  if (std::strcmp(how, "throw") == 0) throw std::runtime_error("the driver fails on purpose");
  if (std::strcmp(how, "sigkill") == 0) std::this_thread::sleep_for(std::chrono::seconds(100));
  return 0;
}

bool expect_config_error(int& argc, char**& argv, const std::string& want) {
  try {
    fibra::Runtime again(argc, argv);
    std::puts("FAIL: a second Runtime was created");
    return false;
  } catch (const fibra::ConfigError& e) {
    std::printf("got: %s\n", e.what());
    if (e.what() == want) return true;
    std::printf("FAIL: wrong message, want: %s\n", want.c_str());
    return false;
  }
}

// Registered only in the workers of build_mismatch (see main): another build of the program.
int only_on_workers(int x) { return x; }

int build_mismatch() {
  const std::size_t here = fibra::detail::registry_size();
  try {
    fibra::Pool p(1);
    std::puts("FAIL: a pool of workers of another build started");
    return 1;
  } catch (const fibra::ConfigError& e) {
    const std::string m = e.what();
    std::printf("got: %s\n", m.c_str());
    const std::string head = std::string("fibra: worker 1 on ") + fibra::Runtime::host() + " (pid ";
    const std::string tail = ") has " + std::to_string(here + 1) + " remote functions registered, this driver has " +
                             std::to_string(here) +
                             " or others: driver and workers must run the same build of the program";
    const bool ok = m.starts_with(head) && m.ends_with(tail) &&
                    m.find_first_not_of("0123456789", head.size()) == m.size() - tail.size();
    std::puts(ok ? "PASS" : "FAIL: wrong message");
    return ok ? 0 : 1;
  }
}

int second_runtime(int& argc, char**& argv) {
  {
    fibra::Runtime rt(argc, argv);  // in spawned workers this never returns
    fibra::Pool p(1);
    if (call_within(bound, "map of pids", [&] { return p.map(pids, std::vector<int>(4, 0)); }).size() != 4) return 1;
    if (!expect_config_error(argc, argv,
                             "fibra: a second fibra::Runtime was created while the first is alive; create one, first "
                             "thing in main, and keep it until main returns"))
      return 1;
  }  // MPI is finalized here
  if (!expect_config_error(argc, argv,
                           "fibra: a fibra::Runtime was created after an earlier one ended, and MPI cannot be started "
                           "twice in one process; create one Runtime, first thing in main, and keep it until main "
                           "returns (create Pools and drop them as often as needed while it lives)"))
    return 1;
  if (fibra::Runtime::active()) {
    std::puts("FAIL: Runtime::active() after the refused Runtime");
    return 1;
  }
  std::puts("PASS");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "two_ranks" && !std::getenv("OMPI_COMM_WORLD_SIZE")) {
    // Re-launch this program as two MPI ranks; both must fail with the clear message.
    std::string cmd =
        std::string(std::getenv("FIBRA_TEST_MPIEXEC")) + " -n 2 --oversubscribe " + argv[0] + " two_ranks 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    int rc = ::pclose(p);
    std::printf("%s\n", out.c_str());
    const char* want = "fibra: the driver was started as 2 MPI processes; start one (`./app` or `mpirun -n 1 ./app`)";
    bool ok = rc != 0 && out.find(want) != std::string::npos;
    std::puts(ok ? "PASS" : "FAIL: no clear error for two ranks");
    return ok ? 0 : 1;
  }
  if (mode == "two_ranks") {
    try {
      fibra::Runtime rt(argc, argv);
    } catch (const fibra::ConfigError& e) {
      std::printf("%s\n", e.what());
      return 3;
    }
    return 0;
  }
  if (mode == "second_runtime") return second_runtime(argc, argv);
  if (std::getenv("FIBRA_TEST_WORKER_EXTRA"))  // build_mismatch: the workers are another build
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], "--fibra-agent") == 0) fibra::detail::Remote<&only_on_workers>::add("only_on_workers");
  fibra::Runtime rt(argc, argv);
  if (mode == "too_few_slots") {
    // fibra refuses a spawn that does not fit in the slots before MPI_Comm_spawn fails (after which
    // mpirun would never exit): the program ends normally.
    return too_few_slots();
  }
  if (mode == "resize_no_slots") {
    int rc = resize_no_slots();
    std::fflush(nullptr);
    return rc;  // a normal exit: teardown after a failed spawn must not hang
  }
  if (mode == "lost_full_slots") {
    int rc = lost_full_slots();
    std::fflush(nullptr);
    return rc;
  }
  if (mode == "build_mismatch") return build_mismatch();
  if (mode == "churn" && argc == 3) return churn(std::atoi(argv[2]));
  if (mode == "orphan" && argc == 4) return orphan(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s too_few_slots | two_ranks | orphan <file> sigkill|throw|return\n", argv[0]);
  return 2;
}
