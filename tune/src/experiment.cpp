// tune/src/experiment.cpp: an experiment's trials and rows, the scheduler's rule, and its file.
#include "experiment.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "fibra/error.hpp"

namespace fibra::tune::detail {

namespace {

constexpr const char* file_format = "fibra-tune";
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// The shortest text that reads back as the same double, whatever the C locale says a decimal
// point is.
std::string exact(double v) {
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string describe(const Domain& d) {
  static const char* kinds[] = {"constant", "grid", "choice", "uniform", "loguniform", "randint"};
  std::string s = kinds[int(d.kind)];
  for (const auto& v : d.values) s += " " + (v.is_double() ? exact(v.number()) : v.str());
  if (d.kind == Domain::Kind::uniform || d.kind == Domain::Kind::loguniform || d.kind == Domain::Kind::randint)
    s += " [" + exact(d.low) + ", " + exact(d.high) + ")";
  return s;
}

std::string describe(const Scheduler& s) {
  if (const auto* a = std::get_if<Asha>(&s))
    return "asha " + a->time_attr + " " + exact(a->max_t) + " " + exact(a->grace_period) + " " +
           exact(a->reduction_factor) + " " + std::to_string(a->brackets);
  if (const auto* p = std::get_if<Pbt>(&s))
    return "pbt " + p->time_attr + " " + exact(p->perturbation_interval) + " " + exact(p->quantile_fraction) + " " +
           exact(p->resample_probability);
  if (const auto* h = std::get_if<HyperBand>(&s))
    return "hyperband " + h->time_attr + " " + exact(h->max_t) + " " + exact(h->reduction_factor);
  return "fifo";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// A configuration as one line of JSON that keeps its types: {"batch": 32, "lr": 0.1, "opt": "adam"}
// (a double always shows a '.', an exponent, or is nan/inf), for resume.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\')
      out += '\\', out += ch;
    else if (ch == '\n')
      out += "\\n";
    else
      out += ch;
  }
  return out + "\"";
}

std::string config_text(const Config& c) {
  std::string out = "{";
  for (const auto& [k, v] : c.values()) {
    if (out.size() > 1) out += ", ";
    out += json_string(k) + ": ";
    if (v.is_text()) {
      out += json_string(v.text());
    } else if (v.is_integer()) {
      out += std::to_string(v.integer());
    } else {
      std::string d = exact(v.number());
      if (d.find_first_of(".eni") == std::string::npos) d += ".0";  // "3" would read back as an integer
      out += d;
    }
  }
  return out + "}";
}

Config parse_config_text(const std::string& text, const std::string& path) {
  auto bad = [&] {
    return ConfigError("fibra::tune: cannot resume from '" + path + "': a trial's configuration is damaged: " + text);
  };
  Config c;
  std::size_t at = 1;
  auto skip = [&] {
    while (at < text.size() && (text[at] == ' ' || text[at] == ',')) ++at;
  };
  auto string_at = [&] {
    if (at >= text.size() || text[at] != '"') throw bad();
    std::string out;
    for (++at; at < text.size() && text[at] != '"'; ++at) {
      if (text[at] == '\\' && at + 1 < text.size()) {
        ++at;
        out += text[at] == 'n' ? '\n' : text[at];
      } else {
        out += text[at];
      }
    }
    if (at >= text.size()) throw bad();
    ++at;
    return out;
  };
  if (text.empty() || text[0] != '{') throw bad();
  for (skip(); at < text.size() && text[at] != '}'; skip()) {
    const std::string key = string_at();
    if (text.compare(at, 2, ": ") != 0) throw bad();
    at += 2;
    if (at < text.size() && text[at] == '"') {
      c.set(key, string_at());
      continue;
    }
    const std::size_t end = text.find_first_of(",}", at);
    if (end == std::string::npos) throw bad();
    const std::string num = text.substr(at, end - at);
    at = end;
    char* stop = nullptr;
    if (num.find_first_of(".eniE") == std::string::npos) {
      const long long v = std::strtoll(num.c_str(), &stop, 10);
      if (stop == num.c_str()) throw bad();
      c.set(key, std::int64_t(v));
    } else {
      double v = 0;
      const auto r = std::from_chars(num.data(), num.data() + num.size(), v);
      if (r.ec != std::errc()) {
        if (num == "nan" || num == "-nan")
          v = std::numeric_limits<double>::quiet_NaN();
        else if (num == "inf")
          v = std::numeric_limits<double>::infinity();
        else if (num == "-inf")
          v = -std::numeric_limits<double>::infinity();
        else
          throw bad();
      }
      c.set(key, v);
    }
  }
  return c;
}

// A metric's column in the results table: its name, unless that is one of the table's own
// columns (a metric "iteration"): then "metric.iteration" (and so for a metric already named so).
bool reserved(const std::string& k) {
  return k == "trial" || k == "iteration" || k == "wall_time" || k.rfind("metric.", 0) == 0;
}
std::string metric_column(const std::string& k) { return reserved(k) ? "metric." + k : k; }
std::string metric_of_column(const std::string& c) { return c.rfind("metric.", 0) == 0 ? c.substr(7) : c; }

template <class T>
const std::vector<T>* column_of(const hdf5_io::Table& t, const std::string& name) {
  const auto* c = t.find(name);
  return c ? std::get_if<std::vector<T>>(&c->values) : nullptr;
}

void check_budget(const char* field, double seconds, const char* whose) {
  if (seconds >= 0) return;  // NaN fails this too
  throw ConfigError(std::string("fibra::tune: RunOptions::") + field + " is " + exact(seconds) + "; it is " + whose +
                    " budget of wall-clock seconds: give a number >= 0 (0: no budget)");
}

}  // namespace

Experiment::Experiment(std::string trainable, const Space& space, const RunOptions& options)
    : trainable_(std::move(trainable)), space_(space), options_(options) {
  if (options_.num_samples == 0) throw ConfigError("fibra::tune: RunOptions::num_samples must be at least 1");
  if (options_.metric.empty() && !std::holds_alternative<Fifo>(options_.scheduler))
    throw ConfigError(
        "fibra::tune: the scheduler compares trials by RunOptions::metric; set it (e.g. .metric = \"score\")");
  if (options_.max_failures < 0) throw ConfigError("fibra::tune: RunOptions::max_failures cannot be negative");
  check_budget("time_budget_s", options_.time_budget_s, "the experiment's");
  check_budget("trial_time_budget_s", options_.trial_time_budget_s, "each trial's");
  const std::size_t n = options_.num_samples * space_.grid_size();
  scheduler_ = make_scheduler(options_.scheduler, options_.seed, n);
  trials_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    trials_[i].r.id = i;
    trials_[i].r.config = space_.sample(options_.seed, i);
    pending_.push_back(i);
  }
}

