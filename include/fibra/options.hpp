// fibra/options.hpp: what can be set for a pool (PoolOptions, with the Initializer its workers
// run) and for one of its calls (MapOptions), and the failed items a call collects instead of
// throwing (ItemError).
#pragma once

#include <concepts>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fibra/detail/call_checks.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/resources.hpp"

namespace fibra {

namespace detail {
/// TaskOptions::timeout_s, the old spelling of TaskOptions::task_timeout_s, kept for one release:
/// code that sets it still compiles, warned to use the new one.
struct OldTaskTimeout {
  std::optional<double> value;
  OldTaskTimeout() = default;
  [[deprecated(
      "TaskOptions::timeout_s is now TaskOptions::task_timeout_s, as MapOptions and PoolOptions spell "
      "it")]] OldTaskTimeout(double seconds)
      : value(seconds) {}
};
}  // namespace detail

/// @brief A registered function and its arguments that each worker process of a pool runs once,
/// before its first task (multiprocessing.Pool's `initializer` and `initargs`):
/// PoolOptions::initializer. Function and arguments are checked when the program compiles, as
/// apply_async's are; what the function returns is dropped.
/// @code
///   void load_model(std::string path) { g_model = Model::load(path); }  // a global of the worker
///   FIBRA_REMOTE(load_model);
///   fibra::Pool pool(8, {.initializer = {load_model, std::string("model.bin")}});
/// @endcode
/// If it throws, that worker runs no task: each call given one fails with a RemoteError that names
/// the initializer and what it threw (docs/pool.md, "Initializer").
class Initializer {
 public:
  Initializer() = default;
  /// @throws ConfigError if `fn` is not registered with FIBRA_REMOTE.
  template <class R, class... P, class... Args>
  Initializer(R (*fn)(P...), Args&&... args)
      : fn_(&detail::function_by_address(reinterpret_cast<const void*>(fn), "PoolOptions::initializer")) {
    static_assert(sizeof...(P) == sizeof...(Args),
                  "fibra: PoolOptions::initializer got a different number of arguments than the function takes");
    static_assert(detail::check_signature<R, P...>());
    detail::Writer w(args_);
    if constexpr (sizeof...(P) == sizeof...(Args)) {
      static_assert((detail::check_item<Args, P>() && ...));
      // Laid out as apply_async lays out its arguments: the executor runs it as such a call.
      if constexpr (sizeof...(P) == 1) {
        mode_ = detail::CallMode::single;
        (detail::encode(w, static_cast<std::remove_cvref_t<P>>(std::forward<Args>(args))), ...);
      } else {
        detail::encode(w, std::tuple<std::remove_cvref_t<P>...>(std::forward<Args>(args)...));
      }
    }
  }
  // A lambda or a member function lands here, where a static_assert says so in fibra's words.
  template <class F, class... Args>
  requires detail::callable_object<F> Initializer(F&&, Args&&...) { detail::refuse_function<F, false>(); }

  /// @brief Whether a function was given.
  explicit operator bool() const noexcept { return fn_ != nullptr; }
  /// @brief Its function's registered name; empty when none was given.
  std::string name() const { return fn_ ? fn_->name : std::string(); }
  /// For the pool (src/driver/): the function, how its arguments are laid out, and their bytes.
  const detail::FunctionEntry* detail_entry() const noexcept { return fn_; }
  detail::CallMode detail_mode() const noexcept { return mode_; }
  const std::string& detail_args() const noexcept { return args_; }

