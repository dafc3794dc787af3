// tune/tests/experiment_test.cpp: an experiment's state without a pool: ASHA's stops through the
// whole path (stop conditions, statuses), the failure budget, and the file: written, read by
// h5py and pandas, and resumed with every trial once.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "experiment.hpp"
#include "status_table.hpp"
#include "fibra/error.hpp"
#include "fibra/hdf5_io/tables.hpp"

namespace fibra::tune::detail {
namespace {

class ExperimentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = "/tmp/fibra-tune-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// Trials 0..3 each report score = their fixed value at every iteration; ASHA (rf 2, grace 1,
// max_t 4) on four trials started together, fed in trial order: at rung 1, trial 1 (2 < median{4}
// = 4) and trial 3 (1 < median{4, 2, 3} = 3) stop; at rung 2, trial 2 (3 < 4) stops; trial 0 runs
// to max_t = 4 and is done.
TEST_F(ExperimentTest, AshaEndsEachTrialAsItsRuleSays) {
  Space space{{"v", grid({4, 2, 3, 1})}};
  Experiment ex("T", space,
                RunOptions{.metric = "score", .scheduler = Asha{.max_t = 4, .grace_period = 1, .reduction_factor = 2}});
  std::vector<std::size_t> live;
  while (auto s = ex.start_next()) live.push_back(s->trial);
  ASSERT_EQ(live.size(), 4u);
  std::map<std::size_t, std::int64_t> steps;
  for (int round = 0; round < 4 && !live.empty(); ++round) {
    std::vector<std::size_t> next;
    for (auto t : live) {
      const double v = double(ex.grid("").trials()[t].config.integer("v"));
      ++steps[t];
      if (!ex.on_result(t, {{"score", v}}, 0.1).end) next.push_back(t);
    }
    live = next;
  }
  const auto g = ex.grid("");
  EXPECT_EQ(g.trials()[0].status, TrialStatus::done);
  EXPECT_EQ(g.trials()[1].status, TrialStatus::stopped);
  EXPECT_EQ(g.trials()[2].status, TrialStatus::stopped);
  EXPECT_EQ(g.trials()[3].status, TrialStatus::stopped);
  EXPECT_EQ(steps, (std::map<std::size_t, std::int64_t>{{0, 4}, {1, 1}, {2, 2}, {3, 1}}));
  EXPECT_EQ(g.rows().size(), 8u);
  EXPECT_EQ(g.best().id, 0u);
  EXPECT_TRUE(ex.finished());
}

TEST_F(ExperimentTest, StopConditionsAndDone) {
  Experiment ex("T", Space{{"v", grid({1, 2})}},
                RunOptions{.metric = "score", .stop = {{"training_iteration", 3}, {"score", 100}}});
  ex.start_next();
  ex.start_next();
  EXPECT_FALSE(ex.on_result(0, {{"score", 1}}, 0).end);
  EXPECT_TRUE(ex.on_result(0, {{"score", 100}}, 0).end);  // a metric reached its value
  EXPECT_FALSE(ex.on_result(1, {{"score", 1}}, 0).end);
  EXPECT_FALSE(ex.on_result(1, {{"score", 1}}, 0).end);
  EXPECT_TRUE(ex.on_result(1, {{"score", 1}}, 0).end);  // three iterations
  EXPECT_EQ(ex.grid("").trials()[1].iterations, 3);
  EXPECT_EQ(ex.grid("").trials()[0].status, TrialStatus::done);
}

TEST_F(ExperimentTest, AFailedTrialRestartsFromItsCheckpointThenIsAnError) {
  Experiment ex("T", Space{{"v", 1}}, RunOptions{.metric = "score", .max_failures = 2, .checkpoint_every = 2});
  auto s = ex.start_next();
  ASSERT_TRUE(s);
  EXPECT_FALSE(ex.on_result(0, {{"score", 1}}, 0).end);
  const auto n2 = ex.on_result(0, {{"score", 2}}, 0);
  EXPECT_TRUE(n2.save_first);         // every 2 iterations
  ex.on_checkpoint(0, "state-at-2");  // came with the third step's outcome
  EXPECT_FALSE(ex.on_result(0, {{"score", 3}}, 0).end);
  ex.on_failure(0, "boom 1");  // died in its fourth iteration
  auto again = ex.start_next();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->checkpoint, "state-at-2");
  EXPECT_EQ(ex.grid("").trials()[0].iterations, 2);  // the row of iteration 3 is dropped
  EXPECT_EQ(ex.rows(), 2u);
  ex.on_failure(0, "boom 2");
  ASSERT_TRUE(ex.start_next());
  ex.on_failure(0, "boom 3");  // past max_failures = 2
  EXPECT_FALSE(ex.start_next());
  EXPECT_TRUE(ex.finished());
  const auto grid = ex.grid("");  // held: a reference into a temporary grid's trials dangled here
  const auto& t = grid.trials()[0];
  EXPECT_EQ(t.status, TrialStatus::error);
  EXPECT_EQ(t.failures, 3);
  EXPECT_EQ(t.error, "trial 0 of 'T' (config v=1) failed at iteration 3: boom 3");
  EXPECT_EQ(ex.grid("").errors().size(), 1u);
}

TEST_F(ExperimentTest, ABudgetThatIsNoNumberOfSecondsIsRefusedNamingIt) {
  const auto refusal = [](const RunOptions& o) {
    try {
      Experiment ex("T", Space{{"v", 1}}, o);
      return std::string("taken");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(refusal(RunOptions{.time_budget_s = -1}),
            "fibra::tune: RunOptions::time_budget_s is -1; it is the experiment's budget of wall-clock seconds: give a "
            "number >= 0 (0: no budget)");
  EXPECT_EQ(
      refusal(RunOptions{.trial_time_budget_s = std::nan("")}),
      "fibra::tune: RunOptions::trial_time_budget_s is nan; it is each trial's budget of wall-clock seconds: give "
      "a number >= 0 (0: no budget)");
  EXPECT_EQ(refusal(RunOptions{.time_budget_s = 0, .trial_time_budget_s = 2.5}), "taken");
}

TEST_F(ExperimentTest, ATrialTheExperimentsBudgetStopsSaysSo) {
  Experiment ex("T", Space{{"v", grid({1, 2})}}, RunOptions{.metric = "score"});
  ex.start_next();
  ex.on_result(0, {{"score", 1}}, 0);
  ex.stop_for_budget(0, "the budget ran out");
  const auto g = ex.grid("");
  EXPECT_EQ(g.trials()[0].status, TrialStatus::stopped);
  EXPECT_EQ(g.trials()[0].error, "trial 0 of 'T' (config v=1) was stopped after 1 iteration: the budget ran out");
  EXPECT_EQ(g.trials()[1].status, TrialStatus::pending);  // never started
  EXPECT_TRUE(g.errors().empty());
  EXPECT_FALSE(ex.finished());
}

// HyperBand with max_t 3 and reduction factor 3: s_max = 1, bracket s = 1 holds n = ceil(2/2 * 3) =
// 3 trials (0-2) with a rung at 1, bracket s = 0 n = ceil(2/1 * 1) = 2 (3-4) that run to 3. Trials
// 0 and 1 pause at the rung; the file is written and resumed: they wait again, not started; trial 2
// decides the rung: the top floor(3/3) = 1, trial 1 (3), goes on from its checkpoint, 0 and 2 stop.
TEST_F(ExperimentTest, HyperBandTrialsWaitAtTheirRungThroughAResume) {
  const Space space{{"v", grid({1, 3, 2, 5, 4})}};
  const RunOptions o{.metric = "score", .scheduler = HyperBand{.max_t = 3, .reduction_factor = 3}};
  const std::string path = (dir_ / "experiment.h5").string();
  Experiment ex("T", space, o);
  while (ex.start_next()) {
  }
  for (std::size_t t : {0, 1}) {
    const auto next = ex.on_result(t, {{"score", double(t == 0 ? 1 : 3)}}, 0);
    EXPECT_TRUE(next.pause) << "trial " << t;
    ex.on_paused(t, "at-rung-" + std::to_string(t));
    EXPECT_EQ(ex.grid("").trials()[t].status, TrialStatus::pending);
  }
  hdf5_io::write_table_file(path, ex.to_file(false, 1.0));

  Experiment again("T", space, o);
  again.resume(hdf5_io::read_table_file(path), path);
  std::vector<std::size_t> order;
  while (auto s = again.start_next()) order.push_back(s->trial);
  EXPECT_EQ(order, (std::vector<std::size_t>{2, 3, 4}));  // 0 and 1 wait at the rung
  EXPECT_TRUE(again.on_result(2, {{"score", 2}}, 0).end);
  const auto resumed = again.start_next();
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->trial, 1u);
  EXPECT_EQ(resumed->checkpoint, "at-rung-1");
  EXPECT_FALSE(again.start_next());
  EXPECT_FALSE(again.on_result(1, {{"score", 3}}, 0).end);
  EXPECT_TRUE(again.on_result(1, {{"score", 3}}, 0).end);  // its third iteration: max_t
  for (std::size_t t : {3, 4}) {                           // bracket s = 0: no rung below max_t
    EXPECT_FALSE(again.on_result(t, {{"score", 0}}, 0).end);
    EXPECT_FALSE(again.on_result(t, {{"score", 0}}, 0).end);
    EXPECT_TRUE(again.on_result(t, {{"score", 0}}, 0).end);
  }
  const auto g = again.grid("");
  const TrialStatus want[] = {TrialStatus::stopped, TrialStatus::done, TrialStatus::stopped, TrialStatus::done,
                              TrialStatus::done};
  const std::int64_t iterations[] = {1, 3, 1, 3, 3};
  for (std::size_t t = 0; t < 5; ++t) {
    EXPECT_EQ(g.trials()[t].status, want[t]) << "trial " << t;
    EXPECT_EQ(g.trials()[t].iterations, iterations[t]) << "trial " << t;
  }
  EXPECT_TRUE(again.finished());
}

// The events an experiment gives the pool's log (Experiment::set_events), on the HyperBand of the
// test above: the experiment named first; trial 0 fails once (trial_failed), starts again from
// nothing (trial_start, iteration 0), reports and pauses at the rung (trial_paused, so no reader
// takes it for running), and the rung's decision stops it: its trial_end says stopped and carries
// no error (its failure was retried, not why it ends).
TEST_F(ExperimentTest, TheEventsSayPausesAndAStopCarriesNoEarlierError) {
  const Space space{{"v", grid({1, 3, 2, 5, 4})}};
  Experiment ex("T", space, {.metric = "score", .scheduler = HyperBand{.max_t = 3, .reduction_factor = 3}});
  std::vector<std::string> events;
  ex.set_events(
      [&](std::string_view ev, std::string_view fields) { events.push_back(std::string(ev) + std::string(fields)); });
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].rfind("tune,\"experiment\":", 0), 0u) << events[0];
  while (ex.start_next()) {
  }
  ex.on_failure(0, "std::runtime_error: boom");
  const auto again = ex.start_next();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->trial, 0u);
  for (std::size_t t : {0, 1}) {
    ASSERT_TRUE(ex.on_result(t, {{"score", double(t == 0 ? 1 : 3)}}, 0).pause);
    ex.on_paused(t, "at-rung");
  }
  EXPECT_TRUE(ex.on_result(2, {{"score", 2}}, 0).end);  // decides the rung: 0 and 2 stop, 1 goes on
  std::vector<std::string> of0;
  for (const auto& e : events)
    if (e.find(",\"trial\":0,") != std::string::npos || e.ends_with(",\"trial\":0"))
      of0.push_back(e.substr(0, e.find(',')));
  EXPECT_EQ(of0, (std::vector<std::string>{"trial_start", "trial_failed", "trial_start", "trial_result", "trial_paused",
                                           "trial_end"}));
  const auto end0 = std::find_if(events.begin(), events.end(), [](const std::string& e) {
    return e.starts_with("trial_end") && e.find(",\"trial\":0,") != std::string::npos;
  });
  ASSERT_NE(end0, events.end());
  EXPECT_NE(end0->find("\"status\":\"stopped\""), std::string::npos) << *end0;
  EXPECT_EQ(end0->find("\"error\""), std::string::npos) << *end0;
}