std::string Experiment::fingerprint() const {
  std::string d = trainable_ + "|" + std::to_string(options_.num_samples) + "|" + std::to_string(options_.seed) + "|" +
                  options_.metric + "|" + (options_.mode == Mode::max ? "max" : "min") + "|" +
                  describe(options_.scheduler);
  for (const auto& [k, dom] : space_.entries()) d += "|" + k + ":" + describe(dom);
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(d)));
  return buf;
}

std::string Experiment::space_text() const {
  std::string space;
  for (const auto& [k, dom] : space_.entries()) space += (space.empty() ? "" : "; ") + k + ": " + describe(dom);
  return space;
}

std::vector<std::pair<std::string, std::string>> Experiment::identity() const {
  return {{"trainable", trainable_},
          {"metric", options_.metric},
          {"mode", options_.mode == Mode::max ? "max" : "min"},
          {"scheduler", describe(options_.scheduler)},
          {"seed", std::to_string(options_.seed)},
          {"num_samples", std::to_string(options_.num_samples)},
          {"space", space_text()}};
}

const std::string* Experiment::reported_time() const {
  const std::string* attr =
      std::holds_alternative<Asha>(options_.scheduler)        ? &std::get<Asha>(options_.scheduler).time_attr
      : std::holds_alternative<Pbt>(options_.scheduler)       ? &std::get<Pbt>(options_.scheduler).time_attr
      : std::holds_alternative<HyperBand>(options_.scheduler) ? &std::get<HyperBand>(options_.scheduler).time_attr
                                                              : nullptr;
  return attr && !attr->empty() && *attr != "training_iteration" ? attr : nullptr;
}

double Experiment::time_of(std::int64_t iteration, const Metrics& m) const {
  const std::string* attr = reported_time();
  if (!attr) return double(iteration);
  auto it = m.find(*attr);
  if (it != m.end()) return it->second;
  std::string names;
  for (const auto& [k, v] : m) names += (names.empty() ? "" : ", ") + k;
  throw ConfigError("fibra::tune: the scheduler's time_attr is '" + *attr +
                    "', and a trial reported no such metric (it " +
                    "reported: " + (names.empty() ? std::string("nothing") : names) +
                    "); report it at every step, or use \"training_iteration\"");
}

double Experiment::score_of(const Metrics& m) const {
  auto it = m.find(options_.metric);
  if (it == m.end()) return nan;
  return options_.mode == Mode::max ? it->second : -it->second;
}

void Experiment::set_events(fibra::detail::EventSink sink) {
  events_ = std::move(sink);
  if (!events_) return;
  // A number for this experiment among the process's: two on one pool at once stay apart.
  static std::atomic<std::uint64_t> experiments{0};
  experiment_id_ = ++experiments;
  std::string fields =
      ",\"experiment\":" + std::to_string(experiment_id_) + ",\"trials\":" + std::to_string(trials_.size());
  for (const auto& [name, value] : identity()) fields += ",\"" + name + "\":" + fibra::detail::json_quoted(value);
  events_("tune", fields);
}

void Experiment::note(std::string_view ev, const Trial& t, const std::string& fields) const {
  if (events_)
    events_(ev, ",\"experiment\":" + std::to_string(experiment_id_) + ",\"trial\":" + std::to_string(t.r.id) + fields);
}

