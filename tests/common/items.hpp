// The items the MPI, join and Slurm suites map over: 0, 1, ..., n - 1 (each test checks 3 i + 1,
// computed on its own side).
#pragma once

#include <cstddef>
#include <vector>

namespace fibra_test {

/// @brief The n items 0 .. n - 1.
inline std::vector<long> upto(long n) {
  std::vector<long> v(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

}  // namespace fibra_test