TEST_F(ExperimentTest, TheFileResumesEveryTrialOnceAndRefusesAnotherExperiment) {
  const Space space{{"lr", loguniform(1e-3, 1)}, {"layers", grid({1, 2})}};
  const RunOptions o{.num_samples = 3, .metric = "score", .checkpoint_every = 1};
  const std::string path = (dir_ / "experiment.h5").string();
  Experiment ex("T", space, o);
  ASSERT_EQ(ex.size(), 6u);
  // Trials 0 and 1 end; trial 2 has run 2 iterations with a checkpoint after 1; 3..5 wait.
  for (std::size_t t = 0; t < 3; ++t) ex.start_next();
  ex.on_result(0, {{"score", 1}, {"done", 1}}, 0.5);
  ex.on_result(1, {{"score", 2}, {"done", 1}}, 0.6);
  ex.on_result(2, {{"score", 3}}, 0.7);
  ex.on_checkpoint(2, "after-1");
  ex.on_result(2, {{"score", 4}}, 0.8);
  hdf5_io::write_table_file(path, ex.to_file(false, 1.0));

  Experiment again("T", space, o);
  again.resume(hdf5_io::read_table_file(path), path);
  EXPECT_EQ(again.rows(), 3u);  // trial 2's second iteration comes again from its checkpoint
  std::vector<std::size_t> order;
  std::string ckpt;
  while (auto s = again.start_next()) {
    order.push_back(s->trial);
    if (s->trial == 2) ckpt = s->checkpoint;
    EXPECT_EQ(s->config, ex.grid("").trials()[s->trial].config);
  }
  EXPECT_EQ(order, (std::vector<std::size_t>{2, 3, 4, 5}));  // 0 and 1 are not run again
  EXPECT_EQ(ckpt, "after-1");
  EXPECT_EQ(again.grid("").trials()[0].status, TrialStatus::done);
  EXPECT_EQ(again.grid("").trials()[0].iterations, 1);
  EXPECT_EQ(again.grid("").trials()[2].iterations, 1);  // from its checkpoint after iteration 1
  // Its results had the metric: a resumed experiment does not check the first new one again.
  EXPECT_NO_THROW(again.on_result(2, {{"loss", 0.5}}, 0.9));

  // Another experiment in the same file is refused, naming exactly what differs (issue 46, case 8:
  // another mode was refused with a message that printed the two experiments identically).
  const auto refusal = [&](const std::string& trainable, const Space& sp, const RunOptions& ro) {
    try {
      Experiment other(trainable, sp, ro);
      other.resume(hdf5_io::read_table_file(path), path);
      return std::string("resumed another experiment's file");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  const std::string head = "fibra::tune: cannot resume from '" + path + "': it holds another experiment over 'T' (";
  const std::string tail = "); pass another RunOptions::storage, or remove that one to start again";
  EXPECT_EQ(refusal("T", space, RunOptions{.num_samples = 4, .metric = "score", .checkpoint_every = 1}),
            head + "num_samples '3' there, '4' in this run" + tail);
  EXPECT_EQ(
      refusal("T", space, RunOptions{.num_samples = 3, .metric = "score", .mode = Mode::min, .checkpoint_every = 1}),
      head + "mode 'max' there, 'min' in this run" + tail);
  EXPECT_EQ(refusal("T", Space{{"lr", loguniform(1e-3, 1)}, {"layers", grid({1, 3})}}, o),
            head +
                "space 'lr: loguniform [0.001, 1); layers: grid 1 2' there, 'lr: loguniform [0.001, 1); layers: grid 1 "
                "3' in this run" +
                tail);
  EXPECT_EQ(refusal("U", space, o), head + "trainable 'T' there, 'U' in this run" + tail);
}

TEST_F(ExperimentTest, ValuesKeepTheirTypesThroughTheFile) {
  // A key of mixed types is a string column for readers; resume reads the typed config column.
  const Space space{{"depth", grid({3, 6.5, "none"})}, {"lr", 0.1}, {"note", "a \"quoted\", {x}: y"}};
  const std::string path = (dir_ / "experiment.h5").string();
  Experiment ex("T", space, RunOptions{.metric = "score"});
  hdf5_io::write_table_file(path, ex.to_file(false, 0));
  Experiment again("T", space, RunOptions{.metric = "score"});
  again.resume(hdf5_io::read_table_file(path), path);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(again.grid("").trials()[i].config, ex.grid("").trials()[i].config) << i;
  EXPECT_TRUE(again.grid("").trials()[0].config.at("depth").is_integer());
  EXPECT_TRUE(again.grid("").trials()[1].config.at("depth").is_double());
}

TEST_F(ExperimentTest, ATimeAttrNeverReportedIsAnErrorAndMetricsMayHaveAnyName) {
  Experiment ex("T", Space{{"v", 1}},
                RunOptions{.metric = "score", .scheduler = Asha{.time_attr = "seconds", .max_t = 100}});
  ex.start_next();
  try {
    ex.on_result(0, {{"score", 1}}, 0);
    FAIL() << "a row without the scheduler's time was taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        "fibra::tune: the scheduler's time_attr is 'seconds', and a trial reported no such metric (it reported: "
        "score); report it at every step, or use \"training_iteration\"");
  }
  // Metrics named as the results table's own columns, or with '/', survive the file.
  const std::string path = (dir_ / "experiment.h5").string();
  Experiment ex2("T", Space{{"v", 1}}, RunOptions{.metric = "score", .checkpoint_every = 1});
  ex2.start_next();
  ex2.on_result(0, {{"score", 1}, {"iteration", 7}, {"train/loss", 0.5}, {"metric.x", 2}}, 0);
  ex2.on_checkpoint(0, "c");
  hdf5_io::write_table_file(path, ex2.to_file(false, 0));
  Experiment again("T", Space{{"v", 1}}, RunOptions{.metric = "score", .checkpoint_every = 1});
  again.resume(hdf5_io::read_table_file(path), path);
  const auto rows = again.grid("").rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].metrics, (Metrics{{"score", 1}, {"iteration", 7}, {"train/loss", 0.5}, {"metric.x", 2}}));
  EXPECT_EQ(rows[0].iteration, 1);
}

