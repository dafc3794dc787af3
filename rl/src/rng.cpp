// Rng's draws that need libm.
#include <fibra/rl/rng.hpp>

#include <cmath>
#include <numbers>

namespace fibra::rl {

double Rng::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace fibra::rl
