// PPO over rollout actors (fibra/rl/trainer.hpp).
#include "fibra/rl/trainer.hpp"

#include "trainer_file.hpp"

#include <fibra/actor.hpp>
#include <fibra/error.hpp>
#include <fibra/object.hpp>
#include <fibra/pool.hpp>
#include <fibra/serialization.hpp>
#include <fibra/tasks.hpp>

#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
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
/// process. Inference is rl::Policy's plain C++: this process never loads libtorch (unless the spec is a
/// user's torch network, PolicySpec::torch_module).
///
/// A resumed run starts it from its setup and then calls restore(): fibra restarts an actor that
/// died from its constructor's argument, and a restarted worker's copies must start new episodes,
/// not go back to the checkpoint's (a state in the setup would send them back on every restart).
class RolloutWorker {
 public:
  explicit RolloutWorker(RolloutSetup s) : sampler_(s.env, s.num_envs, s.first_env, s.seed, s.spec) {}
  /// The next `steps` steps of every copy with `weights` (episodes go on from the last call).
  Fragment sample(const PolicyWeights& weights, int steps) {
    sampler_.set_weights(weights);
    return sampler_.sample(steps);
  }
  /// Where its copies are (for PpoTrainer::save).
  SamplerState state() { return sampler_.state(); }
  /// Puts its copies where a saved run's were (Sampler::restore: each episode replayed).
  void restore(const SamplerState& s) { sampler_.restore(s); }

 private:
  Sampler sampler_;
};

}  // namespace detail
}  // namespace fibra::rl

FIBRA_ACTOR(fibra::rl::detail::RolloutWorker, fibra::rl::detail::RolloutSetup);
FIBRA_ACTOR_METHOD(fibra::rl::detail::RolloutWorker, sample);
FIBRA_ACTOR_METHOD(fibra::rl::detail::RolloutWorker, state);
FIBRA_ACTOR_METHOD(fibra::rl::detail::RolloutWorker, restore);

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
  if (o.asynchronous && (o.async_calls_per_worker < 1 || o.async_epochs < 1))
    bad("TrainerOptions::async_calls_per_worker and async_epochs are " + std::to_string(o.async_calls_per_worker) +
        " and " + std::to_string(o.async_epochs) + "; they must be at least 1");
  if (o.asynchronous && !(o.async_learning_rate > 0))
    bad("TrainerOptions::async_learning_rate is " + std::to_string(o.async_learning_rate) + "; it must be above 0");
  if (o.asynchronous && !(o.async_ent_coef >= 0))
    bad("TrainerOptions::async_ent_coef is " + std::to_string(o.async_ent_coef) + "; it must be 0 or more");
}

