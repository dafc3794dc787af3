// src/common/command.hpp: a child command run to its end with its output captured, for every fibra
// library (the `fibra` command's Slurm calls, and a driver's Pool::adapt, which submits worker
// jobs). Header-only: fibra_slurm takes it through the fibra_internal target (CMakeLists.txt).
#pragma once

#include <fcntl.h>
#include <poll.h>
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
/// Reads both pipes until both are closed, so neither can fill up and block the child.
inline void drain(UniqueFd out_fd, UniqueFd err_fd, std::string& out, std::string& err) {
  UniqueFd* owners[2] = {&out_fd, &err_fd};
  pollfd fds[2] = {{out_fd.get(), POLLIN, 0}, {err_fd.get(), POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open = 2;
  char buf[4096];
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
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
}
}  // namespace command_detail

/// Runs `argv` (its first word searched in PATH) with stdin from /dev/null, to its end. `env`: its
/// whole environment ("NAME=value" each); empty: this process's. `error` is set when it cannot
/// even begin (no pipe, no fork), and the status is then -1.
inline CommandOutput run_command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                 std::string& error) {
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
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
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
    std::fprintf(stderr, "cannot run '%s': %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  out_w.reset();  // the child's ends: the parent reads until the child closes its copies
  err_w.reset();
  if (pid < 0) {
    error = std::string("cannot start '") + argv[0] + "': " + std::strerror(errno);
    return r;
  }
  command_detail::drain(std::move(out_r), std::move(err_r), r.out, r.err);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace fibra::detail
