// tune/tests/run_test.cpp: experiments on a real pool of 2 workers. Trials run as actors; every
// trial ends and reports each iteration once; a trial that throws or whose process aborts is
// retried, and one that always throws is recorded as an error; PBT's exploit hands the bottom
// trial the top trial's saved state (seen in the value it reports next); a function trainable
// reports through its Reporter. Expected values come from the trainables' closed forms.
#include <fibra/fibra.hpp>
#include <fibra/tune.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "status_table.hpp"

namespace tune = fibra::tune;

namespace {

// score = v * t at iteration t.
class Line {
 public:
  explicit Line(const tune::Config& c) : v_(c.number("v")) {}
  tune::Metrics step() { return {{"score", v_ * double(++t_)}}; }

 private:
  double v_;
  int t_ = 0;
};
FIBRA_TRAINABLE(Line);

// Fails once per trial at iteration 2 (throws, or aborts its process for "abort" = 1), the first
// time only (a marker file per trial, named by v and abort, says it did); "always" = 1 throws at
// every first step.
class Flaky {
 public:
  explicit Flaky(const tune::Config& c)
      : v_(c.integer("v")), abort_(c.integer("abort")), always_(c.integer("always")), dir_(c.text("dir")) {}
  tune::Metrics step() {
    ++t_;
    if (always_) throw std::runtime_error("always fails, v=" + std::to_string(v_));
    const std::string marker = dir_ + "/failed_" + std::to_string(v_) + "_" + std::to_string(abort_);
    if (t_ == 2 && !std::filesystem::exists(marker)) {
      std::ofstream(marker) << "1";
      if (abort_) std::abort();
      throw std::runtime_error("flaky at 2, v=" + std::to_string(v_));
    }
    return {{"score", double(v_ * 10 + t_)}};
  }

 private:
  std::int64_t v_, abort_, always_;
  std::string dir_;
  int t_ = 0;
};
FIBRA_TRAINABLE(Flaky);

// value starts at "start" and grows by 1 a step (of 20 ms, so that both trials run side by side
// once their processes have started); save/restore carry it.
class Counter {
 public:
  explicit Counter(const tune::Config& c) : value_(c.integer("start")) {}
  tune::Metrics step() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return {{"score", double(++value_)}};
  }
  std::string save() const { return std::to_string(value_); }
  void restore(const std::string& s) { value_ = std::stoll(s); }

 private:
  std::int64_t value_;
};
FIBRA_TRAINABLE(Counter);

// Says it is done at its third iteration (FIFO sends steps ahead: the fourth may run, and is dropped).
class DoneAtThree {
 public:
  explicit DoneAtThree(const tune::Config& c) : v_(c.number("v")) {}
  tune::Metrics step() {
    ++t_;
    return {{"score", v_ * t_}, {"done", t_ >= 3 ? 1.0 : 0.0}};
  }

 private:
  double v_;
  int t_ = 0;
};
FIBRA_TRAINABLE(DoneAtThree);

void five_reports(const tune::Config& c, tune::Reporter& r) {
  for (int i = 1; i <= 5; ++i)
    if (!r.report({{"score", c.number("v") * i}})) return;
}
FIBRA_TRAINABLE_FUNCTION(five_reports);

// Reports until told the trial is over, then leaves a marker (code after a false report runs).
void marks_its_end(const tune::Config& c, tune::Reporter& r) {
  for (int i = 1;; ++i)
    if (!r.report({{"score", double(i)}})) break;
  std::ofstream(c.text("dir") + "/ended_" + std::to_string(c.integer("v"))) << "1";
}
FIBRA_TRAINABLE_FUNCTION(marks_its_end);

// Two functions registered under one name (each in its namespace, without the qualifier).
namespace one {
void same_name(const tune::Config&, tune::Reporter& r) { r.report({{"score", 1}}); }
FIBRA_TRAINABLE_FUNCTION(same_name);
}  // namespace one
namespace two {
void same_name(const tune::Config&, tune::Reporter& r) { r.report({{"score", 2}}); }
FIBRA_TRAINABLE_FUNCTION(same_name);
}  // namespace two

fibra::Pool& pool() {
  static fibra::Pool p(2);
  return p;
}

std::string scratch() {
  std::string pattern = "/tmp/fibra-tune-run-XXXXXX";
  if (!::mkdtemp(pattern.data())) std::abort();
  return pattern;
}

