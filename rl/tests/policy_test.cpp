// PolicySpec's layout, initial weights, Policy's inference against a plain reference in double,
// its row independence, and the gemm kernels' agreement.
#include <fibra/rl/policy.hpp>

#include "kernels/kernels.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

using fibra::rl::Policy;
using fibra::rl::PolicySpec;
using fibra::rl::PolicyWeights;

TEST(PolicySpec, LayoutOfCartPoleIsCleanRLs) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  const auto blocks = fibra::rl::parameter_layout(spec);
  ASSERT_EQ(blocks.size(), 12u);
  EXPECT_EQ(blocks[0].name, "actor.0.weight");
  EXPECT_EQ(blocks[0].shape, (std::vector<std::int64_t>{64, 4}));
  EXPECT_EQ(blocks[1].name, "actor.0.bias");
  EXPECT_EQ(blocks[1].offset, 256u);
  EXPECT_EQ(blocks[4].name, "actor.4.weight");
  EXPECT_EQ(blocks[4].shape, (std::vector<std::int64_t>{2, 64}));
  EXPECT_EQ(blocks[6].name, "critic.0.weight");
  EXPECT_EQ(blocks[6].offset, 4610u);  // actor: 64*4 + 64 + 64*64 + 64 + 2*64 + 2
  EXPECT_EQ(blocks[11].name, "critic.4.bias");
  EXPECT_EQ(fibra::rl::parameter_count(spec), 9155u);  // + critic: 64*4 + 64 + 64*64 + 64 + 64 + 1
}

TEST(PolicySpec, PendulumHasALogStd) {
  const PolicySpec spec = PolicySpec::for_env("Pendulum-v1", {8});
  const auto blocks = fibra::rl::parameter_layout(spec);
  EXPECT_FALSE(spec.discrete());
  EXPECT_EQ(blocks.back().name, "actor_logstd");
  EXPECT_EQ(blocks.back().shape, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(fibra::rl::parameter_count(spec), (3 * 8 + 8 + 8 + 1) + (3 * 8 + 8 + 8 + 1) + 1u);
  EXPECT_THROW(fibra::rl::parameter_layout(PolicySpec{.observation_size = 0}), fibra::ConfigError);
}

TEST(InitialWeights, OrthogonalWithCleanRLsGains) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  const PolicyWeights w = fibra::rl::initial_weights(spec, 5);
  const auto blocks = fibra::rl::parameter_layout(spec);
  // actor.2.weight (64 x 64): W W^T = 2 I.  actor.4.weight (2 x 64): rows orthogonal, norm 0.01.
  const float* w2 = w.params.data() + blocks[2].offset;
  for (int i = 0; i < 64; i += 9)
    for (int j = 0; j < 64; j += 7) {
      double dot = 0;
      for (int k = 0; k < 64; ++k) dot += static_cast<double>(w2[i * 64 + k]) * w2[j * 64 + k];
      EXPECT_NEAR(dot, i == j ? 2.0 : 0.0, 1e-5);
    }
  const float* w4 = w.params.data() + blocks[4].offset;
  double n0 = 0, d01 = 0;
  for (int k = 0; k < 64; ++k) n0 += static_cast<double>(w4[k]) * w4[k], d01 += static_cast<double>(w4[k]) * w4[64 + k];
  EXPECT_NEAR(n0, 1e-4, 1e-9);
  EXPECT_NEAR(d01, 0.0, 1e-9);
  // actor.0.weight (64 x 4): columns orthonormal times sqrt(2).
  const float* w0 = w.params.data() + blocks[0].offset;
  double c0 = 0;
  for (int r = 0; r < 64; ++r) c0 += static_cast<double>(w0[r * 4]) * w0[r * 4];
  EXPECT_NEAR(c0, 2.0, 1e-5);
  EXPECT_EQ(w.params[blocks[1].offset], 0.0f);  // biases start at 0
  EXPECT_EQ(fibra::rl::initial_weights(spec, 5).params, w.params);
  EXPECT_NE(fibra::rl::initial_weights(spec, 6).params, w.params);
}

