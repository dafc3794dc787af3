// src/common/slurm_time.hpp: Slurm's way of writing a duration, read by the driver (the --time of
// Pool::adapt's worker jobs), by a joining agent (squeue's %L, the time its job has left) and by the
// job spec's reader (fibra::slurm::parse_time_limit). The one parser of it. Header-only.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace fibra::detail {

/// Seconds of a Slurm time: "minutes", "minutes:seconds", "hours:minutes:seconds" or
/// "days-hours[:minutes[:seconds]]"; -1 if it is none of those ("UNLIMITED", "INVALID"), or if a
/// field has more than 6 digits.
inline double slurm_time_s(const std::string& t) {
  long days = 0;
  std::string rest = t;
  if (const auto dash = rest.find('-'); dash != std::string::npos) {
    if (dash == 0 || dash > 6 || rest.find_first_not_of("0123456789") != dash) return -1;
    days = std::atol(rest.substr(0, dash).c_str());
    rest = rest.substr(dash + 1);
  }
  std::vector<long> parts;
  for (std::size_t at = 0;;) {
    const auto colon = rest.find(':', at);
    const std::string p = rest.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    if (p.empty() || p.size() > 6 || p.find_first_not_of("0123456789") != std::string::npos) return -1;
    parts.push_back(std::atol(p.c_str()));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  if (parts.size() > 3) return -1;
  if (t.find('-') != std::string::npos)  // days-hours[:minutes[:seconds]]
    return double(days) * 86400 + double(parts[0]) * 3600 + (parts.size() > 1 ? double(parts[1]) * 60 : 0) +
           (parts.size() > 2 ? double(parts[2]) : 0);
  if (parts.size() == 1) return double(parts[0]) * 60;  // minutes
  double s = 0;
  for (long x : parts) s = s * 60 + double(x);
  return s;
}

}  // namespace fibra::detail
