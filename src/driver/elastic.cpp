// src/driver/elastic.cpp: see elastic.hpp.
#include "driver/elastic.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/command.hpp"
#include "common/log.hpp"
#include "common/process.hpp"
#include "common/slurm_time.hpp"
#include "driver/joins.hpp"
#include "fibra/error.hpp"
#include "transport/mpi.hpp"
#include "common/env.hpp"

namespace fibra::detail {

namespace {
constexpr auto look_every = std::chrono::milliseconds(250);
constexpr double poll_every_s = 2;      // squeue, for the states of the worker jobs
constexpr double command_bound_s = 30;  // sbatch, squeue or scancel that takes longer is killed
constexpr double drain_margin_s = 10;   // a worker job runs at least this long before it drains

// Without its trailing blanks, its lines joined by "; " (sbatch's errors come in two lines).
std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  for (std::size_t at; (at = s.find('\n')) != std::string::npos;) s.replace(at, 1, "; ");
  return s;
}

// A word for bash, in single quotes.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool final_state(const std::string& s) {
  return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" || s == "NODE_FAIL" ||
         s == "PREEMPTED" || s == "BOOT_FAIL" || s == "DEADLINE" || s == "OUT_OF_MEMORY" || s == "SPECIAL_EXIT";
}
}  // namespace

struct Elastic::Impl {
  struct Job {
    std::string id;
    bool joined = false;
    bool ended = false;
  };
  // Set at the start and by no one after: read by the thread without a lock.
  int min = 1, max = 1;
  int cpus_per_job = 1;  // its workers' CPUs (the pool's PoolOptions::offers.cpus each)
  std::uint64_t pool = 0;
  AdaptOptions o;
  std::function<View()> view;
  std::string file, dir, script;
  // FIBRA_ELASTIC_JOB_NAME, fibra-worker-<the driver's Slurm job> in a script with [elastic]
  // (`fibra slurm status` lists them, the script cancels them at its end); else
  // fibra-worker-pid<the driver's pid>.
  std::string job_name;
  std::vector<std::string> env;
  // The thread's alone (and the destructor's once the thread has ended).
  std::vector<Job> jobs;
  int failures = 0;
  bool paused = false;
  double next_submit = 0, next_poll = 0;
  int waiting_looks = 0;
  bool told_unfit = false;  // that chunks wait which no worker job could run
  // Under mu.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;

  void write_script() {
    std::filesystem::create_directories(dir);
    std::ostringstream s;
    s << "#!/bin/bash\n";
    s << "#SBATCH --job-name=" << job_name << "\n";
    s << "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n";
    s << "#SBATCH --cpus-per-task=" << cpus_per_job << "\n";
    s << "#SBATCH --time=" << o.time << "\n";
    s << "#SBATCH --output=" << dir << "/worker-%j.out\n";
    if (!o.partition.empty()) s << "#SBATCH --partition=" << o.partition << "\n";
    for (const auto& a : o.sbatch_args) s << "#SBATCH " << a << "\n";
    s << "# A worker job of fibra's Pool::adapt: it joins the driver (pid " << ::getpid() << " on " << host_name()
      << ") through its join file, and ends when the driver lets it go.\n";
    s << "export FIBRA_JOIN_WORKERS=" << o.workers_per_job << " FIBRA_JOIN_POOL=" << pool << "\n";
    s << "exec " << quoted(self_exe()) << " --fibra-join " << quoted(file) << "\n";
    std::ofstream(script, std::ios::trunc) << s.str();
    if (!std::ifstream(script)) throw ConfigError("fibra: Pool::adapt cannot write its worker job's script " + script);
  }

  void run() {
    std::unique_lock lk(mu);
    while (!stop) {
      lk.unlock();
      try {
        look();
      } catch (const std::exception& e) {
        log::warning("fibra: Pool::adapt: {}", e.what());
      }
      lk.lock();
      cv.wait_for(lk, look_every, [&] { return stop; });
    }
  }

