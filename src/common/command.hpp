// src/common/command.hpp: a child command run to its end with its output captured, for every fibra
// library (the `fibra` command's Slurm calls, and a driver's Pool::adapt, which submits worker
// jobs). Header-only: fibra_slurm takes it through the fibra_internal target (CMakeLists.txt).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/unique_fd.hpp"

namespace fibra::detail {

/// What a finished command printed and how it ended.
struct CommandOutput {
  int status = -1;  ///< exit status; 127 if it could not be started; 128+N if killed by signal N
  std::string out;  ///< its standard output
  std::string err;  ///< its standard error
};

namespace command_detail {
/// CLOCK_MONOTONIC in milliseconds.
inline long long now_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long long>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
}

/// Reads both pipes until both are closed, so neither can fill up and block the child; false if
/// that has not happened by `deadline` (a monotonic time in ms; 0: no deadline).
inline bool drain(UniqueFd out_fd, UniqueFd err_fd, std::string& out, std::string& err, long long deadline) {
  UniqueFd* owners[2] = {&out_fd, &err_fd};
  pollfd fds[2] = {{out_fd.get(), POLLIN, 0}, {err_fd.get(), POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open = 2;
  char buf[4096];
  while (open > 0) {
    int wait_ms = -1;
    if (deadline > 0) {
      const long long now = now_ms();
      if (now >= deadline) return false;
      wait_ms = static_cast<int>(deadline - now);
    }
    if (::poll(fds, 2, wait_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        owners[i]->reset();
        fds[i].fd = -1;
        --open;
      }
    }
  }
  return true;
}
}  // namespace command_detail

/// `words` as exec and posix_spawn take an argv or an environment: a pointer to each, then a null
/// pointer. They point into `words`, which must outlive them.
inline std::vector<char*> exec_words(const std::vector<std::string>& words) {
  std::vector<char*> p;
  p.reserve(words.size() + 1);
  for (const std::string& w : words) p.push_back(const_cast<char*>(w.c_str()));
  p.push_back(nullptr);
  return p;
}

/// Runs `argv` (its first word searched in PATH) with stdin from /dev/null, to its end. `env`: its
/// whole environment ("NAME=value" each); empty: this process's. `error` is set when it cannot
/// even begin (no pipe, no fork), and the status is then -1; or when it runs past `timeout_s`
/// (0: no limit), and it is then killed (status 128 + 9).
inline CommandOutput run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                 std::string& error, double timeout_s = 0) {
  CommandOutput r;
  int out_fds[2], err_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0) {
    error = std::string("cannot create a pipe: ") + std::strerror(errno);
    return r;
  }
  UniqueFd out_r(out_fds[0]), out_w(out_fds[1]);
  if (::pipe2(err_fds, O_CLOEXEC) != 0) {
    error = std::string("cannot create a pipe: ") + std::strerror(errno);
    return r;
  }
  UniqueFd err_r(err_fds[0]), err_w(err_fds[1]);
  std::vector<char*> args = exec_words(argv), envp = exec_words(env);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_w.get(), 1);
    ::dup2(err_w.get(), 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (env.empty())
      ::execvp(args[0], args.data());
    else
      ::execvpe(args[0], args.data(), envp.data());
    // (No stdio here: in a process with threads, another may have held its lock at the fork.)
    const char* why = std::strerror(errno);
    const char* parts[] = {"cannot run '", args[0], "': ", why, "\n"};
    for (const char* p : parts) (void)!::write(2, p, std::strlen(p));
    ::_exit(127);
  }
  out_w.reset();  // the child's ends: the parent reads until the child closes its copies
  err_w.reset();
  if (pid < 0) {
    error = std::string("cannot start '") + argv[0] + "': " + std::strerror(errno);
    return r;
  }
  const long long deadline = timeout_s > 0 ? command_detail::now_ms() + static_cast<long long>(timeout_s * 1000) : 0;
  if (!command_detail::drain(std::move(out_r), std::move(err_r), r.out, r.err, deadline)) {
    ::kill(pid, SIGKILL);
    error = "'" + argv[0] + "' did not end within " + std::to_string(static_cast<int>(timeout_s)) + " s";
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace fibra::detail
