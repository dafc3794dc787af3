// src/driver/event_log.hpp: the run's event log (PoolOptions::events, FIBRA_EVENTS): what became of
// every chunk, worker and call, as JSON lines appended to <folder>/events.jsonl by the driver.
// docs/observability.md lists the events and their fields; `fibra trace` reads them.
//
// Events are buffered in memory and written by a thread of the log's own at least every 0.2 s, so
// that adding one never waits for the disk, and a driver killed by SIGKILL leaves every event but
// those of its last fraction of a second, in whole lines but perhaps the last. Nothing is dropped
// silently: past 64 MiB waiting to be written, events are counted instead, and a `dropped` event
// says how many; a file that refuses a write (a full disk) is said once, as a warning, and the log
// keeps nothing more. One process writes a log at a time (a lock on the file).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "observe/event_clock.hpp"

namespace fibra::detail {

class EventLog {
 public:
  /// The log of `folder` (made, with its parents, if it is not there), shared by every pool of this
  /// process that names it. Its first line says which process writes it (a `log` event); a log
  /// that is there already is appended to (a requeued job's second run follows its first).
  /// @throws ConfigError naming the folder and why, if it cannot be written.
  static std::shared_ptr<EventLog> open(const std::string& folder);
  ~EventLog();  ///< writes what is buffered, then an `end` event
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  /// Writes what is buffered now (a pool that stops: a program may end by _Exit after it).
  void flush();

  /// Appends `{"ev":"<ev>","t":<now>` then `fields` (`,"pool":3,...`: members already encoded,
  /// each with its leading comma) and `}`. `t` is microseconds since the Unix epoch.
  void add(std::string_view ev, std::string_view fields);

  /// `s` as a JSON string: quoted, with quotes, backslashes and control characters escaped, and a
  /// byte that is not part of well-formed UTF-8 written as '?'.
  static std::string quoted(std::string_view s);
  /// The same, appended to `out`.
  static void append_quoted(std::string& out, std::string_view s);
  /// The file's path.
  const std::string& path() const;

  struct Impl;

 private:
  explicit EventLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

using observe::event_time_us;  // the log's clock

}  // namespace fibra::detail
