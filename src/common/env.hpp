// src/common/env.hpp: every FIBRA_* environment variable fibra reads, declared once (name, kind,
// what it does when unset, one line of meaning), and read only through the functions below: a name
// that is not declared here does not compile, and nothing else calls getenv for them (checked by
// layout.env_in_one_place). docs/getting-started.md#environment lists the same variables (checked
// by Env.TheDocsListEveryVariable).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fibra::detail::env {

struct Variable {
  std::string_view name;
  std::string_view kind;   ///< "on/off", "number", "seconds", "path", "text"
  std::string_view unset;  ///< what fibra does when it is unset
  std::string_view meaning;
  bool set_by_fibra;  ///< fibra sets it for its own processes (or its rendered scripts do)
};

// clang-format off
inline constexpr Variable variables[] = {
  {"FIBRA_PROGRESS", "on/off", "on when stderr is a terminal", "the progress line on stderr (`0` or empty: off); MapOptions::progress overrides it", false},
  {"FIBRA_LANES", "on/off", "on", "`0`: every batch goes through MPI and the worker's agent, also to workers on the driver's host (for comparison and diagnosis)", false},
  {"FIBRA_OVERSUBSCRIBE", "on/off", "on, unless SLURM_JOB_ID, PBS_JOBID or LSB_JOBID is set", "whether spawned workers may outnumber MPI's slots", false},
  {"FIBRA_OUTPUT_PREFIX", "on/off", "on when the driver's stdout is a terminal", "lines that tasks print start with `(worker 3 pid 1234) `", false},
  {"FIBRA_PEER_OBJECTS", "on/off", "on", "`0`: agents never copy stored objects from each other, only from the driver (a firewall that lets only MPI through)", false},
  {"FIBRA_WORKERS", "number", "one worker per core", "workers of the default pool (fibra::submit without a pool)", false},
  {"FIBRA_LOG_LEVEL", "text", "info", "the least level of fibra's own log lines: debug, info, warning, error or off", false},
  {"FIBRA_EVENTS", "path", "no event log", "a folder for the run's event log (`events.jsonl`), for pools whose PoolOptions::events is empty", false},
  {"FIBRA_DASHBOARD", "text", "no live page", "the live page's address (`host:port`, or a port on 127.0.0.1; 0: a free one), for pools whose PoolOptions::dashboard is empty; needs the event log", false},
  {"FIBRA_TRACE", "path", "off", "a folder where every process appends its data-path trace (`trace.<pid>`)", false},
  {"FIBRA_RL_TORCH_MODULE", "path", "the build tree's module, then the installed one", "fibra::rl's learner module (libfibra_rl_torch.so), looked for only there when set", false},
  {"FIBRA_CHECKPOINT", "path", "none", "the job's checkpoint (set by `fibra slurm` scripts): SIGTERM and SIGUSR1 are handled from the start", true},
  {"FIBRA_LISTEN", "text", "the address this host's name resolves to, else its first interface", "where fibra's own listeners (joins, object servers) listen and what peers are given: an address, an interface's name, or `any` (every address)", false},
  {"FIBRA_SECRET_DIR", "path", "`~/.fibra/secrets`", "a folder of yours alone (0700) where a driver keeps its run's secret file (docs/security.md); its agents on other nodes read it there", false},
  {"FIBRA_JOIN_FILE", "path", "no joins", "the driver writes there how workers started apart join it; a worker started with `--fibra-join` reads it", false},
  {"FIBRA_JOIN_WORKERS", "number", "the CPUs it may use, shared by its launch's ranks on the node", "executors a joining worker offers (1 to 4096)", false},
  {"FIBRA_JOIN_WAIT_S", "seconds", "60", "how long a joining worker waits for the join file to appear", false},
  {"FIBRA_JOIN_POOL", "number", "any pool that takes it", "the id of the driver's pool a joining worker joins", false},
  {"FIBRA_LOST_HOSTS_FILE", "path", "none", "the driver appends there the hosts whose agents it lost (set by `fibra slurm` scripts, which relaunch on the nodes left)", true},
  {"FIBRA_ELASTIC_MAX_JOBS", "number", "no elastic pool", "the job spec's [elastic]: most worker jobs the first pool adds (set by `fibra slurm` scripts, as are the ten below)", true},
  {"FIBRA_ELASTIC_MIN_JOBS", "number", "0", "the job spec's [elastic]: fewest worker jobs", true},
  {"FIBRA_ELASTIC_WORKERS_PER_JOB", "number", "AdaptOptions' default", "the job spec's [elastic]: workers in each worker job", true},
  {"FIBRA_ELASTIC_TIME", "text", "AdaptOptions' default", "the job spec's [elastic]: a worker job's time limit", true},
  {"FIBRA_ELASTIC_PARTITION", "text", "the cluster's default", "the job spec's [elastic]: the worker jobs' partition", true},
  {"FIBRA_ELASTIC_BACKLOG", "number", "AdaptOptions' default", "the job spec's [elastic]: queued work per worker that asks for another job", true},
  {"FIBRA_ELASTIC_IDLE_TIMEOUT_S", "seconds", "AdaptOptions' default", "the job spec's [elastic]: idle time after which a worker job is let go", true},
  {"FIBRA_ELASTIC_SUBMIT_GAP_S", "seconds", "AdaptOptions' default", "the job spec's [elastic]: least time between two submissions", true},
  {"FIBRA_ELASTIC_DRAIN_BEFORE_S", "seconds", "AdaptOptions' default", "the job spec's [elastic]: a worker job is drained this long before its time limit", true},
  {"FIBRA_ELASTIC_SBATCH_ARGS", "text", "none", "the job spec's [elastic]: more sbatch arguments for worker jobs", true},
  {"FIBRA_ELASTIC_JOB_NAME", "text", "`fibra-worker-pid<pid>`", "the worker jobs' name, by which the batch script cancels them at its end", true},
  {"FIBRA_POOL_POLICY", "text", "PoolOptions' defaults", "an executor's pool defaults (retries, time limit), set by its agent", true},
  {"FIBRA_KEEP_FREED", "number", "PoolOptions::keep_freed_mib", "bytes of freed memory an executor keeps for reuse, set by its agent", true},
  {"FIBRA_INITIALIZER", "text", "none", "the pool's initializer (PoolOptions::initializer) an executor runs before its first task, set by its agent", true},
  {"FIBRA_MAX_TASKS", "number", "0 (no limit)", "tasks after which an executor ends and is replaced (PoolOptions::max_tasks_per_child), set by its agent", true},
  {"FIBRA_DRIVER_HOST", "on/off", "off", "an executor runs on the driver's host (its stored objects stay in its memory), set by its agent", true},
  {"FIBRA_OBJECTS_AS_REMOTE", "on/off", "off", "agents on the driver's host serve and copy objects as agents on other hosts do (tests)", true},
  {"FIBRA_SIMULATED_AGENTS", "number", "0", "the scale simulation: each spawned agent plays this many (tests, benchmarks)", true},
  {"FIBRA_SIMULATED_SILENT_EVERY", "number", "0", "the scale simulation: every n-th simulated agent falls silent", true},
  {"FIBRA_SIMULATED_SILENT_AFTER_S", "seconds", "0", "the scale simulation: when they fall silent, after the first batch", true},
};
// clang-format on

constexpr bool declared(std::string_view name) {
  for (const auto& v : variables)
    if (v.name == name) return true;
  return false;
}

/// A FIBRA_* variable's name, checked against `variables` when the program compiles.
class Name {
 public:
  consteval Name(const char* name) : name_(name) {
    if (!declared(name)) not_declared_in_src_common_env_hpp();
  }
  const char* c_str() const noexcept { return name_; }

 private:
  static void not_declared_in_src_common_env_hpp();  // not constexpr: calling it fails the build
  const char* name_;
};

/// Its value as the environment has it; nullptr when unset (for a variable whose empty value
/// means something of its own).
const char* raw(Name n) noexcept;
/// Its value; "" when unset.
std::string text(Name n);
/// On/off: `0` is off, any other non-empty value on; nullopt when unset or empty.
std::optional<bool> flag(Name n) noexcept;
/// A number from `least` to `most` (whole when `whole`); `unset` when unset or empty.
/// @throws ConfigError naming the variable, its value and the range, with `advice` after it.
double number(Name n, double unset, double least, double most, bool whole = false, std::string_view advice = {});

/// "FIBRA_X=value", for messages.
std::string shown(Name n);

}  // namespace fibra::detail::env
