// Ray's parameter server with fibra: one server actor holds the weights of a linear model; four
// worker tasks each pull the weights, compute the gradient of the squared error on their share
// of the data, and push it, 50 times. The data come from known weights, so training must find them.
// Pushes are asynchronous: a worker held up between its pull and its push (a loaded machine)
// pushes a gradient of weights many updates old, which once left the weights 5e-3 off after the
// last push. So the server bounds staleness, as stale-synchronous parallel SGD does: a push of
// weights more than max_staleness updates old is refused, and its worker pulls and tries again.
//
//   ./param_server            or   mpirun -n 1 ./param_server
// Exit status 0 and "PASS" when the server counted every push once and the weights are found.
#include <fibra/fibra.hpp>

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

class ParameterServer {
 public:
  ParameterServer(std::vector<double> weights, double learning_rate) : w_(std::move(weights)), lr_(learning_rate) {}
  std::vector<double> get_weights() const { return w_; }
  /// The weights and how many updates made them (the version a push names).
  std::pair<std::vector<double>, long> pull() const { return {w_, updates_}; }
  long apply_gradient(const std::vector<double>& g) {
    for (std::size_t i = 0; i < w_.size(); ++i) w_[i] -= lr_ * g[i];
    return ++updates_;
  }
  /// A gradient of the weights at `version`: applied (the count of updates returned), or refused
  /// (-1) when more than max_staleness updates came since.
  long push(const std::vector<double>& g, long version) {
    if (updates_ - version > max_staleness) return -1;
    return apply_gradient(g);
  }
  static constexpr long max_staleness = 8;
  long updates() const { return updates_; }

 private:
  std::vector<double> w_;
  double lr_;
  long updates_ = 0;
};
FIBRA_ACTOR(ParameterServer, std::vector<double>, double);
FIBRA_ACTOR_METHOD(ParameterServer, get_weights);
FIBRA_ACTOR_METHOD(ParameterServer, apply_gradient);
FIBRA_ACTOR_METHOD(ParameterServer, pull);
FIBRA_ACTOR_METHOD(ParameterServer, push);
FIBRA_ACTOR_METHOD(ParameterServer, updates);

constexpr int features = 5;
constexpr int rows_per_shard = 200;
const std::vector<double> true_weights{1.5, -2.0, 0.5, 3.0, -1.0};

// Row r of shard s: a fixed pseudo-random x, and y = x . true_weights (no noise).
std::vector<double> row(int shard, int r) {
  std::vector<double> x(features);
  unsigned long long state = 88172645463325252ull ^ (unsigned long long)(shard * 100003 + r);
  for (auto& v : x) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    v = double(state % 2001) / 1000.0 - 1.0;  // in [-1, 1]
  }
  return x;
}

// A worker: `steps` rounds of pull, gradient of the mean squared error on its shard, push.
int worker(fibra::Actor<ParameterServer> ps, int shard, int steps) {
  for (int s = 0; s < steps; ++s) {
    for (;;) {  // until the server takes the push (it refuses one computed on weights too old)
      const auto [w, version] = ps.call(&ParameterServer::pull).get();
      std::vector<double> g(features, 0.0);
      for (int r = 0; r < rows_per_shard; ++r) {
        const auto x = row(shard, r);
        double y = 0, pred = 0;
        for (int j = 0; j < features; ++j) {
          y += x[j] * true_weights[j];
          pred += x[j] * w[j];
        }
        for (int j = 0; j < features; ++j) g[j] += 2 * (pred - y) * x[j] / rows_per_shard;
      }
      if (ps.call(&ParameterServer::push, g, version).get() >= 0) break;
    }
  }
  return steps;
}
FIBRA_REMOTE(worker);

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::default_pool(4);
  const int workers = 4, steps = 50;
  auto ps = fibra::Actor<ParameterServer>::start(std::vector<double>(features, 0.0), 0.1);
  std::vector<fibra::Future<int>> runs;
  for (int k = 0; k < workers; ++k) runs.push_back(fibra::submit(worker, ps, k, steps));
  int done = 0;
  for (auto& f : runs) done += f.get();
  const long updates = ps.call(&ParameterServer::updates).get();
  const auto w = ps.call(&ParameterServer::get_weights).get();
  double err = 0;
  for (int j = 0; j < features; ++j) err = std::max(err, std::fabs(w[j] - true_weights[j]));
  std::printf("updates %ld (expected %d), largest weight error %.2e\n", updates, workers * steps, err);
  for (int j = 0; j < features; ++j) std::printf("  w[%d] = %+.4f (true %+.4f)\n", j, w[j], true_weights[j]);
  const bool ok = done == workers * steps && updates == workers * steps && err < 1e-3;
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
