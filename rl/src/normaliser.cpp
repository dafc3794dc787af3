// ObsMoments (Welford, Chan et al.'s merge) and ObsNormaliser.
#include <fibra/rl/normaliser.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace fibra::rl {

void ObsMoments::add(std::span<const double> row) {
  if (row.size() != mean.size())
    throw std::invalid_argument("fibra::rl: ObsMoments::add of a row of " + std::to_string(row.size()) +
                                " values to moments of " + std::to_string(mean.size()));
  ++count;
  const double n = static_cast<double>(count);
  for (std::size_t i = 0; i < row.size(); ++i) {
    const double delta = row[i] - mean[i];
    mean[i] += delta / n;
    m2[i] += delta * (row[i] - mean[i]);
  }
}

void ObsMoments::merge(const ObsMoments& other) {
  if (other.count == 0) return;
  if (mean.empty() && count == 0) {
    *this = other;
    return;
  }
  if (other.mean.size() != mean.size())
    throw std::invalid_argument("fibra::rl: cannot merge moments of " + std::to_string(other.mean.size()) +
                                " values into moments of " + std::to_string(mean.size()));
  const double na = static_cast<double>(count), nb = static_cast<double>(other.count), n = na + nb;
  for (std::size_t i = 0; i < mean.size(); ++i) {
    const double delta = other.mean[i] - mean[i];
    mean[i] += delta * (nb / n);
    m2[i] += other.m2[i] + delta * delta * (na * nb / n);
  }
  count += other.count;
}

double ObsMoments::variance(int i) const {
  return count == 0 ? 1.0 : m2[static_cast<std::size_t>(i)] / static_cast<double>(count);
}

void ObsNormaliser::normalise(std::span<const double> in, std::span<float> out) const {
  const std::size_t d = moments_.mean.size();
  if (in.size() != out.size() || d == 0 || in.size() % d != 0)
    throw std::invalid_argument("fibra::rl: ObsNormaliser::normalise of " + std::to_string(in.size()) +
                                " values into " + std::to_string(out.size()) + ", in rows of " + std::to_string(d));
  if (!enabled) {
    std::transform(in.begin(), in.end(), out.begin(), [](double x) { return static_cast<float>(x); });
    return;
  }
  for (std::size_t i = 0; i < d; ++i) {
    const double mean = moments_.count == 0 ? 0.0 : moments_.mean[i];
    const double scale = 1.0 / std::sqrt(moments_.variance(static_cast<int>(i)) + epsilon);
    for (std::size_t r = i; r < in.size(); r += d)
      out[r] = static_cast<float>(std::clamp((in[r] - mean) * scale, -clip, clip));
  }
}

}  // namespace fibra::rl
