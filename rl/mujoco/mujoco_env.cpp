// MujocoEnv: a model compiled once per process and shared read-only, a simulation state per
// environment; and the bodies with Gymnasium's v4 rules (observations, rewards, health, noise).
#include <fibra/rl/mujoco.hpp>
#include <fibra/rl/rng.hpp>

#include <mujoco/mujoco.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "models.hpp"

namespace fibra::rl {
namespace {

using ModelPtr = std::shared_ptr<const mjModel>;

ModelPtr compile(const std::string& name) {
  std::array<char, 1000> error{};
  mjModel* m = nullptr;
  if (name == "humanoid") {
    m = mj_loadXML(FIBRA_RL_MUJOCO_HUMANOID, nullptr, error.data(), static_cast<int>(error.size()));
    if (!m)
      throw ConfigError(std::string("fibra::rl: cannot load MuJoCo's humanoid model ") + FIBRA_RL_MUJOCO_HUMANOID +
                        ": " + error.data() + "\nTo fix: apt-get install libmujoco-samples (the model comes with it)");
  } else {
    const char* xml = name == "hopper"         ? detail::hopper_xml
                      : name == "half_cheetah" ? detail::half_cheetah_xml
                                               : nullptr;
    if (!xml) throw std::logic_error("fibra::rl: no MuJoCo model named " + name);
    // From memory, through MuJoCo's virtual file system (large: on the heap, once per model).
    auto vfs = std::make_unique<mjVFS>();
    mj_defaultVFS(vfs.get());
    const std::string file = name + ".xml";
    const auto size = static_cast<int>(std::strlen(xml));
    if (mj_makeEmptyFileVFS(vfs.get(), file.c_str(), size) != 0)
      throw std::runtime_error("fibra::rl: MuJoCo's virtual file system refused " + file);
    std::memcpy(vfs->filedata[mj_findFileVFS(vfs.get(), file.c_str())], xml, static_cast<std::size_t>(size));
    m = mj_loadXML(file.c_str(), vfs.get(), error.data(), static_cast<int>(error.size()));
    mj_deleteVFS(vfs.get());
    if (!m) throw std::runtime_error("fibra::rl: MuJoCo cannot compile the " + name + " model: " + error.data());
  }
  return ModelPtr(m, [](const mjModel* p) { mj_deleteModel(const_cast<mjModel*>(p)); });
}

// One compiled model per name for the process's life (mj_step only reads it).
ModelPtr model(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, ModelPtr> models;
  std::lock_guard lock(mutex);
  ModelPtr& m = models[name];
  if (!m) m = compile(name);
  return m;
}

Box unbounded(std::size_t n) {
  return Box{.shape = {n},
             .low = std::vector<double>(n, -std::numeric_limits<double>::infinity()),
             .high = std::vector<double>(n, std::numeric_limits<double>::infinity())};
}

double square_sum(std::span<const double> a) {
  double s = 0;
  for (double v : a) s += v * v;
  return s;
}

}  // namespace

struct MujocoEnv::Sim {
  ModelPtr model;
  mjData* data = nullptr;
  int frame_skip = 1;
  std::vector<double> start_qpos, start_qvel;  // start_from's, kept to reuse their memory
  ~Sim() {
    if (data) mj_deleteData(data);
  }
};

MujocoEnv::MujocoEnv(const std::string& model_name, int frame_skip) : sim_(std::make_unique<Sim>()) {
  sim_->model = model(model_name);
  sim_->data = mj_makeData(sim_->model.get());
  if (!sim_->data) throw std::bad_alloc();
  sim_->frame_skip = frame_skip;
}

MujocoEnv::~MujocoEnv() = default;

std::span<const double> MujocoEnv::qpos() const {
  return {sim_->data->qpos, static_cast<std::size_t>(sim_->model->nq)};
}
std::span<const double> MujocoEnv::qvel() const {
  return {sim_->data->qvel, static_cast<std::size_t>(sim_->model->nv)};
}
double MujocoEnv::centre_of_mass_x() const { return sim_->data->subtree_com[0]; }
double MujocoEnv::dt() const { return sim_->model->opt.timestep * sim_->frame_skip; }

void MujocoEnv::set_state(std::span<const double> qpos, std::span<const double> qvel) {
  const mjModel* m = sim_->model.get();
  if (qpos.size() != static_cast<std::size_t>(m->nq) || qvel.size() != static_cast<std::size_t>(m->nv))
    throw std::invalid_argument("fibra::rl: set_state of a model with " + std::to_string(m->nq) + " positions and " +
                                std::to_string(m->nv) + " velocities got " + std::to_string(qpos.size()) + " and " +
                                std::to_string(qvel.size()));
  std::copy(qpos.begin(), qpos.end(), sim_->data->qpos);
  std::copy(qvel.begin(), qvel.end(), sim_->data->qvel);
  mj_forward(m, sim_->data);
}

// The model's initial positions (qpos0) and zero velocities, with noise drawn from the seed,
// uniform in [-scale, scale] (velocities: scale times a normal draw with `normal_velocities`):
// positions first, then velocities; the episode's steps back to 0.
void MujocoEnv::start_from(std::uint64_t seed, double scale, bool normal_velocities) {
  const mjModel* m = sim_->model.get();
  Rng rng(seed);
  const auto noise = [&] { return scale * (2 * rng.uniform() - 1); };
  std::vector<double>& qpos = sim_->start_qpos;
  std::vector<double>& qvel = sim_->start_qvel;
  qpos.assign(m->qpos0, m->qpos0 + m->nq);
  qvel.assign(static_cast<std::size_t>(m->nv), 0.0);
  for (double& q : qpos) q += noise();
  for (double& v : qvel) v += normal_velocities ? scale * rng.normal() : noise();
  mj_resetData(m, sim_->data);
  steps_ = 0;
  set_state(qpos, qvel);
}

void MujocoEnv::simulate(std::span<const double> action) {
  const mjModel* m = sim_->model.get();
  if (action.size() != static_cast<std::size_t>(m->nu))
    throw std::invalid_argument("fibra::rl: an action of " + std::to_string(action.size()) + " values for a model of " +
                                std::to_string(m->nu) + " actuators");
  std::copy(action.begin(), action.end(), sim_->data->ctrl);  // the engine clips to ctrlrange
  for (int i = 0; i < sim_->frame_skip; ++i) mj_step(m, sim_->data);
  ++steps_;
}

double MujocoEnv::simulate_forward(std::span<const double> action) {
  const double x_before = qpos()[0];
  simulate(action);
  return (qpos()[0] - x_before) / dt();
}

Space MujocoEnv::action_space() const {
  const mjModel* m = sim_->model.get();
  Box b{.shape = {static_cast<std::size_t>(m->nu)}, .low = {}, .high = {}};
  for (int i = 0; i < m->nu; ++i) {
    b.low.push_back(m->actuator_ctrlrange[2 * i]);
    b.high.push_back(m->actuator_ctrlrange[2 * i + 1]);
  }
  return b;
}

namespace {

constexpr int max_steps = 1000;  // Gymnasium's TimeLimit for these bodies

/// Hopper-v4: observation qpos[1:] and qvel clipped to +-10 (11 values); reward the torso's forward
/// velocity + 1 (healthy reward) - 1e-3 * |action|^2; unhealthy (the episode's end): the torso's
/// height not above 0.7, its pitch not within (-0.2, 0.2), or a value of the state past qpos[1]
/// not within (-100, 100); start noise uniform +-0.005.
class Hopper final : public MujocoEnv {
 public:
  Hopper() : MujocoEnv("hopper", 4) {}
  Box observation_space() const override { return unbounded(11); }
  std::span<const double> reset(std::uint64_t seed) override {
    start_from(seed, 5e-3);
    return observe();
  }
  StepResult step(std::span<const double> action) override {
    const double x_velocity = simulate_forward(action);
    StepResult r;
    r.reward = x_velocity + 1.0 - 1e-3 * square_sum(action);
    r.terminated = !healthy();
    r.truncated = steps() >= max_steps;
    r.observation = observe();
    return r;
  }
  bool healthy() const {
    const auto q = qpos(), v = qvel();
    const double z = q[1], angle = q[2];
    bool state_ok = true;
    for (std::size_t i = 2; i < q.size(); ++i) state_ok = state_ok && std::abs(q[i]) < 100;
    for (double x : v) state_ok = state_ok && std::abs(x) < 100;
    return state_ok && z > 0.7 && angle > -0.2 && angle < 0.2;
  }

