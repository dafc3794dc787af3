// Huge pages for large payload buffers (fibra/detail/codec.hpp).
#include <sys/mman.h>

#include <cstdint>
#include <string>

#include "fibra/detail/codec.hpp"

namespace fibra::detail {

void advise_large(const void* p, std::size_t n) noexcept {
  if (n < large_buffer) return;
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) & ~(huge - 1);
  // Advice only: a kernel without transparent huge pages says no, and 4 KiB pages serve as before.
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void reserve_large(std::string& s, std::size_t n) {
  if (n <= s.capacity()) return;
  if (s.empty()) std::string().swap(s);  // a fresh allocation, not a copy of nothing into it
  s.reserve(n);
  advise_large(s.data() + s.size(), s.capacity() - s.size());
}

void resize_large(std::string& s, std::size_t n) {
  if (n >= large_buffer && s.capacity() < n) {
    std::string().swap(s);
    reserve_large(s, n);
  }
  s.resize(n);
}

}  // namespace fibra::detail
