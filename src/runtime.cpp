// fibra::Runtime: decides what this process is (driver, agent, executor) and sets MPI up for it.
#include "fibra/runtime.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fibra/detail/checkpoint.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"
#include "common/log.hpp"
#include "transport/mpi.hpp"
#include "agent/agent.hpp"
#include "calls/calls.hpp"
#include "common/process.hpp"
#include "driver/driver.hpp"
#include "driver/joins.hpp"
#include "driver/run_secret.hpp"
#include "executor/executor.hpp"
#include "roles.hpp"
#include "common/env.hpp"

namespace fibra {
namespace {

std::atomic<bool> g_active{false};
std::unique_ptr<detail::JoinListener> g_joins;  // FIBRA_JOIN_FILE: the driver hears workers that join

// Open MPI settings fault handling needs (see docs/architecture.md). Set only where the user has
// not set them; they reach the singleton's own runtime and every process it spawns.
void default_env(const char* name, const char* value) { ::setenv(name, value, 0); }

// Open MPI 4.1 with Debian's PMIx 4.2 can hang in MPI_Comm_spawn for good, about once in 25-60
// spawns: the PMIx server closes a finished child's socket without removing it from libevent's
// epoll set, and a new child given the same fd number is never read. libevent's poll backend keeps
// no such state; EVENT_NOEPOLL=1 selects it (0 hangs in 1,500 spawns, no measurable cost). It must
// be in the environment of the process that hosts the PMIx server: the singleton's orted, forked
// inside MPI_Init (so setting it here works for ./app), or mpirun itself (so it has to be set
// before mpirun starts; see launched_without_noepoll).
constexpr const char* noepoll = "EVENT_NOEPOLL";

// True when this driver was started by mpirun (or another launcher) whose environment lacked
// EVENT_NOEPOLL: too late to fix from here, so the user is told.
bool launched_without_noepoll() { return std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv(noepoll); }

void apply_open_mpi_defaults() {
  default_env(noepoll, "1");
  default_env("OMPI_MCA_orte_enable_recovery", "1");  // a dead worker does not end the job
  default_env("OMPI_MCA_orte_abort_on_non_zero_status", "0");
  if (detail::oversubscribe_allowed()) default_env("OMPI_MCA_rmaps_base_oversubscribe", "1");  // ./app can spawn
  if (::geteuid() == 0) {  // containers and CI often run as root
    default_env("OMPI_ALLOW_RUN_AS_ROOT", "1");
    default_env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
}

// How long an agent spawned with others may wait in MPI_Finalize for them (become_agent): longer
// than an agent takes to stop (its executors, its last sends: up to 5 s each).
constexpr double finalize_bound_s = 15;

// An agent's life once it has its communicator with the driver (spawned: its parent; joined:
// what MPI_Comm_connect gave it), to its end.
[[noreturn]] void run_agent(MPI_Comm parent, bool joined);

[[noreturn]] void become_agent(int& argc, char**& argv) {
  default_env(noepoll, "1");  // its PMIx client's event loop too
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) std::_Exit(2);
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent == MPI_COMM_NULL) {
    log::error("fibra: {} is only for processes that fibra spawns itself", detail::agent_flag);
    std::_Exit(2);
  }
  run_agent(parent, false);
}

void run_agent(MPI_Comm parent, bool joined) {
  MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // a failed disconnect must not abort the job
  bool retired = false;
  int rc = detail::agent_main(parent, retired);
  if (rc == 0) {
    // Local: with Open MPI 4.1 neither side waits for the other (a disconnect, collective, could
    // wait for a driver that is gone), and MPI_Finalize ends this job alone.
    MPI_Comm_free(&parent);
    // ... unless its job has other agents (spawned together, which the driver does only with
    // Open MPI's recovery on: mpi::recovery_enabled): MPI_Finalize waits for every process of the
    // job (measured: 4 s, until the others finalized), so one retired before them ends without
    // it, and with recovery on the rest of its job runs on.
    // And a job-mate that dies while the others are in MPI_Finalize can hold them there for good
    // (seen under mpirun --enable-recovery: an agent SIGKILLed as its pool ended left two others
    // polling in MPI_Finalize, and mpirun waiting for them): after finalize_bound_s it ends
    // without it, as a retired one does. So does one that joined (src/agent/join.cpp), whose
    // MPI_Finalize might wait for a driver it connected to.
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (!(retired && world > 1)) {
      if (world > 1 || joined)
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::duration<double>(finalize_bound_s));
          std::fflush(nullptr);
          std::_Exit(0);
        }).detach();
      MPI_Finalize();
    }
  }
  std::fflush(nullptr);
  std::_Exit(rc);  // the agent never runs the user's main past this point
}

// The driver's part of a stop on SIGTERM/SIGUSR1 (src/calls/calls.hpp), as ~Runtime ends a run:
// every pool stopped, the checkpoints folded, the join listener closed, and MPI finalized unless
// an agent was lost on another host (Open MPI 4.1 may hang or abort in it then) or the listener
// could not stop.
void stop_teardown() noexcept {
  detail::stop_all_pools();
  detail::wait_for_checkpoints();
  const bool joins_clean = !g_joins || g_joins->close();
  detail::remove_run_secret();
  // Under the MPI lock: a Pool() still spawning on the user's thread is not among the pools just
  // stopped, and must not have MPI finalized under it (exit_for_stop's own timer bounds the wait).
  std::lock_guard ml(mpi::lock());
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin && joins_clean && !detail::remote_host_lost() && detail::lost_joined_hosts().empty()) MPI_Finalize();
}

}  // namespace

