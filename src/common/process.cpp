#include "common/process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "fibra/error.hpp"

namespace fibra::detail {

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw ConfigError("fibra: cannot read /proc/self/exe to start workers of this program");
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string describe_exit(int st) {
  if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    const char* name = ::strsignal(sig);
    std::string s = "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
    if (sig == SIGKILL) s += ", perhaps by the kernel for lack of memory";
    return s;
  }
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st)) + " while running it";
  return "ended (wait status " + std::to_string(st) + ")";
}

}  // namespace fibra::detail
