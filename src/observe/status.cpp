// src/observe/status.cpp: `fibra status` and `fibra top` (src/observe/status.hpp).
#include "observe/status.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "common/process.hpp"
#include "observe/event_reader.hpp"

namespace fibra::observe {

namespace {
constexpr std::int64_t rate_window_us = 10'000'000;

// A line per fibra::tune experiment of the segment: its trials by status, and the best so far.
std::string trials_text(const EventLogRecord& log, int segment) {
  std::string text;
  for (std::size_t x = 0; x < log.tunes.size(); ++x) {
    const TuneRecord& tune = log.tunes[x];
    if (tune.segment != segment) continue;
    std::map<std::string, std::size_t> by_status;
    std::size_t started = 0;
    const bool min = tune.mode == "min";
    const TrialRecord* best_trial = nullptr;
    double best = 0;
    for (const auto& r : log.trials) {
      if (r.experiment != x) continue;
      ++started;
      ++by_status[r.status];
      const TrialPoint* p = best_point(r, min);
      if (p && (!best_trial || (min ? p->value < best : p->value > best))) best = p->value, best_trial = &r;
    }
    std::string counts;
    for (const auto& [status, n] : by_status) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, status);
    text += fmt::format("trials     '{}': {} of {} started{}{}", tune.trainable, started, tune.trials,
                        counts.empty() ? "" : ": ", counts);
    if (best_trial)
      text += fmt::format("; best {} {:.6g} (trial {}: {})", tune.metric, best, best_trial->trial, best_trial->config);
    text += "\n";
  }
  return text;
}
}  // namespace

bool run_is_live(const EventLogRecord& log) {
  if (log.segments.empty()) return false;
  const SegmentRecord& s = log.segments.back();
  if (s.ended) return false;
  if (s.host != fibra::detail::host_name()) return true;
  return ::kill(static_cast<pid_t>(s.pid), 0) == 0 || errno == EPERM;
}

std::string status_text(const EventLogRecord& log, std::int64_t now_us, std::optional<bool> known_live) {
  const SegmentRecord& s = log.segments.back();
  const int segment = static_cast<int>(log.segments.size()) - 1;
  const bool live = known_live ? *known_live && !s.ended : run_is_live(log);
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
      case ChunkState::done: {
        ++done;
        items_done += c.count;
        const std::int64_t at = c.attempts.back().ended;
        if (at > log.last - rate_window_us) recent += c.count;
        first_done = first_done ? std::min(first_done, at) : at;
        break;
      }
      case ChunkState::failed:
        ++failed;
        ++call.second;
        break;
      case ChunkState::running:
        ++running;
        ++call.first;
        break;
      case ChunkState::waiting:
        ++waiting;
        ++call.first;
        break;
      case ChunkState::other: break;
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
      if (c.segment == segment && state_of(c) == ChunkState::done && c.attempts.back().ended > until - rate_window_us)
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
  const WorkerCounts workers = count_workers(log, segment);
  std::string hosts;
  for (const auto& [host, n] : workers.executors_by_host)
    hosts += fmt::format("{}{} ({})", hosts.empty() ? "" : ", ", host, n);
  text += fmt::format("workers    {} agents {}: {}; {} lost\n", workers.alive, s.ended ? "at the end" : "alive",
                      hosts.empty() ? "none" : hosts, workers.lost);
  text += trials_text(log, segment);
  std::size_t refused = 0;
  const RefusedJoinRecord* last_refused = nullptr;
  for (const auto& r : log.refused_joins)
    if (r.segment == segment) {
      ++refused;
      last_refused = &r;
    }
  std::uint64_t queues = 0, put = 0, taken = 0, came_back = 0, left = 0;
  for (const auto& q : log.queues)
    if (q.segment == segment) {
      ++queues;
      put += q.put;
      taken += q.taken;
      came_back += q.came_back;
      left += q.left;
    }
  if (queues > 0)
    text += fmt::format("queues     {} queues and pipes gone: {} items put, {} taken, {} came back, {} left in them\n",
                        queues, put, taken, came_back, left);
  if (last_refused) {
    const auto& r = *last_refused;
    const std::string who = !r.origin.empty() ? "the worker from " + r.worker() : !r.from.empty() ? r.from : "a worker";
    text += fmt::format("joins      {} refused; the last, {}: {}\n", refused, who, r.why);
  }
  if (log.dropped) text += fmt::format("dropped    {} events (the log fell behind)\n", log.dropped);
  return text;
}

}  // namespace fibra::observe