 private:
  const detail::FunctionEntry* fn_ = nullptr;
  detail::CallMode mode_ = detail::CallMode::tuple;
  std::string args_;
};

// The old spelling's fields are deprecated; the structs that hold them are not warned about when
// they are made or copied (only code that names a field is).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
namespace detail {
/// PoolOptions::resources, the old spelling of PoolOptions::offers, kept for one release: code
/// that sets one of its fields still compiles (warned by GCC where it assigns one, by Clang in a
/// designated initializer too). What a call needs keeps the name `resources`
/// (MapOptions, TaskOptions, ActorOptions, ProcessOptions).
struct OldPoolResources {
  [[deprecated("PoolOptions::resources is now PoolOptions::offers (what each worker offers)")]] double cpus = 0;
  [[deprecated("PoolOptions::resources is now PoolOptions::offers (what each worker offers)")]] int gpus = 0;
  [[deprecated("PoolOptions::resources is now PoolOptions::offers (what each worker offers)")]] long memory_mb = 0;
  Resources value() const { return {cpus, gpus, memory_mb}; }
  bool set() const { return cpus != 0 || gpus != 0 || memory_mb != 0; }
  /// Read or assigned as a whole, as the Resources it was (not in a designated initializer: `{.resources
  /// = r}` must become `{.offers = r}`; an aggregate cannot take a Resources there and stay one).
  [[deprecated("PoolOptions::resources is now PoolOptions::offers (what each worker offers)")]] operator Resources()
      const {
    return value();
  }
  // (A template, so that `= {2, 1, 512}` still means the implicit assignment rather than being ambiguous.)
  template <class R>
  requires std::same_as<R, Resources>
  [[deprecated("PoolOptions::resources is now PoolOptions::offers (what each worker offers)")]] OldPoolResources&
  operator=(const R& r) {
    cpus = r.cpus;
    gpus = r.gpus;
    memory_mb = r.memory_mb;
    return *this;
  }
};
}  // namespace detail

/// @brief Settings of a pool, fixed when it starts. See docs/fault-tolerance.md.
struct PoolOptions {
  double heartbeat_s = 1.0;       ///< each side says it is alive after this much silence
  double worker_silence_s = 10;   ///< a worker silent this long is declared lost; its work runs elsewhere
  double driver_silence_s = 30;   ///< workers exit when the driver is silent this long (orphan guard)
  double start_timeout_s = 60;    ///< Pool() and resize() give up on workers not started by then
  unsigned retries = 3;           ///< default MapOptions::retries (also for apply_async)
  bool retry_exceptions = false;  ///< default MapOptions::retry_exceptions (also for apply_async)
  double task_timeout_s = 0;      ///< default MapOptions::task_timeout_s (also for apply_async); 0: none
  /// Workers run as executors (plain processes) under agents (MPI processes, one MPI_Comm_spawn
  /// each, about 0.3 s apiece here): this many workers per agent. 0: automatic, the workers spread
  /// evenly over at most 4 agents (a pool of 4 or fewer has one agent per worker). A lost agent
  /// costs the chunks of all its workers, as a lost node would; a crashed worker only its own.
  int workers_per_agent = 0;
  /// Freed memory each worker keeps for its next task, in MiB: a task that takes a large buffer
  /// each time (a 64 MiB vector) then finds it warm instead of faulting it in again. When more
  /// than this came free since the last give-back, it goes back to the system at the next look
  /// (once a second); all of it once the worker turns idle (2-3 s without a batch). 0: the C
  /// library's default (blocks of 32 MiB or more go back at once). At most 1048576 (1 TiB).
  /// Workers are fibra's own processes; the driver is yours: see driver_keep_freed_mib.
  /// docs/architecture.md, "Freed memory kept".
  std::size_t keep_freed_mib = 256;
  /// The same for the driver, your own process, and what your code frees there (the result
  /// vector of the last call): off by default (0), since it changes the allocator of your process
  /// for its whole life (docs/architecture.md, "Freed memory kept", says how). The first pool
  /// with a value above 0 turns it on for the process; later pools change nothing. Large results
  /// come back faster with it (64 MiB: docs/benchmarks.md). At most 1048576.
  std::size_t driver_keep_freed_mib = 0;
  /// A task's result (submit, apply_async) that encodes to at least this many bytes, made by a
  /// worker on the driver's host, stays in shared memory there: a task given its Future reads it
  /// where it lies, and `get()` maps it, instead of its bytes passing through the driver and being
  /// encoded again for each task that takes it. 0: never. docs/tasks.md, "Results kept where they
  /// were made".
  std::size_t keep_results_from = std::size_t(1) << 20;
  /// Processes for actors and fibra::Process that each agent keeps started ahead of need, from
  /// the first actor it runs on: the next one then starts without waiting for its process to be
  /// made, loaded and set up (about a third of the time, docs/processes-and-queues.md has the
  /// figures). Each is an idle process of your program. 0: none. At most 64. docs/actors.md,
  /// "Processes started ahead".
  int spare_processes = 1;
  /// What each worker offers; a field left at 0 comes from the allocation (SLURM_CPUS_PER_TASK,
  /// SLURM_GPUS_PER_TASK, SLURM_MEM_PER_CPU or SLURM_MEM_PER_NODE), else 1 CPU, the visible GPUs
  /// shared out (at least 1 each while they last), and memory not counted. docs/resources.md.
  Resources offers;
  /// Deprecated: offers, used when that one is all 0. In the place it had, so that
  /// `{.resources = {.gpus = 1}, .gpu_ids = {"0"}}` still compiles.
  detail::OldPoolResources resources;
  /// GPU ids shared out among the workers (each sees its own as CUDA_VISIBLE_DEVICES); empty: the
  /// driver's CUDA_VISIBLE_DEVICES, else Slurm's SLURM_STEP_GPUS or SLURM_JOB_GPUS, else none.
  std::vector<std::string> gpu_ids;
  /// Where agents go. "spread": one after another over `hosts` (agent k on host k mod n, or the
  /// next host with room), which default to the nodes of a Slurm allocation of several nodes;
  /// "pack": each host filled (up to its slots) before the next; "none": where MPI puts them.
  std::string placement = "spread";
  /// The hosts to place agents on, as "name" or "name:slots": its slots as Slurm's tasks there,
  /// the driver included on its own host. "spread" counts MPI processes (the driver and agents)
  /// against them, "pack" workers (a task is a CPU); without slots, a host takes as many as asked.
  /// Empty: the allocation's nodes (SLURM_JOB_NODELIST) with their tasks (SLURM_TASKS_PER_NODE)
  /// as slots, else MPI's choice.
  std::vector<std::string> hosts;
  /// A registered function and its arguments that each worker process runs once before its first
  /// task, and again in each process that replaces one (after a crash, or max_tasks_per_child):
  /// `{.initializer = {load_model, path}}`. Its arguments encode to at most 32 KiB. Empty: none.
  Initializer initializer;
  /// A worker process is replaced by a new one (which runs the initializer) after it ran this many
  /// tasks: a chunk of a map counts as one, as in Python, and so does an apply_async or a submit.
  /// Its queued work goes to the next process, not lost, not run twice. For leaky task code.
  /// 0: never (Python's None).
  unsigned max_tasks_per_child = 0;
  /// A folder for the run's event log (`events.jsonl`): every chunk's queued, sent, run and done
  /// times with its worker, executor and attempt; workers that start and are lost; failed
  /// attempts and retries. Empty: FIBRA_EVENTS, else no log. `fibra trace` turns it into a
  /// timeline. docs/observability.md.
  std::string events;
  /// The live page's address, "host:port" or "port" (127.0.0.1 then; port 0: a free one): the
  /// driver serves the run's state, its report's views and /metrics there, to requests that bring
  /// the token in the event log's folder (`dashboard.token`), whose address is in `dashboard.url`.
  /// Needs the event log (events). Empty: FIBRA_DASHBOARD, else none. docs/observability.md.
  std::string dashboard;
  /// Stored objects that agents on other hosts copy from each other travel encrypted
  /// (XChaCha20-Poly1305), not only authenticated: for data that others on the network must not
  /// read. Costs a pass over the bytes on each side (docs/security.md has the figures).
  bool encrypt_objects = false;
};
#pragma GCC diagnostic pop

/// @brief How Pool::adapt grows a pool with Slurm worker jobs that join it, and shrinks it
/// (docs/elastic.md).
struct AdaptOptions {
  int workers_per_job = 1;  ///< workers each worker job runs (it asks for their CPUs: PoolOptions::offers.cpus each)
  std::string time = "01:00:00";         ///< each worker job's time limit (sbatch --time)
  std::string partition;                 ///< sbatch --partition; empty: the cluster's default
  std::vector<std::string> sbatch_args;  ///< more sbatch options, each as one word ("--mem=4G")
  int backlog = 1;                       ///< worker jobs submitted and not yet joined, at most
  double idle_timeout_s = 60;            ///< a joined worker idle this long leaves (never below the minimum)
  double submit_gap_s = 2;               ///< at least this long between two submissions
  int failed_submits = 3;                ///< failed worker jobs in a row after which submission pauses
  /// A joined worker leaves this long before its Slurm job's time limit (it takes no new work, and
  /// ends once what it runs is done), so that no chunk is cut by the limit.
  double drain_before_s = 60;
};

/// @brief Settings of one task (Pool::submit, fibra::submit), over the pool's defaults.
/// @code
///   auto f = fibra::submit(fibra::TaskOptions{.retries = 0, .task_timeout_s = 30, .name = "rollout 7"}, rollout,
///   seed);
/// @endcode
struct TaskOptions {
  std::optional<unsigned> retries;       ///< failed attempts tried again; default PoolOptions::retries
  std::optional<bool> retry_exceptions;  ///< a task that throws is tried again too; default PoolOptions's
  /// Deprecated: task_timeout_s, used when that one is not set. In the place it had, so that
  /// `{.retries = 0, .timeout_s = 5, .name = "probe"}` still compiles (with a warning).
  detail::OldTaskTimeout timeout_s;
  std::optional<double>
      task_timeout_s;   ///< its run is ended after this long (TaskTimeout); 0: none; default PoolOptions's
  std::string name;     ///< what errors and the progress line call it; default its function's name
  Resources resources;  ///< what a worker must offer to run it (docs/resources.md)
};

/// @brief One item that failed in a call that collects errors (MapOptions::errors).
struct ItemError {
  std::size_t index = 0;     ///< the item's position in the input
  std::exception_ptr error;  ///< RemoteError, ExecutorCrashed, TaskTimeout or WorkerLost
  std::string message;       ///< the error's what()
};

/// @brief Settings of one map/imap/starmap call.
struct MapOptions {
  std::size_t chunksize = 0;            ///< items per chunk; 0: automatic (see docs/pool.md)
  std::optional<bool> progress;         ///< progress on stderr; default: on when stderr is a terminal
  std::size_t max_inflight_chunks = 0;  ///< chunks queued or running at once; 0: 4 per worker (min 8)
  /// Failed attempts of a chunk (crash, time limit, lost worker; exceptions if retry_exceptions)
  /// that are run again before the call fails. Default: PoolOptions::retries (3).
  std::optional<unsigned> retries;
  /// Run a chunk again when one of its items throws (default: no; exceptions are usually
  /// deterministic).
  std::optional<bool> retry_exceptions;
  /// Seconds one item may run before its executor is killed and the attempt counts as failed
  /// (TaskTimeout). Default: PoolOptions::task_timeout_s; 0: no limit.
  std::optional<double> task_timeout_s;
  /// When set, the call does not throw for failed items: it runs every item, puts R{} in the place
  /// of each failed one and appends an ItemError for it here (map: sorted by index; imap: as they
  /// come). Errors that stop the whole pool (PoolClosed) still throw.
  std::vector<ItemError>* errors = nullptr;
  /// A checkpoint file (HDF5) for this call; empty: none. Completed results are written to it as
  /// they arrive; a rerun with the same function and inputs loads them, runs only the rest and
  /// returns the same results. Another run's file is refused with CheckpointError. While a
  /// checkpoint is open, SIGTERM/SIGUSR1 make the driver flush and exit with status 75.
  /// Needs a sized input range. See docs/pool.md, "Checkpoints".
  std::string checkpoint;
  /// Results that arrived are flushed to the checkpoint at most this many seconds later; a SIGKILL
  /// of the driver loses at most these.
  double checkpoint_flush_s = 1.0;
  /// What each chunk needs of a worker: it runs only on workers that offer as much. A request no
  /// worker of the pool can meet throws ConfigError at once. Default: nothing in particular.
  Resources resources;
};

}  // namespace fibra
