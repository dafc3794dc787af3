// tune/src/run.cpp: fibra::tune::run, the driver's loop. A fixed set of trial hosts (actors, one
// per concurrent trial) each holds one trial at a time; every step is one actor call, whose
// delivery wakes this loop, which asks the experiment what that trial does next.
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>

#include "experiment.hpp"
#include "fibra/actor.hpp"
#include "fibra/detail/checkpoint.hpp"
#include "fibra/tasks.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"
#include "fibra/hdf5_io/tables.hpp"
#include "fibra/pool.hpp"
#include "trial_host.hpp"

namespace fibra::tune {

namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

/// Hosts whose call has its outcome, in the order they came; filled on fibra's task thread.
struct Completions {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::size_t> hosts;
  void push(std::size_t h) {
    {
      std::lock_guard lk(mu);
      hosts.push_back(h);
    }
    cv.notify_one();
  }
};

struct Host {
  Actor<TrialHost> actor;
  std::optional<std::size_t> trial;
  // Calls in flight, oldest first, each with the host's epoch when it was made: a (re)start begins
  // a new epoch, and outcomes of an older one (a step sent ahead for a trial that has since ended
  // or failed) are dropped. An actor's calls end in the order they were made.
  std::deque<std::pair<std::uint64_t, Future<WireMetrics>>> calls;
  std::uint64_t epoch = 0;
  Clock::time_point began;       // when the trial it holds took it
  Clock::time_point since;       // when the call the trial runs now began (its start, or its last outcome)
  std::size_t current() const {  // calls of this epoch in flight
    std::size_t n = 0;
    for (const auto& c : calls) n += c.first == epoch;
    return n;
  }
};

// What happened to a trial, as its user would say it: the trainable's exception (its type, message
// and where it ran), or how its process died, without the names of fibra::tune's own actor.
std::string cause_of(const std::exception& e) {
  const auto at = [](const RemoteSite& s) {
    return s.host.empty()
               ? std::string()
               : " (worker " + std::to_string(s.worker) + " on " + s.host + ", pid " + std::to_string(s.pid) + ")";
  };
  if (const auto* o = dynamic_cast<const RemoteOrigin*>(&e))
    return o->type_name() + ": " + o->remote_message() + at(o->site());
  if (const auto* c = dynamic_cast<const ExecutorCrashed*>(&e))
    return "its process died (" + c->remote_message() + ")" + at(c->site());
  if (const auto* r = dynamic_cast<const RemoteError*>(&e))
    return r->type_name() + ": " + r->remote_message() + at(r->site());
  if (const auto* d = dynamic_cast<const ActorDied*>(&e); d && !d->cause().empty())
    return "its process died: " + d->cause();
  return e.what();
}

// The actor's pool (its uid) and its id. Actor<T> keeps them to itself: they are read as a handle
// sent to a task carries them.
std::pair<std::uint64_t, std::uint64_t> pool_and_id(const Actor<TrialHost>& actor) {
  std::string bytes;
  fibra::detail::Writer w(bytes);
  fibra::detail::Codec<Actor<TrialHost>>::encode(w, actor);
  fibra::detail::Reader r(bytes);
  const auto pool_uid = r.pod<std::uint64_t>();
  return {pool_uid, r.pod<std::uint64_t>()};
}

// Ends an actor's process at once with SIGKILL, as Process::kill does: a step that never returns
// cannot be stopped any other way. The handle goes first, so that the death does not start the
// actor again; its calls then fail with ActorDied, and no one waits for them.
void kill_actor(Actor<TrialHost> actor) {
  const auto [pool_uid, id] = pool_and_id(actor);
  const auto core = fibra::detail::core_for_actor_handle(pool_uid);
  actor = {};
  core->signal_actor(id, SIGKILL);
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

// A budget in seconds as a point in time; nullopt for none (0, or infinite).
std::optional<Clock::time_point> after(Clock::time_point start, double budget_s) {
  if (!(budget_s > 0) || !std::isfinite(budget_s)) return std::nullopt;
  return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget_s));
}

class Runner {
 public:
  Runner(std::string trainable, const Space& space, const RunOptions& options)
      : trainable_(std::move(trainable)), options_(options), experiment_(trainable_, space, options) {}