// The returns of the episodes that ended in `fragments` (sorted by copy), in (step, global copy)
// order: the order one Sampler of every copy gives, so the window of the last 100 (and its mean)
// is the same for any split of the copies. (Each fragment lists its own in (step, copy) order.)
std::vector<double> ended_in_order(const std::vector<Fragment>& fragments) {
  std::vector<double> out;
  std::vector<std::size_t> next(fragments.size(), 0);
  const int steps = fragments.empty() ? 0 : fragments.front().steps;
  for (int t = 0; t < steps; ++t)
    for (std::size_t k = 0; k < fragments.size(); ++k) {
      const Fragment& f = fragments[k];
      for (std::size_t i = 0; i < static_cast<std::size_t>(f.num_envs); ++i)
        if (f.dones[static_cast<std::size_t>(t) * static_cast<std::size_t>(f.num_envs) + i])
          out.push_back(f.episode_returns.at(next[k]++));
    }
  return out;
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
    // fibra's budget of restarts is for the actor's life; the trainer's is for deaths in a row
    // (TrainerOptions::max_restarts), so the actor's is all but unlimited.
    ao.max_restarts = std::numeric_limits<int>::max() / 2;
    ao.pool = pool;
    return Actor<detail::RolloutWorker>::start(ao, setup(i));
  }
  std::string worker_name(std::size_t i) const {
    return "rollout worker " + std::to_string(i) + " (copies " + std::to_string(i * std::size_t(o.envs_per_worker)) +
           "-" + std::to_string((i + 1) * std::size_t(o.envs_per_worker) - 1) + " of " + o.env + ")";
  }

  // How long a call to an actor is waited for: the pool's task limit ends a hung call (ActorDied)
  // at sample_timeout_s; a pool given by the caller may have none, so the wait has its own bound
  // a little past it.
  std::chrono::duration<double> bound() const {
    return std::chrono::duration<double>(o.sample_timeout_s + (own_pool ? 30.0 : 0.0));
  }
  // Waits for actor i's call and hands it to `take`. False if the actor died (fibra restarts it from
  // its constructor) or did not answer within bound() (a new actor takes its place; the old one ends
  // once its call does): the reason is in `why`, and the restart is counted. What the call itself
  // threw (an environment's bug) comes out of `take`.
  template <class F, class Take>
  bool await(std::size_t i, F& call, Take&& take, std::string& why) {
    if (!call.wait_for(bound())) {
      why = "no answer within " + std::to_string(bound().count()) + " s";
      replace(i);
    } else {
      try {
        take(std::move(call));
        return true;
      } catch (const ActorDied& e) {
        why = e.what();
      }
    }
    ++restarts;
    return false;
  }

  void restore(detail::TrainerFile file);
  std::vector<CopyState> copy_states();

  // Asynchronous: the calls queued at the workers, oldest first, and the weights they are given.
  struct Queued {
    std::size_t worker;
    Future<Fragment> call;
    Clock::time_point since;
  };
  std::deque<Queued> queued;
  std::optional<Future<PolicyWeights>> weights_out;
  std::uint64_t weights_out_version = 0;
  // Asynchronous: a worker whose process died and has sent no fragment since (its other queued
  // calls die with it: one death, counted once).
  std::vector<bool> dead;
  void queue_call(std::size_t i) {
    const std::uint64_t v = learner->weights().version;
    if (!weights_out || weights_out_version != v) {
      weights_out = fibra::put(learner->weights());  // (once per host, and per update)
      weights_out_version = v;
    }
    queued.push_back({i, actors[i].call(&detail::RolloutWorker::sample, *weights_out, o.fragment_steps), Clock::now()});
  }
  // A new actor in worker i's place (the old one ends once its calls do); the calls queued at the
  // old one are dropped: the number dropped.
  std::size_t replace(std::size_t i) {
    actors[i] = start(static_cast<int>(i));
    return std::erase_if(queued, [&](const Queued& q) { return q.worker == i; });
  }
  // Every worker with async_calls_per_worker calls queued.
  void top_up() {
    std::vector<int> have(actors.size(), 0);
    for (const auto& q : queued) ++have[q.worker];
    for (std::size_t i = 0; i < actors.size(); ++i)
      for (; have[i] < o.async_calls_per_worker; ++have[i]) queue_call(i);
  }
  // Counts a loss of worker i; throws when it lost max_restarts + 1 in a row.
  void lost(std::size_t i, const std::string& why) {
    if (++deaths_in_row[i] > o.max_restarts)
      throw Error("fibra::rl::PpoTrainer: " + worker_name(i) + " lost " + std::to_string(deaths_in_row[i]) +
                  " fragments in a row (TrainerOptions::max_restarts is " + std::to_string(o.max_restarts) +
                  "); the last: " + why);
  }
  SampleRound take_ready();
};

// Asynchronous: the fragments that have come (waiting for the first, at most bound(); none if
// every worker's calls were lost); each taken call is replaced at once by one with the newest
// weights, so no worker waits for the learner. A worker whose oldest call is older than bound() is
// replaced (its calls lost), whether or not the others deliver: a pool given by the caller may
// have no task limit to end a hung call.
SampleRound PpoTrainer::Impl::take_ready() {
  SampleRound round;
  const auto t0 = Clock::now();
  top_up();  // (also after a train() that threw)
  const auto any_ready = [&] {
    return std::any_of(queued.begin(), queued.end(), [](const Queued& q) { return q.call.ready(); });
  };
  if (!any_ready()) {
    std::vector<Future<Fragment>> calls;
    for (const auto& q : queued) calls.push_back(q.call);
    (void)fibra::wait(calls, 1, bound());
  }
  for (std::size_t i = 0; i < actors.size(); ++i) {
    const auto oldest = std::find_if(queued.begin(), queued.end(), [&](const Queued& q) { return q.worker == i; });
    if (oldest == queued.end() || oldest->call.ready() || Clock::now() - oldest->since < bound()) continue;
    round.lost += replace(i);
    ++restarts;
    dead[i] = false;
    lost(i, "no fragment within " + std::to_string(bound().count()) + " s");
  }
  for (auto q = queued.begin(); q != queued.end();) {
    if (!q->call.ready()) {
      ++q;
      continue;
    }
    const std::size_t i = q->worker;
    Future<Fragment> call = std::move(q->call);
    q = queued.erase(q);  // (taken whatever get() does: a dead call never stays queued)
    try {
      round.fragments.push_back(std::move(call).get());  // (an environment's bug ends train())
      deaths_in_row[i] = 0;
      dead[i] = false;
    } catch (const ActorDied& e) {
      ++round.lost;
      if (!dead[i]) {  // (the calls queued with this one die with the same process)
        dead[i] = true;
        ++restarts;
        lost(i, e.what());
      }
    }
  }
  top_up();  // the next calls go out before the learner starts: no worker waits for it
  // Stable: two fragments of the same copies (a worker's queued calls) stay in the order they were
  // sampled, which the reward normaliser's returns follow.
  std::stable_sort(round.fragments.begin(), round.fragments.end(),
                   [](const Fragment& a, const Fragment& b) { return a.first_env < b.first_env; });
  round.seconds = seconds_since(t0);
  return round;
}