// (`iteration`: where it goes on from; rows past it, if it ran further before, were dropped)
void Experiment::note_start(const Trial& t, std::int64_t iteration) const {
  note("trial_start", t,
       ",\"config\":" + fibra::detail::json_quoted(t.r.config.str()) + ",\"iteration\":" + std::to_string(iteration));
}

namespace {
// A metric as JSON: a number, or null for NaN and infinities (JSON has neither).
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}
}  // namespace

std::optional<Experiment::Start> Experiment::start_next() {
  if (pending_.empty()) return std::nullopt;
  Trial& t = trials_[pending_.front()];
  pending_.pop_front();
  t.r.status = TrialStatus::running;
  note_start(t, t.checkpoint.empty() ? 0 : t.checkpoint_iteration);
  return Start{t.r.id, t.r.config, t.checkpoint};
}

void Experiment::end_trial(Trial& t, TrialStatus s, bool error_says_why) {
  // (an error field only where it says why this end: a failure, or a budget; not an earlier failure)
  note("trial_end", t,
       std::string(",\"status\":\"") + to_string(s) + "\",\"iterations\":" + std::to_string(t.r.iterations) +
           (error_says_why && !t.r.error.empty() ? ",\"error\":" + fibra::detail::json_quoted(t.r.error)
                                                 : std::string()));
  t.r.status = s;
  ++ended_;
  scheduler_->on_end(t.r.id);
  t.checkpoint.clear();  // an ended trial's checkpoint is no longer needed: disk holds live trials' only
  t.checkpoint.shrink_to_fit();
}

Experiment::Next Experiment::on_result(std::size_t trial, const Metrics& metrics, double wall) {
  Next next = record(trial, metrics, wall);
  apply_rulings();
  return next;
}

// Rungs decided by a result or an end: the trials waiting there go on (before the trials not yet
// started, best first) or stop. A trial running again after a failure is left alone: when it comes
// back to the rung, the scheduler tells it its ruling.
void Experiment::apply_rulings() {
  for (auto rulings = scheduler_->take_rulings(); !rulings.empty(); rulings = scheduler_->take_rulings()) {
    std::vector<std::size_t> resumed;
    for (const auto& [trial, kind] : rulings) {
      Trial& t = trials_.at(trial);
      if (!t.waiting) continue;
      t.waiting = false;
      if (kind == Decision::Kind::stop)
        end_trial(t, TrialStatus::stopped);
      else
        resumed.push_back(trial);
    }
    pending_.insert(pending_.begin(), resumed.begin(), resumed.end());
  }
}

void Experiment::on_paused(std::size_t trial, std::string bytes) {
  on_checkpoint(trial, std::move(bytes));
  Trial& t = trials_.at(trial);
  t.r.status = TrialStatus::pending;
  t.waiting = true;
  note("trial_paused", t, ",\"iteration\":" + std::to_string(t.r.iterations));
  apply_rulings();
}

std::string Experiment::who(const Trial& t) const {
  const std::string config = t.r.config.str();
  return "trial " + std::to_string(t.r.id) + " of '" + trainable_ + "'" +
         (config.empty() ? "" : " (config " + config + ")");
}

void Experiment::stop_for_budget(std::size_t trial, const std::string& why) {
  Trial& t = trials_.at(trial);
  t.r.error = who(t) + " was stopped after " + std::to_string(t.r.iterations) + " iteration" +
              (t.r.iterations == 1 ? "" : "s") + ": " + why;
  end_trial(t, TrialStatus::stopped, true);
  apply_rulings();
}

