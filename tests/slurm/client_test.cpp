// Reading scontrol's output and putting sbatch's errors in plain words (no cluster needed).
#include <fibra/slurm/client.hpp>
#include <fibra/slurm/render.hpp>

#include <gtest/gtest.h>

namespace fs = fibra::slurm;

TEST(Client, ParsesScontrolJobLines) {
  const std::string text =
      "JobId=12 JobName=sweep UserId=root(0) JobState=COMPLETED Reason=None Requeue=1 Restarts=1 BatchFlag=1 "
      "ExitCode=0:0 NodeList=localhost WorkDir=/tmp/w StdOut=/tmp/w/sweep-12.out\n"
      "JobId=14 ArrayJobId=13 ArrayTaskId=1 JobName=sweep JobState=FAILED Reason=NonZeroExitCode Restarts=0 "
      "ExitCode=3:0 NodeList=localhost\n";
  std::vector<fs::JobStatus> jobs = fs::parse_scontrol_jobs(text);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id, "12");
  EXPECT_EQ(jobs[0].state, "COMPLETED");
  EXPECT_EQ(jobs[0].restarts, 1);
  EXPECT_EQ(jobs[0].work_dir, "/tmp/w");
  EXPECT_EQ(jobs[1].array_task, "1");
  EXPECT_EQ(jobs[1].exit_code, 3);
  EXPECT_TRUE(fs::is_final_state(jobs[1].state));
  EXPECT_FALSE(fs::is_final_state("PENDING"));
}

TEST(Client, ExplainsSbatchErrors) {
  fs::JobSpec s = fs::parse_spec(
      "[job]\nname = \"t\"\nprogram = \"p\"\n[resources]\npartition = \"nope\"\ntime = \"2:00:00\"\n", "t.toml");
  EXPECT_EQ(fs::explain_sbatch_error("sbatch: error: invalid partition specified: nope\n"
                                     "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
                                     s),
            "sbatch refused job 't' (t.toml): partition 'nope' does not exist on this cluster; 'sinfo -s' lists the "
            "partitions [sbatch: Invalid partition name specified]");
  EXPECT_EQ(fs::explain_sbatch_error("sbatch: error: Batch job submission failed: Requested time limit is invalid "
                                     "(missing or exceeds some limit)\n",
                                     s),
            "sbatch refused job 't' (t.toml): the time limit '2:00:00' is more than partition 'nope' allows; "
            "'sinfo -o \"%P %l\"' shows each partition's limit [sbatch: Requested time limit is invalid (missing or "
            "exceeds some limit)]");
}

TEST(Client, RunsCommands) {
  fs::CommandResult r = fs::run_command({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(fs::run_command({"/nonexistent/fibra-no-such-command"}).status, 127);
}

TEST(Render, QuotesForTheShell) {
  EXPECT_EQ(fs::shell_quote("plain-arg_1.txt"), "plain-arg_1.txt");
  EXPECT_EQ(fs::shell_quote("two words"), "'two words'");
  EXPECT_EQ(fs::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(fs::shell_quote(""), "''");
}

// Relaunching needs the allocation kept when a node fails (--no-kill) and the loop around the
// launch; a job that does not relaunch keeps Slurm's default (the job ends with its node).
TEST(Render, RelaunchesKeepTheAllocationAndLoop) {
  const std::string base = "[job]\nname = \"t\"\nprogram = \"./app\"\nworkers = 4\n[resources]\nnodes = 2\n";
  const std::string with =
      fs::render_script(fs::parse_spec(base + "[checkpoint]\npath = \"c.h5\"\nrelaunches = 3\n", "t.toml"));
  EXPECT_NE(with.find("\n#SBATCH --no-kill\n"), std::string::npos);
  EXPECT_NE(with.find("\nwhile fibra_relaunch_needed; do fibra_launch; done\n"), std::string::npos);
  EXPECT_NE(with.find("relaunch $fibra_relaunches of 3 on $list"), std::string::npos);
  const std::string without =
      fs::render_script(fs::parse_spec(base + "[checkpoint]\npath = \"c.h5\"\nrelaunches = 0\n", "t.toml"));
  EXPECT_EQ(without.find("--no-kill"), std::string::npos);
  EXPECT_EQ(without.find("fibra_relaunch_needed"), std::string::npos);
}
