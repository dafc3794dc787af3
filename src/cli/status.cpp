// src/cli/status.cpp: `fibra status` and `fibra top` (src/cli/status.hpp).
#include "status.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "event_reader.hpp"

namespace fibra::cli {

namespace {

constexpr std::int64_t rate_window_us = 10'000'000;

std::int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// A chunk's state: its last attempt's outcome.
enum class State { waiting, running, done, failed, other };

State state_of(const ChunkRecord& c) {
  for (auto a = c.attempts.rbegin(); a != c.attempts.rend(); ++a) {
    if (a->sent == 0 && a->outcome.empty()) continue;
    if (a->outcome == "done") return State::done;
    if (a->outcome == "failed") return a->retried ? State::waiting : State::failed;
    if (a->outcome == "requeued") return State::waiting;
    if (a->outcome.empty()) return State::running;
    return State::other;  // cancelled, abandoned
  }
  return State::waiting;
}

}  // namespace

bool run_is_live(const EventLogRecord& log) {
  if (log.segments.empty()) return false;
  const SegmentRecord& s = log.segments.back();
  if (s.ended) return false;
  if (s.host != this_host()) return true;
  return ::kill(static_cast<pid_t>(s.pid), 0) == 0 || errno == EPERM;
}

std::string status_text(const EventLogRecord& log, std::int64_t now_us) {
  const SegmentRecord& s = log.segments.back();
  const int segment = static_cast<int>(log.segments.size()) - 1;
  const bool live = run_is_live(log);
  std::string text =
      fmt::format("run        {} on {} (pid {}), {}: {:.1f} s since it started, last event {:.1f} s ago\n", s.program,
                  s.host, s.pid,
                  s.ended ? "ended"
                  : live  ? "running"
                          : "gone without ending its log (killed?)",
                  double(std::max(log.last, s.started) - s.started) / 1e6, double(now_us - log.last) / 1e6);
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::pair<int, int>> calls;  // (pool, call) -> open, failed
  std::size_t chunks = 0, done = 0, failed = 0, running = 0, waiting = 0, retried = 0;
  std::uint64_t items = 0, items_done = 0, recent = 0;
  std::int64_t first_done = 0;
  for (const auto& c : log.chunks) {
    if (c.segment != segment) continue;
    ++chunks;
    items += c.count;
    for (const auto& a : c.attempts) retried += a.outcome == "failed" && a.retried;
    auto& call = calls[{c.pool, c.call}];
    switch (state_of(c)) {
      case State::done: {
        ++done;
        items_done += c.count;
        const std::int64_t at = c.attempts.back().ended;
        if (at > log.last - rate_window_us) recent += c.count;
        first_done = first_done ? std::min(first_done, at) : at;
        break;
      }
      case State::failed:
        ++failed;
        ++call.second;
        break;
      case State::running:
        ++running;
        ++call.first;
        break;
      case State::waiting:
        ++waiting;
        ++call.first;
        break;
      case State::other: break;
    }
  }
  std::size_t open = 0, failed_calls = 0;
  for (const auto& [id, c] : calls) {
    open += c.first > 0;
    failed_calls += c.first == 0 && c.second > 0;
  }
  text += fmt::format("calls      {} in progress, {} done, {} failed\n", open, calls.size() - open - failed_calls,
                      failed_calls);
  text += fmt::format("chunks     {} queued: {} done, {} failed, {} running, {} waiting; {} attempts retried\n", chunks,
                      done, failed, running, waiting, retried);
  text += fmt::format("items      {} of {} queued done ({:.1f}%)\n", items_done, items,
                      items ? 100.0 * double(items_done) / double(items) : 100.0);
  // The last 10 s to now while the run lives (a stalled run's rate falls), else to its last event.
  const std::int64_t until = live ? std::max(now_us, log.last) : log.last;
  if (live) {
    recent = 0;
    for (const auto& c : log.chunks)
      if (c.segment == segment && state_of(c) == State::done && c.attempts.back().ended > until - rate_window_us)
        recent += c.count;
  }
  const double window_s =
      double(std::min<std::int64_t>(rate_window_us, until - (first_done ? first_done : until))) / 1e6;
  if (recent > 0 && window_s > 0) {
    const double rate = double(recent) / window_s;
    text += fmt::format("rate       {:.1f} items/s over the last {:.1f} s", rate, window_s);
    if (live && items > items_done)
      text += fmt::format("; about {:.1f} s left for what is queued", double(items - items_done) / rate);
    text += "\n";
  } else {
    text += "rate       no item done yet\n";
  }
  std::map<std::string, int> alive;  // host -> executors
  int agents = 0, lost = 0;
  for (const auto& w : log.workers) {
    if (w.segment != segment) continue;
    if (w.lost) {
      ++lost;
      continue;
    }
    if (w.left) continue;  // retired (resize, max_tasks_per_child), or the pool ended
    ++agents;
    alive[w.host] += w.executors;
  }
  std::string hosts;
  for (const auto& [host, n] : alive) hosts += fmt::format("{}{} ({})", hosts.empty() ? "" : ", ", host, n);
  text += fmt::format("workers    {} agents {}: {}; {} lost\n", agents, s.ended ? "at the end" : "alive",
                      hosts.empty() ? "none" : hosts, lost);
  if (log.dropped) text += fmt::format("dropped    {} events (the log fell behind)\n", log.dropped);
  return text;
}

void add_status_commands(CLI::App& app) {
  auto* status = app.add_subcommand("status", "print a run's state from its event log (PoolOptions::events)");
  auto run = std::make_shared<std::string>();
  status->add_option("run", *run, "the event log's folder, or its events.jsonl")->required();
  status->callback(
      [run] { std::fputs(status_text(read_event_log_or_exit(*run, "status"), wall_us()).c_str(), stdout); });

  auto* top = app.add_subcommand("top", "redraw a run's state from its event log until the run ends");
  auto top_run = std::make_shared<std::string>();
  auto interval = std::make_shared<double>(1.0);
  top->add_option("run", *top_run, "the event log's folder, or its events.jsonl")->required();
  top->add_option("--interval", *interval, "seconds between two redraws (default 1)")->check(CLI::Range(0.05, 3600.0));
  top->callback([top_run, interval] {
    try {
      EventLogFollower follower(*top_run);
      const bool terminal = ::isatty(STDOUT_FILENO);
      for (;;) {
        follower.poll();
        const auto& log = follower.log();
        if (log.segments.empty()) {
          std::printf("fibra top: %s has no event yet\n", follower.file().c_str());
        } else {
          if (terminal) std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
          std::fputs(status_text(log, wall_us()).c_str(), stdout);
          if (!terminal) std::fputs("\n", stdout);
          if (!run_is_live(log)) break;
        }
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::duration<double>(*interval));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fibra top: %s\n", e.what());
      std::exit(1);
    }
  });
}

}  // namespace fibra::cli
