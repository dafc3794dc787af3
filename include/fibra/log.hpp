// fibra/log.hpp: the lines fibra itself writes ("fibra: worker 2 of 4 on node7 (pid 4242) was lost:
// ..."), their level, and where they go.
//
//   fibra::log::set_level(fibra::log::Level::error);        // only errors
//   fibra::log::set_sink([&](fibra::log::Level, std::string_view line) { my_log << line << '\n'; });
//
// The environment variable FIBRA_LOG_LEVEL (debug, info, warning, error, off) sets the level of every
// fibra process of a run, the driver's and its workers' (which inherit it); the default is info.
// Workers' lines go to their stderr, which Open MPI forwards to the driver's; set_sink applies to
// the process that calls it.
#pragma once

#include <functional>
#include <string_view>

namespace fibra::log {

/// @brief How much a line matters.
enum class Level { debug = 0, info = 1, warning = 2, error = 3, off = 4 };

/// @brief Lines below `level` are not written.
void set_level(Level level);
/// @brief The level now (FIBRA_LOG_LEVEL, or info, until set_level).
Level level();
/// @brief Sends each line (without its newline) to `sink` instead of stderr; an empty function
///        restores stderr. The sink may be called from fibra's threads, one line at a time; it may
///        call a Pool's stats() or size(), but not fibra::log itself.
void set_sink(std::function<void(Level, std::string_view)> sink);
/// @brief The level a name means ("debug", "info", "warning", "error", "off"); throws ConfigError
///        naming the names for anything else.
Level parse_level(std::string_view name);

}  // namespace fibra::log
