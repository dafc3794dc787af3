// tune/tests/scheduler_test.cpp: each scheduler's rule on scores fixed here, with the decisions
// worked out by hand from the rule as docs/tune.md states it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fibra/error.hpp"
#include "internal.hpp"

namespace fibra::tune::detail {
namespace {

using Kind = Decision::Kind;

TEST(Percentile, LinearBetweenClosestRanksAsNumpy) {
  // numpy.percentile([5, 3], 50) == 4.0; ([5, 3, 8, 1], 50) == 4.0; ([1, 2, 3, 4], 75) == 3.25
  EXPECT_DOUBLE_EQ(percentile({5, 3}, 50), 4.0);
  EXPECT_DOUBLE_EQ(percentile({5, 3, 8, 1}, 50), 4.0);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 75), 3.25);
  EXPECT_DOUBLE_EQ(percentile({7}, 75), 7.0);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

TEST(Asha, StopsExactlyTheTrialsBelowTheRungsCutoff) {
  // reduction_factor 2, grace 1, max_t 8: rungs at 1, 2, 4 (int(log2(8) + 1) = 4 rungs: 1, 2, 4, 8;
  // a trial at 8 is done by max_t first). The cutoff at a rung is the median (1 - 1/2) of the
  // scores recorded there before this one.
  auto s = make_scheduler(Asha{.max_t = 8, .grace_period = 1, .reduction_factor = 2}, 0);
  const Config c;
  // Rung 1, in this order: 5 (nothing recorded: on), 3 (median of {5} = 5: stop), 8 (median of
  // {5, 3} = 4: on), 1 (median {5, 3, 8} = 5: stop), 6 (median {5, 3, 8, 1} = 4: on), 7 (median
  // {5, 3, 8, 1, 6} = 5: on).
  const double rung1[] = {5, 3, 8, 1, 6, 7};
  const Kind want1[] = {Kind::go_on, Kind::stop, Kind::go_on, Kind::stop, Kind::go_on, Kind::go_on};
  for (std::size_t t = 0; t < 6; ++t) EXPECT_EQ(s->on_result(t, 1, rung1[t], c).kind, want1[t]) << "trial " << t;
  // Between rungs nothing is decided.
  EXPECT_EQ(s->on_result(0, 1.5, -100, c).kind, Kind::go_on);
  // Rung 2: trial 2 at 10 (first: on), trial 0 at 4 (median {10} = 10: stop), trial 4 at 12
  // (median {10, 4} = 7: on), trial 5 at 6.5 (median {10, 4, 12} = 10: stop).
  EXPECT_EQ(s->on_result(2, 2, 10, c).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(0, 2, 4, c).kind, Kind::stop);
  EXPECT_EQ(s->on_result(4, 2, 12, c).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(5, 2, 6.5, c).kind, Kind::stop);
  // A trial seen at a rung is not judged there again; at max_t it is done.
  EXPECT_EQ(s->on_result(2, 3, -1000, c).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(2, 8, 0, c).kind, Kind::done);
}

TEST(Asha, AMetricNotReportedDecidesNothing) {
  auto s = make_scheduler(Asha{.max_t = 4, .grace_period = 1, .reduction_factor = 2}, 0);
  EXPECT_EQ(s->on_result(0, 1, 10, {}).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(1, 1, std::nan(""), {}).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(2, 1, 1, {}).kind, Kind::stop);               // only 10 was recorded
  EXPECT_EQ(s->on_result(3, std::nan(""), -5, {}).kind, Kind::go_on);  // no time: not recorded at a rung
  EXPECT_EQ(s->on_result(4, 1, 5, {}).kind, Kind::stop);               // median of {10, 1}: 5.5
}

// Two trials walked up every rung in `rungs`, trial 0 at score 10 and trial 1 at 20 (both go on:
// the first at a rung has nothing to beat, 20 beats 10); then at `last` trial 0 scores 10 (the first
// there: on) and trial 1 scores 5, below the cutoff of {10}: stopped, if `last` is a rung.
void walk_two_trials(SchedulerLogic& s, const std::vector<double>& rungs, double last) {
  for (double t : rungs) {
    EXPECT_EQ(s.on_result(0, t, 10, {}).kind, Kind::go_on) << "trial 0 at " << t;
    EXPECT_EQ(s.on_result(1, t, 20, {}).kind, Kind::go_on) << "trial 1 at " << t;
  }
  EXPECT_EQ(s.on_result(0, last, 10, {}).kind, Kind::go_on) << "trial 0 at " << last;
  EXPECT_EQ(s.on_result(1, last, 5, {}).kind, Kind::stop) << "trial 1 at " << last << ": no rung there";
}

TEST(Asha, RungsUpToTheLastPowerBelowMaxTWhenTheRatioIsNoPower) {
  // max_t 10, grace 1, factor 3: rungs at 1, 3, 9 (the largest 3^k <= 10 is 9); 27 is past max_t.
  auto s = make_scheduler(Asha{.max_t = 10, .grace_period = 1, .reduction_factor = 3}, 0);
  walk_two_trials(*s, {1, 3}, 9);
  // The defaults (max_t 100, grace 1, factor 4): rungs at 1, 4, 16 and 64.
  auto d = make_scheduler(Asha{}, 0);
  walk_two_trials(*d, {1, 4, 16}, 64);
  // Between the last rung and max_t nothing more is decided; at max_t a trial is done.
  EXPECT_EQ(d->on_result(0, 99, -1000, {}).kind, Kind::go_on);
  EXPECT_EQ(d->on_result(0, 100, 0, {}).kind, Kind::done);
}

TEST(Asha, RefusesRungsThatCannotBe) {
  EXPECT_THROW(make_scheduler(Asha{.max_t = 1, .grace_period = 1}, 0), ConfigError);
  EXPECT_THROW(make_scheduler(Asha{.reduction_factor = 1}, 0), ConfigError);
}

TEST(Pbt, TheBottomTakesATopTrialsCheckpointWithAPerturbedConfig) {
  Pbt p;
  p.perturbation_interval = 2;
  p.quantile_fraction = 0.25;
  p.resample_probability = 0;  // always perturb, never resample
  p.perturbation_factors = {2.0};
  p.hyperparam_mutations.add("lr", uniform(0.001, 1));
  auto s = make_scheduler(p, 3);
  auto cfg = [](double lr) { return Config{{"lr", lr}, {"fixed", 1}}; };
  // Between perturbations nothing is decided, and scores count only as of a perturbation (Ray's).
  for (std::size_t t = 0; t < 4; ++t) EXPECT_EQ(s->on_result(t, 1, 100, cfg(0.1)).kind, Kind::go_on);
  // t = 2, in this order: trial 0 (10) is the only one scored: no quantiles. Trial 1 (0): two
  // scored, one in each quantile (ceil(2 * 0.25) = 1), trial 1 the bottom, but the top (trial 0)
  // saved nothing: on. Trials 2 (5) and 3 (4) fall in between.
  EXPECT_EQ(s->on_result(0, 2, 10, cfg(0.1)).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(1, 2, 0, cfg(0.2)).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(2, 2, 5, cfg(0.3)).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(3, 2, 4, cfg(0.4)).kind, Kind::go_on);
  // t = 4: trial 0 (12) is the top one and saves; trial 1 (1) the bottom one exploits trial 0 with
  // lr 0.1 * 2.
  EXPECT_EQ(s->on_result(0, 4, 12, cfg(0.1)).kind, Kind::save);
  const Decision d = s->on_result(1, 4, 1, cfg(0.2));
  ASSERT_EQ(d.kind, Kind::exploit);
  EXPECT_EQ(d.donor, 0u);
  EXPECT_DOUBLE_EQ(d.config.number("lr"), 0.2);
  EXPECT_EQ(d.config.integer("fixed"), 1);
  EXPECT_EQ(s->on_result(2, 4, 5, cfg(0.3)).kind, Kind::go_on);
  // Not again before another interval.
  EXPECT_EQ(s->on_result(1, 5, -5, cfg(0.2)).kind, Kind::go_on);
  // A row without the time (time_attr not reported) decides nothing.
  EXPECT_EQ(s->on_result(3, std::nan(""), -100, cfg(0.4)).kind, Kind::go_on);
}

TEST(Pbt, NoDonorWithoutACheckpointAndNoneAlone) {
  Pbt p;
  p.perturbation_interval = 1;
  p.hyperparam_mutations.add("lr", uniform(0.001, 1));
  auto s = make_scheduler(p, 0);
  EXPECT_EQ(s->on_result(0, 1, 1, {{"lr", 0.1}}).kind, Kind::go_on);  // alone: no quantiles
  // Two trials: trial 1 (score 0) is at the bottom, but the top one (trial 0) never saved.
  EXPECT_EQ(s->on_result(1, 1, 0, {{"lr", 0.1}}).kind, Kind::go_on);
  Pbt none;
  EXPECT_THROW(make_scheduler(none, 0), ConfigError);
}

TEST(Pbt, AGridKeyMovesToANeighbour) {
  Pbt p;
  p.perturbation_interval = 1;
  p.resample_probability = 0;
  p.hyperparam_mutations.add("batch", grid({16, 32, 64}));
  auto s = make_scheduler(p, 5);
  EXPECT_EQ(s->on_result(0, 1, 1, {{"batch", 16}}).kind, Kind::go_on);  // alone: no quantiles
  EXPECT_EQ(s->on_result(1, 1, 5, {{"batch", 32}}).kind, Kind::save);   // the top of two
  const Decision d = s->on_result(0, 2, 1, {{"batch", 16}});            // the bottom of two
  ASSERT_EQ(d.kind, Kind::exploit);
  EXPECT_EQ(d.donor, 1u);
  const std::int64_t b = d.config.integer("batch");  // trial 1's 32, moved one place in the grid
  EXPECT_TRUE(b == 16 || b == 64) << b;
}

}  // namespace
}  // namespace fibra::tune::detail
