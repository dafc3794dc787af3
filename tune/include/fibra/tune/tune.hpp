// fibra/tune/tune.hpp: hyper-parameter search with early stopping (Ray Tune's model) on fibra's actors.
//
//   class Quadratic {                            // a trainable: one iteration per step()
//    public:
//     explicit Quadratic(const fibra::tune::Config& c) : x_(c.number("x")) {}
//     fibra::tune::Metrics step() { ++t_; return {{"score", -(x_ - 3) * (x_ - 3) * t_}}; }
//    private:
//     double x_; int t_ = 0;
//   };
//   FIBRA_TRAINABLE(Quadratic);
//
//   auto grid = fibra::tune::run<Quadratic>({{"x", fibra::tune::uniform(0, 10)}},
//                                           {.num_samples = 64, .metric = "score",
//                                            .scheduler = fibra::tune::Asha{.max_t = 16},
//                                            .storage = "runs/quadratic"});
//   grid.best().config;                           // the best trial's configuration
//
// Trials run as actors on a pool (the default one unless RunOptions::pool); a trial that throws or
// whose process dies is retried from its last checkpoint, up to a budget; the experiment's state
// lives in one HDF5 file (RunOptions::storage), readable by h5py and pandas, from which a rerun
// resumes. docs/tune.md has the rules of each scheduler and the file's layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <variant>
#include <vector>

#include "fibra/detail/registry.hpp"
#include "fibra/resources.hpp"

namespace fibra {
class Pool;
}

namespace fibra::tune {

/// @brief One value of a configuration: a floating-point number, an integer or a string.
class Value {
 public:
  Value(double v) : v_(v) {}                            // NOLINT: implicit on purpose ({"lr", 0.1})
  Value(int v) : v_(std::int64_t(v)) {}                 // NOLINT
  Value(long v) : v_(std::int64_t(v)) {}                // NOLINT
  Value(long long v) : v_(std::int64_t(v)) {}           // NOLINT
  Value(unsigned v) : v_(std::int64_t(v)) {}            // NOLINT
  Value(unsigned long v) : v_(std::int64_t(v)) {}       // NOLINT (a size_t)
  Value(unsigned long long v) : v_(std::int64_t(v)) {}  // NOLINT
  Value(float v) : v_(double(v)) {}                     // NOLINT
  Value(const char* v) : v_(std::string(v)) {}          // NOLINT
  Value(std::string v) : v_(std::move(v)) {}            // NOLINT
  bool is_double() const noexcept { return v_.index() == 0; }
  bool is_integer() const noexcept { return v_.index() == 1; }
  bool is_text() const noexcept { return v_.index() == 2; }
  /// @brief The number (an integer converted); @throws ConfigError for a string.
  double number() const;
  /// @brief The integer (a double without a fraction converted); @throws ConfigError otherwise.
  std::int64_t integer() const;
  /// @brief The string; @throws ConfigError for a number.
  const std::string& text() const;
  /// @brief As printed: 0.01, 32, cartpole.
  std::string str() const;
  friend bool operator==(const Value&, const Value&) = default;

 private:
  std::variant<double, std::int64_t, std::string> v_;
};

/// @brief A trial's configuration: keys to values. Nested configurations use dotted keys
///        ("optimizer.lr"), and sub("optimizer") gives the part under a prefix.
class Config {
 public:
  Config() = default;
  Config(std::initializer_list<std::pair<const std::string, Value>> values) : values_(values) {}
  /// @brief The value of `key`. @throws ConfigError naming the key and the keys there are.
  const Value& at(const std::string& key) const;
  double number(const std::string& key) const { return at(key).number(); }
  std::int64_t integer(const std::string& key) const { return at(key).integer(); }
  const std::string& text(const std::string& key) const { return at(key).text(); }
  /// @brief number(), integer() or text() by type: c.get<double>("lr"), c.get<int>("population").
  template <class T>
  T get(const std::string& key) const {
    if constexpr (std::is_floating_point_v<T>)
      return T(number(key));
    else if constexpr (std::is_integral_v<T>)
      return T(integer(key));
    else
      return T(text(key));
  }
  bool contains(const std::string& key) const { return values_.count(key) != 0; }
  void set(const std::string& key, Value v) { values_.insert_or_assign(key, std::move(v)); }
  /// @brief The keys under `prefix.`, without it.
  Config sub(const std::string& prefix) const;
  const std::map<std::string, Value>& values() const noexcept { return values_; }
  /// @brief "lr=0.01, population=32".
  std::string str() const;
  friend bool operator==(const Config&, const Config&) = default;