// Every trial's rows are iterations 1..iterations, each once.
void expect_rows_once(const tune::ResultGrid& g) {
  std::map<std::size_t, std::vector<std::int64_t>> its;
  for (const auto& r : g.rows()) its[r.trial].push_back(r.iteration);
  for (const auto& t : g.trials()) {
    std::vector<std::int64_t> want(t.iterations);
    for (std::int64_t i = 0; i < t.iterations; ++i) want[i] = i + 1;
    EXPECT_EQ(its[t.id], want) << "trial " << t.id;
  }
}

TEST(TuneRun, AshaEndsEveryTrialAndTheBestSurvives) {
  std::vector<tune::Value> vs;  // the best first: each later trial is below the median at rung 1
  for (int v = 16; v >= 1; --v) vs.push_back(v);
  const auto g = tune::run<Line>({{"v", tune::grid(vs)}},
                                 {.metric = "score",
                                  .scheduler = tune::Asha{.max_t = 8, .grace_period = 1, .reduction_factor = 2},
                                  .pool = &pool()});
  ASSERT_EQ(g.trials().size(), 16u);
  std::size_t stopped = 0;
  for (const auto& t : g.trials()) {
    EXPECT_TRUE(t.status == tune::TrialStatus::done || t.status == tune::TrialStatus::stopped)
        << tune::to_string(t.status);
    stopped += t.status == tune::TrialStatus::stopped;
    EXPECT_EQ(t.last.at("score"), t.config.number("v") * double(t.iterations));
  }
  EXPECT_GE(stopped, 8u);  // at rung 1 alone, about half of those after the first are below the median
  const auto& best = g.best();
  EXPECT_EQ(best.config.integer("v"), 16);  // the best can never be below a cutoff
  EXPECT_EQ(best.status, tune::TrialStatus::done);
  EXPECT_EQ(best.iterations, 8);
  expect_rows_once(g);
}

TEST(TuneRun, FailedTrialsAreRetriedThenRecorded) {
  const std::string dir = scratch();
  const auto g =
      tune::run<Flaky>({{"v", tune::grid({0, 1, 2, 3})}, {"abort", tune::grid({0, 1})}, {"always", 0}, {"dir", dir}},
                       {.metric = "score", .stop = {{"training_iteration", 4}}, .pool = &pool()});
  ASSERT_EQ(g.trials().size(), 8u);
  for (const auto& t : g.trials()) {
    EXPECT_EQ(t.status, tune::TrialStatus::done) << t.config.str() << ": " << t.error;
    EXPECT_EQ(t.iterations, 4);
    EXPECT_EQ(t.failures, 1);  // once each, then from the start again
    EXPECT_EQ(t.last.at("score"), double(t.config.integer("v") * 10 + 4));
  }
  int failures = 0;
  for (const auto& t : g.trials()) failures += t.failures;
  EXPECT_EQ(failures, 8);
  expect_rows_once(g);

  // A trial that fails every time: retried max_failures times, then an error that says which trial,
  // its configuration, the iteration and the trainable's own exception, without fibra::tune's
  // internals (issue 46, case 10: "fibra::tune::detail::TrialHost::begin raised ..."); run() then
  // throws TrialsFailed, holding the results (case 7), unless asked to return them.
  const tune::Space always{{"v", 7}, {"abort", 0}, {"always", 1}, {"dir", dir}};
  try {
    tune::run<Flaky>(always, {.metric = "score", .max_failures = 2, .pool = &pool()});
    ADD_FAILURE() << "run() returned with a trial in error";
  } catch (const tune::TrialsFailed& e) {
    const auto& bad = e.results();
    ASSERT_EQ(bad.errors().size(), 1u);
    EXPECT_EQ(bad.trials()[0].failures, 3);
    EXPECT_EQ(bad.rows().size(), 0u);
    const std::string& error = bad.trials()[0].error;
    const std::string head = "trial 0 of '(anonymous namespace)::Flaky' (config " + bad.trials()[0].config.str() +
                             ") failed at iteration 1: std::runtime_error: always fails, v=7 (worker ";
    EXPECT_EQ(error.substr(0, head.size()), head) << error;
    EXPECT_EQ(error.find("TrialHost"), std::string::npos) << error;
    EXPECT_EQ(
        std::string(e.what()).rfind(
            "fibra::tune: 1 of 1 trials of '(anonymous namespace)::Flaky' failed:\n  " + error + " (3 attempts)", 0),
        0u)
        << e.what();
  }
  const auto returned =
      tune::run<Flaky>(always, {.metric = "score", .max_failures = 0, .pool = &pool(), .raise_on_failed_trial = false});
  EXPECT_EQ(returned.errors().size(), 1u);
  std::filesystem::remove_all(dir);
}