namespace {

// The file's configuration against this run's; CheckpointError for a file that is not a trainer's.
detail::TrainerFile read_for_resume(const TrainerOptions& o, const PolicySpec& spec) {
  const std::string& path = o.resume_from;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw CheckpointError("fibra::rl::PpoTrainer: cannot resume from '" + path +
                          "': no such file (TrainerOptions::resume_from names a file PpoTrainer::save wrote)");
  detail::TrainerFile file = detail::read_trainer_file(path, spec.action_size());
  if (const std::string d = detail::differences(file.configuration, detail::configuration_of(o)); !d.empty())
    throw ConfigError("fibra::rl::PpoTrainer: cannot resume '" + path + "': it was written by a run with " + d +
                      "; rerun with those options, or resume from another file");
  return file;
}

}  // namespace

// The learner, the counters, and every copy's episode (through its actor's restore()) from the file.
void PpoTrainer::Impl::restore(detail::TrainerFile file) {
  const std::string& path = o.resume_from;
  const auto copies = static_cast<std::size_t>(o.workers) * static_cast<std::size_t>(o.envs_per_worker);
  if (file.copies.size() != copies)  // (the configuration said as many)
    throw CheckpointError("fibra::rl::PpoTrainer: cannot resume from '" + path + "': it holds " +
                          std::to_string(file.copies.size()) + " copies' states for a run of " +
                          std::to_string(copies));
  learner->load_state(file.learner);
  iteration = file.iteration;
  env_steps = file.env_steps;
  restarts = file.restarts;
  recent.assign(file.recent_returns.begin(), file.recent_returns.end());
  // Each actor gets its slice of the copies, whatever the split the file was written with.
  const auto m = static_cast<std::size_t>(o.envs_per_worker);
  std::vector<Future<void>> calls;
  for (std::size_t i = 0; i < actors.size(); ++i) {
    SamplerState s{.first_env = static_cast<int>(i * m), .copies = {}};
    s.copies.assign(file.copies.begin() + static_cast<std::ptrdiff_t>(i * m),
                    file.copies.begin() + static_cast<std::ptrdiff_t>((i + 1) * m));
    calls.push_back(actors[i].call(&detail::RolloutWorker::restore, std::move(s)));
  }
  // An actor lost meanwhile starts again from its constructor: its copies begin new episodes
  // (counted in restarts), as after any loss. A replay that fails (CheckpointError) ends the resume.
  const auto take = [](Future<void>&& f) { f.get(); };
  for (std::size_t i = 0; i < calls.size(); ++i) {
    std::string why;
    await(i, calls[i], take, why);
  }
}

// Every actor's copies, in global order. An actor lost before it answers is asked again: it has
// started again from its constructor, and its copies' state is that start's, which is also where
// this run goes on from.
std::vector<CopyState> PpoTrainer::Impl::copy_states() {
  std::vector<Future<SamplerState>> calls;
  for (auto& a : actors) calls.push_back(a.call(&detail::RolloutWorker::state));
  std::vector<CopyState> copies;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    SamplerState s;
    const auto take = [&s](Future<SamplerState>&& f) { s = std::move(f).get(); };
    std::string why;
    if (!await(i, calls[i], take, why)) {
      Future<SamplerState> again = actors[i].call(&detail::RolloutWorker::state);
      if (!await(i, again, take, why))
        throw Error("fibra::rl::PpoTrainer: cannot save: " + worker_name(i) +
                    " was lost twice while it was asked for its copies' state; the last: " + why);
    }
    copies.insert(copies.end(), std::make_move_iterator(s.copies.begin()), std::make_move_iterator(s.copies.end()));
  }
  return copies;
}