 private:
  std::map<std::string, Value> values_;
};

/// @brief Where a key's values come from: a constant, a grid (every value, crossed with the other
///        grids), or a random draw. Made by the functions below, or from a value (a constant).
struct Domain {
  enum class Kind { constant, grid, choice, uniform, loguniform, randint };
  Kind kind = Kind::constant;
  std::vector<Value> values;  ///< constant (one), grid and choice
  double low = 0, high = 0;   ///< uniform, loguniform: [low, high); randint: integers in [low, high)
  Domain() = default;
  template <class T>
  requires std::is_constructible_v<Value, T> Domain(T v) : values{Value(std::move(v))} {}  // NOLINT
};

/// @brief Every value, each in a trial of its own (crossed with the other grids).
Domain grid(std::vector<Value> values);
/// @brief One of `values`, drawn uniformly.
Domain choice(std::vector<Value> values);
/// @brief A double drawn uniformly from [low, high).
Domain uniform(double low, double high);
/// @brief A double whose logarithm is drawn uniformly from [log low, log high); low > 0.
Domain loguniform(double low, double high);
/// @brief An integer drawn uniformly from [low, high).
Domain randint(std::int64_t low, std::int64_t high);

/// @brief A search space: keys and their domains. Grid keys are enumerated (every combination,
///        num_samples times over); the others are drawn, seeded: configuration i of a seed is
///        always the same, so a resumed experiment makes the same trials.
class Space {
 public:
  Space() = default;
  Space(std::initializer_list<std::pair<std::string, Domain>> entries);
  Space& add(const std::string& key, Domain d);
  /// @brief How many configurations one pass over the grids makes (1 without grids).
  std::size_t grid_size() const;
  /// @brief Configuration number `index` of the search seeded with `seed`.
  Config sample(std::uint64_t seed, std::size_t index) const;
  const std::vector<std::pair<std::string, Domain>>& entries() const noexcept { return entries_; }

