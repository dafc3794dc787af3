// The FIBRA_ELASTIC_* variables (src/common/elastic_env.hpp), which carry a job spec's [elastic]
// from the rendered script to the driver: what one side writes the other reads back whole, an unset
// FIBRA_ELASTIC_MAX_JOBS means no elastic pool, and a malformed number is refused with its name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/elastic_env.hpp"
#include "driver/elastic.hpp"
#include "fibra/error.hpp"

using fibra::detail::ElasticEnv;

namespace {

// Every FIBRA_ELASTIC_* variable unset while a test runs, and after it.
class ElasticEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { unset_all(); }
  void TearDown() override { unset_all(); }
  static void unset_all() {
    for (const auto& [name, value] : ElasticEnv{}.to_env()) ::unsetenv(name.c_str());
  }
  static void set(const std::string& name, const std::string& value) { ::setenv(name.c_str(), value.c_str(), 1); }
  // The ConfigError from_env throws, or "(accepted)".
  static std::string refusal() {
    try {
      (void)ElasticEnv::from_env();
    } catch (const fibra::ConfigError& e) {
      return e.what();
    }
    return "(accepted)";
  }
};

TEST_F(ElasticEnvTest, WhatToEnvWritesFromEnvReadsBackWhole) {
  ElasticEnv e;
  e.min_jobs = 1;
  e.max_jobs = 7;
  e.options.workers_per_job = 8;
  e.options.time = "1-02:30:00";
  e.options.partition = "gpu";
  e.options.sbatch_args = {"--mem=2G", "--account=rl"};
  e.options.backlog = 3;
  e.options.idle_timeout_s = 90.5;
  e.options.submit_gap_s = 60.0 / 7;  // a double with no short decimal form
  e.options.drain_before_s = 0.25;
  const auto vars = e.to_env();
  std::vector<std::string> names;
  for (const auto& [name, value] : vars) {
    names.push_back(name);
    set(name, value);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"FIBRA_ELASTIC_MIN_JOBS", "FIBRA_ELASTIC_MAX_JOBS",
                                             "FIBRA_ELASTIC_WORKERS_PER_JOB", "FIBRA_ELASTIC_TIME",
                                             "FIBRA_ELASTIC_BACKLOG", "FIBRA_ELASTIC_IDLE_TIMEOUT_S",
                                             "FIBRA_ELASTIC_DRAIN_BEFORE_S", "FIBRA_ELASTIC_SUBMIT_GAP_S",
                                             "FIBRA_ELASTIC_PARTITION", "FIBRA_ELASTIC_SBATCH_ARGS"}));
  EXPECT_EQ(vars[8].second, "gpu");
  EXPECT_EQ(vars[9].second, "--mem=2G --account=rl");
  const auto g = ElasticEnv::from_env();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->min_jobs, 1);
  EXPECT_EQ(g->max_jobs, 7);
  EXPECT_EQ(g->options.workers_per_job, 8);
  EXPECT_EQ(g->options.time, "1-02:30:00");
  EXPECT_EQ(g->options.partition, "gpu");
  EXPECT_EQ(g->options.sbatch_args, (std::vector<std::string>{"--mem=2G", "--account=rl"}));
  EXPECT_EQ(g->options.backlog, 3);
  EXPECT_EQ(g->options.idle_timeout_s, 90.5);
  EXPECT_EQ(g->options.submit_gap_s, 60.0 / 7) << vars[7].second;
  EXPECT_EQ(g->options.drain_before_s, 0.25);
  EXPECT_EQ(g->options.failed_submits, fibra::AdaptOptions{}.failed_submits);  // not carried
}

// Whole numbers of seconds are written as the spec had them (the golden scripts pin "120", not "120.000000").
TEST_F(ElasticEnvTest, WholeNumbersAreWrittenWithoutAFraction) {
  ElasticEnv e;
  e.options.idle_timeout_s = 120;
  e.options.submit_gap_s = 15;
  const auto vars = e.to_env();
  EXPECT_EQ(vars[5], (std::pair<std::string, std::string>{"FIBRA_ELASTIC_IDLE_TIMEOUT_S", "120"}));
  EXPECT_EQ(vars[7], (std::pair<std::string, std::string>{"FIBRA_ELASTIC_SUBMIT_GAP_S", "15"}));
}

