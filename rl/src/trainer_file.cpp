// PpoTrainer's checkpoint file: its layout (trainer_file.hpp) over fibra::hdf5_io's TableFile.
//
// The copies are arrays indexed by their global number, not a blob per rollout worker: h5py reads
// them, no archive format (Boost's, which changes between versions) is in the file, and a run
// resumed on another number of workers takes its copies' slices from the same arrays.
#include "trainer_file.hpp"

#include <fibra/error.hpp>
#include <fibra/hdf5_io/tables.hpp>

#include <bit>
#include <charconv>
#include <map>
#include <limits>
#include <numeric>
#include <optional>
#include <variant>

namespace fibra::rl::detail {
namespace {

// The shortest text that reads back as the same double (std::to_chars' promise).
std::string number(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}
std::string number(std::int64_t x) { return std::to_string(x); }
std::string flag(bool b) { return b ? "true" : "false"; }

hdf5_io::Array scalar(std::string name, std::uint64_t v) {
  return {.name = std::move(name), .shape = {}, .values = std::vector<std::int64_t>{static_cast<std::int64_t>(v)}};
}

template <class T>
hdf5_io::Array vector_of(std::string name, std::vector<T> values) {
  const std::uint64_t n = values.size();
  return {.name = std::move(name), .shape = {n}, .values = std::move(values)};
}

[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw CheckpointError("fibra::rl: cannot resume from '" + path + "': " + what +
                        "; it was not written by PpoTrainer::save, or is damaged");
}

// Reads the arrays of one file, naming the file and the array in every refusal.
class Arrays {
 public:
  Arrays(const std::string& path, const hdf5_io::TableFile& file) : path_(path), file_(file) {}

  const hdf5_io::Array& find(const std::string& group, const std::string& name) const {
    const hdf5_io::Array* a = file_.find_array(group, name);
    if (!a) malformed(path_, "it has no array '" + group + "/" + name + "'");
    return *a;
  }
  template <class T>
  const std::vector<T>& values(const std::string& group, const std::string& name, std::size_t n) const {
    const hdf5_io::Array& a = find(group, name);
    const auto* v = std::get_if<std::vector<T>>(&a.values);
    if (!v || v->size() != n)
      malformed(path_,
                "its array '" + group + "/" + name + "' is not " + std::to_string(n) + " values of the type written");
    return *v;
  }
  std::uint64_t counter(const std::string& group, const std::string& name) const {
    return static_cast<std::uint64_t>(values<std::int64_t>(group, name, 1)[0]);
  }