 private:
  std::vector<std::pair<std::string, Domain>> entries_;
};

/// @brief What one iteration of a trial reports. A key "done" with a value other than 0 ends the
///        trial (it is done, not stopped early).
using Metrics = std::map<std::string, double>;

/// @brief Whether the metric is better high or low.
enum class Mode { max, min };

/// @brief Runs every trial to its end (or the stop conditions).
struct Fifo {};

/// @brief Asynchronous successive halving (Li et al. 2020, as Ray's ASHAScheduler): rungs at
///        grace_period * reduction_factor^k below max_t; a trial reaching a rung is stopped when its
///        metric is below the (1 - 1/reduction_factor) quantile of those recorded there before it.
struct Asha {
  std::string time_attr = "training_iteration";  ///< or a reported metric that grows
  double max_t = 100;                            ///< a trial stops (done) at this time
  double grace_period = 1;                       ///< the first rung
  double reduction_factor = 4;
  int brackets = 1;  ///< trials go round-robin into brackets whose rungs start rf^s higher
};

/// @brief Population-based training (Jaderberg et al. 2017, as Ray's PBT): every
///        perturbation_interval, a trial in the bottom quantile_fraction takes a top trial's
///        checkpoint and a perturbed copy of its configuration; a top trial saves a checkpoint.
struct Pbt {
  std::string time_attr = "training_iteration";
  double perturbation_interval = 10;
  double quantile_fraction = 0.25;
  double resample_probability = 0.25;
  std::vector<double> perturbation_factors = {1.2, 0.8};
  /// Keys that change and where a resample draws from (a grid or choice moves to a neighbour).
  Space hyperparam_mutations;
  /// Applied after the mutations above, if set.
  std::function<Config(Config)> explore;
};

/// @brief HyperBand (Li et al. 2018): trials go, in order of their ids, into brackets s = s_max..0
///        (s_max = floor(log_eta(max_t)), eta = reduction_factor; then round again) of
///        n = ceil((s_max + 1) / (s + 1) * eta^s) trials that start with max_t * eta^-s of time;
///        each bracket is a synchronous successive halving: a trial at a rung waits (paused, its
///        checkpoint kept) until every trial of its bracket has reached that rung or ended, and
///        the top 1/eta of them (at least one) go on. Needs a trainable with save() and restore().
struct HyperBand {
  std::string time_attr = "training_iteration";  ///< or a reported metric that grows
  double max_t = 81;                             ///< R: a trial stops (done) at this time
  double reduction_factor = 3;                   ///< eta
};

using Scheduler = std::variant<Fifo, Asha, Pbt, HyperBand>;

/// @brief How an experiment runs. Fields in the order of designated initializers.
struct RunOptions {
  std::size_t num_samples = 1;  ///< passes over the space (each draws anew; grids repeat)
  std::string metric;           ///< the metric schedulers and best() compare
  Mode mode = Mode::max;
  Scheduler scheduler = Fifo{};
  std::size_t max_concurrent = 0;  ///< trials at once; 0: the pool's workers
  Resources resources_per_trial;
  /// A trial ends (done) when a reported metric reaches one of these values (for
  /// "training_iteration": that many iterations), as Ray's `stop`.
  std::map<std::string, double> stop;
  /// Seconds of wall time the experiment may run (Ray's time_budget_s); then the trials still
  /// running are stopped (their processes ended) and run() returns what it has. 0: no budget.
  double time_budget_s = 0;
  /// Seconds of wall time a trial may run, summed over its times on a host in this run (its
  /// retries' too; not a wait at a HyperBand rung); then the step it runs is cut (its process
  /// ended: a step that never returns cannot be stopped otherwise) and the trial is an error, not
  /// retried. 0: no budget.
  double trial_time_budget_s = 0;
  /// A directory for the experiment's file (experiment.h5, results.csv); a rerun resumes from
  /// it. "": nothing written, no resume.
  std::string storage;
  std::uint64_t seed = 0;
  /// Retries of a trial that throws or dies, then it is an error. A fibra::ConfigError (a missing
  /// key, a bad value) is not retried: it would fail the same way.
  int max_failures = 3;
  int checkpoint_every = 0;         ///< save() every this many iterations (0: only as PBT needs)
  double flush_interval_s = 5;      ///< the file is rewritten at most this often (and at the end); 0: at the end only
  double progress_interval_s = 10;  ///< the table on stderr; 0: none (FIBRA_PROGRESS=0 also)
  Pool* pool = nullptr;             ///< nullptr: fibra::default_pool()
  /// run() throws TrialsFailed at its end when trials ended in error (Ray's raise_on_failed_trial);
  /// false: it returns them, and ResultGrid::errors() lists them.
  bool raise_on_failed_trial = true;
};

/// @brief Where a trial ended: still waiting or running (after an interrupted run, or a run whose
///        time_budget_s ran out before it started; a trial waiting at a HyperBand rung is
///        pending), done (its stop condition, max_t or "done"), stopped early (by the scheduler or
///        time_budget_s), or failed.
enum class TrialStatus { pending, running, done, stopped, error };
const char* to_string(TrialStatus s) noexcept;

struct TrialResult {
  std::size_t id = 0;
  Config config;
  TrialStatus status = TrialStatus::pending;
  std::int64_t iterations = 0;
  Metrics last;  ///< its last iteration's metrics
  double last_metric = std::numeric_limits<double>::quiet_NaN();
  double best_metric = std::numeric_limits<double>::quiet_NaN();  ///< best over its iterations
  int failures = 0;
  /// The last failure: the trial, its trainable, configuration and iteration, and what happened
  /// ("trial 3 of 'Model' (config lr=0.1) failed at iteration 2: std::runtime_error: ..."); for a
  /// trial stopped by RunOptions::time_budget_s, that sentence ("... was stopped after 4
  /// iterations: the experiment's time budget ran out ...").
  std::string error;
};

struct ResultRow {
  std::size_t trial = 0;
  std::int64_t iteration = 0;
  double wall_time = 0;  ///< seconds since the experiment started (summed over resumes)
  Metrics metrics;
};

/// @brief What run() returns: every trial, every reported row, and the errors.
class ResultGrid {
 public:
  ResultGrid() = default;
  ResultGrid(std::vector<TrialResult> trials, std::vector<ResultRow> rows, std::string metric, Mode mode,
             std::string path);
  /// @brief The trial whose last value of `metric` is best ("" and nullopt: the run's metric and
  ///        mode). @throws Error if no trial reported it.
  const TrialResult& best(const std::string& metric = {}, std::optional<Mode> mode = {}) const;
  const std::vector<TrialResult>& trials() const noexcept { return trials_; }
  const std::vector<ResultRow>& rows() const noexcept { return rows_; }
  std::vector<const TrialResult*> errors() const;
  /// @brief The experiment's HDF5 file ("" without storage).
  const std::string& path() const noexcept { return path_; }

