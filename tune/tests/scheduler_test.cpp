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

// Table 1 of Li et al. 2018 (R = 81, eta = 3), from its Algorithm 1: s_max = floor(log_3 81) = 4,
// n = ceil(5 / (s + 1) * 3^s): s = 4: ceil(81) = 81; s = 3: ceil(5/4 * 27 = 33.75) = 34; s = 2:
// ceil(5/3 * 9) = 15; s = 1: ceil(5/2 * 3 = 7.5) = 8; s = 0: 5; r = 81 * 3^-s; the rungs keep
// n_i = floor(n * 3^-i): 81 27 9 3 1 | 34 11 3 1 | 15 5 1 | 8 2 | 5.
TEST(HyperBand, BracketsAreThePapersTable) {
  const auto b = hyperband_brackets(81, 3);
  ASSERT_EQ(b.size(), 5u);
  const int s[] = {4, 3, 2, 1, 0};
  const std::size_t n[] = {81, 34, 15, 8, 5};
  const double r[] = {1, 3, 9, 27, 81};
  const std::vector<std::vector<std::size_t>> sizes = {{81, 27, 9, 3, 1}, {34, 11, 3, 1}, {15, 5, 1}, {8, 2}, {5}};
  const std::vector<std::vector<double>> rungs = {{1, 3, 9, 27, 81}, {3, 9, 27, 81}, {9, 27, 81}, {27, 81}, {81}};
  for (std::size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(b[k].s, s[k]);
    EXPECT_EQ(b[k].n, n[k]) << "bracket s = " << s[k];
    EXPECT_DOUBLE_EQ(b[k].r, r[k]) << "bracket s = " << s[k];
    EXPECT_EQ(b[k].sizes, sizes[k]) << "bracket s = " << s[k];
    ASSERT_EQ(b[k].milestones.size(), rungs[k].size());
    for (std::size_t i = 0; i < rungs[k].size(); ++i) EXPECT_DOUBLE_EQ(b[k].milestones[i], rungs[k][i]);
  }
  // R = 9: s_max = 2, n = 9, ceil(3/2 * 3 = 4.5) = 5, 3.
  const auto nine = hyperband_brackets(9, 3);
  ASSERT_EQ(nine.size(), 3u);
  EXPECT_EQ(nine[0].n, 9u);
  EXPECT_EQ(nine[1].n, 5u);
  EXPECT_EQ(nine[2].n, 3u);
  // R = 200: s_max = floor(log_3 200 = 4.82) = 4 (Ray rounds it to 5), so 5 brackets; the first
  // starts at 200 / 81 of time.
  const auto two_hundred = hyperband_brackets(200, 3);
  ASSERT_EQ(two_hundred.size(), 5u);
  EXPECT_EQ(two_hundred[0].n, 81u);
  EXPECT_DOUBLE_EQ(two_hundred[0].r, 200.0 / 81);
}