 private:
  const std::string& path_;
  const hdf5_io::TableFile& file_;
};

}  // namespace

Configuration configuration_of(const TrainerOptions& o) {
  std::string hidden;
  for (int h : o.hidden) hidden += (hidden.empty() ? "" : ",") + std::to_string(h);
  const PpoConfig& p = o.ppo;
  return {
      {"format", trainer_file_format},
      {"env", o.env},
      {"copies", std::to_string(std::int64_t(o.workers) * o.envs_per_worker)},
      {"workers", std::to_string(o.workers)},
      {"envs_per_worker", std::to_string(o.envs_per_worker)},
      {"fragment_steps", std::to_string(o.fragment_steps)},
      {"hidden", hidden},
      {"activation", o.activation == Activation::relu ? "relu" : "tanh"},
      {"torch_module", o.torch_module.empty() ? "none" : o.torch_module},
      {"ppo.gamma", number(p.gamma)},
      {"ppo.gae_lambda", number(p.gae_lambda)},
      {"ppo.clip", number(p.clip)},
      {"ppo.anneal_clip", flag(p.anneal_clip)},
      {"ppo.clip_vloss", flag(p.clip_vloss)},
      {"ppo.vf_coef", number(p.vf_coef)},
      {"ppo.ent_coef", number(p.ent_coef)},
      {"ppo.epochs", std::to_string(p.epochs)},
      {"ppo.minibatch_size", std::to_string(p.minibatch_size)},
      {"ppo.max_grad_norm", number(p.max_grad_norm)},
      {"ppo.learning_rate", number(p.learning_rate)},
      {"ppo.anneal_lr", flag(p.anneal_lr)},
      {"ppo.total_steps", number(p.total_steps)},
      {"ppo.norm_adv", flag(p.norm_adv)},
      {"ppo.normalise_observations", flag(p.normalise_observations)},
      {"ppo.normalise_rewards", p.normalise_rewards ? number(p.reward_clip) : "off"},
      {"ppo.target_kl", p.target_kl ? number(*p.target_kl) : "none"},
      {"ppo.adam_epsilon", number(p.adam_epsilon)},
      {"ppo.seed", std::to_string(p.seed)},
      {"ppo.float64", flag(p.float64)},
      {"asynchronous", flag(o.asynchronous)},
      {"async_epochs", o.asynchronous ? std::to_string(o.async_epochs) : "none"},
      {"async_calls_per_worker", o.asynchronous ? std::to_string(o.async_calls_per_worker) : "none"},
      {"async_learning_rate", o.asynchronous ? number(o.async_learning_rate) : "none"},
      {"async_ent_coef", o.asynchronous ? number(o.async_ent_coef) : "none"},
  };
}

std::string differences(const Configuration& saved, const Configuration& now) {
  std::map<std::string, std::string> was(saved.begin(), saved.end());
  std::string d;
  for (const auto& [name, value] : now) {
    if (name == "workers" || name == "envs_per_worker") continue;  // (copies: their product)
    const auto it = was.find(name);
    std::string before = it == was.end() ? "(none)" : it->second;
    // A file from before async_learning_rate existed: its asynchronous learner learned at
    // ppo.learning_rate, its synchronous one at none.
    if (it == was.end() && name == "async_learning_rate")
      before = was["asynchronous"] == "true" ? was["ppo.learning_rate"] : "none";
    // From before async_ent_coef: its asynchronous learner had ppo.ent_coef's bonus.
    if (it == was.end() && name == "async_ent_coef")
      before = was["asynchronous"] == "true" ? was["ppo.ent_coef"] : "none";
    if (it == was.end() && name == "torch_module") before = "none";          // a file from before user networks
    if (it == was.end() && name == "ppo.normalise_rewards") before = "off";  // from before reward normalisation
    if (before == value) continue;
    const std::string label = name == "copies" ? "copies (workers x envs_per_worker)" : name;
    d += (d.empty() ? "" : ", ") + label + " " + before + " (now " + value + ")";
  }
  return d;
}

void write_trainer_file(const std::string& path, const TrainerFile& file, int action_size) {
  hdf5_io::TableFile out;
  for (const auto& [name, value] : file.configuration) out.attributes[name] = value;

  auto& learner = out.arrays["learner"];
  for (const NamedArray& a : file.learner)
    learner.push_back(
        {.name = a.name,
         .shape = std::vector<std::uint64_t>(a.shape.begin(), a.shape.end()),
         .values = std::visit([](const auto& v) -> decltype(hdf5_io::Array::values) { return v; }, a.values)});

  out.arrays["trainer"] = {scalar("iteration", file.iteration), scalar("env_steps", file.env_steps),
                           scalar("restarts", file.restarts), vector_of("recent_returns", file.recent_returns)};

  std::vector<std::int64_t> episodes, rng, steps, lengths;
  std::vector<double> returns, actions;
  for (const CopyState& c : file.copies) {
    episodes.push_back(static_cast<std::int64_t>(c.episodes));
    rng.push_back(std::bit_cast<std::int64_t>(c.rng));
    steps.push_back(static_cast<std::int64_t>(c.steps));
    lengths.push_back(c.episode_length);
    returns.push_back(c.episode_return);
    actions.insert(actions.end(), c.actions.begin(), c.actions.end());
  }
  const std::uint64_t rows = actions.size() / static_cast<std::size_t>(action_size);
  out.arrays["copies"] = {
      vector_of("episodes", std::move(episodes)),
      vector_of("rng", std::move(rng)),
      vector_of("steps", std::move(steps)),
      vector_of("episode_length", std::move(lengths)),
      vector_of("episode_return", std::move(returns)),
      {.name = "actions", .shape = {rows, static_cast<std::uint64_t>(action_size)}, .values = std::move(actions)}};
  hdf5_io::write_table_file(path, out);
}

TrainerFile read_trainer_file(const std::string& path, int action_size) {
  const hdf5_io::TableFile in = hdf5_io::read_table_file(path);
  const auto format = in.attributes.find("format");
  if (format == in.attributes.end() || format->second != trainer_file_format)
    throw CheckpointError("fibra::rl: cannot resume from '" + path + "': it is not a PpoTrainer's file (format '" +
                          (format == in.attributes.end() ? std::string("none") : format->second) + "', expected '" +
                          trainer_file_format + "')");
  TrainerFile file;
  file.configuration.assign(in.attributes.begin(), in.attributes.end());
  const Arrays arrays(path, in);

  const auto learner = in.arrays.find("learner");
  if (learner == in.arrays.end()) malformed(path, "it has no group 'learner'");
  for (const hdf5_io::Array& a : learner->second)
    file.learner.push_back(
        {.name = a.name,
         .shape = std::vector<std::int64_t>(a.shape.begin(), a.shape.end()),
         .values = std::visit([](const auto& v) -> decltype(NamedArray::values) { return v; }, a.values)});

  file.iteration = arrays.counter("trainer", "iteration");
  file.env_steps = arrays.counter("trainer", "env_steps");
  file.restarts = arrays.counter("trainer", "restarts");
  const hdf5_io::Array& recent = arrays.find("trainer", "recent_returns");
  file.recent_returns = arrays.values<double>("trainer", "recent_returns", recent.size());

  const std::size_t n = arrays.find("copies", "episodes").size();
  const auto& episodes = arrays.values<std::int64_t>("copies", "episodes", n);
  const auto& rng = arrays.values<std::int64_t>("copies", "rng", n);
  const auto& steps = arrays.values<std::int64_t>("copies", "steps", n);
  const auto& lengths = arrays.values<std::int64_t>("copies", "episode_length", n);
  const auto& returns = arrays.values<double>("copies", "episode_return", n);
  const auto a = static_cast<std::size_t>(action_size);
  for (std::size_t i = 0; i < n; ++i)  // (before they are summed: {5, -5} would sum to 0)
    if (lengths[i] < 0 || lengths[i] > std::numeric_limits<int>::max())
      malformed(path, "copy " + std::to_string(i) + " has an episode length of " + std::to_string(lengths[i]));
  const std::int64_t rows = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  const auto& actions = arrays.values<double>("copies", "actions", static_cast<std::size_t>(rows) * a);
  std::size_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = static_cast<std::size_t>(lengths[i]) * a;
    if (at + k > actions.size()) malformed(path, "copy " + std::to_string(i) + "'s actions run past the array");
    file.copies.push_back({.episodes = static_cast<std::uint64_t>(episodes[i]),
                           .rng = std::bit_cast<std::uint64_t>(rng[i]),
                           .steps = static_cast<std::uint64_t>(steps[i]),
                           .episode_return = returns[i],
                           .episode_length = static_cast<int>(lengths[i]),
                           .actions = std::vector<double>(actions.begin() + static_cast<std::ptrdiff_t>(at),
                                                          actions.begin() + static_cast<std::ptrdiff_t>(at + k))});
    at += k;
  }
  return file;
}

}  // namespace fibra::rl::detail
