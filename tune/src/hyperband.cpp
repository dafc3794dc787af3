// tune/src/hyperband.cpp: HyperBand (Li et al. 2018) as fibra::tune runs it: brackets of the paper's
// sizes, each a synchronous successive halving whose trials wait at a rung (paused: their
// checkpoint kept, their host given to another trial) until the rung is decided. docs/tune.md
// states the rule and how it differs from Ray's HyperBandScheduler.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "fibra/error.hpp"
#include "internal.hpp"

namespace fibra::tune::detail {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A relative nudge for floor and ceil of products that are integers on paper: 5/4 * 27 is
// 33.75, but 5/5 * 81 must be 81, not 82 because the product came out as 81.00000000000001.
constexpr double nudge = 1e-12;

void check(double max_t, double eta) {
  if (!(eta > 1) || !std::isfinite(eta))
    throw ConfigError(
        "fibra::tune: HyperBand needs reduction_factor > 1 (each rung keeps the top 1/reduction_factor "
        "of its trials); it has " +
        number(eta));
  if (!(max_t >= eta) || !std::isfinite(max_t))
    throw ConfigError(
        "fibra::tune: HyperBand needs max_t >= reduction_factor, so that a bracket halves at least once; "
        "it has max_t " +
        number(max_t) + " and reduction_factor " + number(eta));
}

// s_max = floor(log_eta(max_t)), counted in powers so that max_t 81 and eta 3 give 4 however
// log(81) / log(3) rounds.
int s_max_of(double max_t, double eta) {
  int s = 0;
  while (std::pow(eta, s + 1) <= max_t * (1 + nudge)) {
    if (++s > 64)
      throw ConfigError("fibra::tune: HyperBand's reduction_factor " + number(eta) + " is so close to 1 that max_t " +
                        number(max_t) + " makes more than 64 rungs; use a larger reduction_factor (3 is usual)");
  }
  return s;
}

}  // namespace

std::vector<HyperBandBracket> hyperband_brackets(double max_t, double eta) {
  check(max_t, eta);
  const int s_max = s_max_of(max_t, eta);
  std::vector<HyperBandBracket> out;
  for (int s = s_max; s >= 0; --s) {
    HyperBandBracket b;
    b.s = s;
    const double n = std::ceil(double(s_max + 1) / double(s + 1) * std::pow(eta, s) * (1 - nudge));
    if (n > 1e12)
      throw ConfigError("fibra::tune: HyperBand's bracket s = " + std::to_string(s) + " would hold " + number(n) +
                        " trials; use a smaller max_t or a larger reduction_factor");
    b.n = std::size_t(n);
    b.r = max_t * std::pow(eta, -s);
    for (int i = 0; i <= s; ++i) {
      b.sizes.push_back(std::size_t(std::floor(double(b.n) * std::pow(eta, -i) * (1 + nudge))));
      b.milestones.push_back(max_t * std::pow(eta, i - s));
    }
    out.push_back(std::move(b));
  }
  return out;
}

namespace {

class HyperBandLogic final : public SchedulerLogic {
 public:
  HyperBandLogic(const HyperBand& h, std::size_t trials)
      : h_(h), bracket_of_(trials), level_of_(trials, 0), ended_(trials, false) {
    const auto plan = hyperband_brackets(h.max_t, h.reduction_factor);
    // Trials fill the brackets in the order of their ids, s_max first (the paper's loop), and
    // start another round when the last bracket is full.
    for (std::size_t next = 0, k = 0; next < trials; ++k) {
      const HyperBandBracket& p = plan[k % plan.size()];
      Bracket b;
      b.milestones.assign(p.milestones.begin(), p.milestones.end() - 1);  // the last one is max_t: done
      b.levels.resize(b.milestones.size());
      for (std::size_t j = 0; j < p.n && next < trials; ++j, ++next) {
        bracket_of_[next] = brackets_.size();
        if (!b.levels.empty()) b.levels[0].expected.insert(next);
      }
      brackets_.push_back(std::move(b));
    }
  }

  Decision on_result(std::size_t trial, double t, double score, const Config&) override {
    Decision d;
    if (std::isnan(t) || trial >= bracket_of_.size()) return d;
    if (t >= h_.max_t) {
      d.kind = Decision::Kind::done;
      return d;
    }
    Bracket& b = brackets_[bracket_of_[trial]];
    const std::size_t level = level_of_[trial];
    if (level >= b.levels.size() || t < b.milestones[level]) return d;
    // A trial back at a rung decided without it (it was retried from an earlier checkpoint while
    // the rung was decided): it was not among the top, or it would be a level up by now.
    if (b.levels[level].decided) {
      d.kind = Decision::Kind::stop;
      return d;
    }
    b.levels[level].arrived[trial] = score;  // a retried trial's new value replaces its old one
    settle(b, level);
    return own_ruling(trial);
  }