Runtime::Runtime(int& argc, char**& argv) {
  bool malformed = false;
  if (const auto e = detail::ExecutorArgs::parse(argc, argv, malformed))
    detail::executor_main(e->socket_fd, e->region_fd, static_cast<pid_t>(e->parent_pid));
  if (malformed) {
    log::error("fibra: {} is only for processes that fibra starts itself (<socket fd> <region fd> <agent pid>)",
               detail::executor_flag);
    std::_Exit(2);
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], detail::agent_flag) == 0) become_agent(argc, argv);
    if (std::strcmp(argv[i], detail::join_standin_flag) == 0 && i + 1 < argc) {
      const std::string port = argv[i + 1];
      detail::stand_in_for_joiner(argc, argv, port.c_str());
    }
    if (std::strcmp(argv[i], detail::join_flag) == 0) {
      if (i + 1 >= argc) {
        log::error("fibra: {} needs the driver's join file: ./app {} <file>", detail::join_flag, detail::join_flag);
        std::_Exit(2);
      }
      const std::string file = argv[i + 1];
      run_agent(detail::join_driver(argc, argv, file.c_str()), true);
    }
  }

  detail::set_stop_teardown(&stop_teardown);  // (this process is the driver from here on)
  detail::set_pool_event_sink_finder(&detail::driver_event_sink);
  detail::ChannelStore::instance().set_totals_sink(&detail::note_channel_totals);
  if (g_active.exchange(true))
    throw ConfigError(
        "fibra: a second fibra::Runtime was created while the first is alive; create one, first thing "
        "in main, and keep it until main returns");
  // MPI cannot be initialised again once finalized (Open MPI aborts the process): say so instead.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    g_active = false;
    throw ConfigError(
        "fibra: a fibra::Runtime was created after an earlier one ended, and MPI cannot be started "
        "twice in one process; create one Runtime, first thing in main, and keep it until main returns "
        "(create Pools and drop them as often as needed while it lives)");
  }
  try {
    detail::check_registry();
    if (launched_without_noepoll()) {
      log::warning(
          "fibra: warning: mpirun was started without EVENT_NOEPOLL=1 in its environment; with Open MPI 4.1 "
          "and PMIx 4, MPI_Comm_spawn then hangs now and then (a PMIx bug, see docs/architecture.md). "
          "Start it as `EVENT_NOEPOLL=1 mpirun ...` (fibra slurm scripts do)");
    }
    mpi::note_recovery();  // before the defaults: under mpirun, only mpirun's own settings count
    apply_open_mpi_defaults();
    // FIBRA_JOIN_FILE: workers started apart may join (src/driver/joins.hpp); its accept runs on a
    // thread of its own, so MPI must allow calls from two threads at once.
    g_joins = detail::JoinListener::prepare();
    const int level = g_joins ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    int provided = 0;
    mpi::check(MPI_Init_thread(&argc, &argv, level, &provided), "MPI_Init_thread");
    mpi::check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi::check(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    if (provided < MPI_THREAD_SERIALIZED)
      throw MpiError("fibra: this MPI library does not support MPI_THREAD_SERIALIZED, which fibra needs");
    if (provided < level)
      throw MpiError("fibra: this MPI library does not support MPI_THREAD_MULTIPLE, which FIBRA_JOIN_FILE needs");
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 1) {
      throw ConfigError("fibra: the driver was started as " + std::to_string(size) +
                        " MPI processes; start one (`./app` or `mpirun -n 1 ./app`): fibra spawns its workers itself");
    }
    ::signal(SIGPIPE, SIG_IGN);  // a send to a dead peer must not kill the driver
    // A program started with a checkpoint (FIBRA_CHECKPOINT, as `fibra slurm` scripts do) handles
    // SIGTERM/SIGUSR1 from the start: a warning during start-up or a resume still ends in status 75.
    if (const char* ckpt = detail::env::raw("FIBRA_CHECKPOINT"); ckpt && *ckpt) detail::checkpoint_opened();
    if (g_joins) g_joins->open();
  } catch (...) {
    const bool joins_clean = !g_joins || g_joins->close();
    int init = 0;
    MPI_Initialized(&init);
    if (init && joins_clean) MPI_Finalize();
    g_joins.reset();  // its name server, after MPI_Finalize
    g_active = false;
    throw;
  }
}

Runtime::~Runtime() {
  detail::drop_default_pool();
  detail::stop_all_pools();
  detail::stop_async_calls();  // their calls fail with PoolClosed now, and their callbacks run
  detail::stop_task_thread();
  detail::wait_for_checkpoints();  // checkpoints of finished calls still being folded into their .h5
  const bool joins_clean = !g_joins || g_joins->close();
  detail::remove_run_secret();  // (its agents have read it; a worker that joins reads the join file)
  // After an agent on another host was lost, Open MPI 4.1's MPI_Finalize can hang for good (a node
  // cut off) or abort the process (a node dead), measured on the virtual cluster: every result is
  // delivered by now, so the driver leaves without it and ends with its own exit status.
  std::string lost = detail::lost_remote_hosts();
  if (const std::string joined = detail::lost_joined_hosts(); !joined.empty())
    lost += (lost.empty() ? "" : ", ") + joined + " (joined)";
  if (!lost.empty()) {
    log::warning(
        "fibra: not calling MPI_Finalize: agents on {} were lost, and Open MPI 4.1 may hang or abort in it "
        "after that; every result was delivered",
        lost);
    std::fflush(nullptr);
  } else if (joins_clean) {
    MPI_Finalize();
  }
  g_joins.reset();  // its name server, after MPI_Finalize
  g_active = false;
}

bool Runtime::active() noexcept { return g_active.load(); }

const char* Runtime::host() noexcept {
  static const std::string h = detail::host_name();
  return h.c_str();
}

}  // namespace fibra