Experiment::Next Experiment::record(std::size_t trial, const Metrics& metrics, double wall) {
  Trial& t = trials_.at(trial);
  Next next;
  const auto done_it = metrics.find("done");
  const bool said_done = done_it != metrics.end() && done_it->second != 0;
  if (said_done && metrics.size() == 1) {  // a function trainable returned: no iteration to record
    end_trial(t, TrialStatus::done);
    next.end = true;
    return next;
  }
  // A metric no trial reports would leave every scheduler deciding nothing: the experiment's
  // first result must have it (as Ray checks), and so must hold what names it.
  if (!metric_checked_ && !options_.metric.empty() && !metrics.count(options_.metric)) {
    std::string names;
    for (const auto& [k, v] : metrics) names += (names.empty() ? "" : ", ") + k;
    throw ConfigError("fibra::tune: RunOptions::metric is '" + options_.metric + "', and the first result (trial " +
                      std::to_string(trial) + ", iteration " + std::to_string(t.r.iterations + 1) +
                      ") has no such metric (it reported: " + (names.empty() ? std::string("nothing") : names) +
                      "); report it at every step, or set metric to one that is reported");
  }
  metric_checked_ = true;
  const std::int64_t it = ++t.r.iterations;
  rows_.push_back(ResultRow{trial, it, wall + elapsed_before_, metrics});
  if (events_) {
    std::string fields =
        ",\"iteration\":" + std::to_string(it) + ",\"wall\":" + json_number(rows_.back().wall_time) + ",\"metrics\":{";
    bool first = true;
    for (const auto& [k, v] : metrics) {
      fields += (first ? "" : ",") + fibra::detail::json_quoted(k) + ":" + json_number(v);
      first = false;
    }
    note("trial_result", t, fields + "}");
  }
  t.r.last = metrics;
  const double score = score_of(metrics);
  if (!std::isnan(score)) {
    const double value = options_.mode == Mode::max ? score : -score;
    t.r.last_metric = value;
    if (std::isnan(t.r.best_metric) || better(value, t.r.best_metric)) t.r.best_metric = value;
  }
  bool reached = said_done;
  for (const auto& [key, limit] : options_.stop) {
    if (key == "training_iteration") {
      reached = reached || double(it) >= limit;
    } else if (auto m = metrics.find(key); m != metrics.end()) {
      reached = reached || m->second >= limit;
    }
  }
  if (reached) {
    end_trial(t, TrialStatus::done);
    next.end = true;
    return next;
  }
  Decision d = scheduler_->on_result(trial, time_of(it, metrics), score, t.r.config);
  switch (d.kind) {
    case Decision::Kind::stop:
      end_trial(t, TrialStatus::stopped);
      next.end = true;
      return next;
    case Decision::Kind::done:
      end_trial(t, TrialStatus::done);
      next.end = true;
      return next;
    case Decision::Kind::save: next.save_first = true; break;
    case Decision::Kind::pause: next.pause = true; return next;  // its checkpoint comes with on_paused
    case Decision::Kind::exploit:
      if (!trials_[d.donor].checkpoint.empty()) {
        t.r.config = d.config;
        t.checkpoint = trials_[d.donor].checkpoint;
        t.checkpoint_iteration = it;
        note_start(t, it);  // (PBT's exploit: the donor's state under the new configuration)
        next.restart = true;
        next.config = d.config;
        next.checkpoint = t.checkpoint;
      }
      break;
    case Decision::Kind::go_on: break;
  }
  // Not right after an exploit: the trial's checkpoint is the donor's now, and a save of its own
  // state before the restart would overwrite it.
  if (options_.checkpoint_every > 0 && it % options_.checkpoint_every == 0 && !next.restart) next.save_first = true;
  return next;
}

bool Experiment::can_run_ahead(std::size_t trial) const {
  const Trial& t = trials_.at(trial);
  const std::int64_t next = t.r.iterations + 1;
  for (const auto& [key, limit] : options_.stop)
    if (key != "training_iteration" || double(next) >= limit) return false;  // a metric's value is not known before
  if (options_.checkpoint_every > 0 && next % options_.checkpoint_every == 0) return false;
  if (reported_time()) return false;  // a reported time is not known before
  return !scheduler_->may_decide(trial, double(next));
}

void Experiment::on_checkpoint(std::size_t trial, std::string bytes) {
  Trial& t = trials_.at(trial);
  t.checkpoint = std::move(bytes);
  t.checkpoint_iteration = t.r.iterations;
}

void Experiment::drop_rows_after(std::size_t trial, std::int64_t iteration) {
  std::erase_if(rows_, [&](const ResultRow& r) { return r.trial == trial && r.iteration > iteration; });
  Trial& t = trials_[trial];
  t.r.iterations = 0;
  t.r.last.clear();
  t.r.last_metric = t.r.best_metric = nan;
  for (const auto& r : rows_) {
    if (r.trial != trial) continue;
    t.r.iterations = std::max(t.r.iterations, r.iteration);
    t.r.last = r.metrics;
    const double s = score_of(r.metrics);
    if (std::isnan(s)) continue;
    const double v = options_.mode == Mode::max ? s : -s;
    t.r.last_metric = v;
    if (std::isnan(t.r.best_metric) || better(v, t.r.best_metric)) t.r.best_metric = v;
  }
}

void Experiment::on_failure(std::size_t trial, const std::string& cause, bool retryable) {
  Trial& t = trials_.at(trial);
  ++t.r.failures;
  t.r.error = who(t) + " failed at iteration " + std::to_string(t.r.iterations + 1) + ": " + cause;
  t.waiting = false;
  if (!retryable || t.r.failures > options_.max_failures) {
    end_trial(t, TrialStatus::error, true);
    apply_rulings();
    return;
  }
  note("trial_failed", t, ",\"error\":" + fibra::detail::json_quoted(t.r.error));
  // Again from its checkpoint: the rows after it will be reported again, once.
  drop_rows_after(trial, t.checkpoint.empty() ? 0 : t.checkpoint_iteration);
  if (t.checkpoint.empty()) t.checkpoint_iteration = 0;
  t.r.status = TrialStatus::pending;
  pending_.push_front(trial);
}