 private:
  std::vector<TrialResult> trials_;
  std::vector<ResultRow> rows_;
  std::string metric_;
  Mode mode_ = Mode::max;
  std::string path_;
};

/// @brief run() ended with trials in error (RunOptions::raise_on_failed_trial): what() names the
///        first of them; results() holds every trial and row, as run() would have returned them.
class TrialsFailed : public Error {
 public:
  TrialsFailed(const std::string& what, ResultGrid results) : Error(what), results_(std::move(results)) {}
  const ResultGrid& results() const noexcept { return results_; }

 private:
  ResultGrid results_;
};

/// @brief The trial a trainable runs for, as its constructor, step(), save() and restore() (or a
///        function trainable) see it: its id (TrialResult::id) and a folder of its own,
///        `<storage>/trials/<id>` (created when the trial starts, kept across its restarts; "" when
///        RunOptions::storage is ""). The folder must be where the workers can write: a shared
///        file system on a cluster.
struct TrialContext {
  std::size_t id = 0;
  std::string dir;
};
/// @throws ConfigError outside a trainable (no trial runs in this process).
TrialContext this_trial();

/// @brief Hands a function trainable's metrics to the experiment.
class Reporter {
 public:
  virtual ~Reporter() = default;
  /// @brief Reports one iteration; returns when the next one is wanted. Returns false when the
  ///        trial is over (stopped by the scheduler, or done): return from the function then (a
  ///        report after that throws, to unwind it).
  virtual bool report(const Metrics& metrics) = 0;
};

namespace detail {

/// A trainable behind one interface, in the trial's process.
class Trainable {
 public:
  virtual ~Trainable() = default;
  virtual Metrics step() = 0;
  virtual std::optional<std::string> save() { return std::nullopt; }  // nullopt: it cannot
  virtual bool restore(const std::string&) { return false; }
};
using TrainableFactory = std::unique_ptr<Trainable> (*)(const Config&);
bool register_trainable(const std::string& name, TrainableFactory make, bool can_save);
using TrainableFunction = void (*)(const Config&, Reporter&);
/// Registers a function trainable (it runs on a thread of its own in the trial's process).
bool register_function(const std::string& name, TrainableFunction fn);

template <class T>
class ClassTrainable final : public Trainable {
 public:
  explicit ClassTrainable(const Config& c) : t_(c) {}
  Metrics step() override { return t_.step(); }
  std::optional<std::string> save() override {
    if constexpr (requires(T & t) {
                    { t.save() } -> std::convertible_to<std::string>;
                  })
      return std::string(t_.save());
    else
      return std::nullopt;
  }
  bool restore(const std::string& bytes) override {
    if constexpr (requires(T & t, const std::string& b) { t.restore(b); }) {
      t_.restore(bytes);
      return true;
    } else {
      return false;
    }
  }

