// tune/src/schedulers.cpp: FIFO, asynchronous successive halving and population-based training
// (HyperBand, which pauses trials, is in hyperband.cpp).
// docs/tune.md gives each rule in a paragraph; these follow Ray Tune's, so results compare.
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "fibra/error.hpp"
#include "internal.hpp"

namespace fibra::tune::detail {

double percentile(std::vector<double> v, double q) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * double(v.size() - 1);
  const std::size_t lo = std::size_t(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

namespace {

class FifoLogic final : public SchedulerLogic {
 public:
  Decision on_result(std::size_t, double, double, const Config&) override { return {}; }
  bool may_decide(std::size_t, double) const override { return false; }
};

// The scores recorded at one rung, ordered, with numpy.percentile's interpolation in O(log n): a
// rung of 10,000 trials would otherwise be copied and sorted at each trial's arrival there.
class Rung {
 public:
  explicit Rung(double milestone) : milestone_(milestone) {}
  double milestone() const { return milestone_; }
  bool has(std::size_t trial) const { return trials_.count(trial) != 0; }
  void add(std::size_t trial, double score) {
    trials_.insert(trial);
    scores_.insert({score, trial});
  }
  double percentile(double q) const {
    if (scores_.empty()) return std::numeric_limits<double>::quiet_NaN();
    const double pos = q / 100.0 * double(scores_.size() - 1);
    const std::size_t lo = std::size_t(std::floor(pos)), hi = std::min(lo + 1, scores_.size() - 1);
    const double a = scores_.find_by_order(lo)->first, b = scores_.find_by_order(hi)->first;
    return a + (b - a) * (pos - double(lo));
  }

 private:
  double milestone_;
  std::unordered_set<std::size_t> trials_;
  __gnu_pbds::tree<std::pair<double, std::size_t>, __gnu_pbds::null_type, std::less<>, __gnu_pbds::rb_tree_tag,
                   __gnu_pbds::tree_order_statistics_node_update>
      scores_;
};

// One bracket of ASHA: rungs from the highest milestone down.
class AshaBracket {
 public:
  AshaBracket(double grace, double max_t, double rf, int s) : rf_(rf) {
    const int n = int(std::log(max_t / grace) / std::log(rf) + 1) - s;
    for (int k = n - 1; k >= 0; --k) rungs_.emplace_back(grace * std::pow(rf, k + s));
  }
  bool may_decide(std::size_t trial, double t) const {
    for (const auto& rung : rungs_)
      if (t >= rung.milestone() && !rung.has(trial)) return true;
    return false;
  }
  Decision::Kind on_result(std::size_t trial, double t, double score) {
    for (auto& rung : rungs_) {
      if (t >= rung.milestone() && rung.has(trial)) break;  // decided at this rung already
      if (t < rung.milestone() || rung.has(trial)) continue;
      const double cutoff = rung.percentile((1 - 1 / rf_) * 100);
      const bool stop = !std::isnan(cutoff) && score < cutoff;
      rung.add(trial, score);
      return stop ? Decision::Kind::stop : Decision::Kind::go_on;
    }
    return Decision::Kind::go_on;
  }

 private:
  double rf_;
  std::vector<Rung> rungs_;
};

class AshaLogic final : public SchedulerLogic {
 public:
  explicit AshaLogic(const Asha& a) : a_(a) {
    if (!(a.grace_period > 0) || !(a.max_t > a.grace_period))
      throw ConfigError("fibra::tune: Asha needs 0 < grace_period < max_t; it has grace_period " +
                        std::to_string(a.grace_period) + " and max_t " + std::to_string(a.max_t));
    if (!(a.reduction_factor > 1)) throw ConfigError("fibra::tune: Asha needs reduction_factor > 1");
    if (a.brackets < 1) throw ConfigError("fibra::tune: Asha needs at least one bracket");
    for (int s = 0; s < a.brackets; ++s) brackets_.emplace_back(a.grace_period, a.max_t, a.reduction_factor, s);
  }
  bool may_decide(std::size_t trial, double t) const override {
    return !(t < a_.max_t) || brackets_[trial % brackets_.size()].may_decide(trial, t);
  }
  Decision on_result(std::size_t trial, double t, double score, const Config&) override {
    Decision d;
    if (std::isnan(t)) return d;  // no time in this row (time_attr not reported): nothing to decide
    if (t >= a_.max_t) {
      d.kind = Decision::Kind::done;
    } else if (!std::isnan(score)) {
      d.kind = brackets_[trial % brackets_.size()].on_result(trial, t, score);
    }
    return d;
  }

 private:
  Asha a_;
  std::vector<AshaBracket> brackets_;
};

class PbtLogic final : public SchedulerLogic {
 public:
  PbtLogic(const Pbt& p, std::uint64_t seed) : p_(p), rng_(seed ^ 0x9b7e1a2f3c4d5e6fULL) {
    if (!(p.perturbation_interval > 0)) throw ConfigError("fibra::tune: Pbt needs perturbation_interval > 0");
    if (!(p.quantile_fraction >= 0 && p.quantile_fraction <= 0.5))
      throw ConfigError("fibra::tune: Pbt needs quantile_fraction in [0, 0.5]");
    if (p.hyperparam_mutations.entries().empty() && !p.explore)
      throw ConfigError("fibra::tune: Pbt needs hyperparam_mutations or an explore function: it has nothing to change");
  }

  Decision on_result(std::size_t trial, double t, double score, const Config& config) override {
    auto& st = trials_[trial];
    st.config = config;
    Decision d;
    // As Ray's PBT: a trial's score and standing change only at its perturbations.
    if (std::isnan(t) || t - st.last_perturbation < p_.perturbation_interval) return d;
    st.last_perturbation = t;
    if (!std::isnan(score)) st.score = score;
    const auto [lower, upper] = quantiles();
    const bool top = std::find(upper.begin(), upper.end(), trial) != upper.end();
    st.saved = top;  // a checkpoint from when it was top is not handed out once it is not
    if (top) {
      d.kind = Decision::Kind::save;
    } else if (std::find(lower.begin(), lower.end(), trial) != lower.end()) {
      std::vector<std::size_t> donors;
      for (auto id : upper)
        if (trials_[id].saved) donors.push_back(id);
      if (donors.empty()) return d;
      d.kind = Decision::Kind::exploit;
      d.donor = donors[splitmix(rng_) % donors.size()];
      d.config = explore(trials_[d.donor].config);
      st.config = d.config;
      st.saved = false;
    }
    return d;
  }

  void on_end(std::size_t trial) override { trials_.erase(trial); }
  bool may_decide(std::size_t trial, double t) const override {
    auto it = trials_.find(trial);
    return !(t - (it == trials_.end() ? 0.0 : it->second.last_perturbation) < p_.perturbation_interval);
  }

 private:
  struct State {
    Config config;
    double score = std::numeric_limits<double>::quiet_NaN();
    double last_perturbation = 0;
    bool saved = false;
  };

  std::pair<std::vector<std::size_t>, std::vector<std::size_t>> quantiles() const {
    std::vector<std::pair<double, std::size_t>> ranked;
    for (const auto& [id, st] : trials_)
      if (!std::isnan(st.score)) ranked.emplace_back(st.score, id);
    if (ranked.size() <= 1) return {};
    std::sort(ranked.begin(), ranked.end());
    std::size_t n = std::size_t(std::ceil(double(ranked.size()) * p_.quantile_fraction));
    n = std::min(n, ranked.size() / 2);
    std::vector<std::size_t> lower, upper;
    for (std::size_t i = 0; i < n; ++i) {
      lower.push_back(ranked[i].second);
      upper.push_back(ranked[ranked.size() - 1 - i].second);
    }
    return {lower, upper};
  }

  Config explore(Config c) {
    for (const auto& [key, domain] : p_.hyperparam_mutations.entries()) {
      const bool listed = domain.kind == Domain::Kind::grid || domain.kind == Domain::Kind::choice;
      const auto& values = domain.values;
      const auto at = c.contains(key) ? std::find(values.begin(), values.end(), c.at(key)) : values.end();
      if (unit(rng_) < p_.resample_probability || !c.contains(key) || (listed && at == values.end())) {
        Domain drawn = domain;
        if (drawn.kind == Domain::Kind::grid) drawn.kind = Domain::Kind::choice;
        c.set(key, draw(drawn, rng_));
      } else if (listed) {  // a neighbour in the list
        const std::size_t i = std::size_t(at - values.begin());
        const std::size_t j = splitmix(rng_) % 2 ? std::min(i + 1, values.size() - 1) : (i == 0 ? 0 : i - 1);
        c.set(key, values[j]);
      } else if (!p_.perturbation_factors.empty()) {
        const double f = p_.perturbation_factors[splitmix(rng_) % p_.perturbation_factors.size()];
        const Value& v = c.at(key);
        if (v.is_integer())
          c.set(key, std::int64_t(std::llround(double(v.integer()) * f)));
        else
          c.set(key, v.number() * f);
      }
    }
    return p_.explore ? p_.explore(std::move(c)) : c;
  }

  Pbt p_;
  std::uint64_t rng_;
  std::map<std::size_t, State> trials_;
};

}  // namespace

std::unique_ptr<SchedulerLogic> make_scheduler(const Scheduler& s, std::uint64_t seed, std::size_t trials) {
  if (std::holds_alternative<Asha>(s)) return std::make_unique<AshaLogic>(std::get<Asha>(s));
  if (std::holds_alternative<HyperBand>(s)) return make_hyperband(std::get<HyperBand>(s), trials);
  if (std::holds_alternative<Pbt>(s)) return std::make_unique<PbtLogic>(std::get<Pbt>(s), seed);
  return std::make_unique<FifoLogic>();
}

}  // namespace fibra::tune::detail
