// `fibra slurm render|submit|status` (see docs/slurm.md).
#include "slurm.hpp"

#include <fibra/slurm/client.hpp>
#include <fibra/slurm/render.hpp>
#include <fibra/slurm/spec.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "observe/event_clock.hpp"
#include "observe/event_reader.hpp"
#include "observe/status.hpp"

namespace fibra::cli {
namespace {

namespace fs = fibra::slurm;

struct SlurmArgs {
  std::string spec;
  std::string output;
  bool wait = false;
  double poll_max_s = 10;
  std::string job_id;
};

/// Prints the error and leaves the command with `code` (CLI11 turns this into main's return).
[[noreturn]] void fail(const std::exception& e, int code) {
  std::fprintf(stderr, "fibra slurm: %s\n", e.what());
  throw CLI::RuntimeError(code);
}

std::string describe(const fs::JobStatus& j) {
  std::string s = "job " + j.id + (j.array_task.empty() ? "" : " (array task " + j.array_task + ")") + " '" + j.name +
                  "': " + j.state;
  if (j.state == "PENDING" && !j.reason.empty() && j.reason != "None") s += " (" + j.reason + ")";
  if (fs::is_final_state(j.state)) s += ", exit code " + std::to_string(j.exit_code);
  if (j.exit_signal) s += ", signal " + std::to_string(j.exit_signal);
  s += ", restarts " + std::to_string(j.restarts);
  return s;
}

/// 0 when every task completed; else the first non-zero exit code, or 1.
int exit_status_of(const std::vector<fs::JobStatus>& jobs) {
  int status = 0;
  for (const fs::JobStatus& j : jobs) {
    if (j.state == "COMPLETED") continue;
    if (status == 0) status = (j.exit_code > 0 && j.exit_code < 256) ? j.exit_code : 1;
  }
  return status;
}

/// Reads the job spec, after saying plainly when its path is a folder (a stream would read nothing).
fs::JobSpec read_spec(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw fs::SpecError("cannot read job spec '" + path + "': it is a directory; pass the spec file (TOML) in it");
  return fs::parse_spec_file(path);
}

/// Writes the script to `path`, saying why when it cannot: a folder, a folder that does not exist.
void write_script(const std::string& path, const std::string& script) {
  namespace stdfs = std::filesystem;
  std::error_code ec;
  if (stdfs::is_directory(path, ec))
    throw fs::SpecError("cannot write '" + path + "': it is a directory; pass a file path, such as '" +
                        (stdfs::path(path) / "job.sbatch").string() + "'");
  const stdfs::path parent = stdfs::path(path).parent_path();
  if (!parent.empty() && !stdfs::is_directory(parent, ec))
    throw fs::SpecError("cannot write '" + path + "': the folder '" + parent.string() +
                        (stdfs::exists(parent, ec) ? "' is not a directory" : "' does not exist; create it first"));
  errno = 0;
  std::ofstream out(path);
  out << script;
  out.flush();
  if (!out)
    throw fs::SpecError("cannot write '" + path + "'" +
                        (errno ? std::string(": ") + std::strerror(errno) : std::string()));
}

void run_render(const SlurmArgs& a) {
  try {
    const std::string script = fs::render_script(read_spec(a.spec));
    if (a.output.empty() || a.output == "-") {
      std::fwrite(script.data(), 1, script.size(), stdout);
      return;
    }
    write_script(a.output, script);
  } catch (const fs::SpecError& e) {
    fail(e, 2);
  }
}

void run_submit(const SlurmArgs& a) {
  fs::JobSpec spec;
  try {
    spec = read_spec(a.spec);
  } catch (const fs::SpecError& e) {
    fail(e, 2);
  }
  try {
    const std::string id = fs::submit_script(fs::render_script(spec), spec);
    std::printf("%s\n", id.c_str());
    std::fflush(stdout);
    if (!a.wait) return;
    auto jobs = fs::wait_for_job(id, a.poll_max_s, [](const fs::JobStatus& j) {
      std::fprintf(stderr, "fibra slurm: %s\n", describe(j).c_str());
    });
    for (const fs::JobStatus& j : jobs) std::printf("%s\n", describe(j).c_str());
    if (int status = exit_status_of(jobs)) throw CLI::RuntimeError(status);
  } catch (const fs::SlurmError& e) {
    fail(e, 1);
  }
}

// A path from the job's script (its checkpoint, its event log), as each task of the job sees it,
// with that task: %a is an array task's id, and a relative path is relative to the job's working
// folder, not to this command's. None for an empty path.
std::vector<std::pair<std::string, const fs::JobStatus*>> paths_as_the_job_sees_them(
    const std::string& spec_path, const std::vector<fs::JobStatus>& jobs) {
  std::vector<std::pair<std::string, const fs::JobStatus*>> paths;
  if (spec_path.empty()) return paths;
  std::set<std::string> shown;
  for (const fs::JobStatus& j : jobs) {
    // a pending array's own record names a range of tasks ("2-3%2"), not one task: no file of its own
    const bool one_task =
        std::all_of(j.array_task.begin(), j.array_task.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!one_task) continue;
    std::string path = spec_path;
    for (std::size_t at; (at = path.find("%a")) != std::string::npos;) path.replace(at, 2, j.array_task);
    if (!path.empty() && path[0] != '/' && !j.work_dir.empty()) path = j.work_dir + "/" + path;
    if (shown.insert(path).second) paths.emplace_back(path, &j);
  }
  return paths;
}

void run_status(const SlurmArgs& a) {
  try {
    const auto jobs = fs::query_job(a.job_id);
    for (const fs::JobStatus& j : jobs) std::printf("%s\n", describe(j).c_str());
    // An elastic run's worker jobs ([elastic], Pool::adapt), by the name they carry
    try {
      for (const fs::JobStatus& w : fs::query_worker_jobs(a.job_id)) {
        std::string line = "worker job " + w.id + ": " + w.state;
        if (w.state == "PENDING" && !w.reason.empty() && w.reason != "None") line += " (" + w.reason + ")";
        if (!w.node_list.empty() && w.state != "PENDING") line += " on " + w.node_list;
        std::printf("%s\n", line.c_str());
      }
    } catch (const fs::SlurmError& e) {
      std::printf("worker jobs: unknown (%s)\n", e.what());
    }
    // The run's event log (the spec's job.events): where each task's run stands, as `fibra status`
    // says it, indented.
    // (the script read once: its markers name the event log and the checkpoint)
    const auto markers = fs::job_script_markers(a.job_id);
    const auto marker = [&](const char* name) {
      const auto it = markers.find(name);
      return it == markers.end() ? std::string() : it->second;
    };
    for (const auto& [path, job] : paths_as_the_job_sees_them(marker("events"), jobs)) {
      std::string text;
      try {
        // (the job's state says whether its run still runs: its driver is on another host)
        text = observe::status_text(observe::read_event_log(path), observe::event_time_us(),
                                    !fs::is_final_state(job->state));
      } catch (const std::exception& e) {
        std::printf(
            "events: %s: %s\n", path.c_str(),
            std::filesystem::exists(path) ? ("cannot be read: " + std::string(e.what())).c_str() : "not written yet");
        continue;
      }
      std::printf("events: %s\n", path.c_str());
      for (std::size_t at = 0, end; at < text.size(); at = end + 1) {
        end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        std::printf("  %s\n", text.substr(at, end - at).c_str());
      }
    }
    const std::string spec_path = marker("checkpoint");
    if (spec_path.empty()) {
      std::printf("checkpoint: none\n");
      return;
    }
    for (const auto& [path, job] : paths_as_the_job_sees_them(spec_path, jobs))
      std::printf("checkpoint: %s: %s\n", path.c_str(), fs::checkpoint_progress(path).c_str());
  } catch (const fs::SlurmError& e) {
    fail(e, 1);
  }
}

}  // namespace

void add_slurm_commands(CLI::App& app) {
  auto args = std::make_shared<SlurmArgs>();
  CLI::App* slurm = app.add_subcommand("slurm", "Render, submit and follow Slurm batch jobs from a job spec");
  slurm->require_subcommand(1);

  CLI::App* render = slurm->add_subcommand("render", "Print the sbatch script for a job spec");
  render->add_option("spec", args->spec, "The job spec (TOML)")->required();
  render->add_option("-o,--output", args->output, "Write the script to this file instead of stdout");
  render->callback([args] { run_render(*args); });

  CLI::App* submit = slurm->add_subcommand("submit", "Submit a job spec with sbatch and print the job id");
  submit->add_option("spec", args->spec, "The job spec (TOML)")->required();
  submit->add_flag("--wait", args->wait, "Follow the job until it ends; exit 0 if it completed");
  submit->add_option("--poll-max", args->poll_max_s, "Longest pause between two polls, in seconds (default 10)")
      ->check(CLI::PositiveNumber);
  submit->callback([args] { run_submit(*args); });

  CLI::App* status = slurm->add_subcommand("status", "Show a job's state, restarts, worker jobs and checkpoint");
  status->add_option("job_id", args->job_id, "The job id sbatch gave")->required();
  status->callback([args] { run_status(*args); });
}

}  // namespace fibra::cli