std::string Experiment::failed_summary() const {
  std::size_t n = 0;
  std::string first;
  for (const auto& t : trials_) {
    if (t.r.status != TrialStatus::error) continue;
    if (++n <= 3)
      first +=
          "\n  " + t.r.error + " (" + std::to_string(t.r.failures) + " attempt" + (t.r.failures == 1 ? "" : "s") + ")";
  }
  if (n == 0) return {};
  return "fibra::tune: " + std::to_string(n) + " of " + std::to_string(trials_.size()) + " trials of '" + trainable_ +
         "' failed" + (n > 3 ? " (the first 3 below)" : "") + ":" + first +
         "\nTheir rows and the other trials are in TrialsFailed::results(); set RunOptions::raise_on_failed_trial = "
         "false to have run() return them";
}

hdf5_io::TableFile Experiment::to_file(bool complete, double elapsed) const {
  hdf5_io::TableFile f;
  f.attributes = {{"format", file_format},
                  {"trainable", trainable_},
                  {"fingerprint", fingerprint()},
                  {"metric", options_.metric},
                  {"mode", options_.mode == Mode::max ? "max" : "min"},
                  {"scheduler", describe(options_.scheduler)},
                  {"seed", std::to_string(options_.seed)},
                  {"num_samples", std::to_string(options_.num_samples)},
                  {"space", space_text()},
                  {"state", complete ? "complete" : "running"},
                  {"elapsed_s", exact(elapsed_before_ + elapsed)}};
  const std::size_t n = trials_.size();
  std::vector<std::int64_t> id(n), iterations(n), failures(n), ckpt_it(n);
  std::vector<std::string> status(n), error(n);
  std::vector<double> last(n), best(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& t = trials_[i];
    id[i] = std::int64_t(i);
    iterations[i] = t.r.iterations;
    failures[i] = t.r.failures;
    ckpt_it[i] = t.checkpoint.empty() ? 0 : t.checkpoint_iteration;
    status[i] = to_string(t.r.status);
    error[i] = t.r.error;
    last[i] = t.r.last_metric;
    best[i] = t.r.best_metric;
  }
  hdf5_io::Table trials{"trials",
                        {{"id", id},
                         {"status", status},
                         {"iterations", iterations},
                         {"last_metric", last},
                         {"best_metric", best},
                         {"failures", failures},
                         {"error", error},
                         {"checkpoint_iteration", ckpt_it}}};
  std::set<std::string> keys;
  for (const auto& t : trials_)
    for (const auto& [k, v] : t.r.config.values()) keys.insert(k);
  for (const auto& k : keys) {
    bool ints = true, numbers = true;
    for (const auto& t : trials_) {
      if (!t.r.config.contains(k)) continue;
      const Value& v = t.r.config.at(k);
      ints = ints && v.is_integer();
      numbers = numbers && !v.is_text();
    }
    hdf5_io::Column c{"config." + k, {}};
    if (ints) {
      std::vector<std::int64_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = trials_[i].r.config.contains(k) ? trials_[i].r.config.integer(k) : 0;
      c.values = std::move(v);
    } else if (numbers) {
      std::vector<double> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = trials_[i].r.config.contains(k) ? trials_[i].r.config.number(k) : nan;
      c.values = std::move(v);
    } else {
      std::vector<std::string> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = trials_[i].r.config.contains(k) ? trials_[i].r.config.at(k).str() : "";
      c.values = std::move(v);
    }
    trials.columns.push_back(std::move(c));
  }
  // Each trial's whole configuration, typed and exact, for resume (the config.* columns are for
  // readers: a key of mixed types is a string column there).
  std::vector<std::string> exact_configs(n);
  for (std::size_t i = 0; i < n; ++i) exact_configs[i] = config_text(trials_[i].r.config);
  trials.columns.push_back({"config", std::move(exact_configs)});
  f.tables.push_back(std::move(trials));

  std::set<std::string> metric_names;
  for (const auto& r : rows_)
    for (const auto& [k, v] : r.metrics) metric_names.insert(k);
  const std::size_t m = rows_.size();
  std::vector<std::int64_t> trial(m), iteration(m);
  std::vector<double> wall(m);
  for (std::size_t i = 0; i < m; ++i) {
    trial[i] = std::int64_t(rows_[i].trial);
    iteration[i] = rows_[i].iteration;
    wall[i] = rows_[i].wall_time;
  }
  hdf5_io::Table results{"results", {{"trial", trial}, {"iteration", iteration}, {"wall_time", wall}}};
  for (const auto& k : metric_names) {
    std::vector<double> v(m, nan);
    for (std::size_t i = 0; i < m; ++i)
      if (auto it = rows_[i].metrics.find(k); it != rows_[i].metrics.end()) v[i] = it->second;
    results.columns.push_back({metric_column(k), std::move(v)});
  }
  f.tables.push_back(std::move(results));
  auto& blobs = f.blobs["checkpoints"];
  for (const auto& t : trials_)
    if (!t.checkpoint.empty()) blobs["trial_" + std::to_string(t.r.id)] = t.checkpoint;
  return f;
}