// Issue 46, case 6: a misspelt metric was taken; ASHA stopped nothing, and only best() threw.
TEST_F(ExperimentTest, AMetricTheFirstResultLacksIsRefusedAtOnce) {
  Experiment ex("T", Space{{"v", 1}}, RunOptions{.metric = "scroe", .scheduler = Asha{.max_t = 10}});
  ex.start_next();
  try {
    ex.on_result(0, {{"score", 1}, {"loss", 0.5}}, 0);
    FAIL() << "a first result without RunOptions::metric was taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::tune: RunOptions::metric is 'scroe', and the first result (trial 0, iteration 1) has no such "
                 "metric (it reported: loss, score); report it at every step, or set metric to one that is reported");
  }
  EXPECT_EQ(ex.rows(), 0u) << "the refused result was recorded";
  // Once the first result had it, a later one without it is taken (the metric may be reported every few steps).
  Experiment ok("T", Space{{"v", grid({1, 2})}}, RunOptions{.metric = "score"});
  ok.start_next();
  ok.start_next();
  ok.on_result(0, {{"score", 1}}, 0);
  ok.on_result(1, {{"loss", 0.5}}, 0);
  EXPECT_EQ(ok.rows(), 2u);
  // ... also after a failure dropped every row there was (a restart without a checkpoint).
  ok.on_failure(0, "boom");
  ok.on_failure(1, "boom");
  EXPECT_EQ(ok.rows(), 0u);
  ASSERT_TRUE(ok.start_next());
  EXPECT_NO_THROW(ok.on_result(1, {{"loss", 0.4}}, 0));
}

