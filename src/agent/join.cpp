// src/agent/join.cpp: the joiner's side of transport/join.hpp, in a worker started apart
// (`./app --fibra-join <file>`, or the same under mpirun or srun): it then runs as an agent of the
// driver like a spawned one.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "common/command.hpp"
#include "common/log.hpp"
#include "common/process.hpp"
#include "common/slurm_time.hpp"
#include "fibra/detail/registry.hpp"
#include "transport/auth.hpp"
#include "transport/join.hpp"
#include "transport/mpi.hpp"
#include "transport/tcp.hpp"
#include "transport/wire.hpp"
#include "common/env.hpp"

namespace fibra::detail {

namespace {

constexpr int connect_ms = 3'000;       // per address of the driver's hello
constexpr int join_tries = 20;          // connections turned away by the listener's door (about 35 s)
constexpr int answer_ms = 120'000;      // the driver answers within its wait for a pool (60 s), and more
constexpr double default_wait_s = 60;   // for the join file to appear (FIBRA_JOIN_WAIT_S)
constexpr double connect_bound_s = 60;  // MPI_Comm_connect, once the driver said go
constexpr double standin_bound_s = 30;  // a stand-in's connect, bye and disconnect
constexpr double squeue_bound_s = 30;   // squeue, for the time its job has left (else: not known)

[[noreturn]] void fail(const std::string& why) {
  log::error("fibra: this worker cannot join the driver: {}", why);
  std::fflush(nullptr);
  std::_Exit(2);
}

// A FIBRA_* number, or the reason it is not one, as this worker's last words.
double number_or_fail(env::Name name, double unset, double least, double most, bool whole) {
  try {
    return env::number(name, unset, least, most, whole);
  } catch (const ConfigError& e) {
    fail(e.what());
  }
}

// Workers it offers: FIBRA_JOIN_WORKERS, else the CPUs it may use shared by the ranks of its launch
// on this node.
int executors_offered() {
  if (const int n = static_cast<int>(number_or_fail("FIBRA_JOIN_WORKERS", 0, 1, 4096, true))) return n;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks = local ? std::max(1, std::atoi(local)) : 1;
  return std::max(1, cpus / ranks);
}

// How long its Slurm job has left, if it runs in one (the driver lets it go before that).
double slurm_time_left_s() {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (!job || !*job) return 0;
  std::string error;
  const CommandOutput r = run_command({"squeue", "-h", "-j", job, "-o", "%L"}, {}, error, squeue_bound_s);
  if (!error.empty() || r.status != 0) return 0;
  std::string text = r.out;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return std::max(0.0, slurm_time_s(text));  // squeue's %L: 0 for "UNLIMITED" and the like
}

std::string origin() {
  if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) return std::string("Slurm job ") + job;
  if (std::getenv("OMPI_COMM_WORLD_SIZE"))
    return std::string("mpirun, rank ") + std::getenv("OMPI_COMM_WORLD_RANK") + " of " +
           std::getenv("OMPI_COMM_WORLD_SIZE");
  return "a launch of its own";
}

}  // namespace

std::optional<auth::Secret>& joined_secret() {
  static std::optional<auth::Secret> secret;
  return secret;
}

