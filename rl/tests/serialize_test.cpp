// What fibra ships between processes (PolicySpec, PolicyWeights, Fragment, SamplerState, Rng) round-trips through
// Boost.Serialization, as fibra::put and actor calls will send it.
#include <fibra/rl/policy.hpp>
#include <fibra/rl/sampler.hpp>

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>

#include <gtest/gtest.h>

#include <sstream>

namespace {

template <class T>
T round_trip(const T& value) {
  std::stringstream buffer;
  {
    boost::archive::binary_oarchive out(buffer);
    out << value;
  }
  boost::archive::binary_iarchive in(buffer);
  T copy;
  in >> copy;
  return copy;
}

TEST(Serialization, SpecsOfBothKinds) {
  auto cartpole = fibra::rl::PolicySpec::for_env("CartPole-v1", {32, 16}, fibra::rl::Activation::relu);
  cartpole.torch_module = "/shared/libmy_policy.so";
  const auto c = round_trip(cartpole);
  EXPECT_EQ(c.torch_module, "/shared/libmy_policy.so");
  EXPECT_EQ(c.observation_size, 4);
  EXPECT_EQ(std::get<fibra::rl::Discrete>(c.action_space).n, 2);
  EXPECT_EQ(c.hidden, (std::vector<int>{32, 16}));
  EXPECT_EQ(c.activation, fibra::rl::Activation::relu);
  const auto p = round_trip(fibra::rl::PolicySpec::for_env("Pendulum-v1"));
  EXPECT_EQ(std::get<fibra::rl::Box>(p.action_space).high, (std::vector<double>{2.0}));
}

TEST(Serialization, WeightsAndFragments) {
  const auto spec = fibra::rl::PolicySpec::for_env("CartPole-v1");
  fibra::rl::PolicyWeights w = fibra::rl::initial_weights(spec, 3);
  w.version = 17;
  fibra::rl::Sampler sampler("CartPole-v1", 3, 5, 1, spec);
  sampler.set_weights(w);
  const fibra::rl::Fragment f = sampler.sample(30);
  w.normaliser.merge(f.raw_moments[1]);
  const fibra::rl::PolicyWeights w2 = round_trip(w);
  EXPECT_EQ(w2.version, 17u);
  EXPECT_EQ(w2.params, w.params);
  EXPECT_EQ(w2.normaliser.moments().mean, w.normaliser.moments().mean);
  EXPECT_EQ(w2.normaliser.moments().count, 30u);
  const fibra::rl::Fragment f2 = round_trip(f);
  EXPECT_EQ(f2.first_env, 5);
  EXPECT_EQ(f2.observations, f.observations);
  EXPECT_EQ(f2.dones, f.dones);
  EXPECT_EQ(f2.raw_moments[2].m2, f.raw_moments[2].m2);
  EXPECT_EQ(f2.episode_returns, f.episode_returns);
  const fibra::rl::SamplerState state = round_trip(sampler.state());
  EXPECT_EQ(state.first_env, 5);
  ASSERT_EQ(state.copies.size(), 3u);
  EXPECT_EQ(state.copies[2].actions, sampler.state().copies[2].actions);
  EXPECT_EQ(state.copies[2].rng, sampler.state().copies[2].rng);
  EXPECT_EQ(state.copies[1].episode_return, sampler.state().copies[1].episode_return);
  fibra::rl::Rng rng(9);
  rng.next();
  fibra::rl::Rng copy = round_trip(rng);
  EXPECT_EQ(copy.next(), rng.next());
}

}  // namespace