void Experiment::resume(const hdf5_io::TableFile& f, const std::string& path) {
  auto attr = [&](const char* k) -> std::string {
    auto it = f.attributes.find(k);
    return it == f.attributes.end() ? std::string() : it->second;
  };
  if (attr("format") != file_format)
    throw ConfigError("fibra::tune: cannot resume from '" + path +
                      "': it is not a fibra::tune experiment file; pass another RunOptions::storage");
  if (attr("fingerprint") != fingerprint()) {
    // Name what differs (a file written before the space was an attribute does not say its space).
    std::string differs;
    for (const auto& [key, mine] : identity()) {
      const auto it = f.attributes.find(key);
      if (it == f.attributes.end() || it->second == mine) continue;
      differs += (differs.empty() ? "" : "; ") + key + " '" + it->second + "' there, '" + mine + "' in this run";
    }
    throw ConfigError("fibra::tune: cannot resume from '" + path + "': it holds another experiment over '" +
                      attr("trainable") + "' (" + (differs.empty() ? "its search space differs" : differs) +
                      "); pass another RunOptions::storage, or remove that one to start again");
  }
  const auto* trials = f.find("trials");
  const auto* results = f.find("results");
  if (!trials || !results) throw ConfigError("fibra::tune: cannot resume from '" + path + "': its tables are missing");
  const auto* status = column_of<std::string>(*trials, "status");
  const auto* ids = column_of<std::int64_t>(*trials, "id");
  if (!status || !ids || ids->size() != trials_.size())
    throw ConfigError("fibra::tune: cannot resume from '" + path + "': its trials table does not fit this experiment");
  {
    const std::string e = attr("elapsed_s");
    elapsed_before_ = 0;
    std::from_chars(e.data(), e.data() + e.size(), elapsed_before_);
  }
  const auto checkpoints =
      f.blobs.count("checkpoints") ? f.blobs.at("checkpoints") : std::map<std::string, std::string>{};
  const auto* failures = column_of<std::int64_t>(*trials, "failures");
  const auto* errors = column_of<std::string>(*trials, "error");
  const auto* ckpt_it = column_of<std::int64_t>(*trials, "checkpoint_iteration");
  const auto* exact_configs = column_of<std::string>(*trials, "config");
  for (std::size_t i = 0; i < trials_.size(); ++i) {
    Trial& t = trials_[i];
    if (exact_configs) t.r.config = parse_config_text((*exact_configs)[i], path);
    for (const auto& c : trials->columns) {
      if (exact_configs || c.name.rfind("config.", 0) != 0) continue;
      const std::string key = c.name.substr(7);
      if (const auto* d = std::get_if<std::vector<double>>(&c.values))
        t.r.config.set(key, (*d)[i]);
      else if (const auto* n = std::get_if<std::vector<std::int64_t>>(&c.values))
        t.r.config.set(key, (*n)[i]);
      else
        t.r.config.set(key, std::get<std::vector<std::string>>(c.values)[i]);
    }
    if (failures) t.r.failures = int((*failures)[i]);
    if (errors) t.r.error = (*errors)[i];
    if (auto it = checkpoints.find("trial_" + std::to_string(i)); it != checkpoints.end()) {
      t.checkpoint = it->second;
      t.checkpoint_iteration = ckpt_it ? (*ckpt_it)[i] : 0;
    }
  }
  // Rows, then each trial's state from its rows; the scheduler sees them again in their order.
  rows_.clear();
  const auto* rt = column_of<std::int64_t>(*results, "trial");
  const auto* ri = column_of<std::int64_t>(*results, "iteration");
  const auto* rw = column_of<double>(*results, "wall_time");
  if (!rt || !ri || !rw)
    throw ConfigError("fibra::tune: cannot resume from '" + path + "': its results table is damaged");
  rows_.resize(rt->size());
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if ((*rt)[i] < 0 || std::size_t((*rt)[i]) >= trials_.size())
      throw ConfigError("fibra::tune: cannot resume from '" + path + "': a row names trial " +
                        std::to_string((*rt)[i]) + ", and the experiment has " + std::to_string(trials_.size()));
    rows_[i] = ResultRow{std::size_t((*rt)[i]), (*ri)[i], (*rw)[i], {}};
  }
  for (const auto& c : results->columns) {
    if (c.name == "trial" || c.name == "iteration" || c.name == "wall_time") continue;
    const auto* v = std::get_if<std::vector<double>>(&c.values);
    if (!v) continue;
    const std::string name = metric_of_column(c.name);
    for (std::size_t i = 0; i < rows_.size(); ++i)
      if (!std::isnan((*v)[i])) rows_[i].metrics[name] = (*v)[i];
  }
  metric_checked_ = !rows_.empty();  // the file's results passed the check when they came
  pending_.clear();
  ended_ = 0;
  for (std::size_t i = 0; i < trials_.size(); ++i) {
    Trial& t = trials_[i];
    const std::string& s = (*status)[i];
    const bool ended = s == "done" || s == "stopped" || s == "error";
    if (ended) {
      t.r.status = s == "done" ? TrialStatus::done : s == "stopped" ? TrialStatus::stopped : TrialStatus::error;
      t.checkpoint.clear();
      ++ended_;
    } else {  // pending or running when the file was written: again from its checkpoint
      t.r.status = TrialStatus::pending;
      if (t.checkpoint.empty()) t.checkpoint_iteration = 0;
      pending_.push_back(i);
    }
  }
  for (std::size_t i = 0; i < trials_.size(); ++i) {
    Trial& t = trials_[i];
    drop_rows_after(
        i, t.r.status == TrialStatus::pending ? t.checkpoint_iteration : std::numeric_limits<std::int64_t>::max());
  }
  scheduler_ = make_scheduler(options_.scheduler, options_.seed, trials_.size());
  // Each ended trial leaves right after its last row, as it did in the run (PBT ranks live trials).
  std::vector<std::size_t> last_row(trials_.size(), rows_.size());
  for (std::size_t i = 0; i < rows_.size(); ++i) last_row[rows_[i].trial] = i;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const auto& r = rows_[i];
    (void)scheduler_->on_result(r.trial, time_of(r.iteration, r.metrics), score_of(r.metrics),
                                trials_[r.trial].r.config);
    if (last_row[r.trial] == i && trials_[r.trial].r.status != TrialStatus::pending) scheduler_->on_end(r.trial);
  }
  for (const auto& t : trials_)
    if (t.r.status != TrialStatus::pending && last_row[t.r.id] == rows_.size()) scheduler_->on_end(t.r.id);
  // The rulings replayed are in the file already (a rung is decided with the result that decides
  // it, before any write); a trial still waiting at a rung waits again, not started.
  (void)scheduler_->take_rulings();
  for (Trial& t : trials_)
    if (t.r.status == TrialStatus::pending && scheduler_->waiting(t.r.id)) t.waiting = true;
  std::erase_if(pending_, [&](std::size_t i) { return trials_[i].waiting; });
}

