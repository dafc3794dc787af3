// PPO over rollout actors (fibra/rl/trainer.hpp).
#include "fibra/rl/trainer.hpp"

#include <fibra/actor.hpp>
#include <fibra/error.hpp>
#include <fibra/object.hpp>
#include <fibra/pool.hpp>
#include <fibra/serialization.hpp>

#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fibra::rl {
namespace detail {

/// What a rollout actor is made from (its constructor's one argument).
struct RolloutSetup {
  std::string env;
  int num_envs = 0;
  int first_env = 0;  ///< the global index of its first copy: the copies' seeds follow from it
  std::uint64_t seed = 0;
  PolicySpec spec;

  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& env& num_envs& first_env& seed& spec;
  }
};

/// A rollout worker (RLlib's RolloutWorker): M environment copies and the policy, in an actor's
/// process. Inference is rl::Policy's plain C++: this process never loads libtorch.
class RolloutWorker {
 public:
  explicit RolloutWorker(RolloutSetup s) : sampler_(s.env, s.num_envs, s.first_env, s.seed, s.spec) {}
  /// The next `steps` steps of every copy with `weights` (episodes go on from the last call).
  Fragment sample(const PolicyWeights& weights, int steps) {
    sampler_.set_weights(weights);
    return sampler_.sample(steps);
  }

 private:
  Sampler sampler_;
};

}  // namespace detail
}  // namespace fibra::rl

FIBRA_ACTOR(fibra::rl::detail::RolloutWorker, fibra::rl::detail::RolloutSetup);
FIBRA_ACTOR_METHOD(fibra::rl::detail::RolloutWorker, sample);

namespace fibra::rl {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void check_options(const TrainerOptions& o) {
  const auto bad = [](const std::string& what) { throw ConfigError("fibra::rl::PpoTrainer: " + what); };
  if (o.workers < 1) bad("TrainerOptions::workers is " + std::to_string(o.workers) + "; it must be at least 1");
  if (o.envs_per_worker < 1)
    bad("TrainerOptions::envs_per_worker is " + std::to_string(o.envs_per_worker) + "; it must be at least 1");
  if (o.fragment_steps < 1)
    bad("TrainerOptions::fragment_steps is " + std::to_string(o.fragment_steps) + "; it must be at least 1");
  if (!(o.sample_timeout_s > 0))
    bad("TrainerOptions::sample_timeout_s is " + std::to_string(o.sample_timeout_s) + "; it must be above 0");
  if (o.max_restarts < 0)
    bad("TrainerOptions::max_restarts is " + std::to_string(o.max_restarts) + "; it must be 0 or more");
}

}  // namespace

struct PpoTrainer::Impl {
  TrainerOptions o;
  PolicySpec spec;
  std::optional<fibra::Pool> own_pool;
  fibra::Pool* pool = nullptr;
  std::optional<PpoLearner> learner;
  std::vector<Actor<detail::RolloutWorker>> actors;
  std::vector<int> deaths_in_row;
  std::uint64_t iteration = 0, env_steps = 0, restarts = 0;
  std::deque<double> recent;  // returns of the last 100 episodes

  detail::RolloutSetup setup(int i) const {
    return {o.env, o.envs_per_worker, i * o.envs_per_worker, o.ppo.seed, spec};
  }
  Actor<detail::RolloutWorker> start(int i) {
    ActorOptions ao;
    ao.max_restarts = o.max_restarts;
    return Actor<detail::RolloutWorker>::start_on(*pool, ao, setup(i));
  }
};

PpoTrainer::PpoTrainer(TrainerOptions options) : impl_(std::make_unique<Impl>()) {
  check_options(options);
  Impl& m = *impl_;
  m.o = std::move(options);
  m.spec = PolicySpec::for_env(m.o.env, m.o.hidden, m.o.activation);
  m.learner.emplace(m.spec, m.o.ppo);
  if (m.o.pool) {
    m.pool = m.o.pool;
  } else {
    PoolOptions po;
    po.task_timeout_s = m.o.sample_timeout_s;  // (a hung fragment ends its actor's process)
    m.own_pool.emplace(1, po);
    m.pool = &*m.own_pool;
  }
  for (int i = 0; i < m.o.workers; ++i) m.actors.push_back(m.start(i));
  m.deaths_in_row.assign(static_cast<std::size_t>(m.o.workers), 0);
}

