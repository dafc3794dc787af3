// benchmarks/bench_common.hpp: small helpers the benchmark programs share.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

/// Seconds from `t` to now.
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The value after `name` on the command line (`--workers 4`), or `fallback`.
inline long arg(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  return fallback;
}

/// The value after `name` as a floating-point number, or `fallback`.
inline double arg_double(int argc, char** argv, const char* name, double fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atof(argv[i + 1]);
  return fallback;
}

/// The value after `name` as a string, or `fallback`.
inline std::string arg_str(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

/// The parts of a comma-separated list ("map,seq"), empty parts dropped.
inline std::vector<std::string> split_commas(const std::string& s) {
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

/// The numbers of a comma-separated option ("--agents 4,16,64"), or of `fallback`.
inline std::vector<int> int_list(int argc, char** argv, const char* name, const char* fallback) {
  std::vector<int> out;
  for (const auto& n : split_commas(arg_str(argc, argv, name, fallback))) out.push_back(std::atoi(n.c_str()));
  return out;
}

/// CPU seconds (user + system) that process `pid` ("self": this one) has used so far, all threads;
/// 0 if it is gone.
inline double process_cpu_seconds(const std::string& pid) {
  std::ifstream f("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoul(field);
    if (i == 15) stime = std::stoul(field);
  }
  return double(utime + stime) / double(::sysconf(_SC_CLK_TCK));
}

/// The executable process `pid` runs ("self": this one), or "" if it is gone.
inline std::string exe_of(const std::string& pid) {
  char buf[4096];
  const ssize_t n = ::readlink(("/proc/" + pid + "/exe").c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
}

/// CPU seconds used so far by all processes running `exe` (a fibra program's driver, agents and
/// executors run the same binary); counts them in `procs`.
inline double exe_cpu_seconds(const std::string& exe, int& procs) {
  double total = 0;
  procs = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || exe_of(e->d_name) != exe) continue;
    total += process_cpu_seconds(e->d_name);
    ++procs;
  }
  ::closedir(d);
  return total;
}

/// Physical memory of this machine in GiB (for the `#` line naming the machine).
inline double memory_gib() {
  return double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024 * 1024);
}

/// A payload size as a metric name: "64mib" for 64 MiB, "1000b" otherwise.
inline std::string size_name(long bytes) {
  if (bytes > 0 && bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + "mib";
  return std::to_string(bytes) + "b";
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace bench
