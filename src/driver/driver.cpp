// The driver's process-wide state that outlives any one pool: the hosts lost so far, and the
// oversubscription rule (pools, the default pool and find_pool live in src/driver/pool.cpp and
// src/driver/tasks.cpp).
#include "driver/driver.hpp"
#include "common/env.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace fibra::detail {
namespace {

std::mutex g_lost_mu;
std::set<std::string> g_lost_hosts;  // hosts of agents lost on other hosts (note_lost_remote_host)
std::atomic<bool> g_any_lost{false};
std::set<std::string> g_lost_joined;  // hosts of agents that joined and were lost there (under g_lost_mu)

}  // namespace

bool oversubscribe_allowed() {
  if (const auto on = env::flag("FIBRA_OVERSUBSCRIBE")) return *on;
  return !std::getenv("SLURM_JOB_ID") && !std::getenv("PBS_JOBID") && !std::getenv("LSB_JOBID");
}

std::string lost_remote_hosts() {
  std::lock_guard lk(g_lost_mu);
  std::string all;
  for (const auto& h : g_lost_hosts) all += (all.empty() ? "" : ", ") + h;
  return all;
}

void note_lost_joined_host(const std::string& host) {
  std::lock_guard lk(g_lost_mu);
  g_lost_joined.insert(host);
}

std::string lost_joined_hosts() {
  std::lock_guard lk(g_lost_mu);
  std::string all;
  for (const auto& h : g_lost_joined) all += (all.empty() ? "" : ", ") + h;
  return all;
}

bool remote_host_lost() noexcept { return g_any_lost.load(std::memory_order_acquire); }

void note_lost_remote_host(const std::string& host) {
  std::lock_guard lk(g_lost_mu);
  g_any_lost.store(true, std::memory_order_release);
  if (!g_lost_hosts.insert(host).second) return;
  // A fibra batch script watches this file: it asks the driver to stop for its checkpoint, and
  // relaunches it on the nodes still alive (docs/slurm.md#a-node-lost).
  if (const std::string file = env::text("FIBRA_LOST_HOSTS_FILE"); !file.empty()) {
    if (std::FILE* f = std::fopen(file.c_str(), "a")) {
      std::fprintf(f, "%s\n", host.c_str());
      std::fclose(f);
    }
  }
}

}  // namespace fibra::detail
