// src/driver/run_secret.cpp: see run_secret.hpp.
#include "driver/run_secret.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>

#include "common/env.hpp"
#include "common/log.hpp"
#include "common/private_file.hpp"
#include "common/process.hpp"

namespace fibra::detail {

namespace {
std::mutex g_mu;
std::unique_ptr<RunSecret> g_secret;  // under g_mu
std::string g_file;                   // under g_mu: to remove at the end

std::string secret_folder() {
  if (const std::string asked = env::text("FIBRA_SECRET_DIR"); !asked.empty()) return asked;
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.fibra/secrets";
  return "/tmp/fibra-" + std::to_string(::geteuid()) + "/secrets";
}

// This boot of this host, as a short word: a file named with a pid of another boot (or of another
// host of the same name, say a container's) is not swept for that pid.
std::string boot_word() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  id.erase(std::remove(id.begin(), id.end(), '-'), id.end());
  return id.size() >= 8 ? id.substr(0, 8) : "noboot";
}

// Files "<host>-<boot>-<pid>-<random>.key" of this host and boot whose driver is gone, and which
// are over a day old: a driver killed before it could remove its file. (The age keeps a run in
// another pid namespace of the same host and boot, whose pid means nothing here, out of reach.)
void remove_stale(const std::string& folder, const std::string& prefix) {
  DIR* d = ::opendir(folder.c_str());
  if (!d) return;
  const auto day_ago = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0 || name.size() < prefix.size() + 5 || name.substr(name.size() - 4) != ".key")
      continue;
    const std::string rest = name.substr(prefix.size());
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    std::error_code ec;
    const auto when = std::filesystem::last_write_time(folder + "/" + name, ec);
    if (pid > 0 && !ec && when < day_ago && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      std::remove((folder + "/" + name).c_str());
  }
  ::closedir(d);
}
}  // namespace

const RunSecret& run_secret() {
  std::lock_guard lk(g_mu);
  if (g_secret) return *g_secret;
  auto made = std::make_unique<RunSecret>(RunSecret{auth::Secret::random(), {}});
  const std::string folder = secret_folder(), host = host_name();
  try {
    make_private_folder(folder, "the run's secret (FIBRA_SECRET_DIR)");
    const std::string prefix = host + "-" + boot_word() + "-";
    remove_stale(folder, prefix);
    const std::string file =
        folder + "/" + prefix + std::to_string(::getpid()) + "-" + auth::Secret::random().hex().substr(0, 8) + ".key";
    write_private_file(file, made->secret.hex() + "\n", "the run's secret");
    made->file = g_file = file;
    static const bool removed_at_exit = std::atexit([] { remove_run_secret(); }) == 0;
    (void)removed_at_exit;
  } catch (const std::exception& e) {
    log::warning("{}; agents copy stored objects from the driver only", e.what());
  }
  g_secret = std::move(made);
  return *g_secret;
}

void remove_run_secret() noexcept {
  std::lock_guard lk(g_mu);
  if (g_file.empty()) return;
  std::remove(g_file.c_str());
  g_file.clear();
}

}  // namespace fibra::detail