void Experiment::write_csv(const std::string& path) const {
  std::set<std::string> metric_names, keys;
  for (const auto& r : rows_)
    for (const auto& [k, v] : r.metrics) metric_names.insert(k);
  for (const auto& t : trials_)
    for (const auto& [k, v] : t.r.config.values()) keys.insert(k);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw Error("fibra::tune: cannot write '" + tmp + "'");
    out << "trial,iteration,wall_time";
    for (const auto& k : metric_names) out << "," << csv_field(metric_column(k));
    for (const auto& k : keys) out << "," << csv_field("config." + k);
    out << "\n";
    char buf[40];
    for (const auto& r : rows_) {
      std::snprintf(buf, sizeof buf, "%.6f", r.wall_time);
      out << r.trial << "," << r.iteration << "," << buf;
      for (const auto& k : metric_names) {
        out << ",";
        if (auto it = r.metrics.find(k); it != r.metrics.end()) out << exact(it->second);
      }
      const Config& c = trials_[r.trial].r.config;
      for (const auto& k : keys)
        out << "," << (c.contains(k) ? csv_field(c.at(k).is_double() ? exact(c.number(k)) : c.at(k).str()) : "");
      out << "\n";
    }
    if (!out.flush()) throw Error("fibra::tune: cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("fibra::tune: cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
}

void Experiment::write_trial_csvs(const std::string& storage) {
  std::vector<std::vector<const ResultRow*>> of(trials_.size());
  for (const auto& r : rows_) of.at(r.trial).push_back(&r);
  csv_rows_written_.resize(trials_.size(), 0);
  for (std::size_t t = 0; t < trials_.size(); ++t) {
    if (of[t].size() == csv_rows_written_[t] || (of[t].empty() && csv_rows_written_[t] == 0)) continue;
    std::set<std::string> names;
    for (const ResultRow* r : of[t])
      for (const auto& [k, v] : r->metrics) names.insert(k);
    const auto folder = std::filesystem::path(storage) / "trials" / std::to_string(trials_[t].r.id);
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    const std::string path = (folder / "progress.csv").string(), tmp = path + ".tmp";
    {
      std::ofstream out(tmp);
      if (!out) throw Error("fibra::tune: cannot write '" + tmp + "'");
      out << "iteration,wall_time";
      for (const auto& k : names) out << "," << csv_field(metric_column(k));
      out << "\n";
      char buf[40];
      for (const ResultRow* r : of[t]) {
        std::snprintf(buf, sizeof buf, "%.6f", r->wall_time);
        out << r->iteration << "," << buf;
        for (const auto& k : names) {
          out << ",";
          if (auto it = r->metrics.find(k); it != r->metrics.end()) out << exact(it->second);
        }
        out << "\n";
      }
      if (!out.flush()) throw Error("fibra::tune: cannot write '" + tmp + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error("fibra::tune: cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
    csv_rows_written_[t] = of[t].size();
  }
}

std::string Experiment::status_table(std::size_t most) const {
  std::set<std::string> keys;
  for (const auto& t : trials_)
    for (const auto& [k, v] : t.r.config.values()) keys.insert(k);
  // Running first, then by the metric's best (best first), then by id.
  std::vector<const Trial*> order;
  for (const auto& t : trials_) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [&](const Trial* a, const Trial* b) {
    const bool ra = a->r.status == TrialStatus::running, rb = b->r.status == TrialStatus::running;
    if (ra != rb) return ra;
    const bool na = std::isnan(a->r.best_metric), nb = std::isnan(b->r.best_metric);
    if (na != nb) return nb;
    if (!na && a->r.best_metric != b->r.best_metric) return better(a->r.best_metric, b->r.best_metric);
    return a->r.id < b->r.id;
  });
  std::vector<double> last_time(trials_.size(), nan);
  for (const auto& r : rows_) last_time.at(r.trial) = r.wall_time;
  std::vector<std::string> head{"trial", "status"};
  for (const auto& k : keys) head.push_back(k);
  for (const char* h : {"iter", "last result (s)"}) head.emplace_back(h);
  head.push_back(options_.metric + " (last)");
  head.push_back(options_.metric + " (best)");
  const auto number = [](double v) {
    if (std::isnan(v)) return std::string("-");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < order.size() && i < most; ++i) {
    const TrialResult& r = order[i]->r;
    std::vector<std::string> row{std::to_string(r.id), to_string(r.status)};
    for (const auto& k : keys)
      row.push_back(!r.config.contains(k)        ? std::string("-")
                    : r.config.at(k).is_double() ? number(r.config.number(k))
                                                 : r.config.at(k).str());
    row.push_back(std::to_string(r.iterations));
    row.push_back(number(last_time.at(static_cast<std::size_t>(order[i] - trials_.data()))));
    row.push_back(number(r.last_metric));
    row.push_back(number(r.best_metric));
    rows.push_back(std::move(row));
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (std::size_t c = 0; c < cells.size(); ++c)
      s += " " + cells[c] + std::string(width[c] - cells[c].size(), ' ') + " |";
    return s + "\n";
  };
  std::string rule = "+";
  for (auto w : width) rule += std::string(w + 2, '-') + "+";
  rule += "\n";
  std::string text = "Trials: " + summary() + "\n" + rule + line(head) + rule;
  for (const auto& row : rows) text += line(row);
  text += rule;
  if (order.size() > most) text += "... and " + std::to_string(order.size() - most) + " more trials\n";
  return text;
}

ResultGrid Experiment::grid(const std::string& path) const {
  std::vector<TrialResult> trials;
  trials.reserve(trials_.size());
  for (const auto& t : trials_) trials.push_back(t.r);
  return ResultGrid(std::move(trials), rows_, options_.metric, options_.mode, path);
}

std::string Experiment::summary() const {
  std::size_t count[5] = {};
  const TrialResult* best = nullptr;
  for (const auto& t : trials_) {
    ++count[int(t.r.status)];
    if (!std::isnan(t.r.best_metric) && (!best || better(t.r.best_metric, best->best_metric))) best = &t.r;
  }
  std::string s = std::to_string(count[int(TrialStatus::running)]) + " running, " +
                  std::to_string(count[int(TrialStatus::pending)]) + " pending, " +
                  std::to_string(count[int(TrialStatus::done)]) + " done, " +
                  std::to_string(count[int(TrialStatus::stopped)]) + " stopped, " +
                  std::to_string(count[int(TrialStatus::error)]) + " errors";
  if (best) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.6g", best->best_metric);
    s += " | best " + options_.metric + " " + buf + " (trial " + std::to_string(best->id) + ": " + best->config.str() +
         ")";
  }
  return s;
}

}  // namespace fibra::tune::detail

namespace fibra::tune {

ResultGrid::ResultGrid(std::vector<TrialResult> trials, std::vector<ResultRow> rows, std::string metric, Mode mode,
                       std::string path)
    : trials_(std::move(trials)),
      rows_(std::move(rows)),
      metric_(std::move(metric)),
      mode_(mode),
      path_(std::move(path)) {}

const TrialResult& ResultGrid::best(const std::string& metric, std::optional<Mode> mode) const {
  const std::string& m = metric.empty() ? metric_ : metric;
  const Mode md = mode.value_or(mode_);
  const TrialResult* best = nullptr;
  double best_value = 0;
  for (const auto& t : trials_) {
    auto it = t.last.find(m);
    if (it == t.last.end() || std::isnan(it->second)) continue;
    if (!best || (md == Mode::max ? it->second > best_value : it->second < best_value)) {
      best = &t;
      best_value = it->second;
    }
  }
  if (!best)
    throw Error("fibra::tune: no trial reported the metric '" + m + "'" +
                (m.empty() ? std::string(": pass one to best(), or set RunOptions::metric") : std::string()));
  return *best;
}

std::vector<const TrialResult*> ResultGrid::errors() const {
  std::vector<const TrialResult*> out;
  for (const auto& t : trials_)
    if (t.status == TrialStatus::error) out.push_back(&t);
  return out;
}

}  // namespace fibra::tune