  ResultGrid run() {
    open_storage();
    if (experiment_.finished()) return finished();
    Pool& pool = options_.pool ? *options_.pool : default_pool();
    std::size_t n = options_.max_concurrent ? options_.max_concurrent : std::size_t(std::max(1, pool.size()));
    n = std::min(n, experiment_.size());
    pool_ = &pool;
    actor_options_.max_restarts = 1 << 30;  // a trial's own retries are counted by the experiment
    actor_options_.resources = options_.resources_per_trial;
    actor_options_.pool = &pool;
    hosts_.resize(n);
    for (auto& h : hosts_) h.actor = Actor<TrialHost>::start(actor_options_);
    // The trials in the pool's event log, if it writes one (PoolOptions::events, FIBRA_EVENTS).
    if (!hosts_.empty())
      experiment_.set_events(fibra::detail::pool_event_sink(pool_and_id(hosts_.front().actor).first));
    deadline_ = after(t0_, options_.time_budget_s);
    spent_.resize(experiment_.size());
    // One progress display at a time: the pool's line of actor calls waits while tune's is drawn.
    struct OneDisplay {
      bool held;
      explicit OneDisplay(bool on) : held(on) {
        if (held) fibra::detail::maps_drawing_progress().fetch_add(1);
      }
      ~OneDisplay() {
        if (held) fibra::detail::maps_drawing_progress().fetch_sub(1);
      }
    } one_display(options_.progress_interval_s > 0 && fibra::detail::progress_wanted());
    try {
      for (std::size_t i = 0; i < n; ++i) begin_next(i);
      loop();
    } catch (...) {
      // The pool broke (or the file cannot be written): what was reported is kept if it can be.
      try {
        flush(false);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fibra::tune: could not write the experiment's file after an error: %s\n", e.what());
      }
      throw;
    }
    end_hosts();
    flush(true);
    progress_line(true);
    return finished();
  }