// A missing key is a ConfigError, which fails the same way every time: not retried (issue 46, case 7).
class NeedsKey {
 public:
  explicit NeedsKey(const tune::Config& c) : lr_(c.number("learning_rate")) {}
  tune::Metrics step() { return {{"score", lr_}}; }

 private:
  double lr_;
};
FIBRA_TRAINABLE(NeedsKey);

// A process that dies: its error says so, and where, without the actor's internal names and
// restart counts (issue 46, case 10: "restart 1 of 1073741824").
class Aborts {
 public:
  explicit Aborts(const tune::Config&) {}
  tune::Metrics step() { std::abort(); }
};
FIBRA_TRAINABLE(Aborts);

TEST(TuneRun, AConfigErrorIsNotRetriedAndADeathSaysSo) {
  const auto g = tune::run<NeedsKey>(
      {{"lr", 0.1}}, {.metric = "score", .max_failures = 3, .pool = &pool(), .raise_on_failed_trial = false});
  ASSERT_EQ(g.errors().size(), 1u);
  EXPECT_EQ(g.trials()[0].failures, 1) << "a ConfigError was retried: " << g.trials()[0].error;
  EXPECT_NE(g.trials()[0].error.find("failed at iteration 1: fibra::ConfigError: "), std::string::npos)
      << g.trials()[0].error;
  EXPECT_NE(g.trials()[0].error.find("learning_rate"), std::string::npos) << g.trials()[0].error;

  const auto d =
      tune::run<Aborts>({}, {.metric = "score", .max_failures = 0, .pool = &pool(), .raise_on_failed_trial = false});
  ASSERT_EQ(d.errors().size(), 1u);
  const std::string& error = d.trials()[0].error;
  EXPECT_EQ(error.rfind("trial 0 of '(anonymous namespace)::Aborts' failed at iteration 1: its process died: was "
                        "killed by signal 6",
                        0),
            0u)
      << error;
  EXPECT_EQ(error.find("TrialHost"), std::string::npos) << error;
  EXPECT_EQ(error.find("restart"), std::string::npos) << error;
}

TEST(TuneRun, PbtExploitCopiesTheTopTrialsState) {
  tune::Pbt pbt;
  pbt.perturbation_interval = 2;
  pbt.quantile_fraction = 0.5;
  pbt.resample_probability = 0;
  pbt.hyperparam_mutations.add("unused", tune::uniform(1, 2));
  const auto g =
      tune::run<Counter>({{"start", tune::grid({0, 1000})}, {"unused", 1.5}},
                         {.metric = "score", .scheduler = pbt, .stop = {{"training_iteration", 40}}, .pool = &pool()});
  // Trial 0 counts from 0, trial 1 from 1000. Trial 1 saves at each perturbation (value 1000 + t,
  // t even, at least 2); trial 0 takes that state at one of its own and steps once: its first
  // score above 1000 is an even saved value plus one, so odd and at least 1003. (Made afresh from
  // trial 1's configuration without the restore, it would report 1001.)
  double first_high = -1;
  for (const auto& r : g.rows())
    if (r.trial == 0 && r.metrics.at("score") > 1000) {
      first_high = r.metrics.at("score");
      break;
    }
  std::string seen;
  for (const auto& r : g.rows()) seen += " " + std::to_string(r.trial) + ":" + std::to_string(r.metrics.at("score"));
  ASSERT_GT(first_high, 1000) << "trial 0 never took trial 1's state; rows:" << seen;
  EXPECT_EQ(std::int64_t(first_high) % 2, 1) << first_high;
  EXPECT_GE(first_high, 1003) << seen;
  EXPECT_LE(first_high, 1040 + 1);
  // The exploited configuration is perturbed (by 1.2 or 0.8, perhaps more than once).
  EXPECT_NE(g.trials()[0].config.number("unused"), 1.5);
}

TEST(TuneRun, AFunctionTrainableReportsUntilItReturnsOrIsStopped) {
  const auto all = tune::run(five_reports, {{"v", tune::grid({1, 2})}}, {.metric = "score", .pool = &pool()});
  for (const auto& t : all.trials()) {
    EXPECT_EQ(t.status, tune::TrialStatus::done);
    EXPECT_EQ(t.iterations, 5);
    EXPECT_EQ(t.last.at("score"), t.config.number("v") * 5);
  }
  const auto cut =
      tune::run(five_reports, {{"v", tune::grid({1, 2, 3})}},
                {.metric = "score", .max_concurrent = 1, .stop = {{"training_iteration", 3}}, .pool = &pool()});
  for (const auto& t : cut.trials()) {
    EXPECT_EQ(t.status, tune::TrialStatus::done);
    EXPECT_EQ(t.iterations, 3);
  }
  expect_rows_once(cut);
}

