// What each worker of a pool offers (docs/resources.md): PoolOptions first, then the allocation.
#include "resources.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fibra/error.hpp"

namespace fibra::detail {
namespace {

// A positive number from the environment, or 0 when unset or not a number ("2(x3)" is Slurm's
// way of saying 2 on each of 3 nodes: the first number is what a task gets).
double env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  return end != v && x > 0 ? x : 0;
}

}  // namespace

std::vector<std::string> split_ids(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    std::size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

std::vector<std::string> expand_hostlist(const std::string& list) {
  auto bad = [&](const std::string& why) {
    return ConfigError("fibra: cannot read the host list '" + list + "': " + why);
  };
  // A number of a range: digits only, at most 9 of them (no overflow below).
  auto number = [&](const std::string& t) {
    long v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || t.size() > 9 || ec != std::errc() || end != t.data() + t.size())
      throw bad("'" + t + "' is not a number of at most 9 digits");
    return v;
  };
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < list.size()) {
    // one item: a prefix, maybe one [ranges], maybe a suffix; items are split by commas outside brackets
    std::string prefix;
    while (i < list.size() && list[i] != ',' && list[i] != '[') prefix += list[i++];
    if (i < list.size() && list[i] == '[') {
      const std::size_t close = list.find(']', i);
      if (close == std::string::npos) throw bad("a '[' without its ']'");
      const std::string ranges = list.substr(i + 1, close - i - 1);
      if (ranges.empty()) throw bad("empty brackets");
      i = close + 1;
      std::string suffix;
      while (i < list.size() && list[i] != ',') suffix += list[i++];
      if (suffix.find_first_of("[]") != std::string::npos) throw bad("two bracketed ranges in one name");
      for (const auto& r : split_ids(ranges)) {
        const std::size_t dash = r.find('-');
        const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
        const long a = number(lo), b = number(hi);
        if (b < a || b - a > 100000) throw bad("the range '" + r + "' is backwards or too long");
        for (long n = a; n <= b; ++n) {
          std::string num = std::to_string(n);
          if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // node[01-10]
          out.push_back(prefix + num + suffix);
        }
      }
    } else {
      const auto first = prefix.find_first_not_of(' '), last = prefix.find_last_not_of(' ');
      if (first != std::string::npos) out.push_back(prefix.substr(first, last - first + 1));
    }
    if (i < list.size() && list[i] == ',') ++i;
  }
  return out;
}

std::vector<std::string> placement_hosts(const PoolOptions& o) {
  if (o.placement == "none") return {};
  if (o.placement != "spread")
    throw ConfigError("fibra: PoolOptions::placement is \"" + o.placement +
                      "\"; it can be \"spread\" (agents one after another over the hosts) or \"none\" "
                      "(where MPI puts them)");
  if (!o.hosts.empty()) return o.hosts;
  const char* list = std::getenv("SLURM_JOB_NODELIST");
  if (!list || !*list) return {};
  auto hosts = expand_hostlist(list);
  if (hosts.size() < 2) return {};  // one node: MPI's own placement is that node
  return hosts;
}

std::string describe(const Resources& r) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (r.cpus > 0) {
    char b[32];
    std::snprintf(b, sizeof b, "%g CPU%s", r.cpus, r.cpus == 1 ? "" : "s");
    add(b);
  }
  if (r.gpus > 0) add(std::to_string(r.gpus) + " GPU" + (r.gpus == 1 ? "" : "s"));
  if (r.memory_mb > 0) add(std::to_string(r.memory_mb) + " MiB");
  return out.empty() ? "nothing in particular" : out;
}

WorkerResources resolve_resources(const PoolOptions& o, int workers) {
  const Resources& r = o.resources;
  if (r.cpus < 0 || r.gpus < 0 || r.memory_mb < 0 || !std::isfinite(r.cpus))
    throw ConfigError("fibra: PoolOptions::resources cannot be negative (got " + describe(r) + ")");
  WorkerResources w;
  w.each.cpus = r.cpus > 0 ? r.cpus : env_number("SLURM_CPUS_PER_TASK") > 0 ? env_number("SLURM_CPUS_PER_TASK") : 1;

  if (!o.gpu_ids.empty()) {
    w.gpu_ids = o.gpu_ids;
  } else if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    if (std::string(v) != "NoDevFiles") w.gpu_ids = split_ids(v);
  } else if (const char* v = std::getenv("SLURM_STEP_GPUS")) {
    w.gpu_ids = split_ids(v);
  } else if (const char* v = std::getenv("SLURM_JOB_GPUS")) {
    w.gpu_ids = split_ids(v);
  }
  const int asked = r.gpus > 0 ? r.gpus : static_cast<int>(env_number("SLURM_GPUS_PER_TASK"));
  if (asked > 0 && w.gpu_ids.empty())
    throw ConfigError("fibra: each worker is to have " + std::to_string(asked) +
                      " GPU(s), but no GPU is visible: set CUDA_VISIBLE_DEVICES (or PoolOptions::gpu_ids) to the "
                      "GPUs to share out, or ask Slurm for them (--gpus-per-task)");
  if (asked > 0) w.each.gpus = asked;
  else if (!w.gpu_ids.empty()) w.each.gpus = std::max<int>(1, static_cast<int>(w.gpu_ids.size()) / std::max(1, workers));

  if (r.memory_mb > 0) w.each.memory_mb = r.memory_mb;
  else if (const double per_cpu = env_number("SLURM_MEM_PER_CPU"); per_cpu > 0)
    w.each.memory_mb = static_cast<long>(per_cpu * w.each.cpus);
  else if (const double node = env_number("SLURM_MEM_PER_NODE"); node > 0)
    w.each.memory_mb = static_cast<long>(node / std::max(1, workers));
  return w;
}

}  // namespace fibra::detail
