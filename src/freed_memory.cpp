#include "freed_memory.hpp"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstdlib>
#include <string>

namespace fibra::detail {

namespace {
constexpr auto check_every = std::chrono::seconds(1);
constexpr auto idle_after = std::chrono::seconds(1);
}  // namespace

FreedMemory::FreedMemory(std::size_t keep_bytes) : keep_(keep_bytes) {
  if (keep_ == 0) return;
  // Every block from the heap (none an mmap of its own, which free() unmaps); a free top of the
  // heap up to the bound is not trimmed at each free(). mallopt fails only on a value out of range.
  if (::mallopt(M_MMAP_MAX, 0) != 1 || ::mallopt(M_TRIM_THRESHOLD, int(std::min<std::size_t>(keep_, 1u << 30))) != 1)
    keep_ = 0;
}

void FreedMemory::ran() {
  if (keep_ == 0) return;
  const auto now = Clock::now();
  last_batch_ = now;
  given_back_ = false;
  if (now - last_check_ < check_every) return;
  last_check_ = now;
  // Free bytes in the heap, including those already given back (malloc_trim leaves their blocks
  // free in its lists): at worst a give-back a second that finds little to do.
  if (::mallinfo2().fordblks > keep_) ::malloc_trim(0);
}

void FreedMemory::waited() {
  if (keep_ == 0 || given_back_ || Clock::now() - last_batch_ < idle_after) return;
  ::malloc_trim(0);
  given_back_ = true;
}

namespace {
std::mutex g_driver_mu;  // one communication thread at a time looks
std::atomic<FreedMemory*> g_driver{nullptr};
}  // namespace

void driver_keeps_freed(std::size_t keep_bytes) {
  if (keep_bytes == 0) return;
  std::lock_guard lk(g_driver_mu);
  static FreedMemory* const driver = new FreedMemory(keep_bytes);  // for the process's life
  g_driver.store(driver);
}

void driver_heap_turn(bool busy) noexcept {
  FreedMemory* d = g_driver.load(std::memory_order_relaxed);
  if (!d) return;
  std::unique_lock lk(g_driver_mu, std::try_to_lock);
  if (!lk) return;
  if (busy) d->ran();
  else d->waited();
}

std::size_t keep_freed_bytes_from_env() {
  const char* s = std::getenv("FIBRA_KEEP_FREED");
  if (!s || !*s) return std::size_t(256) << 20;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  return end && *end == '\0' ? std::size_t(v) : std::size_t(256) << 20;
}

}  // namespace fibra::detail
