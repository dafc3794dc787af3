// jobs/tune_es: fibra::tune over the ES job's hyper-parameters on CartPole-v1 (issue 26). Each
// trial is an evolution strategy (OpenAI-ES, jobs/es/es_core.hpp) whose step() is one generation,
// run in the trial's own process; its metric is the mean return of the updated policy over 5
// fixed evaluation episodes, and a trial that reaches 475 (Gymnasium's threshold) is done.
// Searches sigma, the learning rate and the population with ASHA, PBT and random search on the
// same budget, prints each one's best configuration and when it first solved the task, and
// writes each one's best-so-far curve for plot.py.
//
//   tune_es [--schedulers asha,pbt,random] [--samples 24] [--workers 2] [--generations 40]
//           [--seeds 1] [--out tune_es_out]
//
// Prints PASS when every search found a solving configuration (exit status 1 otherwise).
// With --seeds N > 1 it runs every scheduler N times (seeds 0..N-1) and prints the median time to a
// solving configuration per scheduler, as rows of benchmarks/README.md (B9 (a)).
#include <fibra/fibra.hpp>
#include <fibra/tune.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "../es/es_core.hpp"

namespace {

namespace tune = fibra::tune;
constexpr std::uint64_t noise_seed = 0x401e;
constexpr double solved = envs::CartPole::solved;

// One ES run on CartPole-v1: theta, Adam's state and the observation sums travel as a checkpoint.
class EsTrial {
 public:
  explicit EsTrial(const tune::Config& c)
      : sigma_(c.number("sigma")),
        lr_(c.number("lr")),
        pairs_(std::size_t(c.integer("population") / 2)),
        seed_(std::uint64_t(c.integer("seed"))),
        shape_{envs::CartPole::obs_size, 16, envs::CartPole::actions} {
    es::Random r(seed_);
    theta_.resize(shape_.parameters());
    for (auto& t : theta_) t = 0.1 * r.normal();
    sum_.assign(std::size_t(shape_.obs), 0.0);
    sumsq_.assign(std::size_t(shape_.obs), 0.0);
  }

  tune::Metrics step() {
    const std::size_t n = theta_.size();
    const auto& table = es::NoiseTable::of(noise_seed);
    const std::vector<double> mean = mean_of(), sd = sd_of(mean);
    const es::PolicyView p{shape_, theta_.data(), mean.data(), sd.data()};
    std::vector<double> up(pairs_), down(pairs_);
    std::vector<std::size_t> offsets(pairs_);
    es::ObsSums seen{std::vector<double>(std::size_t(shape_.obs)), std::vector<double>(std::size_t(shape_.obs)), 0};
    for (std::size_t i = 0; i < pairs_; ++i) {
      const std::uint64_t pair_seed = es::mix(seed_, generation_, i);
      offsets[i] = es::NoiseTable::offset(pair_seed, n);
      const float* eps = table.at(offsets[i]);
      up[i] = es::episode<envs::CartPole>(p, es::mix(pair_seed, 0xe915), eps, sigma_, &seen).first;
      down[i] = es::episode<envs::CartPole>(p, es::mix(pair_seed, 0xe915), eps, -sigma_, nullptr).first;
    }
    for (std::size_t k = 0; k < sum_.size(); ++k) sum_[k] += seen.sum[k], sumsq_[k] += seen.sumsq[k];
    count_ += seen.count;
    std::vector<double> returns = up;
    returns.insert(returns.end(), down.begin(), down.end());
    const std::vector<double> ranks = es::centred_ranks(returns);
    std::vector<double> grad(n, 0.0);
    for (std::size_t i = 0; i < pairs_; ++i) {
      const double w = ranks[i] - ranks[pairs_ + i];
      const float* eps = table.at(offsets[i]);
      for (std::size_t j = 0; j < n; ++j) grad[j] += w * double(eps[j]);
    }
    for (std::size_t j = 0; j < n; ++j) grad[j] = grad[j] / double(returns.size()) - 0.005 * theta_[j];
    adam_.step(theta_, grad, lr_);
    ++generation_;
    // The updated policy on 5 fixed episodes.
    const std::vector<double> m2 = mean_of(), s2 = sd_of(m2);
    const es::PolicyView q{shape_, theta_.data(), m2.data(), s2.data()};
    double eval = 0;
    for (std::uint64_t e = 0; e < 5; ++e)
      eval += es::episode<envs::CartPole>(q, 1000 + e, nullptr, 0, nullptr).first / 5;
    return {{"eval", eval}, {"episodes", double(2 * pairs_ * generation_)}, {"done", eval >= solved ? 1.0 : 0.0}};
  }

