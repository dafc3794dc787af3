// Submitting and following jobs through Slurm's commands (see fibra/slurm/client.hpp).
#include <fibra/slurm/client.hpp>
#include <fibra/hdf5_io/store.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

namespace fibra::slurm {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

/// sbatch's last "error:" line without its "sbatch: error: Batch job submission failed: " prefix.
std::string sbatch_reason(const std::string& err) {
  std::string last;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (!trim(line).empty()) last = trim(line);
  for (const char* prefix : {"sbatch: error: Batch job submission failed: ", "sbatch: error: "})
    if (last.rfind(prefix, 0) == 0) return last.substr(std::string(prefix).size());
  return last;
}

bool contains(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

std::string or_default(const std::string& v) { return v.empty() ? "(the default)" : "'" + v + "'"; }

/// `Key=Value` fields of one `scontrol -o show job` line. Values hold no spaces except a few
/// (Command, WorkDir, ...) which fibra's own paths avoid; a field runs until the next ` Key=`.
std::string field(const std::string& line, const std::string& key) {
  const std::string padded = " " + line;
  std::size_t at = padded.find(" " + key + "=");
  if (at == std::string::npos) return "";
  at += key.size() + 2;
  const std::size_t end = padded.find(' ', at);
  return padded.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

int to_int(const std::string& s) { return s.empty() ? 0 : std::atoi(s.c_str()); }

std::string slurm_failure(const char* what, const CommandResult& r) {
  std::string why = trim(r.err.empty() ? r.out : r.err);
  if (r.status == 127 && why.find("cannot run") != std::string::npos)
    return std::string(what) + ": Slurm's commands are not installed here (" + why + ")";
  if (contains(why, "Unable to contact slurm controller") || contains(why, "Connection refused"))
    return std::string(what) + ": slurmctld does not answer; is the cluster up and SLURM_CONF right? (" + why + ")";
  return std::string(what) + " failed (exit " + std::to_string(r.status) + "): " + why;
}

}  // namespace

bool is_final_state(const std::string& state) {
  static const char* const finals[] = {"COMPLETED", "FAILED",    "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY",
                                       "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"};
  return std::any_of(std::begin(finals), std::end(finals), [&](const char* f) { return state == f; });
}

std::vector<JobStatus> parse_scontrol_jobs(const std::string& text) {
  std::vector<JobStatus> jobs;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.rfind("JobId=", 0) != 0) continue;
    JobStatus j;
    j.id = field(line, "JobId");
    j.array_task = field(line, "ArrayTaskId");
    j.name = field(line, "JobName");
    j.state = field(line, "JobState");
    j.reason = field(line, "Reason");
    j.restarts = to_int(field(line, "Restarts"));
    const std::string exit = field(line, "ExitCode");
    j.exit_code = to_int(exit.substr(0, exit.find(':')));
    if (exit.find(':') != std::string::npos) j.exit_signal = to_int(exit.substr(exit.find(':') + 1));
    j.node_list = field(line, "NodeList");
    j.work_dir = field(line, "WorkDir");
    j.std_out = field(line, "StdOut");
    jobs.push_back(j);
  }
  return jobs;
}

std::string explain_sbatch_error(const std::string& sbatch_stderr, const JobSpec& s) {
  const std::string said = sbatch_reason(sbatch_stderr);
  std::string plain;
  if (contains(said, "Invalid partition name"))
    plain = "partition " + or_default(s.partition) + " does not exist on this cluster; 'sinfo -s' lists the partitions";
  else if (contains(said, "time limit"))
    plain = "the time limit " + or_default(s.time) + " is more than partition " + or_default(s.partition) +
            " allows; 'sinfo -o \"%P %l\"' shows each partition's limit";
  else if (contains(said, "More processors requested than permitted"))
    plain = std::to_string(s.tasks) + " tasks of " + std::to_string(s.cpus_per_task) +
            " CPUs are more than partition " + or_default(s.partition) +
            " has; lower 'resources.tasks' or 'job.workers'";
  else if (contains(said, "Memory specification"))
    plain = "no node in partition " + or_default(s.partition) + " has memory " + or_default(s.memory) +
            "; lower 'resources.memory'";
  else if (contains(said, "node configuration is not available"))
    plain =
        "no node in partition " + or_default(s.partition) +
        " has what the job asks for (tasks, CPUs per task, memory, constraint); lower them or pick another partition";
  else if (contains(said, "gres"))
    plain = "this cluster has no such generic resource (gres " + or_default(s.gres) + ", gpus " +
            std::to_string(s.gpus) + "); ask the site which GPUs a partition offers";
  else if (contains(said, "feature specification"))
    plain = "no node has the feature " + or_default(s.constraint) + "; fix 'resources.constraint'";
  else if (contains(said, "account"))
    plain = "account " + or_default(s.account) +
            " is not valid here (or not for this partition); 'sacctmgr show assoc user=$USER' lists yours";
  else if (contains(said, "qos") || contains(said, "QOS"))
    plain = "QOS " + or_default(s.qos) +
            " is not valid or its limits forbid this job; ask the site or drop 'resources.qos'";
  else if (contains(said, "policy") || contains(said, "limit"))
    plain = "the job is over a limit of the site (partition, account or QOS)";
  else
    plain = "sbatch refused it";
  return "sbatch refused job '" + s.name + "' (" + s.source + "): " + plain + " [sbatch: " + said + "]";
}