PpoTrainer::PpoTrainer(TrainerOptions options) : impl_(std::make_unique<Impl>()) {
  check_options(options);
  Impl& m = *impl_;
  m.o = std::move(options);
  m.spec = PolicySpec::for_env(m.o.env, m.o.hidden, m.o.activation);
  m.spec.torch_module = m.o.torch_module;
  // (a file of another run is refused before libtorch loads or a process starts)
  std::optional<detail::TrainerFile> saved;
  if (!m.o.resume_from.empty()) saved = read_for_resume(m.o, m.spec);
  PpoConfig learning = m.o.ppo;
  if (m.o.asynchronous) learning.learning_rate = m.o.async_learning_rate, learning.ent_coef = m.o.async_ent_coef;
  m.learner.emplace(m.spec, learning);
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
  m.dead.assign(static_cast<std::size_t>(m.o.workers), false);
  if (saved) m.restore(std::move(*saved));
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
  round.fragments.reserve(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    std::string why;
    // (what the sampler throws, an environment's bug, ends it)
    if (m.await(
            i, calls[i], [&](Future<Fragment>&& f) { round.fragments.push_back(std::move(f).get()); }, why)) {
      m.deaths_in_row[i] = 0;
      continue;
    }
    ++round.lost;
    if (++m.deaths_in_row[i] > m.o.max_restarts)
      throw Error("fibra::rl::PpoTrainer: " + m.worker_name(i) + " lost " + std::to_string(m.deaths_in_row[i]) +
                  " fragments in a row (TrainerOptions::max_restarts is " + std::to_string(m.o.max_restarts) +
                  "); the last: " + why);
  }
  // (learn() orders its rows by copy whatever the order of the fragments; the window of returns
  // takes them in copy order too)
  // Stable: two fragments of the same copies (a worker's queued calls) stay in the order they were
  // sampled, which the reward normaliser's returns follow.
  std::stable_sort(round.fragments.begin(), round.fragments.end(),
                   [](const Fragment& a, const Fragment& b) { return a.first_env < b.first_env; });
  round.seconds = seconds_since(t0);
  return round;
}

Iteration PpoTrainer::train() {
  Impl& m = *impl_;
  Iteration it;
  const auto t0 = Clock::now();
  SampleRound round = m.o.asynchronous ? m.take_ready() : sample();
  it.iteration = ++m.iteration;  // (once sampling went through: a throw above leaves the count)
  it.sample_s = round.seconds;
  it.fragments = round.fragments.size();
  it.lost_fragments = round.lost;
  it.restarts = m.restarts;
  std::uint64_t steps = 0;
  for (const auto& f : round.fragments) steps += f.size();
  it.episode_returns = ended_in_order(round.fragments);
  it.episodes = it.episode_returns.size();
  for (double r : it.episode_returns) {
    m.recent.push_back(r);
    if (m.recent.size() > 100) m.recent.pop_front();
  }
  if (!round.fragments.empty()) {
    const auto t1 = Clock::now();
    if (m.o.asynchronous) {
      const std::uint64_t now = m.learner->weights().version;
      for (const auto& f : round.fragments) {
        const std::uint64_t lag = now - std::min(now, f.policy_version);
        it.mean_lag += double(lag) / double(round.fragments.size());
        it.max_lag = std::max(it.max_lag, lag);
      }
      it.learn = m.learner->learn_vtrace(
          round.fragments, VtraceConfig{.gamma = m.o.ppo.gamma, .lambda = m.o.ppo.gae_lambda}, m.o.async_epochs);
    } else {
      it.learn = m.learner->learn(round.fragments);
    }
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

void PpoTrainer::save(const std::string& path) {
  Impl& m = *impl_;
  detail::TrainerFile file;
  file.copies = m.copy_states();  // (first: an actor lost meanwhile counts in restarts)
  file.configuration = detail::configuration_of(m.o);
  file.learner = m.learner->state();
  file.iteration = m.iteration;
  file.env_steps = m.env_steps;
  file.restarts = m.restarts;
  file.recent_returns.assign(m.recent.begin(), m.recent.end());
  detail::write_trainer_file(path, file, m.spec.action_size());
}

std::uint64_t PpoTrainer::iteration() const { return impl_->iteration; }
std::uint64_t PpoTrainer::env_steps() const { return impl_->env_steps; }
std::vector<double> PpoTrainer::recent_returns() const { return {impl_->recent.begin(), impl_->recent.end()}; }

const PolicySpec& PpoTrainer::spec() const { return impl_->spec; }
PolicyWeights PpoTrainer::weights() const { return impl_->learner->weights(); }
PpoLearner& PpoTrainer::learner() { return *impl_->learner; }
const TrainerOptions& PpoTrainer::options() const { return impl_->o; }

}  // namespace fibra::rl