MPI_Comm join_driver(int& argc, char**& argv, const char* file) {
  // Its variables first: a typo is said at once, not after waiting for the join file.
  const double wait_s = number_or_fail("FIBRA_JOIN_WAIT_S", default_wait_s, 0.001, 1e9, false);
  const auto pool = static_cast<std::uint64_t>(number_or_fail("FIBRA_JOIN_POOL", 0, 0, 1e15, true));
  const int executors = executors_offered();
  join::Address a;
  try {
    a = join::read_file(file, wait_s);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  if (a.fingerprint != registry_fingerprint())
    fail(
        "it is another build of the program than the driver's (its remote functions differ): start workers from "
        "the driver's binary");
  // Open MPI's name server: mpirun's own (--ompi-server), or, for a process without mpirun, the
  // driver's, which MPI_Init reads from the environment.
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    const char* given = std::getenv("OMPI_MCA_pmix_server_uri");
    if (!given || !*given)
      fail(
          "under mpirun it needs the driver's name server, which only mpirun can be given: run `mpirun "
          "--ompi-server file:" +
          a.server_file + " ... ./app --fibra-join " + file + "`, or start it without mpirun");
  } else {
    ::setenv("OMPI_MCA_pmix_server_uri", a.server_uri.c_str(), 1);
  }
  // Its hello, before MPI starts (squeue is a child process: none is forked once MPI runs).
  wire::JoinHello hello;
  hello.fingerprint = registry_fingerprint();
  hello.functions = registry_size();
  hello.pid = ::getpid();
  hello.host = host_name();
  hello.executors = executors;
  hello.origin = origin();
  hello.time_left_s = slurm_time_left_s();
  hello.pool = pool;
  if (const char* n = std::getenv("OMPI_COMM_WORLD_SIZE"); n && *n) hello.ranks = std::max(1, std::atoi(n));
  ::setenv("EVENT_NOEPOLL", "1", 0);  // as every fibra process (src/runtime.cpp)
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) fail("MPI_Init_thread failed");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

  // The listener's door may be full (many workers joining at once, or a flood): a connection it
  // turned away is tried again, for up to join_tries.
  UniqueFd s;
  std::unique_ptr<auth::Session> session;
  std::string why;
  for (int attempt = 1; !session; ++attempt) {
    std::string tried;
    for (const auto& h : a.hello) {
      s = tcp::connect_to(h.host, h.port, connect_ms, why);
      if (s) break;
      tried += (tried.empty() ? "" : "; ") + why;
    }
    if (!s)
      fail("the driver does not answer at the addresses " + std::string(file) + " names (" + tried +
           "): it has ended, or this node cannot reach it");
    bool turned_away = false;
    session =
        auth::Session::connect(s.get(), *a.secret, wire::AuthRole::join, 0, auth::handshake_ms, why, &turned_away);
    if (session) break;
    if (!turned_away)
      fail("the driver's join listener and this worker do not share the join file's secret (" + why +
           "): the file may be an earlier run's; use the one the driver's FIBRA_JOIN_FILE names now");
    if (attempt == join_tries)
      fail("the driver's join listener turned it away " + std::to_string(join_tries) + " times (" + why + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(250 * std::min(attempt, 8)));
  }
  joined_secret() = *a.secret;  // its object server's and fetches' (AgentSetup::secret_file may not be readable here)
  if (!session->send(wire::encode(hello))) fail("the driver closed the connection before the hello");
  const auto reply = session->receive(answer_ms, wire::max_join_message);
  if (!reply)
    fail("no answer from the driver to its hello within " + std::to_string(answer_ms / 1000) +
         " s: it may be stuck in an earlier worker's join (its log says)");
  const auto answer = wire::decode<wire::JoinAnswer>(*reply);
  if (!answer.go) fail("the driver refused it: " + answer.why);
  // A connect that does not return (the driver died after its answer) ends this worker, bounded.
  static std::atomic<bool> connected{false};  // (static: the thread may outlive this call)
  std::thread([] {
    for (int i = 0; i < static_cast<int>(connect_bound_s * 10) && !connected; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!connected) fail("MPI_Comm_connect to the driver did not return within 60 s: the driver has ended?");
  }).detach();
  MPI_Comm inter = MPI_COMM_NULL;
  const int rc = MPI_Comm_connect(answer.port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
  connected = true;
  if (rc != MPI_SUCCESS) fail("MPI_Comm_connect to the driver's port failed: " + mpi::error_text(rc));
  // The hello's connection stays open while this process lives: the driver takes its end for a
  // joiner that left before it connected (src/driver/joins.cpp).
  (void)s.release();
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  return inter;
}

void stand_in_for_joiner(int& argc, char**& argv, const char* port) {
  static std::atomic<bool> done{false};
  std::thread([] {
    for (int i = 0; i < static_cast<int>(standin_bound_s * 10) && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (done) return;
    log::error("fibra: the join stand-in did not connect to the driver and leave within {} s", standin_bound_s);
    std::fflush(nullptr);
    std::_Exit(3);
  }).detach();
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) std::_Exit(3);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Comm inter = MPI_COMM_NULL;
  if (MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter) != MPI_SUCCESS) std::_Exit(3);
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  if (MPI_Send(nullptr, 0, MPI_BYTE, 0, wire::tag_bye, inter) != MPI_SUCCESS) std::_Exit(3);
  MPI_Comm_disconnect(&inter);
  MPI_Finalize();
  done = true;
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace fibra::detail
