#include "common/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "fibra/error.hpp"
#include "common/env.hpp"

namespace fibra::log {
namespace {

Level from_environment() {
  const char* v = fibra::detail::env::raw("FIBRA_LOG_LEVEL");
  if (!v || !*v) return Level::info;
  try {
    return parse_level(v);
  } catch (const Error& e) {
    const std::string msg = std::string(e.what()) + "; using info\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg.data(), msg.size());
    return Level::info;
  }
}

std::atomic<int>& current() {
  static std::atomic<int> level{static_cast<int>(from_environment())};
  return level;
}

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

std::function<void(Level, std::string_view)>& sink() {
  static std::function<void(Level, std::string_view)> s;
  return s;
}

}  // namespace

void set_level(Level level) { current().store(static_cast<int>(level)); }

Level level() { return static_cast<Level>(current().load()); }

void set_sink(std::function<void(Level, std::string_view)> s) {
  std::lock_guard lk(sink_mutex());
  sink() = std::move(s);
}

Level parse_level(std::string_view name) {
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warning") return Level::warning;
  if (name == "error") return Level::error;
  if (name == "off") return Level::off;
  throw ConfigError("fibra: '" + std::string(name) +
                    "' is not a log level (FIBRA_LOG_LEVEL): use debug, info, warning, error or off");
}

bool enabled(Level level) noexcept { return level != Level::off && static_cast<int>(level) >= current().load(); }

void write(Level level, std::string_view line) noexcept {
  if (!enabled(level)) return;
  std::lock_guard lk(sink_mutex());
  if (sink()) {
    try {
      sink()(level, line);
      return;
    } catch (...) {  // a sink that throws loses its line to stderr, not the run
    }
  }
  std::string out(line);
  out += '\n';
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, out.data(), out.size());  // one write: whole lines
}

}  // namespace fibra::log
