// Fiber's remote-object pattern, line for line: a manager hosts 10 remote environments; each is
// reset, then stepped 1,000 times, every step's result coming back through a future.
//
//   Fiber (Python)                                   fibra (C++)
//   MyManager.register("Env", Env)                   FIBRA_ACTOR(Env, int); FIBRA_ACTOR_METHOD(Env, step)...
//   manager = MyManager(); manager.start()           fibra::Manager manager;
//   envs = [manager.Env(i) for i in range(10)]       envs.push_back(manager.start<Env>(i))
//   handles = [env.reset() for env in envs]          handles.push_back(env.call(&Env::reset))
//   obs = [h.get() for h in handles]                 obs.push_back(h.get())
//   for _ in range(1000):                            for (int t = 0; t < 1000; ++t) {
//       handles = [env.step(a) for env in envs]        ... env.call(&Env::step, a) ...
//       results = [h.get() for h in handles]           ... h.get() ... }
//
// Each environment is a small deterministic simulator; the driver runs the same class locally
// and checks every one of the 10,000 results.  ./remote_envs   or   mpirun -n 1 ./remote_envs
#include <fibra/fibra.hpp>

#include <cstdio>
#include <vector>

struct StepResult {  // trivially copyable: sent as its bytes
  double observation = 0;
  double reward = 0;
  bool done = false;
};

class Env {
 public:
  explicit Env(int seed) : seed_(seed) {}
  double reset() {
    rng_ = 0x9E3779B97F4A7C15ull * static_cast<unsigned long long>(seed_ + 1);
    x_ = double(seed_);
    t_ = 0;
    return x_;
  }
  StepResult step(double action) {
    rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;
    const double noise = double(rng_ >> 11) / double(1ull << 53) - 0.5;
    x_ = 0.9 * x_ + action + noise;
    ++t_;
    return {x_, -x_ * x_, t_ % 200 == 0};
  }

 private:
  int seed_;
  unsigned long long rng_ = 0;
  double x_ = 0;
  int t_ = 0;
};
FIBRA_ACTOR(Env, int);
FIBRA_ACTOR_METHOD(Env, reset);
FIBRA_ACTOR_METHOD(Env, step);

double policy(double observation) { return -0.5 * observation; }

int main(int argc, char** argv) {
  fibra::Runtime rt(argc, argv);
  fibra::default_pool(2);
  const int n = 10, rounds = 1000;
  fibra::Manager manager;  // its objects run beside the default pool's 2 workers
  std::vector<fibra::Actor<Env>> envs;
  for (int i = 0; i < n; ++i) envs.push_back(manager.start<Env>(i));
  std::vector<Env> local;  // the same environments, run here, to check every result
  for (int i = 0; i < n; ++i) local.emplace_back(i);

  std::vector<fibra::Future<double>> resets;
  for (auto& env : envs) resets.push_back(env.call(&Env::reset));
  std::vector<double> obs;
  long mismatches = 0;
  for (int i = 0; i < n; ++i) {
    obs.push_back(resets[i].get());
    mismatches += obs[i] != local[i].reset();
  }
  double total_reward = 0;
  for (int t = 0; t < rounds; ++t) {
    std::vector<fibra::Future<StepResult>> handles;
    for (int i = 0; i < n; ++i) handles.push_back(envs[i].call(&Env::step, policy(obs[i])));
    for (int i = 0; i < n; ++i) {
      const StepResult r = handles[i].get();
      const StepResult e = local[i].step(policy(obs[i]));
      mismatches += r.observation != e.observation || r.reward != e.reward || r.done != e.done;
      obs[i] = r.observation;
      total_reward += r.reward;
    }
  }
  std::printf("%d environments, %d steps each: total reward %.3f, %ld results differ from the local run\n", n, rounds,
              total_reward, mismatches);
  std::printf(mismatches == 0 ? "PASS\n" : "FAIL\n");
  return mismatches == 0 ? 0 : 1;
}