TEST(TuneRun, AFunctionTrainableHearsItsTrialIsOver) {
  // One host: each trial is stopped after 3 reports, and the next trial's start on that host (or,
  // for the last, the experiment's end) ends its function: its report returns false and it returns.
  const std::string dir = scratch();
  const auto g =
      tune::run(marks_its_end, {{"v", tune::grid({0, 1, 2})}, {"dir", dir}},
                {.metric = "score", .max_concurrent = 1, .stop = {{"training_iteration", 3}}, .pool = &pool()});
  for (const auto& t : g.trials()) EXPECT_EQ(t.iterations, 3);
  EXPECT_TRUE(std::filesystem::exists(dir + "/ended_0"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ended_1"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ended_2"));  // the last one too, at the experiment's end
  std::filesystem::remove_all(dir);
}

TEST(TuneRun, AStepSentAheadOfATrialThatEndedIsDropped) {
  std::vector<tune::Value> vs;
  for (int v = 1; v <= 12; ++v) vs.push_back(v);
  const auto g = tune::run<DoneAtThree>({{"v", tune::grid(vs)}}, {.metric = "score", .pool = &pool()});
  for (const auto& t : g.trials()) {
    EXPECT_EQ(t.status, tune::TrialStatus::done);
    EXPECT_EQ(t.iterations, 3);
    EXPECT_EQ(t.last.at("score"), t.config.number("v") * 3);
  }
  EXPECT_EQ(g.rows().size(), 36u);
  expect_rows_once(g);
}

