// The demo job: an evolution strategy (OpenAI-ES style) that maximises a 20-dimensional
// Rastrigin-like fitness with a population of 256 per generation, evaluated on workers.
//
//   es [--workers N] [--generations G] [--population P] [--checkpoint PATH]
//
// With a checkpoint (--checkpoint, else $FIBRA_CHECKPOINT, which `fibra slurm submit` sets), each
// generation's map keeps its fitnesses in PATH-gen<G>.h5; the run is deterministic, so a rerun
// after a stop (exit status 75 on SIGUSR1/SIGTERM) replays the finished generations from their
// files and resumes the one that was running.
//
// Each generation maps `evaluate` over the population; the driver updates the mean from the
// fitness-weighted noise. It prints the best fitness per generation, and checks that every
// distributed fitness equals the one computed locally.
//
// For the tests: with $FIBRA_ES_EVAL_LOG set, every evaluation on a worker appends a line to that
// file (one O_APPEND write), so a test can count what a resumed run executed.
#include <fcntl.h>
#include <fibra/fibra.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

constexpr int dims = 20;
using Genome = std::array<double, dims>;

// Fitness of one candidate (higher is better, 0 at the optimum): a shifted Rastrigin, negated.
double fitness_of(const Genome& g) {
  double s = 10.0 * dims;
  for (int i = 0; i < dims; ++i) {
    double x = g[i] - 1.5;
    s += x * x - 10.0 * std::cos(2 * M_PI * x);
  }
  return -s;
}

// What the workers run: the fitness (and a line in $FIBRA_ES_EVAL_LOG when a test counts them).
double evaluate(const Genome& g) {
  if (const char* log = std::getenv("FIBRA_ES_EVAL_LOG")) {
    const int fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] auto n = ::write(fd, "e\n", 2);
      ::close(fd);
    }
  }
  return fitness_of(g);
}
FIBRA_REMOTE(evaluate);

namespace {
long arg(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  return fallback;
}
}  // namespace

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  const int workers = static_cast<int>(arg(argc, argv, "--workers", 4));
  const int generations = static_cast<int>(arg(argc, argv, "--generations", 30));
  const int population = static_cast<int>(arg(argc, argv, "--population", 256));
  std::string checkpoint = std::getenv("FIBRA_CHECKPOINT") ? std::getenv("FIBRA_CHECKPOINT") : "";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--checkpoint") == 0) checkpoint = argv[i + 1];
  if (checkpoint.size() > 3 && checkpoint.ends_with(".h5")) checkpoint.resize(checkpoint.size() - 3);
  fibra::Pool pool(workers);
  std::printf("es: %d workers, population %d, %d generations\n", pool.size(), population, generations);

  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  Genome mean{};
  const double sigma = 0.1, lr = 0.05;
  double first_best = 0, best = 0;
  for (int gen = 0; gen < generations; ++gen) {
    std::vector<Genome> noise(population), candidates(population);
    for (int k = 0; k < population; ++k)
      for (int i = 0; i < dims; ++i) {
        noise[k][i] = normal(rng);
        candidates[k][i] = mean[i] + sigma * noise[k][i];
      }
    const std::string gen_checkpoint = checkpoint.empty() ? "" : checkpoint + "-gen" + std::to_string(gen) + ".h5";
    std::vector<double> fitness = pool.map(evaluate, candidates, {.checkpoint = gen_checkpoint});
    if (fitness.size() != candidates.size()) {
      std::fprintf(stderr, "es: %zu fitnesses for %d candidates\n", fitness.size(), population);
      return 1;
    }
    for (int k = 0; k < population; ++k)
      if (fitness[k] != fitness_of(candidates[k])) {
        std::fprintf(stderr, "es: fitness %d differs from the local value\n", k);
        return 1;
      }
    // Rank-normalised weights, then a gradient step on the mean.
    std::vector<int> order(population);
    for (int k = 0; k < population; ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return fitness[a] < fitness[b]; });
    std::vector<double> w(population);
    for (int r = 0; r < population; ++r) w[order[r]] = double(r) / (population - 1) - 0.5;
    for (int i = 0; i < dims; ++i) {
      double g = 0;
      for (int k = 0; k < population; ++k) g += w[k] * noise[k][i];
      mean[i] += lr / (population * sigma) * g * 10;
    }
    best = *std::max_element(fitness.begin(), fitness.end());
    if (gen == 0) first_best = best;
    std::printf("generation %2d: best fitness %9.3f\n", gen, best);
  }
  std::printf("es: best fitness went from %.3f to %.3f\n", first_best, best);
  return best > first_best ? 0 : 1;
}