PpoTrainer::~PpoTrainer() = default;

SampleRound PpoTrainer::sample() {
  Impl& m = *impl_;
  SampleRound round;
  const auto t0 = Clock::now();
  Future<PolicyWeights> weights = fibra::put(m.learner->weights());  // (once per host)
  std::vector<Future<Fragment>> calls;
  calls.reserve(m.actors.size());
  for (auto& a : m.actors) calls.push_back(a.call(&detail::RolloutWorker::sample, weights, m.o.fragment_steps));
  // The pool's task limit ends a hung call (ActorDied) at sample_timeout_s; a pool given by the
  // caller may have none, so the wait has its own bound a little past it.
  const auto bound = std::chrono::duration<double>(m.o.sample_timeout_s + (m.own_pool ? 30.0 : 0.0));
  round.fragments.reserve(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    std::string why;
    if (!calls[i].wait_for(bound)) {
      why = "no fragment within " + std::to_string(bound.count()) + " s";
      m.actors[i] = m.start(static_cast<int>(i));  // (the old one ends once its call does)
    } else {
      try {
        round.fragments.push_back(std::move(calls[i]).get());  // (what the sampler throws, an env's bug, ends it)
        m.deaths_in_row[i] = 0;
        continue;
      } catch (const ActorDied& e) {
        why = e.what();
      }
    }
    ++round.lost;
    ++m.restarts;
    if (++m.deaths_in_row[i] > m.o.max_restarts)
      throw Error("fibra::rl::PpoTrainer: rollout worker " + std::to_string(i) + " (copies " +
                  std::to_string(i * m.o.envs_per_worker) + "-" + std::to_string((i + 1) * m.o.envs_per_worker - 1) +
                  " of " + m.o.env + ") lost " + std::to_string(m.deaths_in_row[i]) +
                  " fragments in a row (TrainerOptions::max_restarts is " + std::to_string(m.o.max_restarts) +
                  "); the last: " + why);
  }
  // (learn() orders its rows by copy whatever the order of the fragments; the window of returns
  // takes them in copy order too)
  std::sort(round.fragments.begin(), round.fragments.end(),
            [](const Fragment& a, const Fragment& b) { return a.first_env < b.first_env; });
  round.seconds = seconds_since(t0);
  return round;
}

Iteration PpoTrainer::train() {
  Impl& m = *impl_;
  Iteration it;
  it.iteration = ++m.iteration;
  const auto t0 = Clock::now();
  SampleRound round = sample();
  it.sample_s = round.seconds;
  it.fragments = round.fragments.size();
  it.lost_fragments = round.lost;
  it.restarts = m.restarts;
  std::uint64_t steps = 0;
  for (const auto& f : round.fragments) {
    steps += f.size();
    it.episodes += f.episode_returns.size();
    it.episode_returns.insert(it.episode_returns.end(), f.episode_returns.begin(), f.episode_returns.end());
    for (double r : f.episode_returns) {
      m.recent.push_back(r);
      if (m.recent.size() > 100) m.recent.pop_front();
    }
  }
  if (!round.fragments.empty()) {
    const auto t1 = Clock::now();
    it.learn = m.learner->learn(round.fragments);
    it.learn_s = seconds_since(t1);
  }
  m.env_steps += steps;
  it.env_steps = m.env_steps;
  it.mean_return = m.recent.empty() ? std::numeric_limits<double>::quiet_NaN()
                                    : std::accumulate(m.recent.begin(), m.recent.end(), 0.0) / double(m.recent.size());
  const double total = seconds_since(t0);
  it.steps_per_s = total > 0 ? double(steps) / total : 0;
  return it;
}

EvalResult PpoTrainer::evaluate(int episodes, bool greedy) const {
  return rl::evaluate(impl_->o.env, impl_->spec, impl_->learner->weights(), episodes,
                      impl_->o.ppo.seed ^ 0x6576616c75617465ull, greedy);  // ("evaluate": apart from the copies)
}

const PolicySpec& PpoTrainer::spec() const { return impl_->spec; }
PolicyWeights PpoTrainer::weights() const { return impl_->learner->weights(); }
PpoLearner& PpoTrainer::learner() { return *impl_->learner; }
const TrainerOptions& PpoTrainer::options() const { return impl_->o; }

}  // namespace fibra::rl