  void look() {
    const double now = mpi::now_s();
    View v = view();  // before the poll: a job that joined and ended since is not taken for a failure
    mark_joined(v);
    if (now >= next_poll) {
      poll_states();
      next_poll = now + poll_every_s;
    }
    int pending = 0;
    for (auto& j : jobs) pending += !j.ended && !j.joined;
    waiting_looks = v.waiting > 0 ? waiting_looks + 1 : 0;
    // Never a job for work that no worker job could run: said once.
    if (v.unfit > 0 && !told_unfit) {
      log::warning(
          "fibra: Pool::adapt: {} chunk(s) wait, and the first of them need more than a worker job's worker "
          "offers ({}, the pool's PoolOptions::offers without its GPUs): no worker job is submitted for them; "
          "they wait for the pool's own workers",
          v.unfit, v.unfit_example);
      told_unfit = true;
    }
    const int planned = v.workers + pending * o.workers_per_job;
    std::string why;
    if (planned + o.workers_per_job > max) return;
    if (planned < min)
      why =
          "the pool has " + std::to_string(v.workers) + " worker(s), fewer than its minimum of " + std::to_string(min);
    else if (waiting_looks >= 2)
      why = std::to_string(v.waiting) + " chunk(s) wait, and the pool has " + std::to_string(v.workers) +
            " worker(s) of at most " + std::to_string(max);
    if (why.empty() || paused || pending >= o.backlog || now < next_submit) return;
    submit(why);
    next_submit = now + o.submit_gap_s;
    next_poll = 0;
  }

  void mark_joined(const View& v) {
    for (auto& j : jobs)
      if (!j.joined && v.joined.count(j.id)) {
        j.joined = true;
        failures = 0;  // a worker job that works: the ones before it were bad luck, not a bad setup
      }
  }

  void submit(const std::string& why) {
    std::string error;
    const CommandOutput r = run_command({"sbatch", "--parsable", script}, env, error, command_bound_s);
    if (error.empty() && r.status == 0) {
      std::string id = trimmed(r.out);
      id = id.substr(0, id.find(';'));  // "id;cluster" on a federation
      jobs.push_back({id});
      log::info("fibra: submitted worker job {} ({} worker(s)) because {}", id, o.workers_per_job, why);
      return;
    }
    failed("sbatch refused a worker job: " + (error.empty() ? trimmed(r.err) : error));
  }

  void failed(const std::string& what) {
    ++failures;
    log::warning("fibra: {}", what);
    if (failures >= o.failed_submits && !paused) {
      paused = true;
      log::error(
          "fibra: Pool::adapt submits no more worker jobs after {} failures in a row (the last: {}); the pool "
          "carries on with the workers it has. Its worker jobs write to {}",
          failures, what, dir);
    }
  }