// Ends the test program, saying what did not come, unless the scope is left within `limit`: a
// tune::run that never returns would otherwise hold the suite until ctest's timeout.
class Deadline {
 public:
  Deadline(std::chrono::seconds limit, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock lk(mu_);
      if (cv_.wait_for(lk, limit, [this] { return left_; })) return;
      std::fprintf(stderr, "FAILED: %s within %lld s\n", what_.c_str(), static_cast<long long>(limit.count()));
      std::_Exit(1);
    });
  }
  ~Deadline() {
    {
      std::lock_guard lk(mu_);
      left_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool left_ = false;
  std::thread thread_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// score = v * t at iteration t, with t carried by save/restore (HyperBand pauses and resumes).
class SavedLine {
 public:
  explicit SavedLine(const tune::Config& c) : v_(c.number("v")) {}
  tune::Metrics step() { return {{"score", v_ * double(++t_)}}; }
  std::string save() const { return std::to_string(t_); }
  void restore(const std::string& s) { t_ = std::stoi(s); }

 private:
  double v_;
  int t_ = 0;
};
FIBRA_TRAINABLE(SavedLine);

// HyperBand with max_t 9 and reduction factor 3 (s_max = 2): trials 0-8 make bracket s = 2 (rungs
// at 1 and 3), 9-13 bracket s = 1 (a rung at 3), 14-16 bracket s = 0. By hand, with score v * t:
// bracket 2 keeps v = 9, 8, 7 at rung 1 and v = 9 at rung 3; bracket 1 keeps v = 14 of its five;
// bracket 0 runs all three. So v = 9, 14, 15, 16, 17 run to max_t; the others stop where they
// lost: v = 8, 7 and bracket 1's others at 3 iterations, bracket 2's other six at 1.
TEST(TuneRun, HyperBandRunsTheTopOfEachBracketToMaxT) {
  const std::vector<int> vs = {5, 9, 2, 7, 1, 8, 3, 6, 4, 12, 14, 10, 13, 11, 15, 16, 17};
  const std::map<int, std::int64_t> want = {{5, 1},  {9, 9},  {2, 1},  {7, 3},  {1, 1},  {8, 3},
                                            {3, 1},  {6, 1},  {4, 1},  {12, 3}, {14, 9}, {10, 3},
                                            {13, 3}, {11, 3}, {15, 9}, {16, 9}, {17, 9}};
  std::vector<tune::Value> grid(vs.begin(), vs.end());
  Deadline deadline(std::chrono::seconds(60), "tune::run with HyperBand over 17 trials did not return");
  const auto g = tune::run<SavedLine>(
      {{"v", tune::grid(grid)}},
      {.metric = "score", .scheduler = tune::HyperBand{.max_t = 9, .reduction_factor = 3}, .pool = &pool()});
  ASSERT_EQ(g.trials().size(), vs.size());
  for (const auto& t : g.trials()) {
    const int v = int(t.config.integer("v"));
    ASSERT_EQ(v, vs[t.id]) << "trial " << t.id << ": the grid's order is not the one the brackets were worked out for";
    EXPECT_EQ(t.iterations, want.at(v)) << "v = " << v;
    EXPECT_EQ(t.status, want.at(v) == 9 ? tune::TrialStatus::done : tune::TrialStatus::stopped) << "v = " << v;
    EXPECT_EQ(t.last.at("score"), double(v) * double(t.iterations)) << "v = " << v << ": its state was not restored";
  }
  expect_rows_once(g);
  // It pauses trials and resumes them from checkpoints: a trainable without them is refused.
  try {
    tune::run(five_reports, {{"v", 1}}, {.metric = "score", .scheduler = tune::HyperBand{.max_t = 9}, .pool = &pool()});
    ADD_FAILURE() << "HyperBand ran a function trainable";
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("HyperBand pauses trials at its rungs"), std::string::npos) << e.what();
  }
}

// At iteration 3, the trial with v = 1 writes its pid and never returns; the others run 4 steps.
class HangsAtThree {
 public:
  explicit HangsAtThree(const tune::Config& c) : v_(c.integer("v")), dir_(c.text("dir")) {}
  tune::Metrics step() {
    if (++t_ == 3 && v_ == 1) {
      std::ofstream(dir_ + "/hung_pid") << ::getpid();
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    return {{"score", double(t_)}};
  }

 private:
  std::int64_t v_;
  std::string dir_;
  int t_ = 0;
};
FIBRA_TRAINABLE(HangsAtThree);

// Whether process `pid` is gone within `limit` (its agent reaps it once it is killed).
bool gone_within(pid_t pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(TuneRun, AStepThatNeverReturnsIsItsTrialsErrorWhenItsBudgetRunsOut) {
  const std::string dir = scratch();
  const auto t0 = std::chrono::steady_clock::now();
  Deadline deadline(std::chrono::seconds(60), "tune::run with a step that never returns did not return");
  const auto g =
      tune::run<HangsAtThree>({{"v", tune::grid({0, 1, 2})}, {"dir", dir}}, {.metric = "score",
                                                                             .stop = {{"training_iteration", 4}},
                                                                             .trial_time_budget_s = 4,
                                                                             .pool = &pool(),
                                                                             .raise_on_failed_trial = false});
  EXPECT_LT(seconds_since(t0), 30) << "the budget of 4 s did not end the hung step soon";
  ASSERT_EQ(g.trials().size(), 3u);
  const auto& hung = g.trials()[1];
  EXPECT_EQ(hung.status, tune::TrialStatus::error);
  EXPECT_EQ(hung.failures, 1) << "a trial past its budget was retried: " << hung.error;
  EXPECT_EQ(hung.iterations, 2);  // its rows before the step that hung are kept
  const std::string head = "trial 1 of '(anonymous namespace)::HangsAtThree' (config " + hung.config.str() +
                           ") failed at iteration 3: its time budget ran out (RunOptions::trial_time_budget_s = 4 s; "
                           "this iteration had run ";
  EXPECT_EQ(hung.error.substr(0, head.size()), head) << hung.error;
  EXPECT_NE(hung.error.find("its process was ended, and it is not retried"), std::string::npos) << hung.error;
  for (std::size_t t : {0, 2}) {
    EXPECT_EQ(g.trials()[t].status, tune::TrialStatus::done) << g.trials()[t].error;
    EXPECT_EQ(g.trials()[t].iterations, 4);
  }
  expect_rows_once(g);
  long pid = 0;
  ASSERT_TRUE(std::ifstream(dir + "/hung_pid") >> pid) << "the hung trial never said its pid";
  EXPECT_TRUE(gone_within(pid_t(pid), std::chrono::seconds(10))) << "the hung step's process " << pid << " still runs";
  std::filesystem::remove_all(dir);
}

// Steps of 50 ms without end; the trial with v = 1 writes its pid and never returns from its
// second step.
class Endless {
 public:
  explicit Endless(const tune::Config& c) : v_(c.integer("v")), dir_(c.text("dir")) {}
  tune::Metrics step() {
    if (++t_ == 2 && v_ == 1) {
      std::ofstream(dir_ + "/hung_pid") << ::getpid();
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return {{"score", double(t_)}};
  }

 private:
  std::int64_t v_;
  std::string dir_;
  int t_ = 0;
};
FIBRA_TRAINABLE(Endless);

TEST(TuneRun, TheExperimentsBudgetStopsTheTrialsStillRunning) {
  // Two hosts: trials 0 and 1 run (1 hangs), and never end; 2 and 3 never start.
  const std::string dir = scratch();
  const auto t0 = std::chrono::steady_clock::now();
  Deadline deadline(std::chrono::seconds(60), "tune::run with time_budget_s = 3 did not return");
  const auto g = tune::run<Endless>({{"v", tune::grid({0, 1, 2, 3})}, {"dir", dir}},
                                    {.metric = "score", .max_concurrent = 2, .time_budget_s = 3, .pool = &pool()});
  const double took = seconds_since(t0);
  EXPECT_GE(took, 3);
  EXPECT_LT(took, 20) << "run() went on long past its budget of 3 s";
  ASSERT_EQ(g.trials().size(), 4u);
  for (std::size_t t : {0, 1}) {
    const auto& r = g.trials()[t];
    EXPECT_EQ(r.status, tune::TrialStatus::stopped) << "trial " << t;
    const std::string head = "trial " + std::to_string(t) + " of '(anonymous namespace)::Endless' (config " +
                             r.config.str() + ") was stopped after " + std::to_string(r.iterations) + " iteration";
    EXPECT_EQ(r.error.substr(0, head.size()), head) << r.error;
    EXPECT_NE(r.error.find(": the experiment's time budget ran out (RunOptions::time_budget_s = 3 s)"),
              std::string::npos)
        << r.error;
  }
  EXPECT_EQ(g.trials()[1].iterations, 1);  // its second step never returned
  EXPECT_GE(g.trials()[0].iterations, 2);
  for (std::size_t t : {2, 3}) {
    EXPECT_EQ(g.trials()[t].status, tune::TrialStatus::pending) << "trial " << t;
    EXPECT_EQ(g.trials()[t].iterations, 0);
  }
  EXPECT_TRUE(g.errors().empty());
  expect_rows_once(g);
  long pid = 0;
  ASSERT_TRUE(std::ifstream(dir + "/hung_pid") >> pid) << "the hung trial never said its pid";
  EXPECT_TRUE(gone_within(pid_t(pid), std::chrono::seconds(10))) << "the hung step's process " << pid << " still runs";
  std::filesystem::remove_all(dir);
}

TEST(TuneRun, PbtRefusesATrainableWithoutCheckpoints) {
  tune::Pbt pbt;
  pbt.hyperparam_mutations.add("v", tune::uniform(1, 2));
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0)
        tune::run<Line>({{"v", 1.5}}, {.metric = "score", .scheduler = pbt, .pool = &pool()});
      else
        tune::run(five_reports, {{"v", 1.5}}, {.metric = "score", .scheduler = pbt, .pool = &pool()});
      FAIL() << "PBT ran a trainable that cannot save";
    } catch (const fibra::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("PBT hands one trial's checkpoint to another, and '"), std::string::npos)
          << e.what();
    }
  }
}