 private:
  // Each host lets go of its last trial, so a function trainable's last report returns false and
  // its code after it runs (an actor's process may end without running destructors). Bounded: a
  // function that ignores the false answer does not hold the experiment up past 30 s.
  void end_hosts() {
    std::vector<Future<bool>> ends;
    for (auto& h : hosts_)
      if (h.actor.valid()) ends.push_back(h.actor.call(&TrialHost::end));  // (not one ended by the budget)
    for (auto& f : ends) {
      try {
        f.get(std::chrono::seconds(30));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fibra::tune: a trial host did not let go of its last trial: %s\n", e.what());
      }
    }
  }

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  void open_storage() {
    if (options_.storage.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(options_.storage, ec);
    if (ec)
      throw ConfigError("fibra::tune: cannot create the storage directory '" + options_.storage + "': " + ec.message());
    path_ = (std::filesystem::path(options_.storage) / "experiment.h5").string();
    if (std::filesystem::exists(path_)) {
      experiment_.resume(hdf5_io::read_table_file(path_), path_);
      std::fprintf(stderr, "fibra::tune: resuming '%s': %s\n", path_.c_str(), experiment_.summary().c_str());
    }
    fibra::detail::checkpoint_opened();  // SIGTERM/SIGUSR1: the file is written, then status 75
    active_.emplace();
  }

  void begin_next(std::size_t h) {
    Host& host = hosts_[h];
    if (host.trial) spent_[*host.trial] += std::chrono::duration<double>(Clock::now() - host.began).count();
    host.trial.reset();
    // No trial starts once the experiment's budget is spent: it would be stopped at once, with
    // nothing run, where it can stay pending for a rerun.
    if (deadline_ && Clock::now() >= *deadline_) return;
    auto s = experiment_.start_next();
    if (!s) return;
    host.trial = s->trial;
    host.began = Clock::now();
    start(h, s->config, s->checkpoint);
  }

  void start(std::size_t h, const Config& config, const std::string& checkpoint) {
    Host& host = hosts_[h];
    ++host.epoch;
    const std::size_t trial = *host.trial;
    // Absolute, as the driver sees it: a worker's working directory may be another.
    const std::string dir =
        options_.storage.empty()
            ? std::string()
            : (std::filesystem::absolute(options_.storage) / "trials" / std::to_string(trial)).string();
    host.since = Clock::now();
    watch(h, host.actor.call(&TrialHost::begin, trainable_, encode_config(config), checkpoint,
                             static_cast<std::uint64_t>(trial), dir));
  }

  void step(std::size_t h) { watch(h, hosts_[h].actor.call(&TrialHost::step)); }

  void watch(std::size_t h, Future<WireMetrics> f) {
    Host& host = hosts_[h];
    host.calls.emplace_back(host.epoch, f);
    ++in_flight_;
    // Told by the thread that delivers the outcome (a push and a notify), not through then(): the
    // task thread's hop cost about 50 us a step on 2 busy cores.
    f.detail_job()->on_delivered([c = completions_, h] { c->push(h); });
  }

  // The grid, or TrialsFailed holding it when trials ended in error and the caller wants to know.
  ResultGrid finished() {
    ResultGrid grid = experiment_.grid(path_);
    if (options_.raise_on_failed_trial)
      if (std::string failed = experiment_.failed_summary(); !failed.empty())
        throw TrialsFailed(failed, std::move(grid));
    return grid;
  }

  // The outcomes that came, in the order their calls were made.
  void on_delivered(std::size_t h) {
    Host& host = hosts_[h];
    while (!host.calls.empty() && host.calls.front().second.ready()) {
      auto [epoch, f] = std::move(host.calls.front());
      host.calls.pop_front();
      --in_flight_;
      if (epoch != host.epoch || !host.trial) continue;
      host.since = Clock::now();
      on_done(h, f);
    }
  }

  void on_done(std::size_t h, const Future<WireMetrics>& f) {
    Host& host = hosts_[h];
    const std::size_t trial = *host.trial;
    // The trial's failures (it threw, its process died) are retried, but a ConfigError, which
    // would fail the same way again; an error of the experiment's own (a ConfigError from
    // on_result: no time_attr in the metrics) ends the run.
    auto failed = [&](const std::exception& e) {
      experiment_.on_failure(trial, cause_of(e), dynamic_cast<const ConfigError*>(&e) == nullptr);
      begin_next(h);
    };
    WireMetrics wire;
    try {
      wire = f.get();
    } catch (const std::exception& e) {
      return failed(e);
    }
    const Experiment::Next next = experiment_.on_result(trial, Metrics(wire.begin(), wire.end()), elapsed());
    // A checkpoint is taken at once, before any other result is handled: PBT hands it to the next
    // bottom trial, which may be the very next result.
    if ((next.save_first && !next.end) || next.pause) {
      std::optional<Saved> saved;
      try {
        saved = save(h);
      } catch (const std::exception& e) {
        return failed(e);
      }
      if (!saved) return;  // past a budget: cut, or stopped with the experiment
      if (next.pause) {    // it waits at its rung, and its host takes the next trial
        experiment_.on_paused(trial, std::move(saved->second));
        return begin_next(h);
      }
      if (saved->first) experiment_.on_checkpoint(trial, std::move(saved->second));
    }
    if (next.end) {
      begin_next(h);
    } else if (next.restart) {
      start(h, next.config, next.checkpoint);
    } else {
      // The next step, and one more sent ahead when the next one's outcome cannot change what the
      // trial does (no rung, no perturbation, no checkpoint, no stop there): it runs while this
      // loop hears of the one before, and saves a round trip a step.
      const std::size_t want = experiment_.can_run_ahead(trial) ? 2 : 1;
      while (host.current() < want) step(h);
    }
  }

  void loop() {
    auto next_flush = Clock::now() + seconds(options_.flush_interval_s);
    auto next_progress = Clock::now() + seconds(options_.progress_interval_s);
    std::deque<std::size_t> ready;
    while (!experiment_.finished()) {
      {
        std::unique_lock lk(completions_->mu);
        // At most 200 ms at a time: a stop signal is seen soon even while every step is long.
        auto until = std::min({next_flush, next_progress, Clock::now() + std::chrono::milliseconds(200)});
        if (const auto d = next_deadline()) until = std::min(until, *d);
        completions_->cv.wait_until(lk, until, [&] { return !completions_->hosts.empty(); });
        ready.swap(completions_->hosts);
      }
      for (std::size_t h : ready) on_delivered(h);
      ready.clear();
      // A trial retried after the others ended waits for a host that went idle.
      for (std::size_t h = 0; h < hosts_.size(); ++h)
        if (!hosts_[h].trial) begin_next(h);
      if (deadline_ && Clock::now() >= *deadline_) return stop_for_budget();
      cut_overdue_trials();
      if (in_flight_ == 0 && !experiment_.finished())
        throw Error("fibra::tune: internal error: trials wait but no host runs one");  // never: begin_next above
      if (fibra::detail::stop_signal()) {
        flush(false);
        fibra::detail::exit_for_stop(path_.empty() ? std::string("this experiment has no file (RunOptions::storage is "
                                                                 "empty): a rerun starts it again")
                                                   : "the experiment's file '" + path_ + "' holds every result so far",
                                     true);
      }
      const auto now = Clock::now();
      if (now >= next_flush) {
        flush(false);
        // A write costs O(rows) (10,000 trials, 26,000 rows: about 50 ms): the next waits at least
        // 20 times as long as this one took, so writing never takes over 5% of the loop's time.
        const auto took = Clock::now() - now;
        next_flush = Clock::now() + std::max(seconds(options_.flush_interval_s), took * 20);
      }
      if (now >= next_progress) {
        progress_line(false);
        next_progress = now + seconds(options_.progress_interval_s);
      }
    }
  }

  // The trial's checkpoint, within what is left of the budgets: nullopt when one ran out first (a
  // trial past its own is cut here; the experiment's is seen by the loop, which stops the run).
  std::optional<Saved> save(std::size_t h) {
    auto f = hosts_[h].actor.call(&TrialHost::save);
    const auto own = trial_deadline(hosts_[h]);
    const auto until = own && (!deadline_ || *own < *deadline_) ? own : deadline_;
    if (until && !f.wait_for(*until - Clock::now())) {
      if (own && Clock::now() >= *own) cut(h);
      return std::nullopt;
    }
    return f.get();
  }

  // When the trial on `host` runs out of its budget: what is left of it after its earlier times on
  // a host (a wait at a rung does not count), from when it took this one.
  std::optional<Clock::time_point> trial_deadline(const Host& host) const {
    if (!host.trial) return std::nullopt;
    const auto d = after(host.began, options_.trial_time_budget_s);
    if (!d) return d;
    return *d - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spent_[*host.trial]));
  }

  // The nearest budget to run out: the experiment's, or that of a trial that runs.
  std::optional<Clock::time_point> next_deadline() const {
    std::optional<Clock::time_point> next = deadline_;
    for (const auto& host : hosts_)
      if (const auto d = trial_deadline(host); d && (!next || *d < *next)) next = d;
    return next;
  }

  void cut_overdue_trials() {
    for (std::size_t h = 0; h < hosts_.size(); ++h)
      if (const auto d = trial_deadline(hosts_[h]); d && Clock::now() >= *d) cut(h);
  }

  // The trial ran past RunOptions::trial_time_budget_s: its process is ended (the step it runs may
  // never return), the host gets a new one, and the trial is an error that a retry would repeat.
  void cut(std::size_t h) {
    const double ran = std::chrono::duration<double>(Clock::now() - hosts_[h].since).count();
    experiment_.on_failure(*hosts_[h].trial,
                           "its time budget ran out (RunOptions::trial_time_budget_s = " +
                               seconds_text(options_.trial_time_budget_s) + "; this iteration had run " +
                               seconds_text(ran) + " without returning): its process was ended, and it is not retried",
                           false);
    retire(h);
    hosts_[h].actor = Actor<TrialHost>::start(actor_options_);
    begin_next(h);
  }

  // RunOptions::time_budget_s ran out: each trial still running is stopped (its process ended, as
  // its step may not return soon); the others stay as they are (pending: not started, or waiting
  // at a rung), and run() returns.
  void stop_for_budget() {
    const std::string why =
        "the experiment's time budget ran out (RunOptions::time_budget_s = " + seconds_text(options_.time_budget_s) +
        ")";
    std::size_t stopped = 0;
    for (std::size_t h = 0; h < hosts_.size(); ++h) {
      if (!hosts_[h].trial) continue;
      experiment_.stop_for_budget(*hosts_[h].trial, why);
      retire(h);
      ++stopped;
    }
    std::fprintf(stderr, "fibra::tune: %s: %zu running trials stopped; %s\n", why.c_str(), stopped,
                 experiment_.summary().c_str());
  }

  // Ends the host's process and forgets what it ran: the outcomes of its calls are not waited for.
  void retire(std::size_t h) {
    Host& host = hosts_[h];
    if (host.trial) spent_[*host.trial] += std::chrono::duration<double>(Clock::now() - host.began).count();
    kill_actor(std::exchange(host.actor, {}));
    in_flight_ -= host.calls.size();
    host.calls.clear();
    ++host.epoch;
    host.trial.reset();
  }

  static Clock::duration seconds(double s) {
    if (!(s > 0)) return std::chrono::hours(24 * 365);
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  void flush(bool complete) {
    if (path_.empty()) return;
    hdf5_io::write_table_file(path_, experiment_.to_file(complete && experiment_.finished(), elapsed()));
    experiment_.write_csv((std::filesystem::path(options_.storage) / "results.csv").string());
    experiment_.write_trial_csvs(options_.storage);
  }

  // The trials' table (Experiment::status_table) under a line of the time and results, written
  // whole at once so that no other line lands inside it.
  void progress_line(bool last) {
    if (!(options_.progress_interval_s > 0) || !fibra::detail::progress_wanted()) return;
    char head[96];
    std::snprintf(head, sizeof head, "fibra::tune [%.1f s%s]: %zu results\n", elapsed(), last ? ", finished" : "",
                  experiment_.rows());
    const std::string text = head + experiment_.status_table();
    std::fwrite(text.data(), 1, text.size(), stderr);
  }

  std::string trainable_;
  RunOptions options_;
  Experiment experiment_;
  std::string path_;
  std::vector<Host> hosts_;
  Pool* pool_ = nullptr;
  ActorOptions actor_options_;
  std::optional<Clock::time_point> deadline_;  // RunOptions::time_budget_s
  std::vector<double> spent_;  // each trial's seconds on a host before the one it holds now, in this run
  std::shared_ptr<Completions> completions_ = std::make_shared<Completions>();
  std::size_t in_flight_ = 0;
  std::optional<fibra::detail::ActiveCheckpoint> active_;
  Clock::time_point t0_ = Clock::now();
};

}  // namespace

