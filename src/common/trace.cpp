#include "common/trace.hpp"
#include "common/env.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fibra::trace::detail {
namespace {

int open_trace_file() {
  const char* dir = fibra::detail::env::raw("FIBRA_TRACE");
  if (!dir || !*dir) return -1;
  const std::string path = std::string(dir) + "/trace." + std::to_string(::getpid());
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

// Opened on first use in each process (an executor is a new process image, so it opens its own).
int trace_fd() {
  static const int fd = open_trace_file();
  return fd;
}

}  // namespace

bool on = [] {
  const char* dir = fibra::detail::env::raw("FIBRA_TRACE");
  return dir && *dir;
}();

void write(Point p, std::uint64_t chunk) noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  char line[64];
  const int n =
      std::snprintf(line, sizeof line, "%d %llu %lld\n", static_cast<int>(p), static_cast<unsigned long long>(chunk),
                    static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
  const int fd = trace_fd();
  if (fd >= 0 && n > 0) (void)!::write(fd, line, static_cast<std::size_t>(n));  // one write: lines never interleave
}

}  // namespace fibra::trace::detail
