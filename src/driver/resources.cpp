// What each worker of a pool offers (docs/resources.md): PoolOptions first, then the allocation.
#include "driver/resources.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
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

std::vector<int> expand_tasks_per_node(const std::string& text) {
  auto bad = [&] {
    return ConfigError("fibra: cannot read the tasks per node \"" + text +
                       "\" (SLURM_TASKS_PER_NODE, like \"2(x3),1\")");
  };
  std::vector<int> out;
  for (const auto& part : split_ids(text)) {
    const std::size_t open = part.find("(x");
    const std::string count = part.substr(0, open);
    const std::string reps = open == std::string::npos ? "1" : part.substr(open + 2);
    if (open != std::string::npos && (reps.empty() || reps.back() != ')')) throw bad();
    const std::string r = open == std::string::npos ? reps : reps.substr(0, reps.size() - 1);
    if (count.empty() || r.empty() || count.size() > 6 || r.size() > 6 ||
        count.find_first_not_of("0123456789") != std::string::npos ||
        r.find_first_not_of("0123456789") != std::string::npos)
      throw bad();
    out.insert(out.end(), static_cast<std::size_t>(std::stoi(r)), std::stoi(count));
  }
  return out;
}

Placement resolve_placement(const PoolOptions& o) {
  Placement p;
  if (o.placement == "none") return p;
  if (o.placement != "spread" && o.placement != "pack")
    throw ConfigError("fibra: PoolOptions::placement is \"" + o.placement +
                      "\"; it can be \"spread\" (agents one after another over the hosts), \"pack\" (each host "
                      "filled before the next) or \"none\" (where MPI puts them)");
  p.pack = o.placement == "pack";
  if (!o.hosts.empty()) {
    for (const auto& h : o.hosts) {
      const std::size_t colon = h.find(':');
      const std::string name = h.substr(0, colon), n = colon == std::string::npos ? "" : h.substr(colon + 1);
      if (name.empty() ||
          (colon != std::string::npos &&
           (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos || n == "0")))
        throw ConfigError("fibra: PoolOptions::hosts has \"" + h +
                          "\"; write a host as \"name\" or \"name:slots\" "
                          "(the number of processes it takes, at least 1)");
      p.hosts.push_back(name);
      p.slots.push_back(n.empty() ? 0 : std::stoi(n));
    }
    p.source = "PoolOptions::hosts";
    return p;
  }
  const char* list = std::getenv("SLURM_JOB_NODELIST");
  if (!list || !*list) return p;
  p.hosts = expand_hostlist(list);
  if (p.hosts.size() < 2) return Placement{p.pack, {}, {}, {}};  // one node: MPI's own placement is that node
  p.source = "SLURM_JOB_NODELIST";
  p.slots.assign(p.hosts.size(), 0);
  if (const char* tasks = std::getenv("SLURM_TASKS_PER_NODE"); tasks && *tasks) {
    const auto counts = expand_tasks_per_node(tasks);
    for (std::size_t i = 0; i < p.hosts.size() && i < counts.size(); ++i) p.slots[i] = counts[i];
  }
  return p;
}

void check_hosts_resolve(const Placement& p, const std::string& my_host) {
  const auto short_name = [](const std::string& h) { return h.substr(0, h.find('.')); };
  for (const auto& h : p.hosts) {
    if (short_name(h) == short_name(my_host) || h == "localhost") continue;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(h.c_str(), nullptr, &hints, &found);
    if (found) ::freeaddrinfo(found);
    if (rc == 0) continue;
    std::string why = "fibra: the host \"" + h + "\" (from " + p.source + ") is not known on " + my_host + " (" +
                      ::gai_strerror(rc) + "), so no worker can start there. ";
    if (p.source == "SLURM_JOB_NODELIST")
      why +=
          "If this shell is not inside that Slurm allocation, unset SLURM_JOB_NODELIST (a variable left from "
          "another job) or pass PoolOptions::placement = \"none\"";
    else
      why += "Check the name in PoolOptions::hosts, or leave hosts empty to place workers where MPI does";
    throw ConfigError(why);
  }
}

std::size_t choose_host(const Placement& p, const std::vector<bool>& usable, const std::vector<HostLoad>& load,
                        int workers, int slot) {
  const std::size_t n = p.hosts.size();
  std::vector<std::size_t> order;
  for (std::size_t h = 0; h < n; ++h)
    if (usable[h]) order.push_back(h);
  if (order.empty()) return n;
  const auto has_room = [&](std::size_t h) {
    if (p.slots[h] == 0) return true;
    return p.pack ? load[h].workers + workers <= p.slots[h] : load[h].processes < p.slots[h];
  };
  const std::size_t start = p.pack ? 0 : static_cast<std::size_t>(std::max(slot - 1, 0)) % order.size();
  for (std::size_t j = 0; j < order.size(); ++j)
    if (const std::size_t h = order[(start + j) % order.size()]; has_room(h)) return h;
  return order[start];
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
  const bool old = o.resources.set() && o.offers.cpus == 0 && o.offers.gpus == 0 && o.offers.memory_mb == 0;
  const Resources r = old ? o.resources.value() : o.offers;  // the old spelling, deprecated, if only it is set
  if (r.cpus < 0 || r.gpus < 0 || r.memory_mb < 0 || !std::isfinite(r.cpus))
    throw ConfigError(std::string("fibra: ") + (old ? "PoolOptions::resources" : "PoolOptions::offers") +
                      " cannot be negative (got " + describe(r) + ")");
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
  if (asked > 0)
    w.each.gpus = asked;
  else if (!w.gpu_ids.empty())
    w.each.gpus = std::max<int>(1, static_cast<int>(w.gpu_ids.size()) / std::max(1, workers));

  if (r.memory_mb > 0)
    w.each.memory_mb = r.memory_mb;
  else if (const double per_cpu = env_number("SLURM_MEM_PER_CPU"); per_cpu > 0)
    w.each.memory_mb = static_cast<long>(per_cpu * w.each.cpus);
  else if (const double node = env_number("SLURM_MEM_PER_NODE"); node > 0)
    w.each.memory_mb = static_cast<long>(node / std::max(1, workers));
  return w;
}

}  // namespace fibra::detail
