#include "common/freed_memory.hpp"

#include <malloc.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fibra/options.hpp"
#include "common/env.hpp"

#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 33)
#define FIBRA_HAVE_MALLINFO2 1
#endif
#endif

namespace fibra::detail {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

std::atomic<bool> g_on{false};
std::atomic<std::int64_t> g_busy_ms{0};  // the last mark (freed_memory_busy, a batch's start or end)
std::atomic<int> g_running{0};           // batches running (RunningBatch)
std::atomic<bool> g_armed{false};        // marked since the last idle give-back

#ifdef FIBRA_HAVE_MALLINFO2
// Bytes free in the heap. They include what malloc_trim already gave back (it leaves those blocks
// in the free lists), hence the watcher's baseline below.
std::size_t free_bytes() { return ::mallinfo2().fordblks; }

// Once a second: gives back what lies free when more than the bound came free since the last
// give-back (the baseline, lowered whenever a look finds less free: memory given back and taken
// again), and once when the process turns idle after being busy. `sleep_when_idle`: after that,
// it sleeps until the process is busy again (an idle executor frees nothing), rather than waking
// each second.
[[noreturn]] void watch(std::size_t keep, bool sleep_when_idle) {
  std::size_t base = free_bytes();
  for (;;) {
    if (sleep_when_idle) g_armed.wait(false, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const std::size_t free = free_bytes();
    base = std::min(base, free);
    const bool idle = g_running.load(std::memory_order_relaxed) == 0 &&
                      now_ms() - g_busy_ms.load(std::memory_order_relaxed) >= freed_memory_idle_seconds * 1000;
    if (free - base > keep || (idle && g_armed.exchange(false, std::memory_order_relaxed))) {
      ::malloc_trim(0);
      base = free_bytes();
    }
  }
}
#endif

}  // namespace

bool keep_freed_memory(std::size_t keep_bytes, bool sleep_when_idle) {
  static std::mutex mu;
  static bool decided = false;
  std::lock_guard lk(mu);
  if (decided) return g_on.load();
  if (keep_bytes == 0) return false;  // left as it is; a later call may still decide
  decided = true;
#ifdef FIBRA_HAVE_MALLINFO2
  g_busy_ms.store(now_ms());
  try {
    std::thread(watch, keep_bytes, sleep_when_idle).detach();  // for the process's life
  } catch (const std::exception&) {                            // no thread to be had: the allocator is left as it is
    return false;
  }
  g_on.store(true);
  // A child forked without exec has no watcher: glibc's defaults again (malloc is usable in a
  // child handler; glibc resets its locks before these run).
  ::pthread_atfork(nullptr, nullptr, [] {
    g_on.store(false);
    ::mallopt(M_MMAP_MAX, 65536);
    ::mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  });
  // Every block from the heap (none an mmap of its own, which free() unmaps), and a free top of
  // the heap up to the bound not trimmed at each free(). mallopt fails only on a value out of range.
  const int threshold = int(std::min<std::size_t>(keep_bytes, INT_MAX));
  return ::mallopt(M_MMAP_MAX, 0) == 1 && ::mallopt(M_TRIM_THRESHOLD, threshold) == 1;
#else
  (void)keep_bytes;
  (void)sleep_when_idle;
  return false;
#endif
}

void freed_memory_busy() noexcept {
  if (!g_on.load(std::memory_order_relaxed)) return;
  g_busy_ms.store(now_ms(), std::memory_order_relaxed);
  if (!g_armed.load(std::memory_order_relaxed)) {
    g_armed.store(true, std::memory_order_relaxed);
    g_armed.notify_one();  // a watcher asleep until the process is busy again
  }
}

RunningBatch::RunningBatch() noexcept {
  g_running.fetch_add(1, std::memory_order_relaxed);
  freed_memory_busy();
}

RunningBatch::~RunningBatch() {
  freed_memory_busy();
  g_running.fetch_sub(1, std::memory_order_relaxed);
}

namespace {
thread_local std::vector<std::string> t_scratch;
constexpr std::size_t scratch_kept = 4;
constexpr std::size_t scratch_most = std::size_t(1) << 20;
}  // namespace

std::string scratch_buffer(std::size_t n) {
  auto best = t_scratch.end();  // the smallest that is large enough: a small answer leaves the large buffers
  for (auto it = t_scratch.begin(); it != t_scratch.end(); ++it)
    if (it->capacity() >= n && (best == t_scratch.end() || it->capacity() < best->capacity())) best = it;
  if (best != t_scratch.end()) {
    std::string s = std::move(*best);
    t_scratch.erase(best);
    s.clear();
    return s;
  }
  std::string s;
  reserve_large(s, n);  // (a large one with huge pages, not faulted in page by page: codec.hpp)
  return s;
}

void keep_scratch(std::string&& s) noexcept {
  if (s.capacity() < 1024 || s.capacity() > scratch_most) return;
  try {
    if (t_scratch.size() >= scratch_kept) {  // the smallest goes
      auto smallest = std::min_element(t_scratch.begin(), t_scratch.end(),
                                       [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
      if (smallest->capacity() >= s.capacity()) return;
      *smallest = std::move(s);
      return;
    }
    t_scratch.push_back(std::move(s));
  } catch (...) {  // no room to keep it: it is freed
  }
}

std::size_t keep_freed_bytes_from_env() {
  const std::size_t fallback = PoolOptions{}.keep_freed_mib << 20;
  return static_cast<std::size_t>(env::number("FIBRA_KEEP_FREED", double(fallback), 0, 1e15, true));
}

}  // namespace fibra::detail
