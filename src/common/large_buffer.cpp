// Large payload buffers (fibra/detail/codec.hpp): huge pages, copies split across cores, strings
// grown without the zero fill that std::string::resize does, and the memory of finished payloads
// kept for the next large buffer (spares).
//
// This file is compiled as C++23 (CMakeLists.txt) for std::string::resize_and_overwrite: a buffer
// about to be overwritten need not be zeroed first, and only a raw pointer lets the copy be split.
// The functions take and return only types whose layout C++20 and C++23 share.
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fibra/detail/codec.hpp"

namespace fibra::detail {
namespace {

// A copy below this is one memcpy; above it, each extra thread takes at least this much.
constexpr std::size_t split_bytes = std::size_t(8) << 20;
constexpr unsigned max_copy_threads = 4;

// Cores this process may run on (its affinity mask, which Slurm and mpirun narrow), not the
// machine's: threads past them would only take turns.
unsigned usable_cores() {
  static const unsigned n = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1u;
    return std::max(1u, unsigned(CPU_COUNT(&set)));
  }();
  return n;
}

// Large buffers given back (payloads of finished chunks), kept warm for the next large buffer: a
// fresh one costs its page faults, 64 MiB about 6 ms more to fill here than memory already used.
constexpr std::size_t max_spares = 2;
constexpr std::size_t spare_bytes = std::size_t(256) << 20;  // at most this much kept in all
struct Spares {
  std::mutex mu;
  std::vector<std::string> bufs;
};
// Never destroyed: a payload may go after static destructors ran (a pool in a global).
Spares& spares_() {
  static Spares* s = [] {
    auto* p = new Spares;
    p->bufs.reserve(max_spares + 1);
    return p;
  }();
  return *s;
}

// A spare of room for n bytes (the smallest such), or an empty string.
std::string take_spare(std::size_t n) {
  auto& [mu, spares] = spares_();
  std::lock_guard lk(mu);
  auto best = spares.end();
  for (auto it = spares.begin(); it != spares.end(); ++it)  // not one far larger: it would be held long
    if (it->capacity() >= n && it->capacity() / 2 <= n && (best == spares.end() || it->capacity() < best->capacity()))
      best = it;
  if (best == spares.end()) return {};
  std::string s = std::move(*best);
  spares.erase(best);
  s.clear();
  return s;
}

}  // namespace

void advise_large(const void* p, std::size_t n) noexcept {
  if (n < large_buffer) return;
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) & ~(huge - 1);
  // Advice only: a kernel without transparent huge pages says no, and 4 KiB pages serve as before.
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void copy_large(void* dst, const void* src, std::size_t n) noexcept {
  const unsigned parts = unsigned(std::min<std::size_t>({usable_cores(), max_copy_threads, n / split_bytes}));
  if (parts <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const std::size_t part = (n / parts + 4095) & ~std::size_t(4095);  // whole pages each
  std::vector<std::thread> helpers;
  std::size_t at = part;  // the first part is this thread's
  try {
    helpers.reserve(parts - 1);
    for (; at < n; at += part) {
      const std::size_t len = std::min(part, n - at);
      helpers.emplace_back([=] { std::memcpy(d + at, s + at, len); });
    }
  } catch (...) {  // no thread to be had (a limit on threads): this one copies the rest
    std::memcpy(d + at, s + at, n - at);
  }
  std::memcpy(d, s, std::min(part, n));
  for (auto& t : helpers) t.join();
}

void reserve_large(std::string& s, std::size_t n) {
  if (n <= s.capacity()) return;
  if (n >= large_buffer) {
    std::string spare = take_spare(n);
    if (spare.capacity() >= n) {  // warm memory: no page to fault in
      spare.assign(s);
      s.swap(spare);
      return;
    }
  }
  if (s.empty()) std::string().swap(s);  // a fresh allocation, not a copy of nothing into it
  s.reserve(n);
  advise_large(s.data() + s.size(), s.capacity() - s.size());
}

void give_back_large(std::string& s) noexcept {
  if (s.capacity() < large_buffer || s.capacity() > spare_bytes) return;
  std::string evicted[max_spares];  // freed after the lock (unmapping 256 MiB takes a while)
  auto& [mu, spares] = spares_();
  std::lock_guard lk(mu);
  std::size_t kept = s.capacity();
  for (const auto& x : spares) kept += x.capacity();
  // The newest is kept; the oldest go first when there is no room for it.
  for (std::size_t i = 0; !spares.empty() && (spares.size() >= max_spares || kept > spare_bytes); ++i) {
    kept -= spares.front().capacity();
    evicted[i] = std::move(spares.front());
    spares.erase(spares.begin());
  }
  spares.push_back(std::move(s));  // room reserved: no allocation
}

std::shared_ptr<const std::string> share_payload(std::string payload) {
  if (payload.capacity() < large_buffer) return std::make_shared<const std::string>(std::move(payload));
  return std::shared_ptr<const std::string>(new std::string(std::move(payload)), [](const std::string* p) {
    give_back_large(*const_cast<std::string*>(p));
    delete p;
  });
}

void resize_large(std::string& s, std::size_t n) {
  if (n < large_buffer) {
    s.resize(n);
    return;
  }
  if (s.capacity() < n) {
    std::string().swap(s);
    reserve_large(s, n);
  }
  // Its bytes are overwritten by the caller: no zero fill (which would fault every page in first).
  s.resize_and_overwrite(n, [n](char*, std::size_t) { return n; });
}

void append_large(std::string& s, const void* p, std::size_t n) {
  const std::size_t at = s.size();
  if (s.capacity() - at < n) reserve_large(s, at + n);
  s.resize_and_overwrite(at + n, [&](char* out, std::size_t) {
    copy_large(out + at, p, n);
    return at + n;  // not the length the callback is given: libstdc++ passes the grown capacity
  });
}

void extend_unwritten(std::string& s, std::size_t n,
                      const std::function<void(char* to, const char* from, std::size_t size)>& copy) {
  if (n <= s.size()) return;
  if (s.capacity() < n) {
    // Room for the frame's tail and another block or two, so that it seldom moves again.
    std::string bigger;
    reserve_large(bigger, std::max(n + (std::size_t(1) << 20), 2 * s.capacity()));
    const std::size_t size = s.size();
    bigger.resize_and_overwrite(size, [&](char* to, std::size_t) {
      copy(to, s.data(), size);
      return size;
    });
    s.swap(bigger);
  }
  s.resize_and_overwrite(n, [n](char*, std::size_t) { return n; });
}

}  // namespace fibra::detail
