// Job spec parsing and checking (see fibra/slurm/spec.hpp and docs/slurm.md).
#include <fibra/slurm/spec.hpp>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/slurm_time.hpp"  // Slurm durations, parsed one way everywhere
#include "toml_reader.hpp"

namespace fibra::slurm {
namespace {

using detail::TableReader;

const char* const known_tables = "[job], [resources], [checkpoint], [array], [elastic], [sbatch]";

const toml::table* sub_table(const toml::table& doc, const std::string& source, const char* name) {
  const toml::node* n = doc.get(name);
  if (!n) return nullptr;
  if (!n->is_table())
    throw SpecError(detail::where(source, n->source()) + "'" + name + "' must be a table ([" + name + "]), not " +
                    detail::type_phrase(n->type()));
  return n->as_table();
}

void check_tables(const toml::table& doc, const std::string& source) {
  static const char* const names[] = {"job", "resources", "checkpoint", "array", "elastic", "sbatch"};
  for (auto&& [k, v] : doc) {
    const std::string name(k.str());
    if (std::find(std::begin(names), std::end(names), name) != std::end(names)) continue;
    throw SpecError(detail::where(source, k.source()) + "unknown " +
                    (v.is_table() ? "table [" + name + "]" : "key '" + name + "'") + "; a spec has the tables " +
                    known_tables);
  }
}

// Values that go on `#SBATCH --option=value` lines: sbatch splits those at white space.
void no_spaces(const TableReader& r, const std::string& key, const std::string& value) {
  if (value.find_first_of(" \t") != std::string::npos)
    r.fail(key, "is \"" + value + "\"; it goes on an #SBATCH line, which cannot hold a space: use a value without one");
}

void read_job(JobSpec& s, const toml::table* t) {
  TableReader r(s.source, "job", t);
  r.read("name", s.name);
  r.read("program", s.program);
  r.read("args", s.args);
  r.read("workers", s.workers, 0);
  r.read("oversubscribe", s.oversubscribe);
  r.read("workdir", s.workdir);
  r.read("output", s.output);
  r.read("error", s.error);
  r.read("setup", s.setup);
  r.read("env", s.env);
  r.read("events", s.events);
  r.read("mpirun_args", s.mpirun_args);
  r.finish();
  if (!t) throw SpecError(s.source + ": the [job] table is missing; it needs at least 'name' and 'program'");
  if (s.name.empty())
    throw SpecError(s.source + ": 'job.name' is missing; it names the job in squeue and in file names");
  if (!std::regex_match(s.name, std::regex("[A-Za-z0-9_.+-]+")))
    r.fail("name", "is \"" + s.name + "\"; use letters, digits and _ . + - only");
  if (s.program.empty()) throw SpecError(s.source + ": 'job.program' is missing; it is the fibra program to run");
  no_spaces(r, "workdir", s.workdir);
  no_spaces(r, "output", s.output);
  no_spaces(r, "error", s.error);
  no_spaces(r, "events", s.events);
  if (s.env.count("FIBRA_EVENTS"))
    r.fail("env", "sets FIBRA_EVENTS; give the folder as 'job.events' instead, which 'fibra slurm status' reads too");
}

// After [array]: each task of an array writes a log of its own (a folder has one writer).
void check_events(const JobSpec& s, const toml::table* job) {
  const bool per_task = s.events.find("%a") != std::string::npos;
  const std::string where = TableReader(s.source, "job", job).where_of("events");
  if (!s.array && per_task)
    throw SpecError(where + "'job.events' is \"" + s.events +
                    "\"; %a stands for an array task's id, and this job has no [array]");
  if (s.array && !s.events.empty() && !per_task)
    throw SpecError(where + "'job.events' is \"" + s.events +
                    "\"; with [array] every task needs its own event log (one process writes a folder): put %a "
                    "(the task id) in it, like \"events-%a\"");
}

void read_resources(JobSpec& s, const toml::table* t) {
  TableReader r(s.source, "resources", t);
  r.read("nodes", s.nodes, 1);
  r.read("tasks", s.tasks, 1);
  r.read("cpus_per_task", s.cpus_per_task, 1);
  r.read("memory", s.memory);
  r.read_time("time", s.time, s.time_s);
  r.read("partition", s.partition);
  r.read("account", s.account);
  r.read("qos", s.qos);
  r.read("constraint", s.constraint);
  r.read("gres", s.gres);
  r.read("gpus", s.gpus, 0);
  r.finish();
  for (const auto& [key, value] : {std::pair<const char*, const std::string&>{"partition", s.partition},
                                   {"account", s.account},
                                   {"qos", s.qos},
                                   {"constraint", s.constraint},
                                   {"gres", s.gres}})
    no_spaces(r, key, value);
  if (!s.memory.empty() && !std::regex_match(s.memory, std::regex("[0-9]+[KMGT]?")))
    r.fail("memory", "is \"" + s.memory + "\"; use a number of megabytes or a number with K, M, G or T, like \"4G\"");
  const int needed = s.oversubscribe ? 1 : s.workers + 1;
  if (!r.has("tasks")) s.tasks = needed;
  if (s.tasks < needed)
    r.fail("tasks", "= " + std::to_string(s.tasks) + " leaves no slot for the driver and " + std::to_string(s.workers) +
                        " workers (needs " + std::to_string(needed) + "); raise it to " + std::to_string(needed) +
                        " or set 'job.oversubscribe = true'");
  if (s.nodes > s.tasks)
    r.fail("nodes", "= " + std::to_string(s.nodes) + " is more than 'resources.tasks' = " + std::to_string(s.tasks) +
                        "; every node needs at least one task");
  if (s.gpus > 0 && s.gres.find("gpu") != std::string::npos)
    r.fail("gpus", "and 'resources.gres' = \"" + s.gres + "\" both ask for GPUs; keep one of them");
}

void read_checkpoint(JobSpec& s, const toml::table* t) {
  if (!t) return;
  TableReader r(s.source, "checkpoint", t);
  CheckpointSpec c;
  r.read("path", c.path);
  r.read("signal", c.signal);
  r.read("grace", c.grace_s, 1);
  r.read("requeue", c.requeue);
  r.read("max_restarts", c.max_restarts, 0);
  c.relaunches = s.nodes > 1 && !c.path.empty() ? 2 : 0;
  r.read("relaunches", c.relaunches, 0);
  r.finish();
  if (c.grace_s > 65535)
    r.fail("grace", "= " + std::to_string(c.grace_s) + " s is more than Slurm's --signal allows (65535 s)");
  if (!s.array && c.path.find("%a") != std::string::npos)
    r.fail("path", "is \"" + c.path + "\"; %a stands for an array task's id, and this job has no [array]");
  if (s.array && !c.path.empty() && c.path.find("%a") == std::string::npos)
    r.fail("path", "is \"" + c.path +
                       "\"; with [array] every task needs its own checkpoint: put %a (the task id) in it, "
                       "like \"sweep-%a.h5\"");
  if (c.signal != "USR1" && c.signal != "TERM")
    r.fail("signal", "is \"" + c.signal + "\"; the driver checkpoints on \"USR1\" or \"TERM\"");
  if (c.path.empty() && c.requeue)
    throw SpecError(r.where_of("requeue") +
                    "'checkpoint.requeue' needs 'checkpoint.path': a requeued run without a checkpoint starts over");
  if (c.path.empty() && c.relaunches > 0)  // the default is 0 without a path: it was given
    throw SpecError(
        r.where_of("relaunches") +
        "'checkpoint.relaunches' needs 'checkpoint.path': a relaunched driver without a checkpoint starts over");

  if (s.time_s > 0 && c.grace_s >= s.time_s)
    r.fail("grace", "= " + std::to_string(c.grace_s) + " s is not shorter than 'resources.time' (" +
                        std::to_string(s.time_s) + " s); the warning would come before the job starts");
  s.checkpoint = c;
}

void read_array(JobSpec& s, const toml::table* t) {
  if (!t) return;
  TableReader r(s.source, "array", t);
  ArraySpec a;
  r.read("indices", a.indices);
  r.read("throttle", a.throttle, 1);
  r.finish();
  if (a.indices.empty()) {
    if (r.has("throttle")) r.fail("throttle", "needs 'array.indices' (the tasks to throttle), e.g. indices = \"0-9\"");
    throw SpecError(s.source + ": 'array.indices' is missing; e.g. indices = \"0-9\" runs tasks 0 to 9");
  }
  static const std::regex range("[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*");
  if (!std::regex_match(a.indices, range))
    r.fail("indices", "is \"" + a.indices + "\"; use Slurm's form, like \"0-9\", \"1,3,5\" or \"0-30:10\"");
  s.array = a;
}

// A worker job drains this long before its limit, and runs at least this much more (Pool::adapt).
constexpr int drain_margin_s = 10;

void read_elastic(JobSpec& s, const toml::table* t) {
  if (!t) return;
  TableReader r(s.source, "elastic", t);
  ElasticSpec e;
  e.min_nodes = s.nodes;
  // (With oversubscribe, tasks is 1: the workers spread over the nodes say more.)
  e.workers_per_node = std::max({1, s.tasks / s.nodes, (s.workers + s.nodes - 1) / s.nodes});
  e.partition = s.partition;
  if (s.time_s > 0) {
    e.worker_time = s.time;
    e.worker_time_s = s.time_s;
  } else {
    e.worker_time = "1:00:00";
    e.worker_time_s = 3600;
  }
  e.join_file = s.name + "-%j.join";
  r.read("min_nodes", e.min_nodes, 1);
  r.read("max_nodes", e.max_nodes, 1);
  r.read("workers_per_node", e.workers_per_node, 1);
  r.read_time("worker_time", e.worker_time, e.worker_time_s);
  r.read("partition", e.partition);
  r.read("backlog", e.backlog, 1);
  r.read("idle_timeout_s", e.idle_timeout_s, 1);
  r.read("max_submit_per_minute", e.max_submit_per_minute, 1);
  r.read("drain_before_s", e.drain_before_s, 0);
  r.read("join_file", e.join_file);
  r.finish();
  const std::string own = "'resources.nodes' = " + std::to_string(s.nodes);
  if (!r.has("max_nodes"))
    throw SpecError(s.source + ": 'elastic.max_nodes' is missing; it is how many nodes the run may grow to, " +
                    "the job's own " + std::to_string(s.nodes) +
                    " included, e.g. max_nodes = " + std::to_string(s.nodes + 3));
  if (e.max_nodes <= s.nodes)
    r.fail("max_nodes", "= " + std::to_string(e.max_nodes) + " leaves no room to grow: the job's own nodes (" + own +
                            ") count in it; make it larger than " + std::to_string(s.nodes));
  if (e.min_nodes < s.nodes)
    r.fail("min_nodes", "= " + std::to_string(e.min_nodes) + " is below " + own +
                            ": the job's own nodes stay in the run to its end; make it at least " +
                            std::to_string(s.nodes));
  if (e.min_nodes > e.max_nodes)
    r.fail("min_nodes",
           "= " + std::to_string(e.min_nodes) + " is more than 'elastic.max_nodes' = " + std::to_string(e.max_nodes));
  if (e.worker_time_s == 0)
    r.fail("worker_time", "is \"" + e.worker_time +
                              "\"; a worker job needs a time limit, to drain before it: give one, like \"1:00:00\"");
  if (e.worker_time_s < e.drain_before_s + drain_margin_s)
    r.fail("worker_time", "is \"" + e.worker_time + "\" (" + std::to_string(e.worker_time_s) +
                              " s), which leaves a worker job no time before it drains, 'elastic.drain_before_s' = " +
                              std::to_string(e.drain_before_s) + " s before its limit; ask for at least " +
                              std::to_string(e.drain_before_s + drain_margin_s) + " s");
  if (e.max_submit_per_minute > 600)
    r.fail("max_submit_per_minute", "= " + std::to_string(e.max_submit_per_minute) + " is more than 600 (10 a second)");
  if (e.workers_per_node > 4096) r.fail("workers_per_node", "must be at most 4096");
  no_spaces(r, "partition", e.partition);
  no_spaces(r, "join_file", e.join_file);
  if (e.join_file.empty()) r.fail("join_file", "is empty; leave it out for \"<name>-%j.join\"");
  if (s.array)
    throw SpecError(r.where_of("max_nodes") +
                    "[elastic] and [array] do not go together: every array task would grow on its own; "
                    "make the sweep one elastic job (a Pool with fibra::tune or a map), or drop [elastic]");
  s.elastic = e;
}

void read_sbatch(JobSpec& s, const toml::table* t) {
  TableReader r(s.source, "sbatch", t);
  r.read("extra", s.sbatch_extra);
  r.finish();
  for (const std::string& line : s.sbatch_extra)
    if (line.empty() || line[0] != '-' || line.find_first_of(" \t") != std::string::npos)
      r.fail("extra", "has \"" + line + "\"; each entry is one sbatch option without spaces, like \"--exclusive\"");
}

}  // namespace

std::optional<long> parse_time_limit(std::string_view text) {
  const double s = fibra::detail::slurm_time_s(std::string(text));  // the parser the driver and agents use too
  if (s < 0) return std::nullopt;
  return static_cast<long>(s);
}

JobSpec parse_spec(std::string_view text, const std::string& source) {
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw SpecError(detail::where(source, e.source()) + "not valid TOML: " + std::string(e.description()));
  }
  JobSpec s;
  s.source = source;
  check_tables(doc, source);
  read_job(s, sub_table(doc, source, "job"));
  read_resources(s, sub_table(doc, source, "resources"));
  read_array(s, sub_table(doc, source, "array"));
  read_checkpoint(s, sub_table(doc, source, "checkpoint"));  // after [array]: its path then needs %a
  check_events(s, sub_table(doc, source, "job"));
  read_elastic(s, sub_table(doc, source, "elastic"));
  read_sbatch(s, sub_table(doc, source, "sbatch"));
  return s;
}

JobSpec parse_spec_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError("cannot read the job spec '" + path + "': no such file or no permission");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_spec(text.str(), path);
}

}  // namespace fibra::slurm
