// tune/src/trial_host.cpp: the trainables' registry, the adapter of function trainables, and the
// actor trials run in. This code runs in the trials' processes.
#include "trial_host.hpp"

#include <condition_variable>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <map>
#include <set>
#include <mutex>
#include <thread>

#include "fibra/actor.hpp"
#include "fibra/error.hpp"
#include "internal.hpp"

namespace fibra::tune::detail {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, TrainableFactory> classes;
  std::map<std::string, bool> can_save;                          // classes with save() and restore()
  std::map<std::string, std::set<TrainableFunction>> functions;  // two under one name: ns1::train and ns2::train
};

Registry& registry() {
  static Registry r;
  return r;
}

ConfigError ambiguous(const std::string& name) {
  return ConfigError("fibra::tune: two different functions are registered as trainables under the name '" + name +
                     "': register each with its qualified name (FIBRA_TRAINABLE_FUNCTION(ns::" + name + "))");
}

/// Thrown inside a function trainable's report() when the trial is to end; caught by its thread.
struct EndOfTrial {};

/// A function trainable on a thread of its own: step() lets it run to its next report().
class FunctionTrainable final : public Trainable, Reporter {
 public:
  FunctionTrainable(TrainableFunction fn, const Config& config) : fn_(fn), config_(config) {}
  ~FunctionTrainable() override {
    {
      std::lock_guard lk(mu_);
      end_ = true;
      turn_ = Turn::function;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Metrics step() override {
    std::unique_lock lk(mu_);
    if (finished_) return {{"done", 1}};
    if (!thread_.joinable()) thread_ = std::thread([this] { body(); });
    turn_ = Turn::function;
    cv_.notify_all();
    cv_.wait(lk, [&] { return turn_ == Turn::step; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    if (finished_ && !have_metrics_) return {{"done", 1}};
    have_metrics_ = false;
    return std::move(metrics_);
  }

  // false once the trial is over (the scheduler stopped it, or its host moves on): the function
  // returns then; a report after that one throws, to unwind a function that ignores it.
  bool report(const Metrics& m) override {
    std::unique_lock lk(mu_);
    if (end_) return told_end();
    metrics_ = m;
    have_metrics_ = true;
    turn_ = Turn::step;
    cv_.notify_all();
    cv_.wait(lk, [&] { return turn_ == Turn::function; });
    if (end_) return told_end();
    return true;
  }

 private:
  enum class Turn { step, function };
  bool told_end() {
    if (told_end_) throw EndOfTrial{};
    told_end_ = true;
    return false;
  }
  void body() {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return turn_ == Turn::function; });
      if (end_) return;
    }
    std::exception_ptr error;
    try {
      fn_(config_, *this);
    } catch (const EndOfTrial&) {
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lk(mu_);
    finished_ = true;
    error_ = error;
    turn_ = Turn::step;
    cv_.notify_all();
  }

  TrainableFunction fn_;
  Config config_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  Turn turn_ = Turn::step;
  bool end_ = false, finished_ = false, have_metrics_ = false, told_end_ = false;
  Metrics metrics_;
  std::exception_ptr error_;
};

}  // namespace

bool register_trainable(const std::string& name, TrainableFactory make, bool can_save) {
  auto& r = registry();
  std::lock_guard lk(r.mu);
  r.classes[name] = make;
  r.can_save[name] = can_save;
  return true;
}

bool can_save(const std::string& name) {
  auto& r = registry();
  std::lock_guard lk(r.mu);
  auto it = r.can_save.find(name);
  return it != r.can_save.end() && it->second;
}

bool register_function(const std::string& name, TrainableFunction fn) {
  auto& r = registry();
  std::lock_guard lk(r.mu);
  r.functions[name].insert(fn);
  return true;
}

std::string function_name(TrainableFunction fn) {
  auto& r = registry();
  std::lock_guard lk(r.mu);
  for (const auto& [name, fns] : r.functions)
    if (fns.count(fn)) {
      if (fns.size() > 1) throw ambiguous(name);
      return name;
    }
  return {};
}

bool is_registered(const std::string& name) {
  auto& r = registry();
  std::lock_guard lk(r.mu);
  return r.classes.count(name) || r.functions.count(name);
}

std::unique_ptr<Trainable> make_trainable(const std::string& name, const Config& config) {
  TrainableFactory make = nullptr;
  TrainableFunction fn = nullptr;
  {
    auto& r = registry();
    std::lock_guard lk(r.mu);
    if (auto it = r.classes.find(name); it != r.classes.end()) make = it->second;
    if (auto it = r.functions.find(name); it != r.functions.end()) {
      if (it->second.size() > 1) throw ambiguous(name);
      fn = *it->second.begin();
    }
  }
  if (make) return make(config);
  if (fn) return std::make_unique<FunctionTrainable>(fn, config);
  throw ConfigError("fibra::tune: no trainable '" + name + "' is registered in this process: add FIBRA_TRAINABLE(" +
                    name + ") at namespace scope (the driver and workers must run the same binary)");
}

namespace {
// The trial this process runs (one TrialHost per actor process); read by this_trial() from the
// trainable's calls, which a function trainable makes from a thread of its own.
std::mutex g_trial_mu;
std::optional<TrialContext> g_trial;
}  // namespace

WireMetrics TrialHost::begin(std::string name, std::string config, std::string checkpoint, std::uint64_t trial,
                             std::string dir) {
  trainable_.reset();  // the last trial's goes first (a function trainable's thread ends)
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw ConfigError("fibra::tune: the folder of trial " + std::to_string(trial) + ", " + dir +
                        ", cannot be made here (" + ec.message() +
                        "): RunOptions::storage must be writable from the workers");
  }
  {
    std::lock_guard lk(g_trial_mu);
    g_trial = TrialContext{static_cast<std::size_t>(trial), std::move(dir)};
  }
  try {
    trainable_ = make_trainable(name, decode_config(config));
    name_ = std::move(name);
    if (!checkpoint.empty() && !trainable_->restore(checkpoint))
      throw ConfigError("fibra::tune: trainable '" + name_ +
                        "' has no restore(const std::string&), and this trial must continue from a checkpoint");
  } catch (...) {  // no trial runs here after all
    std::lock_guard lk(g_trial_mu);
    g_trial.reset();
    throw;
  }
  return step();
}

