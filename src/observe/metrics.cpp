// src/observe/metrics.cpp: /metrics in Prometheus' text format (src/observe/metrics.hpp).
#include "observe/metrics.hpp"

#include <fmt/format.h>

#include <array>
#include <map>

#include "observe/event_reader.hpp"

namespace fibra::observe {

namespace {
// The run-time histogram's upper bounds, in seconds.
constexpr std::array<double, 12> bounds{0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300};

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}
}  // namespace

std::string prometheus_text(const EventLogRecord& log) {
  const int segment = static_cast<int>(log.segments.size()) - 1;
  std::map<ChunkState, std::uint64_t> chunks, items;
  std::uint64_t failed_attempts = 0, retried = 0;
  std::array<std::uint64_t, bounds.size()> below{};
  std::uint64_t runs = 0;
  double run_sum = 0;
  for (const auto& c : log.chunks) {
    if (c.segment != segment) continue;
    const ChunkState s = state_of(c);
    ++chunks[s];
    items[s] += c.count;
    for (const auto& a : c.attempts) {
      failed_attempts += a.outcome == "failed";
      retried += a.outcome == "failed" && a.retried;
      if (a.outcome != "done" || a.start == 0) continue;
      const double seconds = double(a.run) / 1e6;
      ++runs;
      run_sum += seconds;
      for (std::size_t b = 0; b < bounds.size(); ++b) below[b] += seconds <= bounds[b];
    }
  }
  const WorkerCounts workers = count_workers(log, segment);
  const std::pair<ChunkState, const char*> states[] = {{ChunkState::waiting, "waiting"},
                                                       {ChunkState::running, "running"},
                                                       {ChunkState::done, "done"},
                                                       {ChunkState::failed, "failed"},
                                                       {ChunkState::other, "cancelled"}};
  std::string out;
  metric(out, "fibra_chunks", "gauge", "Chunks of work queued so far, by state (cancelled: cancelled or abandoned).");
  for (auto [s, name] : states) out += fmt::format("fibra_chunks{{state=\"{}\"}} {}\n", name, chunks[s]);
  metric(out, "fibra_items", "gauge", "Items (a map's elements, a task's one) in those chunks, by state.");
  for (auto [s, name] : states) out += fmt::format("fibra_items{{state=\"{}\"}} {}\n", name, items[s]);
  metric(out, "fibra_queue_depth", "gauge", "Chunks waiting for a worker.");
  out += fmt::format("fibra_queue_depth {}\n", chunks[ChunkState::waiting]);
  metric(out, "fibra_attempts_failed_total", "counter", "Attempts that failed (raised, crashed, timed out, lost).");
  out += fmt::format("fibra_attempts_failed_total {}\n", failed_attempts);
  metric(out, "fibra_attempts_retried_total", "counter", "Failed attempts that were tried again.");
  out += fmt::format("fibra_attempts_retried_total {}\n", retried);
  metric(out, "fibra_workers", "gauge", "Agents (processes of one or more workers), by state.");
  out += fmt::format("fibra_workers{{state=\"alive\"}} {}\nfibra_workers{{state=\"lost\"}} {}\n", workers.alive,
                     workers.lost);
  out += fmt::format("fibra_workers{{state=\"left\"}} {}\n", workers.left);
  metric(out, "fibra_executors_alive", "gauge", "Workers (executors) of the agents alive.");
  out += fmt::format("fibra_executors_alive {}\n", workers.executors);
  metric(out, "fibra_task_duration_seconds", "histogram", "Run time of done attempts, on their executors' clocks.");
  for (std::size_t b = 0; b < bounds.size(); ++b)
    out += fmt::format("fibra_task_duration_seconds_bucket{{le=\"{}\"}} {}\n", bounds[b], below[b]);
  out += fmt::format("fibra_task_duration_seconds_bucket{{le=\"+Inf\"}} {}\n", runs);
  out += fmt::format("fibra_task_duration_seconds_sum {}\nfibra_task_duration_seconds_count {}\n", run_sum, runs);
  metric(out, "fibra_events_dropped_total", "counter", "Events the driver could not keep (its log fell behind).");
  out += fmt::format("fibra_events_dropped_total {}\n", log.dropped);
  return out;
}

}  // namespace fibra::observe
