// B9 (issue 26): fibra::tune's overhead. (1) 10,000 trials of a synthetic trainable whose step()
// sleeps 1 ms, 20 steps each, ASHA (grace 1, reduction factor 4, max_t 20) on 2 workers: wall
// time against the sleeping time per worker (steps x 1 ms / workers); the peer is Optuna's
// SuccessiveHalvingPruner on the same curve (benchmarks/peers/optuna_peer.py). (2) The driver's
// ingestion alone: results fed to an experiment (rows, stop conditions, ASHA's rule) in one
// process, no pool, per second.
//
//   b9_tune [--workers N] [--trials N] [--steps S] [--step-ms MS] [--ingest N] [--repeats R]
//           [--storage DIR]   (the experiment's file written as it goes, as a user's would be)
//
// Prints the rows of benchmarks/README.md (benchmark,metric,value,unit; medians of R runs).
#include <fibra/fibra.hpp>
#include <fibra/tune.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "experiment.hpp"  // tune/src: the driver's state, for the ingestion figure

namespace {

long g_step_us = 1000;  // the same in every process: set from --step-ms before the pool starts

// score = x * sqrt(t), as the Optuna peer's objective.
class Synthetic {
 public:
  explicit Synthetic(const fibra::tune::Config& c) : x_(c.number("x")), step_us_(c.integer("step_us")) {}
  fibra::tune::Metrics step() {
    std::this_thread::sleep_for(std::chrono::microseconds(step_us_));
    ++t_;
    return {{"score", x_ * std::sqrt(double(t_))}};
  }

 private:
  double x_;
  std::int64_t step_us_;
  int t_ = 0;
};
FIBRA_TRAINABLE(Synthetic);

void row(const char* metric, double value, const char* unit) { std::printf("tune,%s,%.6g,%s\n", metric, value, unit); }

}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const long workers = bench::arg(argc, argv, "--workers", 2);
  const long trials = bench::arg(argc, argv, "--trials", 10000);
  const long steps = bench::arg(argc, argv, "--steps", 20);
  g_step_us = long(bench::arg_double(argc, argv, "--step-ms", 1.0) * 1000);
  const long ingest = bench::arg(argc, argv, "--ingest", 1000000);
  const long repeats = bench::arg(argc, argv, "--repeats", 1);
  const std::string storage = bench::arg_str(argc, argv, "--storage", "");
  namespace tune = fibra::tune;
  const tune::Space space{{"x", tune::uniform(0, 1)}, {"step_us", std::int64_t(g_step_us)}};
  const tune::Asha asha{.max_t = double(steps), .grace_period = 1, .reduction_factor = 4};

  std::vector<double> wall, overhead, rate, ingest_rate;
  double total_steps = 0, pruned = 0;
  fibra::Pool pool(static_cast<int>(workers));
  for (long r = 0; r < repeats; ++r) {
    if (!storage.empty()) std::filesystem::remove_all(storage + "/run" + std::to_string(r));  // not a resume
    const auto t0 = bench::Clock::now();
    const auto g =
        tune::run<Synthetic>(space, {.num_samples = std::size_t(trials),
                                     .metric = "score",
                                     .scheduler = asha,
                                     .max_concurrent = std::size_t(workers),
                                     .storage = storage.empty() ? std::string() : storage + "/run" + std::to_string(r),
                                     .seed = std::uint64_t(r),
                                     .progress_interval_s = 0,
                                     .pool = &pool});
    const double s = bench::seconds_since(t0);
    total_steps = double(g.rows().size());
    pruned = 0;
    for (const auto& t : g.trials()) {
      pruned += t.status == tune::TrialStatus::stopped;
      if (t.status != tune::TrialStatus::done && t.status != tune::TrialStatus::stopped) {
        std::fprintf(stderr, "b9_tune: trial %zu ended %s: %s\n", t.id, tune::to_string(t.status), t.error.c_str());
        return 1;
      }
    }
    const double sleep_per_worker = total_steps * double(g_step_us) / 1e6 / double(workers);
    wall.push_back(s);
    overhead.push_back(100 * (s / sleep_per_worker - 1));
    rate.push_back(total_steps / s);
  }
  // Ingestion: `ingest` results through the experiment's state, trials of `steps` iterations.
  for (long r = 0; r < repeats; ++r) {
    tune::RunOptions o{.num_samples = std::size_t(ingest / steps + 1), .metric = "score", .scheduler = asha};
    tune::detail::Experiment ex("Synthetic", space, o);
    std::vector<std::size_t> live;
    const auto t0 = bench::Clock::now();
    long fed = 0;
    while (fed < ingest) {
      auto st = ex.start_next();
      if (!st) break;
      const double x = st->config.number("x");
      for (long t = 1; t <= steps && fed < ingest; ++t) {
        ++fed;
        if (ex.on_result(st->trial, {{"score", x * std::sqrt(double(t))}}, 0).end) break;
      }
    }
    ingest_rate.push_back(double(fed) / bench::seconds_since(t0));
  }
  std::printf(
      "# %ld trials of %ld steps of %.3g ms, ASHA (grace 1, rf 4, max_t %ld), %ld workers; %ld results "
      "ingested in one process%s\n",
      trials, steps, double(g_step_us) / 1000, steps, workers, ingest,
      storage.empty() ? "" : "; the experiment's file written as it goes");
  row("wall_s", bench::median(wall), "s");
  row("steps", total_steps, "steps");
  row("trials_pruned", pruned, "trials");
  row("sleep_per_worker_s", total_steps * double(g_step_us) / 1e6 / double(workers), "s");
  row("overhead_pct", bench::median(overhead), "%");
  row("results_per_s", bench::median(rate), "1/s");
  row("ingest_per_s", bench::median(ingest_rate), "1/s");
  // The floor under the overhead: what a sleep of one step's length really takes here (the
  // kernel's timer slack and wake-up), 1,000 in a row on this thread.
  if (g_step_us > 0) {
    const auto t0 = bench::Clock::now();
    for (int i = 0; i < 1000; ++i) std::this_thread::sleep_for(std::chrono::microseconds(g_step_us));
    row("sleep_overshoot_pct", 100 * (bench::seconds_since(t0) / (1000 * double(g_step_us) / 1e6) - 1), "%");
  }
  return 0;
}