WireMetrics TrialHost::step() {
  if (!trainable_) throw Error("fibra::tune: a step was asked of a trial host holding no trial");
  const Metrics m = trainable_->step();
  return WireMetrics(m.begin(), m.end());
}

bool TrialHost::end() {
  trainable_.reset();
  std::lock_guard lk(g_trial_mu);
  g_trial.reset();
  return true;
}

Saved TrialHost::save() {
  if (!trainable_) throw Error("fibra::tune: a checkpoint was asked of a trial host holding no trial");
  auto bytes = trainable_->save();
  return {bytes ? 1 : 0, bytes ? std::move(*bytes) : std::string()};
}

}  // namespace fibra::tune::detail

namespace fibra::tune {

TrialContext this_trial() {
  std::lock_guard lk(detail::g_trial_mu);
  if (!detail::g_trial)
    throw ConfigError("fibra::tune::this_trial() was called outside a trainable: no trial runs in this process");
  return *detail::g_trial;
}

}  // namespace fibra::tune

FIBRA_ACTOR(fibra::tune::detail::TrialHost);
FIBRA_ACTOR_METHOD(fibra::tune::detail::TrialHost, begin);
FIBRA_ACTOR_METHOD(fibra::tune::detail::TrialHost, step);
FIBRA_ACTOR_METHOD(fibra::tune::detail::TrialHost, save);
FIBRA_ACTOR_METHOD(fibra::tune::detail::TrialHost, end);