// Random weights of a visible size, so outputs are far from 0.
PolicyWeights random_weights(const PolicySpec& spec, std::uint64_t seed) {
  PolicyWeights w = fibra::rl::initial_weights(spec, seed);
  fibra::rl::Rng rng(seed);
  for (float& p : w.params) p = static_cast<float>(0.3 * rng.normal());
  return w;
}

// The reference: the flat layout read directly, in double (a weight block, then its bias).
std::vector<double> reference_mlp(const PolicySpec& spec, const PolicyWeights& w, const std::string& net,
                                  std::vector<double> x) {
  const std::size_t layers = spec.hidden.size() + 1;
  std::size_t layer = 0;
  for (const auto& b : fibra::rl::parameter_layout(spec)) {
    if (b.name.rfind(net + ".", 0) != 0 || b.shape.size() != 2) continue;
    const auto out = static_cast<std::size_t>(b.shape[0]), in = static_cast<std::size_t>(b.shape[1]);
    std::vector<double> y(out);
    for (std::size_t o = 0; o < out; ++o) {
      double s = w.params[b.offset + b.size + o];
      for (std::size_t i = 0; i < in; ++i) s += static_cast<double>(w.params[b.offset + o * in + i]) * x[i];
      y[o] = s;
    }
    if (++layer < layers)
      for (double& v : y) v = std::tanh(v);
    x = y;
  }
  return x;
}

TEST(Policy, CategoricalMatchesAPlainReference) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1", {16, 8});
  const PolicyWeights w = random_weights(spec, 3);
  Policy policy(spec, w);
  const std::vector<double> obs{0.1, -0.5, 0.03, 1.2, -0.2, 0.4, -0.1, -0.9};
  fibra::rl::Evaluation e;
  const std::vector<double> actions{1, 0};
  policy.evaluate(obs, actions, e);
  for (int r = 0; r < 2; ++r) {
    const std::vector<double> x(obs.begin() + 4 * r, obs.begin() + 4 * r + 4);
    const std::vector<double> logits = reference_mlp(spec, w, "actor", x);
    const double lse = std::log(std::exp(logits[0]) + std::exp(logits[1]));
    const double p0 = std::exp(logits[0] - lse), p1 = std::exp(logits[1] - lse);
    EXPECT_NEAR(e.logp[r], logits[static_cast<std::size_t>(actions[r])] - lse, 1e-5);
    EXPECT_NEAR(e.entropy[r], -(p0 * std::log(p0) + p1 * std::log(p1)), 1e-5);
    EXPECT_NEAR(e.values[r], reference_mlp(spec, w, "critic", x)[0], 1e-5);
  }
}

TEST(Policy, GaussianMatchesAPlainReference) {
  const PolicySpec spec = PolicySpec::for_env("Pendulum-v1", {16, 8});
  PolicyWeights w = random_weights(spec, 4);
  w.params.back() = -0.5f;  // log std
  Policy policy(spec, w);
  const std::vector<double> obs{0.6, 0.8, -2.0};
  const std::vector<double> action{0.25};
  fibra::rl::Evaluation e;
  policy.evaluate(obs, action, e);
  const double mean = reference_mlp(spec, w, "actor", obs)[0], log_std = -0.5, sd = std::exp(log_std);
  const double z = (0.25 - mean) / sd;
  EXPECT_NEAR(e.logp[0], -0.5 * z * z - log_std - 0.5 * std::log(2 * M_PI), 1e-5);
  EXPECT_NEAR(e.entropy[0], 0.5 + 0.5 * std::log(2 * M_PI) + log_std, 1e-6);
  // act_greedy gives the mean; act draws mean + sd * z from the row's generator.
  fibra::rl::ActBatch greedy, sampled;
  policy.act_greedy(obs, greedy);
  EXPECT_NEAR(greedy.actions[0], mean, 1e-5);
  std::vector<fibra::rl::Rng> rngs{fibra::rl::Rng(11)};
  policy.act(obs, rngs, sampled);
  const double draw = fibra::rl::Rng(11).normal();
  EXPECT_NEAR(sampled.actions[0], mean + sd * draw, 1e-5);
  EXPECT_NEAR(sampled.logp[0], -0.5 * draw * draw - log_std - 0.5 * std::log(2 * M_PI), 1e-4);
}