ResultGrid run_named(const std::string& trainable, const Space& space, const RunOptions& options) {
  // Its trials are actors of a pool the driver holds, and it waits on them with Future::then: in a
  // task it could only wait for ever (issue 46, case 5).
  if (fibra::in_task())
    throw ConfigError(
        "fibra::tune::run was called inside a task (on a worker): an experiment runs from the driver, "
        "whose pool holds its trials; call it from main, and let the trainable submit tasks of its own "
        "if a trial needs more workers");
  if (!is_registered(trainable))
    throw ConfigError("fibra::tune::run: '" + trainable + "' is not a registered trainable: add FIBRA_TRAINABLE(" +
                      trainable + ") at namespace scope");
  if (std::holds_alternative<Pbt>(options.scheduler) && !can_save(trainable))
    throw ConfigError("fibra::tune::run: PBT hands one trial's checkpoint to another, and '" + trainable +
                      "' cannot make one: give the class `std::string save()` and `void restore(const std::string&)` "
                      "(a function trainable cannot be used with PBT)");
  if (std::holds_alternative<HyperBand>(options.scheduler) && !can_save(trainable))
    throw ConfigError(
        "fibra::tune::run: HyperBand pauses trials at its rungs and resumes the best from a checkpoint, "
        "and '" +
        trainable +
        "' cannot make one: give the class `std::string save()` and `void restore(const std::string&)`, "
        "or use Asha, which stops trials without pausing them (a function trainable cannot be used "
        "with HyperBand)");
  Runner r(trainable, space, options);
  return r.run();
}

}  // namespace detail

ResultGrid run(void (*fn)(const Config&, Reporter&), const Space& space, const RunOptions& options) {
  const std::string name = detail::function_name(fn);
  if (name.empty())
    throw ConfigError(
        "fibra::tune::run: this function is not a registered trainable: add FIBRA_TRAINABLE_FUNCTION(<its name>) at "
        "namespace scope");
  return detail::run_named(name, space, options);
}

}  // namespace fibra::tune
