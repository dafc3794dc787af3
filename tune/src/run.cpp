// tune/src/run.cpp: fibra::tune::run, the driver's loop. A fixed set of trial hosts (actors, one
// per concurrent trial) each holds one trial at a time; every step is one actor call, whose
// delivery wakes this loop, which asks the experiment what that trial does next.
#include <chrono>
#include <condition_variable>
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
    ActorOptions ao;
    ao.max_restarts = 1 << 30;  // a trial's own retries are counted by the experiment
    ao.resources = options_.resources_per_trial;
    hosts_.resize(n);
    for (auto& h : hosts_) h.actor = Actor<TrialHost>::start_on(pool, ao);
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
    for (auto& h : hosts_) ends.push_back(h.actor.call(&TrialHost::end));
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
    auto s = experiment_.start_next();
    host.trial.reset();
    if (!s) return;
    host.trial = s->trial;
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
      if (epoch == host.epoch && host.trial) on_done(h, f);
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
    if (next.save_first && !next.end) {
      try {
        auto [can, bytes] = host.actor.call(&TrialHost::save).get();
        if (can) experiment_.on_checkpoint(trial, std::move(bytes));
      } catch (const std::exception& e) {
        return failed(e);
      }
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
        const auto until = std::min({next_flush, next_progress, Clock::now() + std::chrono::milliseconds(200)});
        completions_->cv.wait_until(lk, until, [&] { return !completions_->hosts.empty(); });
        ready.swap(completions_->hosts);
      }
      for (std::size_t h : ready) on_delivered(h);
      ready.clear();
      // A trial retried after the others ended waits for a host that went idle.
      for (std::size_t h = 0; h < hosts_.size(); ++h)
        if (!hosts_[h].trial) begin_next(h);
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

  static Clock::duration seconds(double s) {
    if (!(s > 0)) return std::chrono::hours(24 * 365);
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  void flush(bool complete) {
    if (path_.empty()) return;
    hdf5_io::write_table_file(path_, experiment_.to_file(complete && experiment_.finished(), elapsed()));
    experiment_.write_csv((std::filesystem::path(options_.storage) / "results.csv").string());
  }

  void progress_line(bool last) {
    if (!(options_.progress_interval_s > 0) || !fibra::detail::progress_wanted()) return;
    std::fprintf(stderr, "fibra::tune [%.1f s%s]: %s | %zu results\n", elapsed(), last ? ", finished" : "",
                 experiment_.summary().c_str(), experiment_.rows());
  }

  std::string trainable_;
  RunOptions options_;
  Experiment experiment_;
  std::string path_;
  std::vector<Host> hosts_;
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