// With progress on and stderr redirected (issue 46, case 9): tune's lines and the pool's never run
// together ("...0 queuedfibra::tune [1.0 s]: ..."), and none is drawn in place with "\r".
// Sends stderr to `path` and turns progress on, for as long as it lives; then puts both back, even
// when the test fails or throws (the rest of the suite runs in this process).
class StderrToFile {
 public:
  explicit StderrToFile(const std::string& path) {
    const char* before = std::getenv("FIBRA_PROGRESS");
    if (before) progress_ = before;
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (file >= 0) {
      ::dup2(file, STDERR_FILENO);
      ::close(file);
    }
    ::setenv("FIBRA_PROGRESS", "1", 1);
  }
  ~StderrToFile() {
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    if (progress_)
      ::setenv("FIBRA_PROGRESS", progress_->c_str(), 1);
    else
      ::unsetenv("FIBRA_PROGRESS");
  }

 private:
  int saved_ = -1;
  std::optional<std::string> progress_;
};

TEST(TuneRun, ProgressLinesAreWholeWhenRedirected) {
  const std::string dir = scratch(), log = dir + "/stderr.txt";
  {
    StderrToFile redirected(log);
    fibra::Pool drawn(2);  // a pool made with progress on draws its line of actor calls (after 0.5-1 s of them)
    tune::run<Counter>(
        {{"start", tune::grid({0, 100})}},
        {.metric = "score", .stop = {{"training_iteration", 100}}, .progress_interval_s = 0.2, .pool = &drawn});
  }
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  int tune_lines = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("fibra::tune [");
    EXPECT_TRUE(at == std::string::npos || at == 0) << "a line run together with another: " << line;
    tune_lines += at == 0;
  }
  EXPECT_GE(tune_lines, 2) << text;
  // The last table (issue 49, item 6): each trial done after its 100 iterations, the best first.
  const auto last = text.rfind(", finished]");
  ASSERT_NE(last, std::string::npos) << text;
  auto rows = fibra::tune::test::table_rows(text.substr(last));
  for (auto& cells : rows)
    if (cells.size() == 7) cells.erase(cells.begin() + 4);  // the time of the last result: not known here
  ASSERT_EQ(rows.size(), 3u) << text.substr(last);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"trial", "status", "start", "iter", "score (last)", "score (best)"}));
  EXPECT_EQ(rows[1], (std::vector<std::string>{"1", "done", "100", "100", "200", "200"}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{"0", "done", "0", "100", "100", "100"}));
  std::filesystem::remove_all(dir);
}