TEST_F(ElasticEnvTest, AnUnsetMaxJobsMeansNoElasticPool) {
  EXPECT_FALSE(ElasticEnv::from_env());
  set("FIBRA_ELASTIC_MIN_JOBS", "2");
  set("FIBRA_ELASTIC_BACKLOG", "not even a number");
  EXPECT_FALSE(ElasticEnv::from_env()) << "the others alone say nothing";
  set("FIBRA_ELASTIC_MAX_JOBS", "");
  EXPECT_FALSE(ElasticEnv::from_env()) << "empty is unset";
}

TEST_F(ElasticEnvTest, UnsetVariablesKeepAdaptOptionsDefaults) {
  set("FIBRA_ELASTIC_MAX_JOBS", "3");
  set("FIBRA_ELASTIC_TIME", "");
  const auto g = ElasticEnv::from_env();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->max_jobs, 3);
  EXPECT_EQ(g->min_jobs, 0);
  const fibra::AdaptOptions d;
  EXPECT_EQ(g->options.workers_per_job, d.workers_per_job);
  EXPECT_EQ(g->options.time, d.time) << "an empty time keeps the default";
  EXPECT_EQ(g->options.partition, d.partition);
  EXPECT_EQ(g->options.sbatch_args, d.sbatch_args);
  EXPECT_EQ(g->options.backlog, d.backlog);
  EXPECT_EQ(g->options.idle_timeout_s, d.idle_timeout_s);
  EXPECT_EQ(g->options.submit_gap_s, d.submit_gap_s);
  EXPECT_EQ(g->options.drain_before_s, d.drain_before_s);
}

TEST_F(ElasticEnvTest, AMalformedNumberIsRefusedWithItsNameAndWhatToDo) {
  const std::string advice =
      "; it comes from the job spec's [elastic] table (fibra slurm render): render the script again rather than edit "
      "it";
  set("FIBRA_ELASTIC_MAX_JOBS", "2.5");
  EXPECT_EQ(refusal(), "fibra: FIBRA_ELASTIC_MAX_JOBS=2.5 is not a whole number from 0 to 2147483647" + advice);
  set("FIBRA_ELASTIC_MAX_JOBS", "3");
  set("FIBRA_ELASTIC_BACKLOG", "two");
  EXPECT_EQ(refusal(), "fibra: FIBRA_ELASTIC_BACKLOG=two is not a whole number from 0 to 2147483647" + advice);
  ::unsetenv("FIBRA_ELASTIC_BACKLOG");
  set("FIBRA_ELASTIC_IDLE_TIMEOUT_S", "-1");
  EXPECT_EQ(refusal(), "fibra: FIBRA_ELASTIC_IDLE_TIMEOUT_S=-1 is not a number from 0 to 1000000000000" + advice);
  ::unsetenv("FIBRA_ELASTIC_IDLE_TIMEOUT_S");
  EXPECT_EQ(refusal(), "(accepted)");
}

// The driver's side: one pool at a time takes the spec's [elastic], and none when it is not set.
TEST_F(ElasticEnvTest, OnePoolAtATimeTakesTheSpecsElastic) {
  EXPECT_FALSE(fibra::detail::adapt_from_environment());
  set("FIBRA_ELASTIC_MAX_JOBS", "2");
  const auto first = fibra::detail::adapt_from_environment();
  ASSERT_TRUE(first) << "an unset variable took nothing";
  EXPECT_EQ(first->max_jobs, 2);
  EXPECT_FALSE(fibra::detail::adapt_from_environment()) << "taken";
  fibra::detail::give_back_spec_adapt();
  set("FIBRA_ELASTIC_MIN_JOBS", "x");
  EXPECT_THROW(fibra::detail::adapt_from_environment(), fibra::ConfigError);
  ::unsetenv("FIBRA_ELASTIC_MIN_JOBS");
  EXPECT_TRUE(fibra::detail::adapt_from_environment()) << "a refusal gave it back";
  fibra::detail::give_back_spec_adapt();
}

}  // namespace
