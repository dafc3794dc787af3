// hdf5_io/src/checksum.hpp: a fast 64-bit checksum of bytes (internal).
//
// Four independent multiply-rotate lanes over 8-byte words, then a final avalanche. It detects torn
// and garbled journal records; it is not cryptographic.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fibra::hdf5_io::detail {

inline constexpr std::uint64_t prime1 = 0x9e3779b185ebca87ULL;
inline constexpr std::uint64_t prime2 = 0xc2b2ae3d27d4eb4fULL;

inline std::uint64_t load64(const std::byte* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

inline std::uint64_t lane(std::uint64_t h, std::uint64_t w) noexcept { return std::rotl(h + w * prime2, 31) * prime1; }

inline std::uint64_t avalanche(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= prime2;
  h ^= h >> 29;
  h *= prime1;
  return h ^ (h >> 32);
}

/// Checksum of `n` bytes at `p`, continuing from `seed` (so a header and its payload chain).
inline std::uint64_t checksum(const std::byte* p, std::size_t n, std::uint64_t seed = 0) noexcept {
  std::uint64_t a = seed + prime1, b = seed ^ prime2, c = seed - prime1, d = ~seed;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = lane(a, load64(p + i));
    b = lane(b, load64(p + i + 8));
    c = lane(c, load64(p + i + 16));
    d = lane(d, load64(p + i + 24));
  }
  std::uint64_t h = std::rotl(a, 1) + std::rotl(b, 7) + std::rotl(c, 12) + std::rotl(d, 18) + n * prime1;
  for (; i + 8 <= n; i += 8) h = lane(h, load64(p + i));
  for (; i < n; ++i) h = lane(h, std::uint64_t(p[i]) + 1);
  return avalanche(h);
}

}  // namespace fibra::hdf5_io::detail
