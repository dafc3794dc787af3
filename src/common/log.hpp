// src/common/log.hpp: how fibra's own code writes a line (fibra/log.hpp has the level and the sink).
//
//   log::warning("fibra: {} was lost: {}", who, why);
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>

#include "fibra/log.hpp"

namespace fibra::log {

/// Writes one whole line at `level` (to the sink, else stderr with a newline). Never throws.
void write(Level level, std::string_view line) noexcept;
/// Whether a line at `level` would be written (skip building it otherwise).
bool enabled(Level level) noexcept;

template <class... A>
void line(Level lv, fmt::format_string<A...> f, A&&... a) noexcept {
  if (!enabled(lv)) return;
  try {
    write(lv, fmt::format(f, std::forward<A>(a)...));
  } catch (...) {  // a line that cannot be built is not worth an exception where it was logged
  }
}
template <class... A>
void debug(fmt::format_string<A...> f, A&&... a) noexcept {
  line(Level::debug, f, std::forward<A>(a)...);
}
template <class... A>
void info(fmt::format_string<A...> f, A&&... a) noexcept {
  line(Level::info, f, std::forward<A>(a)...);
}
template <class... A>
void warning(fmt::format_string<A...> f, A&&... a) noexcept {
  line(Level::warning, f, std::forward<A>(a)...);
}
template <class... A>
void error(fmt::format_string<A...> f, A&&... a) noexcept {
  line(Level::error, f, std::forward<A>(a)...);
}

}  // namespace fibra::log