// R = 9, eta = 3, 14 trials: trials 0-8 fill bracket s = 2 (rungs at 1 and 3, then max_t 9) and
// 9-13 bracket s = 1 (5 of its 5: a rung at 3); bracket s = 0 gets none.
TEST(HyperBand, EachBracketKeepsTheTopThirdAtEachRung) {
  auto s = make_scheduler(HyperBand{.max_t = 9, .reduction_factor = 3}, 0, 14);
  // Rung 1 of bracket 2: every trial waits there until the ninth arrives; then the top
  // floor(9 / 3) = 3 (values 9, 8, 7: trials 1, 5, 3) go on, the others stop, best first.
  const double at1[] = {5, 9, 2, 7, 1, 8, 3, 6, 4};
  for (std::size_t t = 0; t < 8; ++t) {
    EXPECT_EQ(s->on_result(t, 1, at1[t], {}).kind, Kind::pause) << "trial " << t;
    EXPECT_TRUE(s->waiting(t)) << "trial " << t;
  }
  EXPECT_TRUE(s->take_rulings().empty());
  EXPECT_EQ(s->on_result(8, 1, at1[8], {}).kind, Kind::stop);  // the last to arrive: 4, not in the top 3
  EXPECT_EQ(s->take_rulings(), (std::vector<Ruling>{{1, Kind::go_on},
                                                    {5, Kind::go_on},
                                                    {3, Kind::go_on},
                                                    {7, Kind::stop},
                                                    {0, Kind::stop},
                                                    {6, Kind::stop},
                                                    {2, Kind::stop},
                                                    {4, Kind::stop}}));
  EXPECT_FALSE(s->waiting(1));
  // Between rungs nothing is decided; rung 3 keeps floor(3 / 3) = 1, and the one that decides it
  // by arriving goes on after a checkpoint (save).
  EXPECT_FALSE(s->may_decide(1, 2));
  EXPECT_TRUE(s->may_decide(1, 3));
  EXPECT_EQ(s->on_result(1, 2, -100, {}).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(5, 3, 20, {}).kind, Kind::pause);
  EXPECT_EQ(s->on_result(1, 3, 10, {}).kind, Kind::pause);
  EXPECT_EQ(s->on_result(3, 3, 30, {}).kind, Kind::save);
  EXPECT_EQ(s->take_rulings(), (std::vector<Ruling>{{5, Kind::stop}, {1, Kind::stop}}));
  EXPECT_EQ(s->on_result(3, 5, 0, {}).kind, Kind::go_on);
  EXPECT_EQ(s->on_result(3, 9, 0, {}).kind, Kind::done);

  // Bracket 1 (trials 9-13), one rung at 3: trial 13 ends before it, so the rung is decided once
  // the other four are there: the top floor(4 / 3) = 1 (trial 11) goes on.
  EXPECT_FALSE(s->may_decide(9, 1));
  EXPECT_EQ(s->on_result(9, 1, 1, {}).kind, Kind::go_on);
  s->on_end(13);
  EXPECT_EQ(s->on_result(9, 3, 1, {}).kind, Kind::pause);
  EXPECT_EQ(s->on_result(10, 3, 2, {}).kind, Kind::pause);
  EXPECT_EQ(s->on_result(11, 3, 3, {}).kind, Kind::pause);
  EXPECT_TRUE(s->take_rulings().empty());
  EXPECT_EQ(s->on_result(12, 3, 0, {}).kind, Kind::stop);
  EXPECT_EQ(s->take_rulings(), (std::vector<Ruling>{{11, Kind::go_on}, {10, Kind::stop}, {9, Kind::stop}}));
}

TEST(HyperBand, ATrialBackAtADecidedRungHearsItsRuling) {
  // Three trials, all in bracket s = 2 of R = 9 (9 places): rung 1 keeps max(1, floor(3 / 3)) = 1.
  auto s = make_scheduler(HyperBand{.max_t = 9, .reduction_factor = 3}, 0, 3);
  EXPECT_EQ(s->on_result(0, 1, 5, {}).kind, Kind::pause);
  EXPECT_EQ(s->on_result(1, 1, 1, {}).kind, Kind::pause);
  // Trial 0 fails while saving at the rung and is retried: it comes back with another value.
  EXPECT_EQ(s->on_result(0, 1, 6, {}).kind, Kind::pause);
  EXPECT_EQ(s->on_result(2, 1, 3, {}).kind, Kind::stop);
  EXPECT_EQ(s->take_rulings(), (std::vector<Ruling>{{0, Kind::go_on}, {1, Kind::stop}}));
  // Trial 1, retried while the rung was decided (its ruling was not heard), comes back: stopped,
  // whatever it scores now; trial 0 back at 1 is a level up: it goes on.
  EXPECT_EQ(s->on_result(1, 1, 100, {}).kind, Kind::stop);
  EXPECT_EQ(s->on_result(0, 1, 6, {}).kind, Kind::go_on);
  EXPECT_FALSE(s->waiting(0));
}

TEST(HyperBand, RefusesBracketsThatCannotBe) {
  try {
    make_scheduler(HyperBand{.max_t = 2, .reduction_factor = 3}, 0, 4);
    FAIL() << "max_t below reduction_factor was taken";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "fibra::tune: HyperBand needs max_t >= reduction_factor, so that a bracket halves at least once; it "
                 "has max_t 2 and reduction_factor 3");
  }
  EXPECT_THROW(make_scheduler(HyperBand{.reduction_factor = 1}, 0, 4), ConfigError);
  EXPECT_THROW(make_scheduler(HyperBand{.max_t = std::nan("")}, 0, 4), ConfigError);
}

}  // namespace
}  // namespace fibra::tune::detail
