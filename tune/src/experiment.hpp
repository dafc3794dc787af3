// tune/src/experiment.hpp: an experiment's state in the driver: its trials, the rows they
// reported, the scheduler's rule applied to each row, and the file it lives in. No MPI and no
// pool here: the runner (run.cpp) feeds it, and unit tests and the benchmark drive it directly.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fibra/detail/events.hpp"
#include "fibra/hdf5_io/tables.hpp"
#include "fibra/tune.hpp"
#include "internal.hpp"

namespace fibra::tune::detail {

class Experiment {
 public:
  Experiment(std::string trainable, const Space& space, const RunOptions& options);

  /// What the next call to the trial's process is.
  struct Next {
    bool end = false;         ///< the trial is over (done, stopped or an error)
    bool save_first = false;  ///< take a checkpoint now, before the next iteration
    bool restart = false;     ///< start it again: `config` and `checkpoint` (PBT's exploit)
    bool pause = false;       ///< save a checkpoint (on_paused), then give up the host: it waits at a rung
    Config config;
    std::string checkpoint;
  };
  /// Where a trial (re)starts: its configuration and the checkpoint it continues from.
  struct Start {
    std::size_t trial = 0;
    Config config;
    std::string checkpoint;
  };

  /// From now on, the trials' starts, results, failures, pauses and ends go to `sink` as events
  /// (`tune` first, naming the experiment; then `trial_start`, `trial_result`, `trial_failed`,
  /// `trial_paused`, `trial_end`: docs/observability.md). An empty sink: none.
  void set_events(fibra::detail::EventSink sink);

  /// The next trial to start, marked running; nullopt when none waits.
  std::optional<Start> start_next();
  /// One iteration's metrics from `trial`, at `wall` seconds; applies the stop conditions and the
  /// scheduler's rule.
  Next on_result(std::size_t trial, const Metrics& metrics, double wall);
  /// Whether the outcome of the trial's next iteration cannot end it, restart it or need a
  /// checkpoint (so the one after may be run before it is known). A trial saying "done" there
  /// still ends: the step run ahead is then dropped.
  bool can_run_ahead(std::size_t trial) const;
  /// A checkpoint of the trial after its latest iteration (asked by Next::save_first).
  void on_checkpoint(std::size_t trial, std::string bytes);
  /// The checkpoint of a trial that pauses at a rung (Next::pause): it waits, pending but not
  /// started, until the rung is decided; then it is started again from it, or stopped.
  void on_paused(std::size_t trial, std::string bytes);
  /// The experiment's time budget ran out while the trial ran: it is stopped, and its error field
  /// says so (`why`: which budget).
  void stop_for_budget(std::size_t trial, const std::string& why);
  /// The trial threw or its process died (`cause` says how, without fibra's internals): retried
  /// from its checkpoint, or an error past the budget, or at once when it is not `retryable`.
  void on_failure(std::size_t trial, const std::string& cause, bool retryable = true);
  /// The sentence that names the first failed trials, for TrialsFailed ("" when none failed).
  std::string failed_summary() const;

  /// Resumes from a file this experiment wrote. @throws ConfigError if another experiment wrote it.
  void resume(const hdf5_io::TableFile& file, const std::string& path);
  /// The state as a file (`complete`: every trial ended; `elapsed`: seconds of this run so far).
  hdf5_io::TableFile to_file(bool complete, double elapsed) const;
  /// results.csv: one line per row, with the trial's configuration.
  void write_csv(const std::string& path) const;
  /// <storage>/trials/<id>/progress.csv for each trial whose rows changed since the last call:
  /// its rows (iteration, wall_time, its metrics) as Ray Tune's progress.csv has them.
  void write_trial_csvs(const std::string& storage);
  /// The trials as a table, as Ray Tune's status table shows them: a line of counts and the best,
  /// then a row per trial (id, status, configuration, iterations, time of its last result, the
  /// metric's last and best), running trials first, then the best; at most `most` rows, and how
  /// many more.
  std::string status_table(std::size_t most = 20) const;

  ResultGrid grid(const std::string& path) const;
  bool finished() const { return ended_ == trials_.size(); }
  std::size_t size() const { return trials_.size(); }
  std::size_t rows() const { return rows_.size(); }
  double elapsed_before() const { return elapsed_before_; }
  /// "12 running, 30 pending, 8 done, 44 stopped, 2 errors | best score 195 (trial 17: lr=0.01)".
  std::string summary() const;

 private:
  struct Trial {
    TrialResult r;
    std::string checkpoint;  // the latest: restarts and PBT's donors use it
    std::int64_t checkpoint_iteration = 0;
    bool waiting = false;  // paused at a rung (HyperBand): pending, but not in pending_
  };
  Next record(std::size_t trial, const Metrics& metrics, double wall);
  void apply_rulings();
  /// "trial 3 of 'Model' (config lr=0.1)".
  std::string who(const Trial& t) const;
  double score_of(const Metrics& m) const;
  /// The scheduler's time of a row: its iteration, or the metric named by the scheduler's time_attr.
  double time_of(std::int64_t iteration, const Metrics& m) const;
  /// The metric the scheduler's time is, or nullptr when it is the iteration count.
  const std::string* reported_time() const;
  bool better(double a, double b) const { return options_.mode == Mode::max ? a > b : a < b; }
  /// `error_says_why`: its error field says why it ends now (a failure, a budget), not an earlier failure.
  void end_trial(Trial& t, TrialStatus s, bool error_says_why = false);
  void note_start(const Trial& t, std::int64_t iteration) const;  // a trial_start event
  /// An event about `t` (`,"trial":<id>` then `fields`), if there is a sink.
  void note(std::string_view ev, const Trial& t, const std::string& fields = {}) const;
  void drop_rows_after(std::size_t trial, std::int64_t iteration);
  std::string fingerprint() const;
  /// What makes this experiment the one a file holds, as the file's attributes say it, in order:
  /// trainable, metric, mode, scheduler, seed, num_samples, space.
  std::vector<std::pair<std::string, std::string>> identity() const;
  /// The search space as the file's `space` attribute says it ("lr: loguniform [0.001, 1); ...").
  std::string space_text() const;

  std::string trainable_;
  Space space_;
  RunOptions options_;
  std::vector<Trial> trials_;
  std::deque<std::size_t> pending_;
  std::vector<ResultRow> rows_;
  std::unique_ptr<SchedulerLogic> scheduler_;
  std::size_t ended_ = 0;
  bool metric_checked_ = false;  // a result had RunOptions::metric (or rows were resumed)
  double elapsed_before_ = 0;
  fibra::detail::EventSink events_;            // the pool's event log, or empty
  std::uint64_t experiment_id_ = 0;            // its number in the log
  std::vector<std::size_t> csv_rows_written_;  // by trial: its rows in its progress.csv (write_trial_csvs)
};

}  // namespace fibra::tune::detail