  void poll_states() {
    std::string ids;
    for (const auto& j : jobs)
      if (!j.ended) ids += (ids.empty() ? "" : ",") + j.id;
    if (ids.empty()) return;
    std::string error;
    const CommandOutput r =
        run_command({"squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ids}, env, error, command_bound_s);
    if (!error.empty()) return;
    const bool unknown = r.status != 0 && r.err.find("Invalid job id") != std::string::npos;
    if (r.status != 0 && !unknown) return;  // slurmctld busy or away: the next poll asks again
    std::map<std::string, std::string> state;
    std::istringstream in(r.out);
    for (std::string id, st; in >> id >> st;) state[id] = st;
    for (auto& j : jobs) {
      if (j.ended) continue;
      const auto s = state.find(j.id);
      if (s != state.end() && !final_state(s->second)) continue;
      j.ended = true;
      const std::string how = s == state.end() ? "is gone from squeue" : "ended " + s->second;
      if (!j.joined)
        failed("worker job " + j.id + " " + how + " before its worker joined; see " + dir + "/worker-" + j.id + ".out");
    }
  }

  void cancel(bool joined_too, const std::string& why) {
    std::vector<std::string> argv{"scancel"};
    for (auto& j : jobs)
      if (!j.ended && (joined_too || !j.joined)) {
        argv.push_back(j.id);
        j.ended = true;
      }
    if (argv.size() == 1) return;
    std::string error;
    const CommandOutput r = run_command(argv, env, error, command_bound_s);
    std::string list;
    for (std::size_t i = 1; i < argv.size(); ++i) list += (i > 1 ? ", " : "") + argv[i];
    if (!error.empty() || r.status != 0)
      log::warning("fibra: scancel of worker job(s) {} failed ({}): cancel them by hand", list,
                   trimmed(error.empty() ? r.err : error));
    else
      log::info("fibra: cancelled worker job(s) {} ({})", list, why);
  }
};

namespace {
std::atomic<bool> g_spec_adapt_taken{false};  // by a running pool
}  // namespace

void give_back_spec_adapt() { g_spec_adapt_taken = false; }

std::optional<ElasticEnv> adapt_from_environment() {
  if (g_spec_adapt_taken.exchange(true)) return std::nullopt;
  try {
    std::optional<ElasticEnv> spec = ElasticEnv::from_env();
    if (!spec) give_back_spec_adapt();  // no [elastic]: nothing was taken
    return spec;
  } catch (...) {
    give_back_spec_adapt();
    throw;
  }
}

Elastic::Elastic(int min_workers, int max_workers, AdaptOptions options, std::uint64_t pool, double cpus_per_worker,
                 std::function<View()> view)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const auto bad = [](const std::string& what) { return ConfigError("fibra: Pool::adapt: " + what); };
  if (min_workers < 0 || max_workers < 1 || min_workers > max_workers)
    throw bad("the bounds (" + std::to_string(min_workers) + ", " + std::to_string(max_workers) +
              ") need 0 <= min_workers <= max_workers and max_workers >= 1");
  if (options.workers_per_job < 1 || options.workers_per_job > 4096)
    throw bad("AdaptOptions::workers_per_job must be from 1 to 4096");
  if (options.backlog < 1) throw bad("AdaptOptions::backlog must be 1 or more");
  if (!(options.idle_timeout_s > 0)) throw bad("AdaptOptions::idle_timeout_s must be above 0");
  if (!(options.submit_gap_s >= 0)) throw bad("AdaptOptions::submit_gap_s cannot be negative");
  if (options.failed_submits < 1) throw bad("AdaptOptions::failed_submits must be 1 or more");
  if (!(options.drain_before_s >= 0)) throw bad("AdaptOptions::drain_before_s cannot be negative");
  const double limit = slurm_time_s(options.time);
  if (limit < 0)
    throw bad("AdaptOptions::time \"" + options.time +
              "\" is not a Slurm time (minutes, minutes:seconds, hours:minutes:seconds or days-hours:minutes:seconds)");
  if (limit < options.drain_before_s + drain_margin_s)
    throw bad("AdaptOptions::time (" + options.time + ") leaves a worker job no time before it drains, " +
              std::to_string(static_cast<int>(options.drain_before_s)) +
              " s before its limit (AdaptOptions::drain_before_s): ask for more time, or drain later");
  s.file = join_file_listening();
  if (s.file.empty())
    throw bad(
        "worker jobs join the driver through its join file, and this driver has none: start it with "
        "FIBRA_JOIN_FILE=<a path on a file system the worker nodes read> (docs/elastic.md)");
  s.min = min_workers;
  s.max = max_workers;
  s.pool = pool;
  s.o = std::move(options);
  s.cpus_per_job = std::max(1, static_cast<int>(std::ceil(cpus_per_worker * s.o.workers_per_job - 1e-9)));
  s.view = std::move(view);
  s.env = launch_environment();
  std::string error;
  const CommandOutput v = run_command({"sbatch", "--version"}, s.env, error, command_bound_s);
  if (!error.empty() || v.status != 0)
    throw bad("it submits worker jobs with sbatch, which " +
              (error.empty() && v.status == 127 && v.err.find("cannot run") != std::string::npos
                   ? std::string("is not on PATH")
                   : "failed: " + trimmed(error.empty() ? v.err : error)));
  const std::string name = env::text("FIBRA_ELASTIC_JOB_NAME");
  s.job_name = !name.empty() ? name : "fibra-worker-pid" + std::to_string(::getpid());
  s.dir = s.file + ".workers";
  s.script = s.dir + "/worker.sbatch";
  s.write_script();
  s.thread = std::thread([&s] { s.run(); });
}

void Elastic::halt() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void Elastic::cancel(bool joined_too, const std::string& why) {
  try {
    impl_->mark_joined(impl_->view());
    impl_->poll_states();  // not those that ended meanwhile
    impl_->cancel(joined_too, why);
  } catch (const std::exception& e) {
    log::warning("fibra: Pool::adapt could not cancel its worker jobs: {}", e.what());
  }
}

Elastic::~Elastic() { halt(); }

int Elastic::min_workers() const { return impl_->min; }
double Elastic::idle_timeout_s() const { return impl_->o.idle_timeout_s; }

}  // namespace fibra::detail
