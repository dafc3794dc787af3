// fibra/slurm/spec.hpp: a Slurm job spec (TOML), parsed and checked.
//
// A spec says what to run (program, arguments, workers) and what to ask Slurm for (tasks, time,
// partition, ...). The format is documented in docs/slurm.md; examples live in jobs/*/job.toml.
//
//   fibra::slurm::JobSpec spec = fibra::slurm::parse_spec_file("jobs/hello/job.toml");
#pragma once

#include <fibra/error.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fibra::slurm {

/// @brief A job spec is wrong. The message starts with `file:line: ` when a line is known and
/// names the key, e.g. `job.toml:4: unknown key 'job.wrokers'; ...`.
class SpecError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// @brief The warning Slurm sends before the time limit (`--signal=B:<signal>@<grace>`) and what
/// the job does with it: the driver checkpoints and exits 75, and the batch script requeues it.
struct CheckpointSpec {
  std::string path;             ///< checkpoint file, passed to the program as FIBRA_CHECKPOINT;
                                ///< with [array] it holds %a, the task id (one file per task)
  std::string signal = "USR1";  ///< USR1 or TERM
  int grace_s = 60;             ///< seconds between the warning and the time limit
  bool requeue = false;         ///< requeue the job when the driver stops for a checkpoint
  int max_restarts = 10;        ///< requeue at most this many times (a run that saves nothing would loop)
  /// Relaunch the driver inside the allocation, on the nodes still alive, when a node is lost or
  /// the driver is killed (`#SBATCH --no-kill`); at most this many times. Needs `path`. Default: 2
  /// for a job of several nodes, else 0.
  int relaunches = 0;
};

/// @brief A job array for sweeps (`--array=<indices>%<throttle>`).
struct ArraySpec {
  std::string indices;  ///< e.g. "0-15", "1,3,5", "0-30:10"
  int throttle = 0;     ///< at most this many tasks at once; 0: no limit
};

/// @brief An elastic run (`[elastic]`, docs/elastic.md): the driver's pool grows with worker jobs
/// that join it while work waits, one node each, and lets them go when idle (Pool::adapt).
struct ElasticSpec {
  int min_nodes = 0;              ///< nodes of the run, the job's own included, kept at least
  int max_nodes = 0;              ///< nodes of the run, at most (required; above 'resources.nodes')
  int workers_per_node = 0;       ///< workers of each worker job; default: the job's tasks per node
  std::string worker_time;        ///< each worker job's time limit; default 'resources.time', else 1 hour
  long worker_time_s = 0;         ///< that limit in seconds
  std::string partition;          ///< the worker jobs'; default 'resources.partition'
  int backlog = 1;                ///< worker jobs pending at once, at most
  int idle_timeout_s = 60;        ///< a worker job idle this long ends
  int max_submit_per_minute = 6;  ///< submissions at most, per minute
  int drain_before_s = 60;        ///< a worker job drains this long before its time limit
  std::string join_file;          ///< where workers find the driver; default "<name>-%j.join" (%j: job id)
};

/// @brief Everything a spec says, with defaults filled in.
struct JobSpec {
  std::string source;                      ///< the spec's file name, as given
  std::string name;                        ///< job name (`--job-name`)
  std::string program;                     ///< the fibra program to run under `mpirun -n 1`
  std::vector<std::string> args;           ///< its arguments
  int workers = 1;                         ///< workers the program spawns (slots it needs)
  bool oversubscribe = false;              ///< allow more processes than slots (FIBRA_OVERSUBSCRIBE=1)
  std::string workdir;                     ///< `--chdir`; empty: the directory sbatch runs in
  std::string output;                      ///< `--output`; empty: `<name>-%j.out` (`%A_%a` for arrays)
  std::string error;                       ///< `--error`; empty: with the output
  std::vector<std::string> setup;          ///< shell lines run first (module load ...)
  std::map<std::string, std::string> env;  ///< variables exported before the program starts
  /// The run's event log folder (FIBRA_EVENTS; docs/observability.md), relative to workdir; %a is
  /// an array task's id (each task needs its own). Empty: none.
  std::string events;
  std::vector<std::string> mpirun_args;  ///< extra mpirun arguments

  int nodes = 1;          ///< `--nodes`
  int tasks = 0;          ///< `--ntasks`; default workers + 1 (1 with oversubscribe)
  int cpus_per_task = 1;  ///< `--cpus-per-task`
  std::string memory;     ///< `--mem`, e.g. "4G"; empty: the partition's default
  std::string time;       ///< `--time` as written; empty: the partition's default
  long time_s = 0;        ///< the time limit in seconds; 0 when not set
  std::string partition, account, qos, constraint, gres;
  int gpus = 0;  ///< `--gpus`; 0: none asked

  std::optional<CheckpointSpec> checkpoint;
  std::optional<ArraySpec> array;
  std::optional<ElasticSpec> elastic;
  std::vector<std::string> sbatch_extra;  ///< extra `#SBATCH` options, e.g. "--exclusive"
};

/// @brief Parses and checks a spec from TOML text.
/// @param text   the TOML document
/// @param source the file name used in error messages
/// @throws SpecError naming the key and line of the first problem.
JobSpec parse_spec(std::string_view text, const std::string& source);

/// @brief Reads, parses and checks a spec file.
/// @throws SpecError if the file cannot be read or the spec is wrong.
JobSpec parse_spec_file(const std::string& path);

/// @brief Seconds in a Slurm time limit ("30", "10:00", "1:30:00", "2-0", "2-12:00", "2-12:00:00").
/// @returns nullopt if the text is not one of Slurm's formats.
std::optional<long> parse_time_limit(std::string_view text);

}  // namespace fibra::slurm
