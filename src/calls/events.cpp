// src/calls/events.cpp: a library's or a call's way into the event log of the pool it runs on
// (fibra/detail/events.hpp), for every role: the driver registers how its pools are found
// (driver/pool_events.cpp); in an agent or an executor none is, and there is no log to write.
#include <atomic>
#include <cstdio>

#include "calls/calls.hpp"
#include "fibra/detail/events.hpp"

namespace fibra::detail {

namespace {
std::atomic<EventSink (*)(std::uint64_t)> g_sink_finder{nullptr};

// The length of the well-formed UTF-8 sequence `s` starts with (two to four bytes), or 0.
std::size_t utf8_length(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  const std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
  if (n == 0 || s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i)
    if ((b(i) & 0xC0) != 0x80) return 0;
  if (n == 3 && ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) >= 0xA0))) return 0;  // overlong, surrogate
  if (n == 4 && ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) >= 0x90))) return 0;  // overlong, past U+10FFFF
  return n;
}
}  // namespace

void set_pool_event_sink_finder(EventSink (*finder)(std::uint64_t)) noexcept { g_sink_finder.store(finder); }

EventSink pool_event_sink(std::uint64_t pool_uid) {
  const auto finder = g_sink_finder.load();
  return finder ? finder(pool_uid) : EventSink{};
}

std::string json_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_quoted(out, s);
  return out;
}

void append_json_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {  // whole UTF-8 sequences as they are; any other byte as '?' (JSON is UTF-8)
      const std::size_t n = utf8_length(s.substr(i));
      if (n == 0) {
        out += '?';
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

}  // namespace fibra::detail
