// jobs/tune_ppo: fibra::tune over PPO's hyper-parameters on CartPole-v1 (issue 47, item 8). Each
// trial is a PPO learner and a Sampler of 8 copies in the trial's own process (fibra::rl's
// PpoLearner loads libtorch there: a trial is a learner); step() is a few updates of 8 x 32 steps;
// its metric is the mean return of the last 20 training episodes, and a trial whose greedy policy
// then averages 475 over 20 episodes (Gymnasium's threshold) is done. save() and restore() carry the
// learner's whole state (parameters, Adam, the normaliser, counters), so PBT hands a bottom trial a
// top trial's learner; the restored trial's copies start new episodes.
//
// Searches the learning rate, the entropy coefficient and the clip range with ASHA, PBT and random
// search on the same budget and prints each one's best configuration.
//
//   tune_ppo [--schedulers asha,pbt,random] [--samples 8] [--workers 2] [--iterations 30] [--seed 0]
//
// Prints PASS when every search found a configuration that solves CartPole-v1 (exit 1 otherwise).
#include <fibra/fibra.hpp>
#include <fibra/rl.hpp>
#include <fibra/tune.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace {

namespace rl = fibra::rl;
namespace tune = fibra::tune;

constexpr int updates_per_step = 4;  // 4 x 256 = 1,024 environment steps an iteration

// The learner's state as bytes: per array its name, shape, type and values (a checkpoint of one
// process's making, read by another of the same build: native byte order).
void put_u64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
std::uint64_t get_u64(const std::string& in, std::size_t& at) {
  if (in.size() - at < 8) throw std::runtime_error("tune_ppo: a checkpoint cut short");
  std::uint64_t v = 0;
  std::memcpy(&v, in.data() + at, 8);
  at += 8;
  return v;
}
std::string encode(const std::vector<rl::NamedArray>& arrays, std::uint64_t iterations) {
  std::string out;
  put_u64(out, iterations);
  put_u64(out, arrays.size());
  for (const auto& a : arrays) {
    put_u64(out, a.name.size());
    out += a.name;
    put_u64(out, a.shape.size());
    for (auto d : a.shape) put_u64(out, static_cast<std::uint64_t>(d));
    put_u64(out, a.values.index());
    std::visit(
        [&](const auto& v) {
          put_u64(out, v.size());
          out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
        },
        a.values);
  }
  return out;
}
std::vector<rl::NamedArray> decode(const std::string& in, std::uint64_t& iterations) {
  std::size_t at = 0;
  iterations = get_u64(in, at);
  const std::uint64_t count = get_u64(in, at);
  if (count > in.size() / 8) throw std::runtime_error("tune_ppo: a checkpoint with an impossible array count");
  std::vector<rl::NamedArray> arrays(count);
  const auto take = [&](std::size_t bytes, void* to) {
    if (in.size() - at < bytes) throw std::runtime_error("tune_ppo: a checkpoint cut short");
    std::memcpy(to, in.data() + at, bytes);
    at += bytes;
  };
  // (every count is checked against the bytes left before anything is allocated for it)
  const auto count_of = [&](std::size_t each) {
    const std::uint64_t n = get_u64(in, at);
    if (n > (in.size() - at) / each) throw std::runtime_error("tune_ppo: a checkpoint cut short");
    return n;
  };
  for (auto& a : arrays) {
    a.name.resize(count_of(1));
    take(a.name.size(), a.name.data());
    a.shape.resize(count_of(8));
    std::uint64_t product = 1;
    for (auto& d : a.shape) {
      d = static_cast<std::int64_t>(get_u64(in, at));
      product *= static_cast<std::uint64_t>(d);
    }
    const std::uint64_t kind = get_u64(in, at);
    if (kind > 2) throw std::runtime_error("tune_ppo: a checkpoint with an unknown array type");
    const std::uint64_t n = count_of(kind == 0 ? 4 : 8);
    if (n != product) throw std::runtime_error("tune_ppo: array '" + a.name + "' does not fit its shape");
    const auto fill = [&](auto v) {
      v.resize(n);
      take(n * sizeof(v[0]), v.data());
      a.values = std::move(v);
    };
    if (kind == 0)
      fill(std::vector<float>{});
    else if (kind == 1)
      fill(std::vector<double>{});
    else
      fill(std::vector<std::int64_t>{});
  }
  return arrays;
}

rl::PpoConfig ppo_config(const tune::Config& c) {
  rl::PpoConfig p;
  p.learning_rate = c.number("lr");
  p.ent_coef = c.number("ent_coef");
  p.clip = c.number("clip");
  p.seed = static_cast<std::uint64_t>(c.integer("seed"));
  p.total_steps = 200'000;
  return p;
}

