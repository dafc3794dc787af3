// Job spec parsing: defaults, and the exact text of every error a user may read.
#include <fibra/slurm/spec.hpp>

#include <gtest/gtest.h>

#include <string>

namespace fs = fibra::slurm;

namespace {

const char* const minimal = "[job]\nname = \"t\"\nprogram = \"./app\"\nworkers = 4\n";

/// The message of the SpecError that parsing `text` throws, or "no error".
std::string error_of(const std::string& text) {
  try {
    fs::parse_spec(text, "t.toml");
  } catch (const fs::SpecError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Spec, MinimalSpecGetsDefaults) {
  fs::JobSpec s = fs::parse_spec(minimal, "t.toml");
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.program, "./app");
  EXPECT_EQ(s.workers, 4);
  EXPECT_EQ(s.tasks, 5);  // one slot for the driver and one per worker
  EXPECT_EQ(s.nodes, 1);
  EXPECT_FALSE(s.checkpoint);
  EXPECT_FALSE(s.array);
}

TEST(Spec, OversubscribeNeedsOneTask) {
  fs::JobSpec s = fs::parse_spec(std::string(minimal) + "oversubscribe = true\n", "t.toml");
  EXPECT_EQ(s.tasks, 1);
}

TEST(Spec, FullSpec) {
  fs::JobSpec s =
      fs::parse_spec(std::string(minimal) +
                         "args = [\"--x\", \"1\"]\nsetup = [\"module load openmpi\"]\nenv = { A = \"b c\" }\n"
                         "[resources]\ntime = \"1-02:03:04\"\nmemory = \"4G\"\ngpus = 2\n"
                         "[checkpoint]\npath = \"run-%a.ckpt\"\ngrace = 90\nrequeue = true\n"
                         "[array]\nindices = \"0-9\"\nthrottle = 3\n[sbatch]\nextra = [\"--exclusive\"]\n",
                     "t.toml");
  EXPECT_EQ(s.args, (std::vector<std::string>{"--x", "1"}));
  EXPECT_EQ(s.env.at("A"), "b c");
  EXPECT_EQ(s.time_s, 86400 + 2 * 3600 + 3 * 60 + 4);
  EXPECT_EQ(s.checkpoint->grace_s, 90);
  EXPECT_TRUE(s.checkpoint->requeue);
  EXPECT_EQ(s.checkpoint->signal, "USR1");
  EXPECT_EQ(s.array->throttle, 3);
  EXPECT_EQ(s.sbatch_extra.front(), "--exclusive");
}

TEST(Spec, TimeFormats) {
  EXPECT_EQ(fs::parse_time_limit("30"), 1800);
  EXPECT_EQ(fs::parse_time_limit("10:30"), 630);
  EXPECT_EQ(fs::parse_time_limit("1:00:00"), 3600);
  EXPECT_EQ(fs::parse_time_limit("2-0"), 2 * 86400);
  EXPECT_EQ(fs::parse_time_limit("2-1:30"), 2 * 86400 + 3600 + 1800);
  EXPECT_EQ(fs::parse_time_limit("1:2:3:4"), std::nullopt);
  EXPECT_EQ(fs::parse_time_limit("1h"), std::nullopt);
  EXPECT_EQ(fs::parse_time_limit("2-1:30:15"), 2 * 86400 + 3600 + 1800 + 15);
  EXPECT_EQ(fs::parse_time_limit("1234567"), std::nullopt) << "a field of more than 6 digits";
  EXPECT_EQ(fs::parse_time_limit("UNLIMITED"), std::nullopt);
  EXPECT_EQ(fs::parse_time_limit("-5"), std::nullopt);
  EXPECT_EQ(fs::parse_time_limit(""), std::nullopt);
  const auto unlimited = fs::parse_spec(std::string(minimal) + "[resources]\ntime = \"UNLIMITED\"\n", "t.toml");
  EXPECT_EQ(unlimited.time, "UNLIMITED");
  EXPECT_EQ(unlimited.time_s, 0);
}

TEST(SpecErrors, UnknownKeyNamesKeyAndLine) {
  EXPECT_EQ(error_of(std::string(minimal) + "wrokers = 4\n"),
            "t.toml:5: unknown key 'job.wrokers'; [job] takes name, program, args, workers, oversubscribe, workdir, "
            "output, error, setup, env, events, mpirun_args");
}

TEST(SpecErrors, UnknownTable) {
  EXPECT_EQ(error_of(std::string(minimal) + "[resource]\nnodes = 1\n"),
            "t.toml:5: unknown table [resource]; a spec has the tables [job], [resources], [checkpoint], [array], "
            "[elastic], [sbatch]");
}

TEST(SpecErrors, WrongType) {
  EXPECT_EQ(error_of("[job]\nname = \"t\"\nprogram = \"./app\"\nworkers = \"4\"\n"),
            "t.toml:4: 'job.workers' must be an integer, not a string");
  EXPECT_EQ(error_of(std::string(minimal) + "[checkpoint]\npath = \"c\"\nrequeue = \"yes\"\n"),
            "t.toml:7: 'checkpoint.requeue' must be a boolean (true or false), not a string");
  EXPECT_EQ(error_of(std::string(minimal) + "args = [\"a\", 2]\n"),
            "t.toml:5: 'job.args' must be an array of strings, but holds an integer");
}

TEST(SpecErrors, BadTimeFormat) {
  EXPECT_EQ(error_of(std::string(minimal) + "[resources]\ntime = \"1:2:3:4\"\n"),
            "t.toml:6: 'resources.time' is \"1:2:3:4\", which is not a Slurm time; use MM, MM:SS, HH:MM:SS, D-HH, "
            "D-HH:MM, D-HH:MM:SS or UNLIMITED");
}

TEST(SpecErrors, NotToml) {
  EXPECT_EQ(error_of("[job]\nname = \n"),
            "t.toml:2: not valid TOML: Error while parsing key-value pair: expected value, saw '\\n'");
}

TEST(SpecErrors, MissingKeys) {
  EXPECT_EQ(error_of("[resources]\nnodes = 1\n"),
            "t.toml: the [job] table is missing; it needs at least 'name' and 'program'");
  EXPECT_EQ(error_of("[job]\nname = \"t\"\n"), "t.toml: 'job.program' is missing; it is the fibra program to run");
}

TEST(SpecErrors, WorkersNeedSlots) {
  EXPECT_EQ(error_of(std::string(minimal) + "[resources]\ntasks = 4\n"),
            "t.toml:6: 'resources.tasks' = 4 leaves no slot for the driver and 4 workers (needs 5); raise it to 5 "
            "or set 'job.oversubscribe = true'");
}

TEST(SpecErrors, GpusTwice) {
  EXPECT_EQ(error_of(std::string(minimal) + "[resources]\ngpus = 1\ngres = \"gpu:2\"\n"),
            "t.toml:6: 'resources.gpus' and 'resources.gres' = \"gpu:2\" both ask for GPUs; keep one of them");
}

TEST(SpecErrors, ThrottleWithoutArray) {
  EXPECT_EQ(error_of(std::string(minimal) + "[array]\nthrottle = 2\n"),
            "t.toml:6: 'array.throttle' needs 'array.indices' (the tasks to throttle), e.g. indices = \"0-9\"");
}

TEST(SpecErrors, BadArrayIndices) {
  EXPECT_EQ(error_of(std::string(minimal) + "[array]\nindices = \"0..9\"\n"),
            "t.toml:6: 'array.indices' is \"0..9\"; use Slurm's form, like \"0-9\", \"1,3,5\" or \"0-30:10\"");
}

TEST(SpecErrors, RequeueWithoutCheckpoint) {
  EXPECT_EQ(error_of(std::string(minimal) + "[checkpoint]\nrequeue = true\n"),
            "t.toml:6: 'checkpoint.requeue' needs 'checkpoint.path': a requeued run without a checkpoint starts over");
}

TEST(SpecErrors, GraceLongerThanTime) {
  EXPECT_EQ(error_of(std::string(minimal) + "[resources]\ntime = \"5\"\n[checkpoint]\npath = \"c\"\ngrace = 300\n"),
            "t.toml:9: 'checkpoint.grace' = 300 s is not shorter than 'resources.time' (300 s); the warning would "
            "come before the job starts");
}

TEST(SpecErrors, GraceOverSlurmsLimit) {
  EXPECT_EQ(error_of(std::string(minimal) + "[checkpoint]\npath = \"c\"\ngrace = 70000\n"),
            "t.toml:7: 'checkpoint.grace' = 70000 s is more than Slurm's --signal allows (65535 s)");
}

TEST(SpecErrors, ArrayTasksNeedTheirOwnCheckpoint) {
  EXPECT_EQ(error_of(std::string(minimal) + "[array]\nindices = \"0-3\"\n[checkpoint]\npath = \"run.h5\"\n"),
            "t.toml:8: 'checkpoint.path' is \"run.h5\"; with [array] every task needs its own checkpoint: put %a "
            "(the task id) in it, like \"sweep-%a.h5\"");
  const auto s = fs::parse_spec(std::string(minimal) +
                                    "[array]\nindices = \"0-3\"\n[checkpoint]\npath = \"r-%a.h5\"\n"
                                    "requeue = true\nmax_restarts = 2\n",
                                "t.toml");
  EXPECT_EQ(s.checkpoint->path, "r-%a.h5");
  EXPECT_EQ(s.checkpoint->max_restarts, 2);
  EXPECT_EQ(fs::parse_spec(std::string(minimal) + "[checkpoint]\npath = \"c\"\n", "t.toml").checkpoint->max_restarts,
            10);
  EXPECT_EQ(
      error_of(std::string(minimal) + "[checkpoint]\npath = \"r-%a.h5\"\n"),
      "t.toml:6: 'checkpoint.path' is \"r-%a.h5\"; %a stands for an array task's id, and this job has no [array]");
}

// job.events: the run's event log folder; an array's tasks each need their own (%a), a job without
// [array] has no %a to give, and FIBRA_EVENTS in env would be a second way to say it.
TEST(SpecErrors, EventsLikeTheCheckpointTakeTheTaskIdInAnArray) {
  EXPECT_EQ(fs::parse_spec(std::string(minimal) + "events = \"run-events\"\n", "t.toml").events, "run-events");
  EXPECT_EQ(error_of(std::string(minimal) + "events = \"ev\"\n[array]\nindices = \"0-3\"\n"),
            "t.toml:5: 'job.events' is \"ev\"; with [array] every task needs its own event log (one process writes a "
            "folder): put %a (the task id) in it, like \"events-%a\"");
  EXPECT_EQ(error_of(std::string(minimal) + "events = \"ev-%a\"\n"),
            "t.toml:5: 'job.events' is \"ev-%a\"; %a stands for an array task's id, and this job has no [array]");
  EXPECT_EQ(error_of(std::string(minimal) + "env = { FIBRA_EVENTS = \"ev\" }\n"),
            "t.toml:5: 'job.env' sets FIBRA_EVENTS; give the folder as 'job.events' instead, which 'fibra slurm "
            "status' reads too");
}

// A job of several nodes with a checkpoint relaunches its driver twice by default; one node, or no
// checkpoint, none; relaunching without a checkpoint would start over and is refused.
TEST(Spec, RelaunchesDefaultToTwoForSeveralNodesWithACheckpoint) {
  const std::string two_nodes = std::string(minimal) + "[resources]\nnodes = 2\n";
  EXPECT_EQ(fs::parse_spec(two_nodes + "[checkpoint]\npath = \"c\"\n", "t.toml").checkpoint->relaunches, 2);
  EXPECT_EQ(fs::parse_spec(two_nodes + "[checkpoint]\npath = \"c\"\nrelaunches = 5\n", "t.toml").checkpoint->relaunches,
            5);
  EXPECT_EQ(fs::parse_spec(two_nodes + "[checkpoint]\npath = \"c\"\nrelaunches = 0\n", "t.toml").checkpoint->relaunches,
            0);
  EXPECT_EQ(fs::parse_spec(std::string(minimal) + "[checkpoint]\npath = \"c\"\n", "t.toml").checkpoint->relaunches, 0);
  EXPECT_EQ(fs::parse_spec(two_nodes + "[checkpoint]\nsignal = \"TERM\"\n", "t.toml").checkpoint->relaunches, 0);
  EXPECT_EQ(error_of(two_nodes + "[checkpoint]\nrelaunches = 2\n"),
            "t.toml:8: 'checkpoint.relaunches' needs 'checkpoint.path': a relaunched driver without a checkpoint "
            "starts over");
  EXPECT_NE(error_of(two_nodes + "[checkpoint]\npath = \"c\"\nrelaunches = -1\n").find("'checkpoint.relaunches'"),
            std::string::npos);
}

TEST(SpecErrors, SpacesCannotGoOnSbatchLines) {
  EXPECT_EQ(error_of(std::string(minimal) + "output = \"my run.out\"\n"),
            "t.toml:5: 'job.output' is \"my run.out\"; it goes on an #SBATCH line, which cannot hold a space: use a "
            "value without one");
  EXPECT_EQ(error_of(std::string(minimal) + "[resources]\npartition = \"big mem\"\n"),
            "t.toml:6: 'resources.partition' is \"big mem\"; it goes on an #SBATCH line, which cannot hold a space: "
            "use a value without one");
  EXPECT_EQ(error_of(std::string(minimal) + "[sbatch]\nextra = [\"--comment=a b\"]\n"),
            "t.toml:6: 'sbatch.extra' has \"--comment=a b\"; each entry is one sbatch option without spaces, like "
            "\"--exclusive\"");
}

TEST(SpecErrors, BadSignalAndMemory) {
  EXPECT_EQ(error_of(std::string(minimal) + "[checkpoint]\npath = \"c\"\nsignal = \"HUP\"\n"),
            "t.toml:7: 'checkpoint.signal' is \"HUP\"; the driver checkpoints on \"USR1\" or \"TERM\"");
  EXPECT_EQ(
      error_of(std::string(minimal) + "[resources]\nmemory = \"4GB\"\n"),
      "t.toml:6: 'resources.memory' is \"4GB\"; use a number of megabytes or a number with K, M, G or T, like \"4G\"");
}

TEST(SpecErrors, NumbersInRange) {
  EXPECT_EQ(error_of("[job]\nname = \"t\"\nprogram = \"p\"\nworkers = -1\n"),
            "t.toml:4: 'job.workers' must be at least 0, not -1");
  EXPECT_EQ(error_of(std::string(minimal) + "[resources]\nnodes = 6\n"),
            "t.toml:6: 'resources.nodes' = 6 is more than 'resources.tasks' = 5; every node needs at least one task");
}

TEST(SpecErrors, EnvNamesAndMissingFile) {
  EXPECT_EQ(error_of(std::string(minimal) + "env = { \"A-B\" = \"1\" }\n"),
            "t.toml:5: 'job.env' has 'A-B', which is not a shell variable name");
  try {
    fs::parse_spec_file("/nonexistent/job.toml");
    FAIL() << "no error";
  } catch (const fs::SpecError& e) {
    EXPECT_STREQ(e.what(), "cannot read the job spec '/nonexistent/job.toml': no such file or no permission");
  }
}

TEST(Spec, ElasticDefaultsComeFromTheJobsOwnResources) {
  fs::JobSpec s = fs::parse_spec(std::string(minimal) +
                                     "[resources]\nnodes = 2\ntasks = 10\ntime = \"3:00:00\"\npartition = \"cpu\"\n"
                                     "[elastic]\nmax_nodes = 6\n",
                                 "t.toml");
  ASSERT_TRUE(s.elastic);
  EXPECT_EQ(s.elastic->min_nodes, 2);         // the job's own nodes
  EXPECT_EQ(s.elastic->workers_per_node, 5);  // its tasks per node
  EXPECT_EQ(s.elastic->worker_time, "3:00:00");
  EXPECT_EQ(s.elastic->worker_time_s, 3 * 3600);
  EXPECT_EQ(s.elastic->partition, "cpu");
  EXPECT_EQ(s.elastic->join_file, "t-%j.join");
  EXPECT_EQ(s.elastic->backlog, 1);
}

TEST(SpecErrors, ElasticBoundsAndTimesAreCheckedByName) {
  const std::string two_nodes = std::string(minimal) + "[resources]\nnodes = 2\n[elastic]\n";
  EXPECT_EQ(error_of(two_nodes + "min_nodes = 3\n"),
            "t.toml: 'elastic.max_nodes' is missing; it is how many nodes the run may grow to, the job's own 2 "
            "included, e.g. max_nodes = 5");
  EXPECT_EQ(error_of(two_nodes + "max_nodes = 2\n"),
            "t.toml:8: 'elastic.max_nodes' = 2 leaves no room to grow: the job's own nodes ('resources.nodes' = "
            "2) count in it; make it larger than 2");
  EXPECT_EQ(error_of(two_nodes + "max_nodes = 4\nmin_nodes = 1\n"),
            "t.toml:9: 'elastic.min_nodes' = 1 is below 'resources.nodes' = 2: the job's own nodes stay in the "
            "run to its end; make it at least 2");
  EXPECT_EQ(error_of(two_nodes + "max_nodes = 4\nmin_nodes = 5\n"),
            "t.toml:9: 'elastic.min_nodes' = 5 is more than 'elastic.max_nodes' = 4");
  EXPECT_EQ(error_of(two_nodes + "max_nodes = 4\nworker_time = \"1:00\"\n"),
            "t.toml:9: 'elastic.worker_time' is \"1:00\" (60 s), which leaves a worker job no time before it "
            "drains, 'elastic.drain_before_s' = 60 s before its limit; ask for at least 70 s");
  EXPECT_EQ(error_of(two_nodes + "max_nodes = 4\nworker_time = \"UNLIMITED\"\n"),
            "t.toml:9: 'elastic.worker_time' is \"UNLIMITED\"; a worker job needs a time limit, to drain before "
            "it: give one, like \"1:00:00\"");
  EXPECT_EQ(error_of(two_nodes + "max_nodes = 4\nmax_nodse = 5\n"),
            "t.toml:9: unknown key 'elastic.max_nodse'; [elastic] takes min_nodes, max_nodes, workers_per_node, "
            "worker_time, partition, backlog, idle_timeout_s, max_submit_per_minute, drain_before_s, join_file");
  EXPECT_NE(error_of(std::string(minimal) + "[array]\nindices = \"0-3\"\n[elastic]\nmax_nodes = 3\n")
                .find("[elastic] and [array] do not go together"),
            std::string::npos);
}
