// src/common/elastic_env.hpp: the FIBRA_ELASTIC_* variables that carry a job spec's [elastic]
// table from the script `fibra slurm render` writes (slurm/src/render.cpp, to_env) to the driver's
// first pool (src/driver/elastic.cpp, from_env). Both walk one list, elastic_variables: each
// variable's name beside the field it carries, so the two sides cannot disagree on a name or a form.
#pragma once

#include <charconv>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/env.hpp"
#include "fibra/options.hpp"

namespace fibra::detail {

/// Pool::adapt's bounds and options from a job spec's [elastic]: worker jobs, on top of the pool's
/// own workers.
struct ElasticEnv {
  int min_jobs = 0;      ///< worker jobs kept at least
  int max_jobs = 0;      ///< worker jobs at most
  AdaptOptions options;  ///< all but failed_submits travel (that one keeps its default)

  /// Each variable's name and value, in elastic_variables' order; a number is written so that it
  /// reads back the same.
  std::vector<std::pair<std::string, std::string>> to_env() const;
  /// The variables as this process's environment has them; nullopt when FIBRA_ELASTIC_MAX_JOBS is
  /// unset or empty (no elastic pool). A variable unset (or empty) leaves its field's default.
  /// @throws ConfigError naming a variable that is not a number in its range.
  static std::optional<ElasticEnv> from_env();
};

/// The variables, each with the field it carries, in the order a rendered script exports them.
template <class F, class E>
requires std::is_same_v<std::remove_const_t<E>, ElasticEnv>
void elastic_variables(F&& f, E& e) {
  f(env::Name("FIBRA_ELASTIC_MIN_JOBS"), e.min_jobs);
  f(env::Name("FIBRA_ELASTIC_MAX_JOBS"), e.max_jobs);
  f(env::Name("FIBRA_ELASTIC_WORKERS_PER_JOB"), e.options.workers_per_job);
  f(env::Name("FIBRA_ELASTIC_TIME"), e.options.time);
  f(env::Name("FIBRA_ELASTIC_BACKLOG"), e.options.backlog);
  f(env::Name("FIBRA_ELASTIC_IDLE_TIMEOUT_S"), e.options.idle_timeout_s);
  f(env::Name("FIBRA_ELASTIC_DRAIN_BEFORE_S"), e.options.drain_before_s);
  f(env::Name("FIBRA_ELASTIC_SUBMIT_GAP_S"), e.options.submit_gap_s);
  f(env::Name("FIBRA_ELASTIC_PARTITION"), e.options.partition);
  f(env::Name("FIBRA_ELASTIC_SBATCH_ARGS"), e.options.sbatch_args);
}

namespace elastic_env {

// A field as its variable's value: a whole number, the shortest decimal that reads back as the same
// double, a text, words joined by blanks.
inline std::string text_of(int v) { return std::to_string(v); }
inline std::string text_of(double v) {
  char b[32];
  return std::string(b, std::to_chars(b, b + sizeof b, v).ptr);
}
inline std::string text_of(const std::string& v) { return v; }
inline std::string text_of(const std::vector<std::string>& words) {
  std::string t;
  for (const std::string& w : words) t += (t.empty() ? "" : " ") + w;
  return t;
}

// A variable into its field, which keeps its default when the variable is unset or empty.
inline double number(env::Name n, double unset, bool whole) {
  return env::number(n, unset, 0, whole ? double(std::numeric_limits<int>::max()) : 1e12, whole,
                     "it comes from the job spec's [elastic] table (fibra slurm render): render the script again "
                     "rather than edit it");
}
inline void read(env::Name n, int& v) { v = static_cast<int>(number(n, v, true)); }
inline void read(env::Name n, double& v) { v = number(n, v, false); }
inline void read(env::Name n, std::string& v) {
  if (std::string t = env::text(n); !t.empty()) v = std::move(t);
}
inline void read(env::Name n, std::vector<std::string>& words) {
  std::istringstream in(env::text(n));
  for (std::string w; in >> w;) words.push_back(w);
}

}  // namespace elastic_env

inline std::vector<std::pair<std::string, std::string>> ElasticEnv::to_env() const {
  std::vector<std::pair<std::string, std::string>> vars;
  elastic_variables([&](env::Name n, const auto& v) { vars.emplace_back(n.c_str(), elastic_env::text_of(v)); }, *this);
  return vars;
}

inline std::optional<ElasticEnv> ElasticEnv::from_env() {
  const char* max = env::raw("FIBRA_ELASTIC_MAX_JOBS");
  if (!max || !*max) return std::nullopt;
  ElasticEnv e;
  elastic_variables([](env::Name n, auto& v) { elastic_env::read(n, v); }, e);
  return e;
}

}  // namespace fibra::detail