// Reports the trial it runs for (tune::this_trial) and leaves a file in its folder.
class KnowsItsTrial {
 public:
  explicit KnowsItsTrial(const tune::Config&) : trial_(tune::this_trial()) {
    if (!trial_.dir.empty()) std::ofstream(trial_.dir + "/made_by") << trial_.id;
  }
  tune::Metrics step() {
    const auto now = tune::this_trial();  // the same during its steps
    return {{"trial", double(now.id)}, {"same", now.id == trial_.id && now.dir == trial_.dir ? 1.0 : 0.0}};
  }

 private:
  tune::TrialContext trial_;
};
FIBRA_TRAINABLE(KnowsItsTrial);

// A trainable reads its trial's id and a folder of its own under the storage (issue 46).
TEST(TuneRun, ATrainableKnowsItsTrialAndHasAFolderOfItsOwn) {
  const auto dir = std::filesystem::temp_directory_path() / ("fibra-tune-trial-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto g = tune::run<KnowsItsTrial>(
      {{"v", tune::grid({1, 2, 3, 4})}},
      {.metric = "trial", .stop = {{"training_iteration", 2}}, .storage = dir.string(), .pool = &pool()});
  ASSERT_EQ(g.trials().size(), 4u);
  for (const auto& t : g.trials()) {
    EXPECT_EQ(t.last.at("trial"), double(t.id)) << "trial " << t.id << " was told another id";
    EXPECT_EQ(t.last.at("same"), 1.0) << "trial " << t.id << ": this_trial() changed between its steps";
    std::ifstream made(dir / "trials" / std::to_string(t.id) / "made_by");
    std::size_t written = 99;
    ASSERT_TRUE(made >> written) << "no file in trial " << t.id << "'s folder";
    EXPECT_EQ(written, t.id);
  }
  EXPECT_THROW(tune::this_trial(), fibra::ConfigError) << "the driver runs no trial";
  std::filesystem::remove_all(dir);
}

// tune::run inside a task (issue 46, case 5) never returned; it is refused at once, saying why.
std::string tune_in_a_task(int) {
  try {
    tune::run<Line>({{"v", tune::grid({1, 2})}}, {.metric = "score", .stop = {{"training_iteration", 2}}});
    return "it ran";
  } catch (const fibra::ConfigError& e) {
    return e.what();
  }
}
FIBRA_REMOTE(tune_in_a_task);

TEST(TuneRun, ARunInsideATaskIsRefusedAtOnceSayingWhy) {
  auto f = pool().submit(tune_in_a_task, 0);
  ASSERT_TRUE(f.wait_for(std::chrono::seconds(60))) << "tune::run inside a task did not return within 60 s";
  const std::string what = f.get();
  EXPECT_NE(what.find("fibra::tune::run was called inside a task"), std::string::npos) << what;
  EXPECT_NE(what.find("call it from main"), std::string::npos) << what;
  EXPECT_FALSE(fibra::in_task()) << "the driver is no task";
}