 private:
  T t_;
};

template <class T>
bool register_class() {
  static_assert(std::is_constructible_v<T, const Config&>,
                "fibra: FIBRA_TRAINABLE(T) needs a constructor T(const fibra::tune::Config&)");
  static_assert(
      requires(T & t) {
        { t.step() } -> std::convertible_to<Metrics>;
      },
      "fibra: FIBRA_TRAINABLE(T) needs a method `fibra::tune::Metrics step()`");
  constexpr bool saves = requires(T & t) { t.save(); };
  constexpr bool restores = requires(T & t, const std::string& b) { t.restore(b); };
  static_assert(saves == restores,
                "fibra: FIBRA_TRAINABLE(T) has save() without restore(const std::string&) or the other way round: "
                "a checkpoint needs both");
  if constexpr (saves)
    static_assert(
        requires(T & t) {
          { t.save() } -> std::convertible_to<std::string>;
        },
        "fibra: FIBRA_TRAINABLE(T)'s save() must return the checkpoint's bytes as a std::string");
  return register_trainable(
      ::fibra::detail::demangle(typeid(T).name()),
      [](const Config& c) -> std::unique_ptr<Trainable> { return std::make_unique<ClassTrainable<T>>(c); }, saves);
}

ResultGrid run_named(const std::string& trainable, const Space& space, const RunOptions& options);

}  // namespace detail

/// @brief Runs an experiment over class T (registered with FIBRA_TRAINABLE) and returns its
///        results. Resumes from RunOptions::storage when it holds this experiment.
/// @throws ConfigError for bad options, an unregistered trainable, or a storage written by another
///         experiment; the trials' own failures are recorded, not thrown.
template <class T>
ResultGrid run(const Space& space, const RunOptions& options) {
  return detail::run_named(::fibra::detail::demangle(typeid(T).name()), space, options);
}

/// @brief Runs an experiment over a function trainable (FIBRA_TRAINABLE_FUNCTION).
ResultGrid run(void (*fn)(const Config&, Reporter&), const Space& space, const RunOptions& options);

}  // namespace fibra::tune

#define FIBRA_TUNE_DETAIL_CAT2(a, b) a##b
#define FIBRA_TUNE_DETAIL_CAT(a, b) FIBRA_TUNE_DETAIL_CAT2(a, b)

/// @brief Registers class `cls` as a trainable: a constructor from `const fibra::tune::Config&`,
///        `fibra::tune::Metrics step()`, and optionally `std::string save()` and
///        `void restore(const std::string&)` (needed by PBT and to resume from checkpoints).
#define FIBRA_TRAINABLE(cls)                                                                     \
  [[maybe_unused]] static const bool FIBRA_TUNE_DETAIL_CAT(fibra_tune_trainable_, __COUNTER__) = \
      ::fibra::tune::detail::register_class<cls>()

/// @brief Registers `void fn(const fibra::tune::Config&, fibra::tune::Reporter&)` as a trainable.
#define FIBRA_TRAINABLE_FUNCTION(fn)                                                             \
  [[maybe_unused]] static const bool FIBRA_TUNE_DETAIL_CAT(fibra_tune_trainable_, __COUNTER__) = \
      ::fibra::tune::detail::register_function(#fn, &fn)