  std::string save() const {
    std::string out;
    auto put = [&](const std::vector<double>& v) {
      const std::uint64_t k = v.size();
      out.append(reinterpret_cast<const char*>(&k), 8);
      if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * 8);
    };
    put(theta_), put(adam_.m), put(adam_.v), put(sum_), put(sumsq_);
    put({adam_.t, count_, double(generation_)});
    return out;
  }

  void restore(const std::string& bytes) {
    std::size_t at = 0;
    auto get = [&] {
      std::uint64_t k = 0;
      if (bytes.size() - at < 8) throw std::runtime_error("tune_es: a checkpoint cut short");
      std::memcpy(&k, bytes.data() + at, 8);
      at += 8;
      if (k > (bytes.size() - at) / 8) throw std::runtime_error("tune_es: a checkpoint cut short");
      std::vector<double> v(k);
      if (k) std::memcpy(v.data(), bytes.data() + at, k * 8);
      at += k * 8;
      return v;
    };
    theta_ = get(), adam_.m = get(), adam_.v = get(), sum_ = get(), sumsq_ = get();
    const auto rest = get();
    if (rest.size() != 3 || theta_.size() != shape_.parameters() || sum_.size() != std::size_t(shape_.obs))
      throw std::runtime_error("tune_es: a checkpoint of another policy shape");
    adam_.t = rest[0], count_ = rest[1], generation_ = std::uint64_t(rest[2]);
  }

 private:
  std::vector<double> mean_of() const {
    std::vector<double> m(sum_.size(), 0.0);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = count_ > 0 ? sum_[i] / count_ : 0.0;
    return m;
  }
  std::vector<double> sd_of(const std::vector<double>& m) const {
    std::vector<double> s(m.size(), 1.0);
    for (std::size_t i = 0; i < s.size(); ++i)
      if (count_ > 0) s[i] = std::sqrt(std::max(sumsq_[i] / count_ - m[i] * m[i], 1e-4));
    return s;
  }

  double sigma_, lr_;
  std::size_t pairs_;
  std::uint64_t seed_, generation_ = 0;
  es::PolicyShape shape_;
  std::vector<double> theta_, sum_, sumsq_;
  double count_ = 0;
  es::Adam adam_;
};
FIBRA_TRAINABLE(EsTrial);

std::string arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

// When the search first had a solving trial (seconds since it began), or NaN; and the curve of the
// best evaluation so far against wall time.
double time_to_solve(const tune::ResultGrid& g, std::vector<std::pair<double, double>>& curve) {
  std::vector<const tune::ResultRow*> rows;
  for (const auto& r : g.rows()) rows.push_back(&r);
  std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->wall_time < b->wall_time; });
  double best = -1, first = std::nan("");
  for (const auto* r : rows) {
    const double e = r->metrics.at("eval");
    if (e > best) {
      best = e;
      curve.emplace_back(r->wall_time, best);
    }
    if (e >= solved && std::isnan(first)) first = r->wall_time;
  }
  return first;
}

}  // namespace

int run_searches(int argc, char** argv);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  try {
    return run_searches(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tune_es: %s\n", e.what());
    return 2;
  }
}