TEST(TuneRun, TwoFunctionsUnderOneNameAreRefused) {
  try {
    tune::run(one::same_name, {}, {.pool = &pool()});
    FAIL() << "ran one of two functions registered as 'same_name'";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::tune: two different functions are registered as trainables under the name 'same_name': "
                 "register each with its qualified name (FIBRA_TRAINABLE_FUNCTION(ns::same_name))");
  }
}

TEST(TuneRun, AnUnregisteredTrainableIsRefused) {
  struct NotRegistered {
    explicit NotRegistered(const tune::Config&) {}
    tune::Metrics step() { return {}; }
  };
  try {
    tune::run<NotRegistered>({}, {.pool = &pool()});
    FAIL();
  } catch (const fibra::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a registered trainable: add FIBRA_TRAINABLE("), std::string::npos)
        << e.what();
  }
}

// The trials in the event log of the pool they ran on (PoolOptions::events, issue 49): the
// experiment named once, then for each trial its start, each result with the metric's value (read
// back with another JSON parser and checked against Flaky's closed form v * 10 + t), the failure
// at iteration 2 and the start again from nothing, the four results, and its end. The folder is
// $FIBRA_TEST_TUNE_EVENTS_DIR when set (tune.report reads it: `fibra report` and `fibra status`).
TEST(TuneRun, TheTrialsAreInThePoolsEventLog) {
  const char* given = std::getenv("FIBRA_TEST_TUNE_EVENTS_DIR");
  const std::string events = given && *given ? given : scratch() + "/events";
  std::filesystem::remove_all(events);
  const std::string dir = scratch();
  {
    fibra::PoolOptions po;
    po.events = events;
    fibra::Pool p(2, po);
    const auto g = tune::run<Flaky>({{"v", tune::grid({0, 1, 2})}, {"abort", 0}, {"always", 0}, {"dir", dir}},
                                    {.metric = "score", .stop = {{"training_iteration", 4}}, .pool = &p});
    ASSERT_EQ(g.trials().size(), 3u);
  }
  std::vector<nlohmann::json> all;
  {
    std::ifstream in(events + "/events.jsonl");
    for (std::string line; std::getline(in, line);) all.push_back(nlohmann::json::parse(line));
  }
  int tunes = 0;
  std::map<std::size_t, std::vector<std::string>> seen;  // trial -> its events, as "start 0", "result 1 11", ...
  std::map<std::size_t, std::int64_t> v_of;
  for (const auto& e : all) {
    const std::string ev = e.at("ev");
    if (ev == "tune") {
      ++tunes;
      EXPECT_EQ(e.at("trainable"), "(anonymous namespace)::Flaky");
      EXPECT_EQ(e.at("metric"), "score");
      EXPECT_EQ(e.at("mode"), "max");
      EXPECT_EQ(e.at("trials"), 3);
      continue;
    }
    if (!ev.starts_with("trial_")) continue;
    const std::size_t trial = e.at("trial");
    auto& s = seen[trial];
    if (ev == "trial_start") {
      const std::string config = e.at("config");  // "abort=0, always=0, dir=..., v=1"
      v_of[trial] = std::stoll(config.substr(config.rfind("v=") + 2));
      s.push_back("start " + std::to_string(e.at("iteration").get<int>()));
    } else if (ev == "trial_result") {
      s.push_back("result " + std::to_string(e.at("iteration").get<int>()) + " " +
                  std::to_string(e.at("metrics").at("score").get<double>()));
    } else if (ev == "trial_failed") {
      const std::string error = e.at("error");
      EXPECT_NE(error.find("flaky at 2"), std::string::npos) << error;
      s.push_back("failed");
    } else if (ev == "trial_end") {
      s.push_back("end " + e.at("status").get<std::string>() + " " + std::to_string(e.at("iterations").get<int>()));
    }
  }
  EXPECT_EQ(tunes, 1);
  ASSERT_EQ(seen.size(), 3u);
  std::set<std::int64_t> vs;
  for (const auto& [trial, s] : seen) {
    const std::int64_t v = v_of[trial];
    vs.insert(v);
    const auto result = [&](int t) { return "result " + std::to_string(t) + " " + std::to_string(double(v * 10 + t)); };
    const std::vector<std::string> want = {"start 0", result(1), "failed",  "start 0",   result(1),
                                           result(2), result(3), result(4), "end done 4"};
    EXPECT_EQ(s, want) << "trial " << trial;
  }
  EXPECT_EQ(vs, (std::set<std::int64_t>{0, 1, 2}));
  std::filesystem::remove_all(dir);
  if (!given || !*given) std::filesystem::remove_all(std::filesystem::path(events).parent_path());
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
