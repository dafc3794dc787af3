// The ES job's controller for a box of actions (es_control.hpp), against values worked by hand and
// against episodes stepped here without it. One process, no MPI.
#include "es_control.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

// tanh squashed into [low, high], written out as the documentation states it.
double squash(double s, double low, double high) { return low + (high - low) * (std::tanh(s) + 1.0) / 2.0; }

TEST(EsController, ALinearControllerIsOneWeightedSumPerActionSquashedIntoItsRange) {
  // 2 observations, 2 actions in [-2, 2] and [0, 1]: W (2 x 2, row-major), then b.
  const es::Controller c(2, 0, {-2.0, 0.0}, {2.0, 1.0});
  ASSERT_EQ(c.parameters(), 6u);
  const std::vector<double> theta{0.5, -1.0, 2.0, 0.25, 0.1, -0.3};
  const double mean[] = {1.0, -1.0}, stddev[] = {2.0, 0.5}, obs[] = {3.0, 0.0};
  // Normalised: (3 - 1) / 2 = 1, (0 + 1) / 0.5 = 2.
  double out[2];
  c.act(theta.data(), mean, stddev, obs, out);
  EXPECT_DOUBLE_EQ(out[0], squash(0.5 * 1 - 1.0 * 2 + 0.1, -2, 2));  // -1.4
  EXPECT_DOUBLE_EQ(out[1], squash(2.0 * 1 + 0.25 * 2 - 0.3, 0, 1));  // 2.2
}

TEST(EsController, AHiddenLayerIsTanhOfW1ThenW2SquashedInTheDocumentedLayout) {
  // 2 observations, 3 hidden units, 1 action in [-1, 1]: W1 (3 x 2), b1 (3), W2 (1 x 3), b2 (1).
  const es::Controller c(2, 3, {-1.0}, {1.0});
  ASSERT_EQ(c.parameters(), 6u + 3u + 3u + 1u);
  const std::vector<double> theta{0.1,  0.2,  -0.3, 0.4, 0.5, -0.6,  // W1
                                  0.01, 0.02, 0.03,                  // b1
                                  1.0,  -2.0, 0.5,                   // W2
                                  0.2};                              // b2
  const double mean[] = {0, 0}, stddev[] = {1, 1}, obs[] = {1.0, -2.0};
  const double h0 = std::tanh(0.1 * 1 + 0.2 * -2 + 0.01), h1 = std::tanh(-0.3 * 1 + 0.4 * -2 + 0.02),
               h2 = std::tanh(0.5 * 1 - 0.6 * -2 + 0.03);
  double out[1];
  c.act(theta.data(), mean, stddev, obs, out);
  EXPECT_DOUBLE_EQ(out[0], squash(1.0 * h0 - 2.0 * h1 + 0.5 * h2 + 0.2, -1, 1));
}

TEST(EsController, NormalisedObservationsAreClippedToFiveStandardDeviations) {
  const es::Controller c(1, 0, {-1.0}, {1.0});
  const std::vector<double> theta{1.0, 0.0};
  const double mean[] = {0}, stddev[] = {1}, far[] = {100.0}, edge[] = {5.0};
  double a = 0, b = 0;
  c.act(theta.data(), mean, stddev, far, &a);
  c.act(theta.data(), mean, stddev, edge, &b);
  EXPECT_DOUBLE_EQ(a, std::tanh(5.0));
  EXPECT_DOUBLE_EQ(a, b);
}

TEST(EsController, RefusesDiscreteActionsAndUnboundedOnes) {
  const auto cartpole = fibra::rl::make_env("CartPole-v1");
  try {
    (void)es::Controller::of(*cartpole, 0);
    FAIL() << "a controller for discrete actions";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("discrete"), std::string::npos) << e.what();
  }
  try {
    es::Controller(2, 0, {-1.0}, {INFINITY});
    FAIL() << "a controller for an unbounded action";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no finite range"), std::string::npos) << e.what();
  }
}

TEST(EsController, PerturbedIsThetaPlusSigmaTimesTheNoise) {
  const std::vector<double> theta{1.0, -1.0, 0.5};
  const float noise[] = {0.5f, -2.0f, 1.0f};
  EXPECT_EQ(es::perturbed(theta, noise, 0.1), (std::vector<double>{1.0 + 0.1 * 0.5, -1.0 + 0.1 * -2.0, 0.5 + 0.1}));
  EXPECT_EQ(es::perturbed(theta, noise, -0.1), (std::vector<double>{1.0 - 0.1 * 0.5, -1.0 + 0.1 * 2.0, 0.5 - 0.1}));
}

// A linear controller at zero asks for the middle of each range: Pendulum-v1's torque 0. The
// episode must be what stepping another Pendulum with torque 0 gives, step by step.
TEST(EsEpisode, IsTheEnvironmentsOwnEpisodeWithTheControllersActions) {
  auto env = fibra::rl::make_env("Pendulum-v1");
  const es::Controller c = es::Controller::of(*env, 0);
  ASSERT_EQ(c.observations(), 3);
  ASSERT_EQ(c.actions(), 1);
  const std::vector<double> theta(c.parameters(), 0.0), mean(3, 0.0), stddev(3, 1.0);
  es::ObsSums seen{std::vector<double>(3), std::vector<double>(3), 0};
  const es::Outcome got = es::run_episode(*env, c, theta.data(), mean.data(), stddev.data(), 7, &seen);

  auto by_hand = fibra::rl::make_env("Pendulum-v1");
  const std::span<const double> first = by_hand->reset(7);
  std::vector<double> obs(first.begin(), first.end());
  double ret = 0, sum0 = 0, sumsq2 = 0;
  long steps = 0;
  const double zero[] = {0.0};
  for (bool done = false; !done; ++steps) {
    sum0 += obs[0];
    sumsq2 += obs[2] * obs[2];
    const fibra::rl::StepResult r = by_hand->step(zero);
    ret += r.reward;
    done = r.terminated || r.truncated;
    obs.assign(r.observation.begin(), r.observation.end());
  }
  EXPECT_EQ(steps, 200);  // Pendulum-v1's limit
  EXPECT_EQ(got.steps, steps);
  EXPECT_DOUBLE_EQ(got.ret, ret);
  EXPECT_EQ(seen.count, 200.0);
  EXPECT_DOUBLE_EQ(seen.sum[0], sum0);
  EXPECT_DOUBLE_EQ(seen.sumsq[2], sumsq2);
  // Another seed starts elsewhere.
  EXPECT_NE(es::run_episode(*env, c, theta.data(), mean.data(), stddev.data(), 8, nullptr).ret, got.ret);
}

TEST(EsEpisode, TheObservedPairsAreTheAskedFractionOfThem) {
  int none = 0, all = 0, tenth = 0;
  const int n = 20000;
  for (int k = 0; k < n; ++k) {
    const std::uint64_t seed = es::mix(1, 2, std::uint64_t(k));
    none += es::observes(seed, 0.0);
    all += es::observes(seed, 1.0);
    tenth += es::observes(seed, 0.1);
  }
  EXPECT_EQ(none, 0);
  EXPECT_EQ(all, n);
  EXPECT_NEAR(tenth, n / 10, 200);  // 4.7 binomial standard deviations
}

}  // namespace