TEST_F(ExperimentTest, H5pyAndPandasReadBothTables) {
  std::string status_text;
  {
    FILE* p = ::popen((std::string(FIBRA_TEST_PYTHON) + " -c 'import h5py, pandas' 2>&1").c_str(), "r");
    ASSERT_NE(p, nullptr);
    if (::pclose(p) != 0) GTEST_SKIP() << "python3-h5py or python3-pandas is not installed";
  }
  Experiment ex("T", Space{{"lr", grid({0.5, 0.25})}, {"opt", "adam"}},
                RunOptions{.metric = "loss", .mode = Mode::min});
  ex.start_next();
  ex.start_next();
  ex.on_result(0, {{"loss", 3.0}, {"acc", 0.5}}, 1.0);
  ex.on_result(0, {{"loss", 2.0}, {"acc", 0.75}, {"done", 1}}, 2.0);
  ex.on_result(1, {{"loss", 9.0}}, 1.5);
  const std::string path = (dir_ / "experiment.h5").string();
  hdf5_io::write_table_file(path, ex.to_file(false, 2.0));
  ex.write_csv((dir_ / "results.csv").string());
  const std::string script =
      "import sys, h5py, pandas as pd\n"
      "f = h5py.File(sys.argv[1], \"r\")\n"
      "def table(g): return pd.DataFrame({c: g[c][()] for c in g.attrs[\"columns\"].split(\",\")})\n"
      "t, r = table(f[\"trials\"]), table(f[\"results\"])\n"
      "print(f.attrs[\"format\"], f.attrs[\"state\"], f.attrs[\"metric\"], f.attrs[\"mode\"])\n"
      "print(t[\"id\"].tolist(), [s.decode() for s in t[\"status\"]], t[\"iterations\"].tolist(), "
      "t[\"best_metric\"].tolist(), t[\"config.lr\"].tolist(), [s.decode() for s in t[\"config.opt\"]])\n"
      "print(r[\"trial\"].tolist(), r[\"iteration\"].tolist(), r[\"loss\"].tolist(), r[\"acc\"].fillna(-1).tolist())\n"
      "c = pd.read_csv(sys.argv[2])\n"
      "print(len(c), list(c.columns))\n";
  FILE* p = ::popen((std::string(FIBRA_TEST_PYTHON) + " -c '" + script + "' " + path + " " +
                     (dir_ / "results.csv").string() + " 2>&1")
                        .c_str(),
                    "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << out;
  EXPECT_EQ(out,
            "fibra-tune running loss min\n"
            "[0, 1] ['done', 'running'] [2, 1] [2.0, 9.0] [0.5, 0.25] ['adam', 'adam']\n"
            "[0, 0, 1] [1, 2, 1] [3.0, 2.0, 9.0] [0.5, 0.75, -1.0]\n"
            "3 ['trial', 'iteration', 'wall_time', 'acc', 'done', 'loss', 'config.lr', 'config.opt']\n");
}

std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Issue 49, item 6: a progress.csv per trial (its rows, its own metrics, written again only when it
// has new rows) and the status table (a row per trial, running first, then by the best metric).
TEST_F(ExperimentTest, EachTrialHasItsCsvAndARowInTheStatusTable) {
  Experiment ex("T", Space{{"lr", grid({0.5, 0.25})}}, RunOptions{.metric = "loss", .mode = Mode::min});
  ex.start_next();
  ex.start_next();
  ex.on_result(0, {{"loss", 3.0}, {"acc", 0.5}}, 1.0);
  ex.on_result(0, {{"loss", 2.0}}, 2.0);
  ex.on_result(1, {{"loss", 1.5}}, 1.5);
  ex.write_trial_csvs(dir_.string());
  EXPECT_EQ(file_text(dir_ / "trials/0/progress.csv"),
            "iteration,wall_time,acc,loss\n1,1.000000,0.5,3\n2,2.000000,,2\n");
  EXPECT_EQ(file_text(dir_ / "trials/1/progress.csv"), "iteration,wall_time,loss\n1,1.500000,1.5\n");
  std::filesystem::remove(dir_ / "trials/1/progress.csv");
  ex.on_result(0, {{"loss", 1.0}}, 3.0);
  ex.write_trial_csvs(dir_.string());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "trials/1/progress.csv")) << "a trial without new rows was written again";
  EXPECT_EQ(file_text(dir_ / "trials/0/progress.csv"),
            "iteration,wall_time,acc,loss\n1,1.000000,0.5,3\n2,2.000000,,2\n3,3.000000,,1\n");

  const std::string table = ex.status_table();
  EXPECT_EQ(table.rfind("Trials: 2 running, 0 pending", 0), 0u) << table;
  const auto rows = test::table_rows(table);
  ASSERT_EQ(rows.size(), 3u) << table;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"trial", "status", "lr", "iter", "last result (s)", "loss (last)",
                                               "loss (best)"}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"0", "running", "0.5", "3", "3", "1", "1"}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{"1", "running", "0.25", "1", "1.5", "1.5", "1.5"}));
  const std::string short_table = ex.status_table(1);
  EXPECT_EQ(test::table_rows(short_table).size(), 2u) << short_table;
  EXPECT_NE(short_table.find("... and 1 more trials"), std::string::npos) << short_table;
}

}  // namespace
}  // namespace fibra::tune::detail
