// src/cli/observe.cpp: `fibra trace`, `fibra report`, `fibra status` and `fibra top` (src/cli/observe.hpp).
#include "observe.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "observe/event_reader.hpp"
#include "observe/event_clock.hpp"
#include "observe/report.hpp"
#include "observe/status.hpp"
#include "observe/trace.hpp"

namespace fibra::cli {

namespace {

using namespace fibra::observe;

// The log at `path`, or exit status 1 after "fibra <command>: <why>" on stderr.
EventLogRecord read_event_log_or_exit(const std::string& path, const char* command) {
  try {
    return read_event_log(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fibra %s: %s\n", command, e.what());
    std::exit(1);
  }
}

// Writes `text` to `path`, or exits with status 1 after "fibra <command>: cannot write <path>".
void write_or_exit(const std::string& path, const std::string& text, const char* command) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "fibra %s: cannot write %s\n", command, path.c_str());
    std::exit(1);
  }
}

// Says on stderr what the log lacks: lines that did not parse, events the driver dropped.
void warn_about(const EventLogRecord& log, const char* command) {
  if (log.unreadable)
    std::fprintf(stderr, "fibra %s: %zu line(s) of %zu did not parse (a driver killed as it wrote its last?)\n",
                 command, log.unreadable, log.lines);
  if (log.dropped)
    std::fprintf(stderr, "fibra %s: the driver dropped %llu events (its log fell behind)\n", command,
                 static_cast<unsigned long long>(log.dropped));
}

void add_trace_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("trace", "write a run's event log (PoolOptions::events) as a Chrome trace for Perfetto");
  auto log_path = std::make_shared<std::string>();
  auto out_path = std::make_shared<std::string>("trace.json");
  cmd->add_option("log", *log_path, "the event log: events.jsonl, or the folder that holds it")->required();
  cmd->add_option("-o,--output", *out_path, "where to write the trace (default trace.json)");
  cmd->callback([log_path, out_path] {
    const EventLogRecord log = read_event_log_or_exit(*log_path, "trace");
    write_or_exit(*out_path, chrome_trace(log), "trace");
    std::size_t attempts = 0, failed = 0;
    for (const auto& c : log.chunks)
      for (const auto& a : c.attempts) {
        attempts += a.reached_a_worker();
        failed += a.outcome == "failed";
      }
    std::printf(
        "fibra trace: %zu chunks, %zu attempts (%zu failed), %zu workers -> %s (open it in "
        "https://ui.perfetto.dev or chrome://tracing)\n",
        log.chunks.size(), attempts, failed, log.workers.size(), out_path->c_str());
    warn_about(log, "trace");
  });
}

void add_report_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("report", "write a run's event log (PoolOptions::events) as one self-contained HTML page");
  auto log_path = std::make_shared<std::string>();
  auto out_path = std::make_shared<std::string>("report.html");
  cmd->add_option("log", *log_path, "the event log: events.jsonl, or the folder that holds it")->required();
  cmd->add_option("-o,--output", *out_path, "where to write the page (default report.html)");
  cmd->callback([log_path, out_path] {
    const EventLogRecord log = read_event_log_or_exit(*log_path, "report");
    const std::string page = html_report(log);
    write_or_exit(*out_path, page, "report");
    std::printf("fibra report: %zu chunks, %zu workers -> %s (%zu bytes; it needs no network)\n", log.chunks.size(),
                log.workers.size(), out_path->c_str(), page.size());
    warn_about(log, "report");
  });
}

void add_status_commands(CLI::App& app) {
  auto* status = app.add_subcommand("status", "print a run's state from its event log (PoolOptions::events)");
  auto run = std::make_shared<std::string>();
  status->add_option("run", *run, "the event log's folder, or its events.jsonl")->required();
  status->callback(
      [run] { std::fputs(status_text(read_event_log_or_exit(*run, "status"), event_time_us()).c_str(), stdout); });

  auto* top = app.add_subcommand("top", "redraw a run's state from its event log until the run ends");
  auto top_run = std::make_shared<std::string>();
  auto interval = std::make_shared<double>(1.0);
  auto first_wait = std::make_shared<double>(60.0);
  top->add_option("run", *top_run, "the event log's folder, or its events.jsonl")->required();
  top->add_option("--interval", *interval, "seconds between two redraws (default 1)")->check(CLI::Range(0.05, 3600.0));
  top->add_option("--wait", *first_wait, "seconds to wait for the run's first event (default 60)")
      ->check(CLI::Range(0.0, 86400.0));
  top->callback([top_run, interval, first_wait] {
    try {
      EventLogFollower follower(*top_run);
      const bool terminal = ::isatty(STDOUT_FILENO);
      const std::int64_t began = event_time_us();
      for (;;) {
        follower.poll();
        const auto& log = follower.log();
        if (log.segments.empty()) {
          const double waited = double(event_time_us() - began) / 1e6;
          if (waited >= *first_wait) {
            std::fprintf(stderr,
                         "fibra top: %s has had no event in %g s (--wait): no run writes it. Start the run with "
                         "FIBRA_EVENTS=<this folder> (or PoolOptions::events), or give --wait a longer bound\n",
                         follower.file().c_str(), *first_wait);
            std::exit(1);
          }
          std::printf("fibra top: %s has no event yet\n", follower.file().c_str());
        } else {
          if (terminal) std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
          std::fputs(status_text(log, event_time_us()).c_str(), stdout);
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

}  // namespace

void add_observe_commands(CLI::App& app) {
  add_trace_command(app);
  add_report_command(app);
  add_status_commands(app);
}

}  // namespace fibra::cli
