// Renders a job spec as an sbatch script (see fibra/slurm/render.hpp and docs/slurm.md).
#include <fibra/slurm/render.hpp>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "common/elastic_env.hpp"  // FIBRA_ELASTIC_*, as the driver reads them
#include "common/env.hpp"          // the FIBRA_* names the driver reads

namespace fibra::slurm {
namespace env = fibra::detail::env;
namespace {

void sbatch_line(std::ostringstream& o, const char* option, const std::string& value) {
  if (!value.empty()) o << "#SBATCH --" << option << '=' << value << '\n';
}

void render_sbatch_lines(std::ostringstream& o, const JobSpec& s) {
  sbatch_line(o, "job-name", s.name);
  sbatch_line(o, "chdir", s.workdir);
  sbatch_line(o, "nodes", std::to_string(s.nodes));
  sbatch_line(o, "ntasks", std::to_string(s.tasks));
  sbatch_line(o, "cpus-per-task", std::to_string(s.cpus_per_task));
  sbatch_line(o, "mem", s.memory);
  sbatch_line(o, "time", s.time);
  sbatch_line(o, "partition", s.partition);
  sbatch_line(o, "account", s.account);
  sbatch_line(o, "qos", s.qos);
  sbatch_line(o, "constraint", s.constraint);
  sbatch_line(o, "gres", s.gres);
  if (s.gpus > 0) sbatch_line(o, "gpus", std::to_string(s.gpus));
  const std::string default_output = s.name + (s.array ? "-%A_%a.out" : "-%j.out");
  sbatch_line(o, "output", s.output.empty() ? default_output : s.output);
  sbatch_line(o, "error", s.error);
  o << "#SBATCH --open-mode=append\n";  // a requeued run appends to the first run's output
  if (s.checkpoint) {
    o << "#SBATCH --signal=B:" << s.checkpoint->signal << '@' << s.checkpoint->grace_s << '\n';
    o << (s.checkpoint->requeue ? "#SBATCH --requeue\n" : "#SBATCH --no-requeue\n");
    // a lost node must not end the job: the script relaunches the driver on the others
    if (s.checkpoint->relaunches > 0) o << "#SBATCH --no-kill\n";
  }
  if (s.array)
    sbatch_line(o, "array", s.array->indices + (s.array->throttle > 0 ? "%" + std::to_string(s.array->throttle) : ""));
  for (const std::string& extra : s.sbatch_extra) o << "#SBATCH " << extra << '\n';
}

// A path for the shell, with each `marker` replaced by `variable` ("%a" by the array task's id).
std::string with_variable(std::string_view path, std::string_view marker, const std::string& variable) {
  std::string value;
  std::string_view rest = path;
  for (std::size_t at; (at = rest.find(marker)) != std::string_view::npos; rest.remove_prefix(at + marker.size()))
    value += (at ? shell_quote(rest.substr(0, at)) : "") + "\"${" + variable + "}\"";
  if (!rest.empty() || value.empty()) value += shell_quote(rest);
  return value;
}

// Pool::adapt's bounds and options as [elastic] gives them, for the driver's first pool to read
// back (FIBRA_ELASTIC_*, ElasticEnv::from_env): worker jobs, on top of the job's own nodes.
detail::ElasticEnv elastic_env(const JobSpec& s, const ElasticSpec& e) {
  detail::ElasticEnv adapt;
  adapt.min_jobs = e.min_nodes - s.nodes;
  adapt.max_jobs = e.max_nodes - s.nodes;
  adapt.options.workers_per_job = e.workers_per_node;
  adapt.options.time = e.worker_time;
  adapt.options.backlog = e.backlog;
  adapt.options.idle_timeout_s = e.idle_timeout_s;
  adapt.options.drain_before_s = e.drain_before_s;
  adapt.options.submit_gap_s = 60.0 / e.max_submit_per_minute;
  adapt.options.partition = e.partition;
  for (const auto& [option, value] : {std::pair<const char*, const std::string&>{"mem", s.memory},
                                      {"account", s.account},
                                      {"qos", s.qos},
                                      {"constraint", s.constraint}})
    if (!value.empty()) adapt.options.sbatch_args.push_back(std::string("--") + option + "=" + value);
  return adapt;
}

// [elastic]: the batch shell starts Open MPI's name server (worker jobs of other allocations can
// connect to the driver only through one: docs/architecture.md, "Joining a running driver"), hands
// the driver the join file and the bounds for Pool::adapt (FIBRA_ELASTIC_*, read by its first pool),
// and at the end cancels every worker job of this job that is left, whatever way the driver ended.
void render_elastic(std::ostringstream& o, const JobSpec& s, const ElasticSpec& e) {
  const std::string join =
      (e.join_file[0] == '/' ? "" : "\"$PWD\"/") + with_variable(e.join_file, "%j", "SLURM_JOB_ID");
  const detail::ElasticEnv adapt = elastic_env(s, e);
  o << "\n# [elastic]: worker jobs of one node each join this driver while work waits (Pool::adapt,\n"
       "# docs/elastic.md), through Open MPI's name server and the join file.\n";
  o << "fibra_join=" << join << "\n";
  // The variables' names come from the list the driver reads them by (src/common/env.hpp).
  const auto var = [](env::Name n) { return std::string(n.c_str()) + "="; };
  o << "export " << var("FIBRA_ELASTIC_JOB_NAME") << "\"fibra-worker-${SLURM_JOB_ID}\"  # the worker jobs' name\n";
  o << "fibra_cancel_workers() {  # the worker jobs of this job still pending or running\n"
       "  scancel --user=\"${SLURM_JOB_USER:-$(id -un)}\" --name=\"$FIBRA_ELASTIC_JOB_NAME\" ||\n"
       "    echo \"fibra: could not cancel worker jobs named $FIBRA_ELASTIC_JOB_NAME: cancel them by hand\" >&2\n"
       "}\n";
  // A requeued job (the same id) starts with none of its earlier run's worker jobs
  o << "fibra_cancel_workers\n";
  o << "rm -f \"$fibra_join\" \"$fibra_join.uri\"\n"
       "ompi-server --no-daemonize -r \"$fibra_join.uri\" &\n"
       "fibra_name_server=$!\n"
       "for fibra_i in $(seq 1 100); do\n"
       "  { [ -s \"$fibra_join.uri\" ] || ! kill -0 \"$fibra_name_server\" 2>/dev/null; } && break; sleep 0.1\n"
       "done\n"
       "if [ ! -s \"$fibra_join.uri\" ]; then\n"
       "  echo \"fibra: ompi-server (Open MPI's name server, which [elastic] needs) wrote no URI to $fibra_join.uri "
       "within 10 s; is openmpi-bin installed on this node, and the folder writable?\" >&2\n"
       "  kill \"$fibra_name_server\" 2>/dev/null; exit 1\n"
       "fi\n";
  o << "export " << var("FIBRA_JOIN_FILE") << "\"$fibra_join\"\n";
  // In three export lines: the bounds, a worker job's own limits, how worker jobs are submitted.
  const std::string_view new_line_at[] = {env::Name("FIBRA_ELASTIC_TIME").c_str(),
                                          env::Name("FIBRA_ELASTIC_SUBMIT_GAP_S").c_str()};
  const char* between = "export ";
  for (const auto& [name, value] : adapt.to_env()) {
    if (std::find(std::begin(new_line_at), std::end(new_line_at), name) != std::end(new_line_at)) between = "\nexport ";
    o << between << name << '=' << shell_quote(value);
    between = " ";
  }
  o << '\n';
  o << "fibra_elastic_end() {  # no worker job outlives the driver, however it ended\n"
       "  fibra_cancel_workers\n"
       "  kill \"$fibra_name_server\" 2>/dev/null\n"
       "  rm -f \"$fibra_join\" \"$fibra_join.uri\"\n"
       "}\n";
}

void render_environment(std::ostringstream& o, const JobSpec& s) {
  if (!s.setup.empty()) {
    o << "\n# Set-up lines from the spec (modules, virtual environments, ...).\n";
    for (const std::string& line : s.setup) o << line << '\n';
  }
  o << "\nexport FIBRA_JOB_SPEC=" << shell_quote(s.name) << '\n';
  if (s.checkpoint && !s.checkpoint->path.empty()) {
    // %a: the array task's id, so that every task of an array has a checkpoint of its own
    o << "export " << env::Name("FIBRA_CHECKPOINT").c_str() << "="
      << with_variable(s.checkpoint->path, "%a", "SLURM_ARRAY_TASK_ID") << '\n';
  }
  if (!s.events.empty())
    o << "export " << env::Name("FIBRA_EVENTS").c_str() << "=" << with_variable(s.events, "%a", "SLURM_ARRAY_TASK_ID")
      << '\n';
  o << "export " << env::Name("FIBRA_OVERSUBSCRIBE").c_str() << "=" << (s.oversubscribe ? 1 : 0)
    << (s.oversubscribe ? "  # the spec allows more processes than slots\n"
                        : "  # the allocation has a slot for the driver and each worker\n");
  o << "export EVENT_NOEPOLL=1  # mpirun's PMIx server must not use epoll: Open MPI 4.1 + PMIx 4 spawn hang\n";
  for (const auto& [name, value] : s.env) o << "export " << name << '=' << shell_quote(value) << '\n';
  if (s.elastic) render_elastic(o, s, *s.elastic);
}

// How mpirun starts the driver: through a small `sh` that records the driver's pid (so that the
// trap can signal the driver itself) and its exit status (with the recovery settings, mpirun exits 0
// whatever its process returned: measured with Open MPI 4.1.4). The files are on the batch host,
// where mpirun places its only rank. The driver starts with USR1 ignored, so that a warning that
// comes before it installs its handler (fibra::Runtime does, given FIBRA_CHECKPOINT) does not kill
// it; the batch shell sends the warning again until the driver ends.
const char* const driver_wrapper =
    "sh -c 'trap \"\" USR1; \"$@\" & echo $! >\"$0.pid\"; wait $!; s=$?; rm -f \"$0.pid\"; echo $s >\"$0.status\"; "
    "exit $s' \"$fibra_run\"";

std::string mpirun_command(const JobSpec& s) {
  std::string cmd = "mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0";
  if (s.oversubscribe) cmd += " --oversubscribe";
  for (const std::string& a : s.mpirun_args) cmd += ' ' + shell_quote(a);
  if (s.elastic) cmd += " --ompi-server \"file:$fibra_join.uri\"";  // the name server render_elastic started
  cmd += std::string(" -n 1 ") + driver_wrapper + " " + shell_quote(s.program);
  for (const std::string& a : s.args) cmd += ' ' + shell_quote(a);
  return cmd;
}

// First in the script: the batch shell must never die of the warning (bash's default for USR1),
// even during the set-up lines. The trap sends USR1 to the driver itself, not to mpirun: mpirun
// would pass it on to every process it started, and the spawned workers die of it (measured with
// Open MPI 4.1.4).
void render_signals(std::ostringstream& o) {
  o << "\necho \"fibra: job ${SLURM_JOB_ID} run $(( ${SLURM_RESTART_COUNT:-0} + 1 )) on ${SLURM_JOB_NODELIST:-?}"
       " at $(date -u +%Y-%m-%dT%H:%M:%SZ)\"\n";
  o << "fibra_run=\"${TMPDIR:-/tmp}/fibra-${SLURM_JOB_ID}-$$\"  # .pid and .status of the driver\n"
       "rm -f \"$fibra_run.pid\" \"$fibra_run.status\"\n"
       "fibra_signalled=0\n"
       "fibra_warned=0\n";
  o << "fibra_resender=\n"
       "fibra_forward() {  # $1: the signal the batch shell got\n"
       "  fibra_signalled=1 fibra_warned=1\n"
       "  echo \"fibra: batch shell got SIG$1; asking the driver to checkpoint and stop\"\n"
       "  [ -z \"$fibra_resender\" ] || return 0\n"
       "  # USR1 to the driver now and every 2 s while this shell runs: one that comes before the driver\n"
       "  # handles it is ignored, a later one lands; a second one changes nothing\n"
       "  ( while kill -0 $$ 2>/dev/null; do\n"
       "      if [ -s \"$fibra_run.pid\" ]; then kill -USR1 \"$(cat \"$fibra_run.pid\")\" 2>/dev/null; fi\n"
       "      sleep 2\n"
       "    done ) &\n"
       "  fibra_resender=$!\n"
       "}\n"
       "trap 'fibra_forward USR1' USR1\n"
       "trap 'fibra_forward TERM' TERM\n";
}

// The batch shell runs mpirun in the background so that a trapped signal interrupts `wait` at once;
// `wait` is repeated until mpirun really ends. mpirun also waits for the driver's spawned workers,
// which leave by themselves only after PoolOptions::driver_silence_s when the driver exited in a
// hurry (a stop for a checkpoint): 10 s after the driver's status is known, mpirun is ended, so
// that the requeue comes inside the grace time.
void render_launch_body(std::ostringstream& o, const JobSpec& s, bool relaunch) {
  // A relaunched driver starts a new run: the worker jobs of the one before are not its own
  if (s.elastic && relaunch) o << "fibra_cancel_workers\n";
  o << mpirun_command(s) << " &\n";
  o << "fibra_mpirun=$!\n"
       "( while kill -0 \"$fibra_mpirun\" 2>/dev/null && [ ! -s \"$fibra_run.status\" ]; do sleep 1; done\n";
  // After a lost node mpirun waits for that node's daemon for good, and no worker needs the time
  if (relaunch)
    o << "  if [ -s \"$fibra_run.lost\" ]; then sleep 1; else sleep 10; fi\n";
  else
    o << "  sleep 10\n";
  o << "  if kill -0 \"$fibra_mpirun\" 2>/dev/null; then\n"
       "    echo \"fibra: mpirun is still running after the driver exited; ending it\" >&2\n"
       "    kill \"$fibra_mpirun\"; sleep 5; kill -KILL \"$fibra_mpirun\" 2>/dev/null\n"
       "  fi ) &\n"
       "fibra_reaper=$!\n"
       "while :; do\n"
       "  fibra_signalled=0\n"
       "  wait \"$fibra_mpirun\"\n"
       "  fibra_status=$?\n"
       "  # above 128 with the flag set: a trap interrupted wait, so wait again for mpirun's own status\n"
       "  [ \"$fibra_signalled\" = 1 ] && [ \"$fibra_status\" -gt 128 ] || break\n"
       "done\n"
       "kill \"$fibra_reaper\" 2>/dev/null\n"
       "fibra_status_known=0\n"
       "if [ -s \"$fibra_run.status\" ]; then fibra_status=$(cat \"$fibra_run.status\") fibra_status_known=1\n"
       "elif [ \"$fibra_status\" -eq 0 ]; then fibra_status=1; echo \"fibra: the driver's exit status is unknown\" "
       ">&2; fi\n"
       "rm -f \"$fibra_run.pid\" \"$fibra_run.status\"\n"
       "if [ -n \"$fibra_resender\" ]; then kill \"$fibra_resender\" 2>/dev/null; fi\n";
}

// Relaunches (checkpoint.relaunches): after a launch that did not end with 0 (nor with 75 unless the
// driver reported a lost node), each node of the allocation is asked to run a one-task step
// (`srun --overlap`, at most 30 s); those that do not are lost. With no node lost or reported,
// only a driver killed from outside (137, 143) or of unknown status runs again: one that failed by
// itself would fail the same way. Otherwise the driver runs again, on the nodes still alive: mpirun
// (ORTE's Slurm support) and fibra's placement read the nodes and their task counts from
// SLURM_NODELIST, SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE, so the script narrows those. The
// job itself is kept by `--no-kill`. The driver resumes from its checkpoint: mpirun's exit status
// is not trusted.
// While the driver runs: when it reports agents lost on other nodes (FIBRA_LOST_HOSTS_FILE; it
// spawns nothing more then, see PoolImpl::declare_lost), it is asked to stop for its checkpoint (USR1,
// again every 2 s until it exits), so that it can be relaunched with all the nodes still alive.
const char* const launch_watcher = R"SH(rm -f "$fibra_run.lost"
( while sleep 1; do
    if [ -s "$fibra_run.lost" ] && [ -s "$fibra_run.pid" ]; then
      echo "fibra: the driver lost its workers on $(sort -u "$fibra_run.lost" | paste -sd, -); asking it to stop for its checkpoint, to relaunch it on the nodes still alive"
      while [ -s "$fibra_run.pid" ]; do kill -USR1 "$(cat "$fibra_run.pid")" 2>/dev/null; sleep 2; done
      break
    fi
  done ) &
fibra_watcher=$!
)SH";

const char* const relaunch_helpers = R"SH(
# Relaunch on a lost node (checkpoint.relaunches): the driver runs again on the nodes still alive.
export FIBRA_LOST_HOSTS_FILE="$fibra_run.lost"  # the driver writes there the nodes it lost
fibra_relaunches=0 fibra_lost=""
fibra_nodes="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr '\n' ' ')"
fibra_tasks=""  # tasks per node, in the order of fibra_nodes ("2(x3),1" -> "2 2 2 1")
for fibra_item in ${SLURM_TASKS_PER_NODE//,/ }; do
  if [[ "$fibra_item" =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
    for ((fibra_i = 0; fibra_i < BASH_REMATCH[2]; fibra_i++)); do fibra_tasks+="${BASH_REMATCH[1]} "; done
  else fibra_tasks+="$fibra_item "; fi
done
fibra_probe() {  # keeps in fibra_nodes the nodes that run a step; the others go to fibra_newly_lost
  local n p i=0 alive="" tasks="" pids=()
  local -a counts=($fibra_tasks)
  rm -f "$fibra_run".up-*
  for n in $fibra_nodes; do
    ( timeout -k 5 30 srun --overlap --nodes=1 --ntasks=1 --nodelist="$n" true >/dev/null 2>&1 && : >"$fibra_run.up-$n" ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do wait "$p"; done; done
  for n in $fibra_nodes; do
    if [ -e "$fibra_run.up-$n" ]; then alive+="$n " tasks+="${counts[$i]} "; else fibra_newly_lost+="$n "; fi
    i=$((i + 1))
  done
  rm -f "$fibra_run".up-*
  fibra_nodes="$alive" fibra_tasks="$tasks" fibra_lost+="$fibra_newly_lost"
}
fibra_relaunch_needed() {  # after a launch: 0 (and the environment narrowed) if the driver runs again
  local reported=""  # nodes on which the driver lost its workers
  [ -s "$fibra_run.lost" ] && reported="$(sort -u "$fibra_run.lost" | paste -sd, -)"
  rm -f "$fibra_run.lost"
  case "$fibra_status" in 0) return 1 ;; @CHECKPOINT@) [ -n "$reported" ] || return 1 ;; esac
  if [ "$fibra_warned" = 1 ]; then echo "fibra: the driver ended with status $fibra_status after the warning signal; not relaunching it" >&2; return 1; fi
  local ended_at probe_s=$SECONDS
  ended_at="$(date -u +%H:%M:%SZ)"
  fibra_newly_lost=""
  fibra_probe
  probe_s=$((SECONDS - probe_s))
  # No node lost or reported: only a driver killed from outside (SIGKILL: the kernel for lack of
  # memory, say; SIGTERM) or whose status is unknown runs again. One that failed by itself (an
  # error, an abort, a crash) would fail the same way again.
  if [ -z "$fibra_newly_lost" ] && [ -z "$reported" ] && [ "$fibra_status_known" = 1 ]; then
    case "$fibra_status" in 137|143) ;; *) return 1 ;; esac
  fi
  local why="the driver ended with status $fibra_status at $ended_at${reported:+ after losing its workers on $reported}"
  why+="${fibra_newly_lost:+; node(s) ${fibra_newly_lost% } did not answer (probed in $probe_s s)}"
  if [ "$fibra_relaunches" -ge @MAX@ ]; then
    echo "fibra: $why; not relaunching it: relaunched @MAX@ time(s) already (checkpoint.relaunches)" >&2; return 1
  fi
  if [ -z "$fibra_nodes" ]; then echo "fibra: $why; no node of the job answers, so it cannot be relaunched" >&2; return 1; fi
  if [ "$fibra_warned" = 1 ]; then echo "fibra: $why; the warning signal came meanwhile: not relaunching it" >&2; return 1; fi
  fibra_relaunches=$((fibra_relaunches + 1))
  local list="${fibra_nodes% }" tasks="${fibra_tasks% }"
  list="${list// /,}" tasks="${tasks// /,}"
  echo "fibra: $why; relaunch $fibra_relaunches of @MAX@ on $list at $(date -u +%Y-%m-%dT%H:%M:%SZ), resuming from its checkpoint"
  export SLURM_JOB_NODELIST="$list" SLURM_NODELIST="$list" SLURM_TASKS_PER_NODE="$tasks"
  export SLURM_JOB_NUM_NODES="$(wc -w <<<"$fibra_nodes")" SLURM_NNODES="$(wc -w <<<"$fibra_nodes")"
  # A step of the lost run may hold its resources until slurmctld clears the lost node: mpirun's
  # own srun (its daemons) shares them rather than wait
  export SLURM_OVERLAP=1 FIBRA_RELAUNCH="$fibra_relaunches"
  return 0
}
fibra_launch
while fibra_relaunch_needed; do fibra_launch; done
if [ "$fibra_relaunches" -gt 0 ]; then echo "fibra: the driver was relaunched $fibra_relaunches time(s); node(s) lost: ${fibra_lost:-none}"; fi
)SH";

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