// One PPO run on CartPole-v1 in the trial's process.
class PpoTrial {
 public:
  explicit PpoTrial(const tune::Config& c)
      : spec_(rl::PolicySpec::for_env("CartPole-v1")),
        learner_(spec_, ppo_config(c)),
        seed_(static_cast<std::uint64_t>(c.integer("seed"))),
        sampler_(std::make_unique<rl::Sampler>("CartPole-v1", 8, 0, seed_, spec_)) {}

  tune::Metrics step() {
    for (int u = 0; u < updates_per_step; ++u) {
      sampler_->set_weights(learner_.weights());
      const rl::Fragment f = sampler_->sample(32);
      for (double r : f.episode_returns) {
        recent_.push_back(r);
        if (recent_.size() > 20) recent_.pop_front();
      }
      learner_.learn({&f, 1});
    }
    ++iterations_;
    const double mean =
        recent_.empty() ? 0.0 : std::accumulate(recent_.begin(), recent_.end(), 0.0) / double(recent_.size());
    double eval = 0;
    if (recent_.size() == 20 && mean >= 475)
      eval = rl::evaluate("CartPole-v1", spec_, learner_.weights(), 20, seed_ ^ 0xe7a1, true).mean;
    return {{"mean_return", mean},
            {"eval", eval},
            {"env_steps", double(learner_.weights().version) * 256},
            {"done", eval >= 475 ? 1.0 : 0.0}};
  }

  std::string save() const { return encode(learner_.state(), iterations_); }

  void restore(const std::string& bytes) {
    learner_.load_state(decode(bytes, iterations_));
    // The copies start new episodes (the sampler's state is not in the checkpoint), from a seed of
    // their own so that a restored trial does not replay its donor's episodes.
    sampler_ = std::make_unique<rl::Sampler>("CartPole-v1", 8, 0, seed_ ^ (iterations_ << 20), spec_);
    recent_.clear();
  }

 private:
  rl::PolicySpec spec_;
  rl::PpoLearner learner_;
  std::uint64_t seed_;
  std::unique_ptr<rl::Sampler> sampler_;
  std::deque<double> recent_;
  std::uint64_t iterations_ = 0;
};
FIBRA_TRAINABLE(PpoTrial);

struct Options {
  std::vector<std::string> schedulers{"asha", "pbt", "random"};
  std::size_t samples = 8;
  int workers = 2;
  int iterations = 30;
  std::uint64_t seed = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--schedulers") {
      o.schedulers.clear();
      for (std::size_t at = 0; at <= v.size();) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        if (comma > at) o.schedulers.push_back(v.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (a == "--samples") {
      o.samples = std::stoul(v);
    } else if (a == "--workers") {
      o.workers = std::stoi(v);
    } else if (a == "--iterations") {
      o.iterations = std::stoi(v);
    } else if (a == "--seed") {
      o.seed = std::stoull(v);
    } else {
      std::fprintf(stderr, "tune_ppo: unknown option '%s'\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const Options o = parse(argc, argv);
  fibra::Pool pool(o.workers);
  const tune::Space space{{"lr", tune::loguniform(1e-4, 3e-3)},
                          {"ent_coef", tune::uniform(0.0, 0.02)},
                          {"clip", tune::uniform(0.1, 0.3)},
                          {"seed", tune::randint(0, 1 << 20)}};
  bool all_found = true;
  for (const std::string& name : o.schedulers) {
    tune::RunOptions ro;
    ro.num_samples = o.samples;
    ro.metric = "mean_return";
    ro.stop = {{"training_iteration", double(o.iterations)}};
    ro.seed = o.seed;
    ro.pool = &pool;
    ro.progress_interval_s = 0;
    if (name == "asha") {
      ro.scheduler = tune::Asha{.max_t = double(o.iterations), .grace_period = 4, .reduction_factor = 2};
    } else if (name == "pbt") {
      tune::Pbt pbt;
      pbt.perturbation_interval = 5;
      pbt.hyperparam_mutations = tune::Space{{"lr", tune::loguniform(1e-4, 3e-3)}, {"clip", tune::uniform(0.1, 0.3)}};
      ro.scheduler = pbt;
    } else if (name != "random") {
      std::fprintf(stderr, "tune_ppo: unknown scheduler '%s' (asha, pbt or random)\n", name.c_str());
      return 2;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const tune::ResultGrid grid = tune::run<PpoTrial>(space, ro);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const tune::TrialResult& best = grid.best();
    std::size_t solved = 0;
    for (const auto& t : grid.trials()) solved += t.status == tune::TrialStatus::done;
    std::printf("%s: %zu trials, %zu solved, %.1f s; best trial %zu (%s): mean return %.1f after %lld iterations\n",
                name.c_str(), grid.trials().size(), solved, took, best.id, best.config.str().c_str(), best.best_metric,
                static_cast<long long>(best.iterations));
    std::fflush(stdout);
    all_found = all_found && solved > 0;
  }
  std::printf(all_found ? "PASS: every search found a configuration that solves CartPole-v1\n"
                        : "FAIL: a search found no configuration that solves CartPole-v1\n");
  return all_found ? 0 : 1;
}