 private:
  std::span<const double> observe() {
    const auto q = qpos(), v = qvel();
    obs_.assign(q.begin() + 1, q.end());
    for (double x : v) obs_.push_back(std::clamp(x, -10.0, 10.0));
    return obs_;
  }
  std::vector<double> obs_;
};

/// HalfCheetah-v4: observation qpos[1:] and qvel (17 values); reward the torso's forward velocity
/// - 0.1 * |action|^2; no end but the step limit; start noise uniform +-0.1 on the positions, 0.1
/// times a normal draw on the velocities.
class HalfCheetah final : public MujocoEnv {
 public:
  HalfCheetah() : MujocoEnv("half_cheetah", 5) {}
  Box observation_space() const override { return unbounded(17); }
  std::span<const double> reset(std::uint64_t seed) override {
    start_from(seed, 0.1, /*normal_velocities=*/true);
    return observe();
  }
  StepResult step(std::span<const double> action) override {
    const double x_velocity = simulate_forward(action);
    StepResult r;
    r.reward = x_velocity - 0.1 * square_sum(action);
    r.truncated = steps() >= max_steps;
    r.observation = observe();
    return r;
  }

 private:
  std::span<const double> observe() {
    const auto q = qpos(), v = qvel();
    obs_.assign(q.begin() + 1, q.end());
    obs_.insert(obs_.end(), v.begin(), v.end());
    return obs_;
  }
  std::vector<double> obs_;
};

/// Humanoid-v4 on MuJoCo's own humanoid: observation qpos[2:], qvel, every body's cinert and cvel,
/// qfrc_actuator and every body's cfrc_ext, as the engine leaves them after the step (mj_step does
/// not compute the contact forces: zeros, as in Gymnasium's v4 on MuJoCo 2 and later); reward
/// 1.25 * the centre of mass's forward velocity + 5 (healthy reward) - 0.1 * |action|^2; unhealthy
/// (the end): the torso's height (qpos[2]) not within (1, 2); start noise uniform +-0.01.
class Humanoid final : public MujocoEnv {
 public:
  Humanoid() : MujocoEnv("humanoid", 5) {}
  Box observation_space() const override {
    const mjModel* m = sim().model.get();
    return unbounded(
        static_cast<std::size_t>((m->nq - 2) + m->nv + 10 * m->nbody + 6 * m->nbody + m->nv + 6 * m->nbody));
  }
  std::span<const double> reset(std::uint64_t seed) override {
    start_from(seed, 1e-2);
    return observe();
  }
  StepResult step(std::span<const double> action) override {
    const double x_before = mass_centre_x();
    simulate(action);
    const double x_velocity = (mass_centre_x() - x_before) / dt();
    StepResult r;
    r.reward = 1.25 * x_velocity + 5.0 - 0.1 * square_sum(action);
    r.terminated = !healthy();
    r.truncated = steps() >= max_steps;
    r.observation = observe();
    return r;
  }
  bool healthy() const { return qpos()[2] > 1.0 && qpos()[2] < 2.0; }
  /// The centre of mass's x: body masses times their centres' x (xipos), over the total mass.
  double mass_centre_x() const {
    const mjModel* m = sim().model.get();
    const mjData* d = sim().data;
    double mass = 0, moment = 0;
    for (int b = 0; b < m->nbody; ++b) {
      mass += m->body_mass[b];
      moment += m->body_mass[b] * d->xipos[3 * b];
    }
    return moment / mass;
  }

 private:
  std::span<const double> observe() {
    const mjModel* m = sim().model.get();
    const mjData* d = sim().data;
    const auto q = qpos(), v = qvel();
    obs_.assign(q.begin() + 2, q.end());
    obs_.insert(obs_.end(), v.begin(), v.end());
    obs_.insert(obs_.end(), d->cinert, d->cinert + 10 * m->nbody);
    obs_.insert(obs_.end(), d->cvel, d->cvel + 6 * m->nbody);
    obs_.insert(obs_.end(), d->qfrc_actuator, d->qfrc_actuator + m->nv);
    obs_.insert(obs_.end(), d->cfrc_ext, d->cfrc_ext + 6 * m->nbody);
    return obs_;
  }
  std::vector<double> obs_;
};

}  // namespace

void register_mujoco_envs() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_env("Hopper-v4", [] { return std::unique_ptr<Env>(std::make_unique<Hopper>()); });
    register_env("HalfCheetah-v4", [] { return std::unique_ptr<Env>(std::make_unique<HalfCheetah>()); });
    register_env("Humanoid-v4", [] { return std::unique_ptr<Env>(std::make_unique<Humanoid>()); });
  });
}

}  // namespace fibra::rl