std::string submit_script(const std::string& script, const JobSpec& spec) {
  char path[] = "/tmp/fibra-sbatch-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw SlurmError("cannot write the batch script to /tmp");
  const bool written = ::write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
  ::close(fd);
  CommandResult r;
  if (written) r = run_command({"sbatch", "--parsable", path});
  ::unlink(path);  // sbatch keeps its own copy of the script
  if (!written) throw SlurmError("cannot write the batch script to /tmp");
  if (r.status == 127) throw SlurmError(slurm_failure("sbatch", r));
  if (r.status != 0) {
    if (contains(r.err, "Unable to contact") || contains(r.err, "Connection refused"))
      throw SlurmError(slurm_failure("sbatch", r));
    throw SlurmError(explain_sbatch_error(r.err, spec));
  }
  const std::string out = trim(r.out);
  return out.substr(0, out.find(';'));  // "id" or "id;cluster"
}

std::vector<JobStatus> query_job(const std::string& id) {
  CommandResult r = run_command({"scontrol", "-o", "show", "job", id});
  if (r.status != 0) {
    if (contains(r.err, "Invalid job id"))
      throw SlurmError("job " + id + " is not known to slurmctld (a wrong id, or it ended longer ago than MinJobAge)");
    throw SlurmError(slurm_failure("scontrol show job", r));
  }
  std::vector<JobStatus> jobs = parse_scontrol_jobs(r.out);
  if (jobs.empty()) throw SlurmError("scontrol show job " + id + " printed no job: " + trim(r.out));
  return jobs;
}

std::vector<JobStatus> query_worker_jobs(const std::string& id) {
  const std::string name = "fibra-worker-" + id;
  CommandResult r = run_command({"squeue", "-h", "-t", "all", "-n", name, "-o", "%i|%j|%T|%r|%N"});
  if (r.status != 0) throw SlurmError(slurm_failure("squeue", r));
  std::vector<JobStatus> jobs;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::istringstream fields(trim(line));
    for (std::string x; std::getline(fields, x, '|');) f.push_back(x);
    if (f.size() < 5 || f[1] != name) continue;
    JobStatus j;
    j.id = f[0];
    j.name = f[1];
    j.state = f[2];
    j.reason = f[3];
    j.node_list = f[4];
    jobs.push_back(j);
  }
  return jobs;
}

std::vector<JobStatus> wait_for_job(const std::string& id, double max_interval_s,
                                    const std::function<void(const JobStatus&)>& on_change) {
  std::map<std::string, std::string> seen;  // last state per job or array task, to report changes once
  double interval = 0.5;
  int misses = 0;  // slurmctld may be busy or restarting: a few failed polls in a row are tolerated
  for (;;) {
    std::vector<JobStatus> jobs;
    try {
      jobs = query_job(id);
      misses = 0;
    } catch (const SlurmError&) {
      if (++misses >= 3) throw;
      std::this_thread::sleep_for(std::chrono::duration<double>(max_interval_s));
      continue;
    }
    bool all_final = true;
    for (const JobStatus& j : jobs) {
      const std::string now = j.state + "/" + std::to_string(j.restarts);
      std::string& before = seen[j.id + "_" + j.array_task];
      if (before != now && on_change) on_change(j);
      before = now;
      all_final = all_final && is_final_state(j.state);
    }
    // a pending array is one line until its tasks start; it is final only when all tasks are
    if (all_final) return jobs;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    interval = std::min(interval * 1.5, max_interval_s);
  }
}

std::map<std::string, std::string> job_script_markers(const std::string& id) {
  std::map<std::string, std::string> markers;
  CommandResult r = run_command({"scontrol", "write", "batch_script", id, "-"});
  if (r.status != 0) return markers;
  std::istringstream in(r.out);
  const std::string lead = "# fibra-";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(lead, 0) != 0) continue;
    const auto colon = line.find(": ", lead.size());
    if (colon != std::string::npos)
      markers.emplace(line.substr(lead.size(), colon - lead.size()), line.substr(colon + 2));
  }
  return markers;
}

std::string checkpoint_progress(const std::string& path) {
  if (!std::filesystem::exists(path)) return "not written yet";
  try {
    // Read-only: the running job may hold the writer's lock; readers are not locked out.
    const auto info = hdf5_io::Store::open(path, hdf5_io::Access::read_only).info();
    const double pct = info.run.n_inputs ? 100.0 * double(info.n_done) / double(info.run.n_inputs) : 100.0;
    char line[512];
    std::snprintf(line, sizeof line, "%llu/%llu items of %s done (%.1f%%), %s, updated %s",
                  static_cast<unsigned long long>(info.n_done), static_cast<unsigned long long>(info.run.n_inputs),
                  info.run.function.c_str(), pct, info.state.c_str(), info.updated_at.c_str());
    return std::string(line);
  } catch (const std::exception& e) {
    return std::string("cannot be read: ") + e.what();
  }
}

}  // namespace fibra::slurm
