// fibra/slurm/client.hpp: submitting, following and inspecting Slurm jobs through Slurm's commands
// (`sbatch --parsable`, `scontrol show job`), with sbatch's errors put in plain words.
#pragma once

#include <fibra/slurm/error.hpp>
#include <fibra/slurm/spec.hpp>

#include <functional>
#include <optional>
#include <map>
#include <string>
#include <vector>

namespace fibra::slurm {

/// @brief What a finished command printed and how it ended.
struct CommandResult {
  int status = -1;  ///< exit status; 127 if the command could not be started; 128+N if killed by signal N
  std::string out;  ///< its standard output
  std::string err;  ///< its standard error
};

/// @brief Runs a command (searched in PATH) to completion, capturing its output.
CommandResult run_command(const std::vector<std::string>& argv);

/// @brief One job (or one array task) as `scontrol show job` sees it.
struct JobStatus {
  std::string id;          ///< JobId, e.g. "12"; array tasks have their own id
  std::string array_task;  ///< ArrayTaskId for array tasks, else empty
  std::string name;        ///< JobName
  std::string state;       ///< JobState: PENDING, RUNNING, COMPLETED, FAILED, ...
  std::string reason;      ///< Reason (why pending), "None" when none
  int restarts = 0;        ///< Restarts: how often the job was requeued
  int exit_code = 0;       ///< the first number of ExitCode
  int exit_signal = 0;     ///< the second number of ExitCode
  std::string node_list;   ///< NodeList
  std::string work_dir;    ///< WorkDir
  std::string std_out;     ///< StdOut
};

/// @brief True for states a job never leaves (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...).
bool is_final_state(const std::string& state);

/// @brief Parses the output of `scontrol -o show job <id>` (one job or array task per line).
std::vector<JobStatus> parse_scontrol_jobs(const std::string& text);

/// @brief sbatch's error output in plain words, naming the spec's setting that caused it.
std::string explain_sbatch_error(const std::string& sbatch_stderr, const JobSpec& spec);

/// @brief Submits a rendered script with `sbatch --parsable` and returns the job id.
/// @throws SlurmError with explain_sbatch_error's text when sbatch refuses the job.
std::string submit_script(const std::string& script, const JobSpec& spec);

/// @brief The job's current status (every task, for an array).
/// @throws SlurmError if slurmctld does not know the job or cannot be reached.
std::vector<JobStatus> query_job(const std::string& id);

/// @brief The worker jobs an elastic run (`[elastic]`, Pool::adapt) of job `id` submitted
/// (named `fibra-worker-<id>`), as squeue lists them: those pending, running, or ended lately.
/// @throws SlurmError if squeue fails.
std::vector<JobStatus> query_worker_jobs(const std::string& id);

/// @brief Polls until every task of the job is in a final state and returns their last status.
///
/// Polls `scontrol show job` every 0.5 s at first, backing off to every `max_interval_s`
/// (a long job costs slurmctld one small request every few seconds). `on_change` is called with
/// each new state. Two failed polls in a row are retried; the third failure is thrown.
std::vector<JobStatus> wait_for_job(const std::string& id, double max_interval_s,
                                    const std::function<void(const JobStatus&)>& on_change);

/// @brief What a fibra batch script records in its `# fibra-<name>: <value>` lines, read with
/// `scontrol write batch_script`: "checkpoint" (the spec's checkpoint path) and "events" (its
/// event log folder, job.events), by name; empty if the job's script cannot be read.
std::map<std::string, std::string> job_script_markers(const std::string& id);

/// @brief A one-line summary of a checkpoint's progress, read with the checkpoint store
/// ("812/1000 items of rollout done (81.2%), running, updated 2026-11-30T08:00:00Z"), "not written
/// yet", or "cannot be read: <why>".
std::string checkpoint_progress(const std::string& path);

}  // namespace fibra::slurm
