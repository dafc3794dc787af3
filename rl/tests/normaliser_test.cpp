// ObsMoments and ObsNormaliser: merging equals the statistics of the concatenation; the
// normalisation formula, clip and the disabled copy; Rng is envs::SplitMix64.
#include <fibra/rl/normaliser.hpp>
#include <fibra/rl/rng.hpp>

#include "envs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

std::vector<std::vector<double>> rows(int n, std::uint64_t seed) {
  fibra::rl::Rng rng(seed);
  std::vector<std::vector<double>> out;
  for (int i = 0; i < n; ++i) out.push_back({-3 + 8 * rng.uniform(), 100 + rng.normal(), 1e-3 * rng.normal()});
  return out;
}

// Two passes over every row: the plain mean and population variance.
void exact(const std::vector<std::vector<double>>& all, std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(3, 0.0);
  var.assign(3, 0.0);
  for (const auto& r : all)
    for (int i = 0; i < 3; ++i) mean[i] += r[i] / static_cast<double>(all.size());
  for (const auto& r : all)
    for (int i = 0; i < 3; ++i) var[i] += (r[i] - mean[i]) * (r[i] - mean[i]) / static_cast<double>(all.size());
}

TEST(ObsMoments, MergeEqualsTheConcatenation) {
  const auto all = rows(1000, 3);
  std::vector<double> mean, var;
  exact(all, mean, var);
  for (std::size_t split : {std::size_t{0}, std::size_t{1}, std::size_t{337}, std::size_t{999}, std::size_t{1000}}) {
    fibra::rl::ObsMoments a(3), b(3), whole(3);
    for (std::size_t r = 0; r < all.size(); ++r) {
      (r < split ? a : b).add(all[r]);
      whole.add(all[r]);
    }
    a.merge(b);
    EXPECT_EQ(a.count, 1000u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(a.mean[i], mean[i], 1e-12 * (1 + std::abs(mean[i]))) << "split " << split << ", component " << i;
      EXPECT_NEAR(a.variance(i), var[i], 1e-10 * var[i]) << "split " << split << ", component " << i;
      EXPECT_NEAR(a.variance(i), whole.variance(i), 1e-10 * var[i]);
    }
  }
}

TEST(ObsMoments, ManyPartsMergedInOrder) {
  const auto all = rows(300, 9);
  std::vector<double> mean, var;
  exact(all, mean, var);
  fibra::rl::ObsMoments total(3);
  for (int part = 0; part < 30; ++part) {
    fibra::rl::ObsMoments m(3);
    for (int r = 0; r < 10; ++r) m.add(all[static_cast<std::size_t>(part * 10 + r)]);
    total.merge(m);
  }
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(total.variance(i), var[i], 1e-10 * var[i]);
}

TEST(ObsMoments, EmptyMergesAsNothingAndSizesMustAgree) {
  fibra::rl::ObsMoments a(2), empty, other(3);
  a.add(std::vector<double>{1, 2});
  a.merge(empty);
  a.merge(fibra::rl::ObsMoments(2));
  EXPECT_EQ(a.count, 1u);
  other.add(std::vector<double>{1, 2, 3});
  EXPECT_THROW(a.merge(other), std::invalid_argument);
  EXPECT_THROW(a.add(std::vector<double>{1}), std::invalid_argument);
}

TEST(ObsNormaliser, GymnasiumsFormulaWithClip) {
  fibra::rl::ObsNormaliser norm(2);
  const std::vector<double> raw{1, 0, 3, 0};  // rows (1, 0), (3, 0)
  std::vector<float> out(4);
  norm.normalise(raw, out);  // no statistics yet: mean 0, variance 1
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(1 / std::sqrt(1 + 1e-8)));
  fibra::rl::ObsMoments m(2);
  m.add(std::vector<double>{1, 0});
  m.add(std::vector<double>{3, 0});
  norm.merge(m);  // component 0: mean 2, variance 1; component 1: mean 0, variance 0
  const std::vector<double> x{4, 1e-3};
  std::vector<float> y(2);
  norm.normalise(x, y);
  EXPECT_FLOAT_EQ(y[0], static_cast<float>(2 / std::sqrt(1 + 1e-8)));
  EXPECT_FLOAT_EQ(y[1], 10.0f);  // 1e-3 / sqrt(1e-8) = 10, at the clip; more is clipped
  const std::vector<double> far{-100, -1};
  norm.normalise(far, y);
  EXPECT_FLOAT_EQ(y[0], -10.0f);
  EXPECT_FLOAT_EQ(y[1], -10.0f);
  norm.enabled = false;
  norm.normalise(far, y);
  EXPECT_FLOAT_EQ(y[0], -100.0f);
  std::vector<float> three(3);
  EXPECT_THROW(norm.normalise(std::vector<double>{1, 2, 3}, three), std::invalid_argument);
}

TEST(Rng, IsJobsEnvsSplitMix64) {
  fibra::rl::Rng ours(12345);
  envs::SplitMix64 theirs(12345);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(ours.next(), theirs.next());
  EXPECT_EQ(ours.uniform(), theirs.uniform());
  const fibra::rl::Rng copy(ours.state());
  EXPECT_EQ(fibra::rl::Rng(copy).next(), ours.next());
}

TEST(Rng, NormalHasUnitMomentsAndBelowStaysInRange) {
  fibra::rl::Rng rng(1);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal();
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.below(7), 7u);
}

}  // namespace