int run_searches(int argc, char** argv) {
  const int workers = std::stoi(arg(argc, argv, "--workers", "2"));
  const std::size_t samples = std::stoul(arg(argc, argv, "--samples", "24"));
  const double generations = std::stod(arg(argc, argv, "--generations", "40"));
  const int seeds = std::stoi(arg(argc, argv, "--seeds", "1"));
  const std::string out = arg(argc, argv, "--out", "tune_es_out");
  std::string list = arg(argc, argv, "--schedulers", "asha,pbt,random");
  std::vector<std::string> schedulers;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    schedulers.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  fibra::Pool pool(workers);
  const tune::Space space{{"sigma", tune::loguniform(0.01, 0.5)},
                          {"lr", tune::loguniform(0.003, 0.3)},
                          {"population", tune::choice({16, 32, 64, 128})},
                          {"seed", tune::randint(0, 1 << 30)}};
  std::filesystem::create_directories(out);
  std::ofstream curves(out + "/curves.csv");
  curves << "scheduler,seed,wall_time,best_eval\n";
  std::map<std::string, std::vector<double>> solve_times, search_times, generations_run;
  for (int seed = 0; seed < seeds; ++seed) {
    for (const auto& name : schedulers) {
      tune::Scheduler sched = tune::Fifo{};
      if (name == "asha") {
        sched = tune::Asha{.max_t = generations, .grace_period = 2, .reduction_factor = 3};
      } else if (name == "pbt") {
        tune::Pbt pbt;
        pbt.perturbation_interval = 4;
        pbt.hyperparam_mutations.add("sigma", tune::loguniform(0.01, 0.5)).add("lr", tune::loguniform(0.003, 0.3));
        sched = pbt;
      } else if (name != "random") {
        std::fprintf(stderr, "tune_es: unknown scheduler '%s' (asha, pbt or random)\n", name.c_str());
        return 2;
      }
      const std::string dir = out + "/" + name + "_seed" + std::to_string(seed);
      std::filesystem::remove_all(dir);  // a fresh search each time (the file would resume it)
      const auto t0 = std::chrono::steady_clock::now();
      const auto g = tune::run<EsTrial>(space, {.num_samples = samples,
                                                .metric = "eval",
                                                .scheduler = sched,
                                                .stop = {{"training_iteration", generations}},
                                                .storage = dir,
                                                .seed = std::uint64_t(seed),
                                                .pool = &pool});
      const double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::vector<std::pair<double, double>> curve;
      const double t = time_to_solve(g, curve);
      for (const auto& [w, b] : curve) curves << name << "," << seed << "," << w << "," << b << "\n";
      const auto& best = g.best();
      std::printf("%-6s seed %d: best eval %.1f (%s), %zu generations in %.2f s, solved %s\n", name.c_str(), seed,
                  best.last.at("eval"), best.config.str().c_str(), g.rows().size(), search_s,
                  std::isnan(t) ? "never" : (std::to_string(t) + " s into the search").c_str());
      std::fflush(stdout);
      solve_times[name].push_back(std::isnan(t) ? 1e9 : t);
      search_times[name].push_back(search_s);
      generations_run[name].push_back(double(g.rows().size()));
    }
  }
  // Every search found a configuration that solves the task (the test's check).
  bool all = true;
  for (const auto& [name, ts] : solve_times)
    for (double x : ts) all = all && x < 1e9;
  std::printf(
      "%s: every search %s a configuration that solves CartPole-v1; curves in %s/curves.csv "
      "(plot: jobs/tune_es/plot.py %s)\n",
      all ? "PASS" : "FAIL", all ? "found" : "did not find", out.c_str(), out.c_str());
  if (seeds > 1) {
    for (auto& [name, ts] : solve_times) {
      std::sort(ts.begin(), ts.end());
      std::printf("tune_es,%s_median_time_to_solve_s,%g,s\n", name.c_str(), ts[ts.size() / 2]);
      int solved_runs = 0;
      for (double x : ts) solved_runs += x < 1e9;
      std::printf("tune_es,%s_runs_solved,%d,runs\n", name.c_str(), solved_runs);
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::printf("tune_es,%s_median_search_s,%g,s\n", name.c_str(), median(search_times[name]));
      std::printf("tune_es,%s_median_generations,%g,generations\n", name.c_str(), median(generations_run[name]));
    }
  }
  return all ? 0 : 1;
}
