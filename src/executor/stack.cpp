// The task thread and its stack (state.hpp): its bounds, and a stack overflow told as one.
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <memory>
#include <mutex>

#include "executor/state.hpp"

namespace fibra::detail::exec {

thread_local constinit TaskThread t_task;

namespace {

// On a SIGSEGV at the end of a task thread's stack the mailbox says so before the process dies
// (the signal is delivered on an alternate stack: the thread's own has no room left).
void on_segv(int sig, siginfo_t* si, void*) {
  const char* at = static_cast<const char*>(si->si_addr);
  constexpr std::size_t window = std::size_t(1) << 20;  // the guard, and what a frame may skip past it
  if (t_task.low && at + window >= t_task.low && at < t_task.low + 4 * 4096 && g_executor.box)
    g_executor.box->stack_overflow.store(1, std::memory_order_relaxed);
  // SA_RESETHAND made the action the default again. The signal is raised again, since it may have
  // come from raise() or kill() (a task that ends itself so), after which nothing faults again: it
  // is blocked until this handler returns, and then ends the process by SIGSEGV, as without it.
  ::raise(sig);
}

}  // namespace

void watch_stack() {
  pthread_attr_t attr;
  if (::pthread_getattr_np(::pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    std::size_t size = 0;
    if (::pthread_attr_getstack(&attr, &addr, &size) == 0) {
      t_task.low = static_cast<char*>(addr);
      t_task.high = t_task.low + size;
    }
    ::pthread_attr_destroy(&attr);
  }
  static thread_local std::unique_ptr<char[]> alt;
  if (!alt) {
    constexpr std::size_t alt_bytes = 64 * 1024;
    alt = std::make_unique<char[]>(alt_bytes);
    stack_t ss{};
    ss.ss_sp = alt.get();
    ss.ss_size = alt_bytes;
    ::sigaltstack(&ss, nullptr);
  }
  static std::once_flag installed;  // once per process: a handler a task installed later stays
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, nullptr);
  });
}

void become_task_thread() {
  t_task.is = true;
  watch_stack();
}

std::size_t stack_left() {
  char here = 0;
  if (!t_task.low || &here < t_task.low || &here > t_task.high) return SIZE_MAX;
  return static_cast<std::size_t>(&here - t_task.low);
}

}  // namespace fibra::detail::exec
