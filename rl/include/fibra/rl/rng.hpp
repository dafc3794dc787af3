// fibra/rl/rng.hpp: the portable generator every random number of fibra::rl comes from.
#pragma once

#include <cstdint>

namespace fibra::rl {

/// @brief splitmix64 (Steele, Lea, Flood 2014), the generator of jobs/envs' envs::SplitMix64 (a
/// unit test checks that both give the same sequence), with the draws fibra::rl needs. Integer
/// arithmetic and no std:: distributions, so a seed gives the same numbers under every compiler
/// and standard library. Copyable; its whole state is one integer (checkpoints save state()).
///
///   fibra::rl::Rng rng(42);
///   double u = rng.uniform();   // [0, 1)
///   double z = rng.normal();    // standard normal (Box-Muller, two uniforms a draw)
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : state_(seed) {}

  /// @brief The next 64 random bits.
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// @brief A double in [0, 1): the top 53 bits, each value a multiple of 2^-53.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// @brief An integer in [0, n), n >= 1 (Lemire's multiply-shift: no modulo, the same on every
  /// platform; its bias, below n / 2^64, is immaterial here).
  std::uint64_t below(std::uint64_t n) {
    __extension__ typedef unsigned __int128 wide;  // GCC and Clang; __extension__ keeps -Wpedantic quiet
    return static_cast<std::uint64_t>((static_cast<wide>(next()) * n) >> 64);
  }
  /// @brief A standard normal draw: Box-Muller's cosine branch over two uniforms (the sine branch
  /// is dropped, so a draw is a function of two next() calls and the state alone).
  double normal();

  /// @brief The whole state, for checkpoints: Rng(r.state()) continues where r is.
  std::uint64_t state() const { return state_; }

  /// @brief Boost.Serialization (fibra ships it between processes).
  template <class Archive>
  void serialize(Archive& ar, unsigned /*version*/) {
    ar& state_;
  }

 private:
  std::uint64_t state_;
};

}  // namespace fibra::rl