  bool may_decide(std::size_t trial, double t) const override {
    if (!(t < h_.max_t)) return true;
    if (trial >= bracket_of_.size()) return false;
    const Bracket& b = brackets_[bracket_of_[trial]];
    return level_of_[trial] < b.levels.size() && t >= b.milestones[level_of_[trial]];
  }

  // A trial that ended before its rung is no longer waited for there. One that ended after it
  // arrived still counts there (a resume replays each ended trial's end right after its last row,
  // which for a trial stopped at a rung comes before the rung was decided).
  void on_end(std::size_t trial) override {
    if (trial >= bracket_of_.size()) return;
    ended_[trial] = true;
    Bracket& b = brackets_[bracket_of_[trial]];
    const std::size_t level = level_of_[trial];
    if (level >= b.levels.size()) return;
    Level& l = b.levels[level];
    if (l.decided || l.arrived.count(trial)) return;
    l.expected.erase(trial);
    settle(b, level);
  }

  std::vector<Ruling> take_rulings() override { return std::exchange(rulings_, {}); }

  bool waiting(std::size_t trial) const override {
    if (trial >= bracket_of_.size() || ended_[trial]) return false;
    const Bracket& b = brackets_[bracket_of_[trial]];
    const std::size_t level = level_of_[trial];
    return level < b.levels.size() && !b.levels[level].decided && b.levels[level].arrived.count(trial);
  }

 private:
  // One rung of a bracket: the trials it waits for, the values of those that reached it.
  struct Level {
    std::set<std::size_t> expected;
    std::map<std::size_t, double> arrived;
    bool decided = false;
  };
  struct Bracket {
    std::vector<double> milestones;  // the rungs below max_t
    std::vector<Level> levels;
  };

  // Decides the rung once every trial it waits for has reached it (a rung nobody is left for is
  // decided empty, and so on up).
  void settle(Bracket& b, std::size_t level) {
    for (; level < b.levels.size(); ++level) {
      Level& l = b.levels[level];
      if (l.decided) return;
      for (std::size_t t : l.expected)
        if (!l.arrived.count(t)) return;
      decide(b, level);
      if (level + 1 < b.levels.size() && !b.levels[level + 1].expected.empty()) return;
    }
  }

  // The top floor(m / eta) of the m trials at the rung (at least one) go up a level; a value not
  // reported ranks last, and ties go to the lower id.
  void decide(Bracket& b, std::size_t level) {
    Level& l = b.levels[level];
    l.decided = true;
    std::vector<std::pair<double, std::size_t>> ranked;
    for (const auto& [trial, score] : l.arrived)
      ranked.emplace_back(std::isnan(score) ? -std::numeric_limits<double>::infinity() : score, trial);
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& c) {
      return a.first > c.first || (a.first == c.first && a.second < c.second);
    });
    const auto keep =
        std::max<std::size_t>(1, std::size_t(std::floor(double(ranked.size()) / h_.reduction_factor * (1 + nudge))));
    for (std::size_t i = 0; i < ranked.size(); ++i) {
      const std::size_t trial = ranked[i].second;
      const bool up = i < keep;
      if (up) level_of_[trial] = level + 1;
      if (ended_[trial]) continue;  // counted at the rung, but no longer runs
      if (up && level + 1 < b.levels.size()) b.levels[level + 1].expected.insert(trial);
      rulings_.push_back({trial, up ? Decision::Kind::go_on : Decision::Kind::stop});
    }
  }

  // The trial that decided its rung by arriving goes on (after a checkpoint, so that a resumed
  // experiment finds it at the rung too) or stops; otherwise it waits there.
  Decision own_ruling(std::size_t trial) {
    Decision d;
    d.kind = Decision::Kind::pause;
    const auto it = std::find_if(rulings_.begin(), rulings_.end(), [&](const Ruling& r) { return r.trial == trial; });
    if (it == rulings_.end()) return d;
    d.kind = it->kind == Decision::Kind::go_on ? Decision::Kind::save : Decision::Kind::stop;
    rulings_.erase(it);
    return d;
  }

  HyperBand h_;
  std::vector<Bracket> brackets_;
  std::vector<std::size_t> bracket_of_;
  std::vector<std::size_t> level_of_;  // the rung a trial runs towards (levels.size(): max_t)
  std::vector<bool> ended_;
  std::vector<Ruling> rulings_;
};

}  // namespace

std::unique_ptr<SchedulerLogic> make_hyperband(const HyperBand& h, std::size_t trials) {
  return std::make_unique<HyperBandLogic>(h, trials);
}

}  // namespace fibra::tune::detail