TEST(Policy, ARowsResultDoesNotDependOnItsBatch) {
  const PolicySpec spec = PolicySpec::for_env("CartPole-v1");
  Policy policy(spec, random_weights(spec, 8));
  fibra::rl::Rng rng(2);
  std::vector<double> obs(4 * 13);
  for (double& v : obs) v = rng.normal();
  std::vector<fibra::rl::Rng> rngs(13, fibra::rl::Rng(1));
  fibra::rl::ActBatch all;
  policy.act(obs, rngs, all);
  for (std::size_t r = 0; r < 13; ++r) {
    fibra::rl::ActBatch one;
    std::vector<fibra::rl::Rng> rng1(1, fibra::rl::Rng(1));
    policy.act(std::span<const double>(obs).subspan(4 * r, 4), rng1, one);
    EXPECT_EQ(std::memcmp(&one.values[0], &all.values[r], sizeof(double)), 0) << "row " << r;
    EXPECT_EQ(std::memcmp(&one.logp[0], &all.logp[r], sizeof(double)), 0) << "row " << r;
    EXPECT_EQ(one.actions[0], all.actions[r]);
  }
}

TEST(Policy, RefusesWeightsOfAnotherSpec) {
  const PolicySpec cartpole = PolicySpec::for_env("CartPole-v1");
  const PolicyWeights w = fibra::rl::initial_weights(PolicySpec::for_env("Acrobot-v1"), 1);
  try {
    Policy p(cartpole, w);
    FAIL() << "no error";
  } catch (const fibra::ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        "fibra::rl: the policy's weights hold 9476 values; its spec needs 9155 (were they made for another spec?)");
  }
}

TEST(Gemm, GenericAndAvx2GiveTheSameBitsForAnyRowCount) {
  fibra::rl::Rng rng(4);
  for (int rows : {1, 3, 4, 5, 8, 64}) {
    for (int cols : {1, 2, 7, 16, 33, 64}) {
      const int depth = 37;
      std::vector<float> a(static_cast<std::size_t>(rows * depth)), b(static_cast<std::size_t>(depth * cols)),
          bias(static_cast<std::size_t>(cols));
      for (float& v : a) v = static_cast<float>(rng.normal());
      for (float& v : b) v = static_cast<float>(rng.normal());
      for (float& v : bias) v = static_cast<float>(rng.normal());
      std::vector<float> generic(static_cast<std::size_t>(rows * cols)), chosen(generic.size());
      fibra::rl::detail::gemm_generic(rows, cols, depth, a.data(), b.data(), bias.data(), generic.data());
      fibra::rl::detail::gemm(rows, cols, depth, a.data(), b.data(), bias.data(), chosen.data());
      // The sum in ascending k with each product rounded: compute it here one value at a time.
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
          volatile float s = bias[static_cast<std::size_t>(c)];
          for (int k = 0; k < depth; ++k) {
            volatile float p = a[static_cast<std::size_t>(r * depth + k)] * b[static_cast<std::size_t>(k * cols + c)];
            s = s + p;
          }
          ASSERT_EQ(generic[static_cast<std::size_t>(r * cols + c)], s)
              << rows << "x" << cols << " at " << r << "," << c;
        }
      ASSERT_EQ(std::memcmp(generic.data(), chosen.data(), generic.size() * sizeof(float)), 0)
          << rows << "x" << cols << " with " << fibra::rl::detail::simd_isa();
    }
  }
  std::printf("gemm uses %s\n", fibra::rl::detail::simd_isa());
}

}  // namespace