void render_launch(std::ostringstream& o, const JobSpec& s) {
  if (!s.checkpoint || s.checkpoint->relaunches <= 0) {
    o << '\n';
    render_launch_body(o, s, false);
    return;
  }
  std::ostringstream body;
  render_launch_body(body, s, true);
  o << "\nfibra_launch() {  # runs the driver once; sets fibra_status (and fibra_status_known)\n";
  o << launch_watcher;
  o << body.str();  // as written: an argument may hold a newline, which indenting would change
  o << "kill \"$fibra_watcher\" 2>/dev/null\n";
  o << "}\n";
  std::string helpers = replace_all(relaunch_helpers, "@MAX@", std::to_string(s.checkpoint->relaunches));
  o << replace_all(helpers, "@CHECKPOINT@", std::to_string(checkpoint_exit_status));
}

void render_epilogue(std::ostringstream& o, const JobSpec& s) {
  const bool requeue = s.checkpoint && s.checkpoint->requeue;
  if (s.elastic) o << "\nfibra_elastic_end\n";
  o << "\nif [ \"$fibra_status\" -eq " << checkpoint_exit_status << " ]; then\n";
  if (requeue) {
    const std::string max = std::to_string(s.checkpoint->max_restarts);
    o << "  if [ \"${SLURM_RESTART_COUNT:-0}\" -ge " << max
      << " ]; then\n"
         "    echo \"fibra: the driver stopped for a checkpoint, but the job was requeued "
      << max
      << " times already (checkpoint.max_restarts); resubmit it to resume\" >&2\n"
         "  else\n"
         "    echo \"fibra: the driver stopped for a checkpoint; requeueing job ${SLURM_JOB_ID}\"\n"
         "    if scontrol requeue \"${SLURM_JOB_ID}\"; then exit 0; fi\n"
         "    echo \"fibra: 'scontrol requeue ${SLURM_JOB_ID}' failed; resubmit this job to resume\" >&2\n"
         "  fi\n";
  } else {
    o << "  echo \"fibra: the driver stopped for a checkpoint; requeue is off, so resubmit the job to resume\" >&2\n";
  }
  o << "fi\n";
  o << "echo \"fibra: the driver exited with status ${fibra_status}\"\n";
  o << "exit \"$fibra_status\"\n";
}

}  // namespace

std::string shell_quote(std::string_view s) {
  const bool safe = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("_-./=:,+%@").find(c) != std::string_view::npos;
  });
  if (safe) return std::string(s);
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string render_script(const JobSpec& s) {
  std::ostringstream o;
  o << "#!/bin/bash\n";
  o << "# Rendered by 'fibra slurm render' from " << s.source << ".\n";
  render_sbatch_lines(o, s);
  if (s.checkpoint && !s.checkpoint->path.empty()) o << "# fibra-checkpoint: " << s.checkpoint->path << '\n';
  if (!s.events.empty()) o << "# fibra-events: " << s.events << '\n';
  render_signals(o);
  render_environment(o, s);
  render_launch(o, s);
  render_epilogue(o, s);
  return o.str();
}

}  // namespace fibra::slurm
