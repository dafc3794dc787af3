// src/observe/trace.cpp: `fibra trace` (src/observe/trace.hpp).
//
// Tracks: process 1.. per driver (one per process that wrote the log) with a thread of its
// submissions, and a process per agent (a pool's worker) with a thread per executor, named by its
// pid; an attempt whose executor never reported (its agent was lost) goes on thread 0 of its agent.
// Times are microseconds from the log's first event. A run is placed by its executor's clock; where
// an attempt's times come from the driver's clock (a crash its agent reported, a loss) and would
// overlap the run before it on the same thread, it starts where that one ends, so that events
// nest as the format requires.
#include "observe/trace.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "observe/event_reader.hpp"

namespace fibra::observe {

namespace {

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct Slice {  // a complete event ("X")
  int pid = 0;
  std::int64_t tid = 0;
  std::int64_t ts = 0, dur = 0;
  std::string name, cat, args;
  std::vector<std::pair<std::uint64_t, bool>> flows_in;  // flows that end at its start: id, a dependency's
};

class TraceWriter {
 public:
  explicit TraceWriter(const EventLogRecord& log) : log_(log), base_(log.first) {}

  std::string write() {
    for (std::size_t s = 0; s < log_.segments.size(); ++s) driver_pid(static_cast<int>(s));
    for (const auto& w : log_.workers) agent_pid(w.segment, w.pool, w.worker);
    for (const auto& c : log_.chunks) queued_at_[{c.segment, c.pool, c.chunk}] = c.queued;
    for (const auto& c : log_.chunks) add_chunk(c);
    add_spawns();
    add_actor_calls();
    add_trials();
    add_workers();
    add_refused_joins();
    add_counters();
    nest();
    for (const auto& x : slices_) {
      out_.push_back(
          fmt::format(R"({{"name":{},"cat":"{}","ph":"X","ts":{},"dur":{},"pid":{},"tid":{},"args":{{{}}}}})",
                      json_string(x.name), x.cat, x.ts, x.dur, x.pid, x.tid, x.args));
      for (auto [id, dependency] : x.flows_in)
        out_.push_back(fmt::format(R"({{"name":"{}","cat":"{}","ph":"f","bp":"e","id":{},"ts":{},"pid":{},"tid":{}}})",
                                   dependency ? "argument" : "run", dependency ? "dependency" : "flow", id, x.ts, x.pid,
                                   x.tid));
    }
    add_names();
    std::string text = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"fibra event log\",\"dropped_events\":" +
                       std::to_string(log_.dropped) + "},\"traceEvents\":[\n";
    for (std::size_t i = 0; i < out_.size(); ++i) {
      text += out_[i];
      text += i + 1 < out_.size() ? ",\n" : "\n";
    }
    text += "]}\n";
    return text;
  }

 private:
  std::int64_t us(std::int64_t t) const { return std::max<std::int64_t>(0, t - base_); }

  int driver_pid(int segment) {
    auto [it, added] = drivers_.try_emplace(segment, next_pid_);
    if (added) ++next_pid_;
    return it->second;
  }
  int agent_pid(int segment, std::uint64_t pool, int worker) {
    auto [it, added] = agents_.try_emplace({segment, pool, worker}, next_pid_);
    if (added) ++next_pid_;
    return it->second;
  }

  void add_chunk(const ChunkRecord& c) {
    const int driver = driver_pid(c.segment);
    const std::string items = c.items();
    // The submission: a point on the driver's thread that each run's flow starts from, and that a
    // flow from each task it waited for (its Future arguments) ends at.
    Slice submit{driver,
                 1,
                 us(c.queued),
                 0,
                 "submit " + c.fn,
                 "submit",
                 fmt::format(R"("chunk":{},"call":{},"items":"{}")", c.chunk, c.call, items),
                 {}};
    if (c.asked_by_worker >= 0)
      submit.args += fmt::format(R"(,"asked_by_worker":{},"asked_by_route":{})", c.asked_by_worker, c.asked_by_route);
    for (const auto dep : c.after) {
      submit.args += fmt::format(R"(,"after_{}":{})", dep, dep);
      const auto at = queued_at_.find({c.segment, c.pool, dep});
      if (at == queued_at_.end()) continue;
      const std::uint64_t flow = ++next_flow_;
      submit.flows_in.push_back({flow, true});
      out_.push_back(
          fmt::format(R"({{"name":"argument","cat":"dependency","ph":"s","id":{},"ts":{},"pid":{},"tid":1}})", flow,
                      us(at->second), driver));
    }
    slices_.push_back(std::move(submit));
    for (const auto& a : c.attempts) {
      if (!a.reached_a_worker()) continue;  // never sent, or taken back before it ran
      // The wait in the queue (async: waits overlap).
      const std::string id = fmt::format("\"{}.{}.{}.{}\"", c.segment, c.pool, c.chunk, a.attempt);
      out_.push_back(fmt::format(R"({{"name":{},"cat":"queued","ph":"b","id":{},"ts":{},"pid":{},"tid":1}})",
                                 json_string(c.fn), id, us(a.ready), driver));
      out_.push_back(fmt::format(R"({{"name":{},"cat":"queued","ph":"e","id":{},"ts":{},"pid":{},"tid":1}})",
                                 json_string(c.fn), id, us(std::max(a.sent, a.ready)), driver));
      Slice x;
      x.pid = agent_pid(c.segment, c.pool, a.worker);
      x.tid = a.exec;
      x.name = c.fn;
      x.cat = "attempt";
      if (a.start > 0) {  // on the executor's clock
        x.ts = us(a.start);
        x.dur = a.run;
      } else {  // on the driver's: from its sending to its report, loss or the log's end
        const std::int64_t end = a.reported ? a.reported : a.ended ? a.ended : log_.last;
        x.ts = us(a.sent);
        x.dur = std::max<std::int64_t>(0, end - a.sent);
      }
      const std::string outcome = a.outcome.empty() ? "unfinished" : a.outcome;
      x.args = fmt::format(R"("segment":{},"pool":{},"chunk":{},"call":{},"attempt":{},"items":"{}","outcome":"{}")",
                           c.segment, c.pool, c.chunk, c.call, a.attempt, items, outcome);
      if (!a.status.empty()) x.args += ",\"status\":" + json_string(a.status);
      if (a.wait > 0) x.args += fmt::format(R"(,"waited_us":{})", a.wait);
      if (!a.error.empty()) x.args += ",\"error\":" + json_string(a.error);
      const std::uint64_t flow = ++next_flow_;
      x.flows_in.push_back({flow, false});
      out_.push_back(fmt::format(R"({{"name":"run","cat":"flow","ph":"s","id":{},"ts":{},"pid":{},"tid":1}})", flow,
                                 us(c.queued), driver));
      slices_.push_back(std::move(x));
      if (a.start > 0) {
        busy_.push_back({a.start, +1});
        busy_.push_back({a.start + a.run, -1});
      }
      if (a.outcome == "done") results_.push_back(a.ended);
    }
    // Queued chunks over time: in at each wait's start, out at each sending.
    for (const auto& a : c.attempts) {
      if (a.sent == 0) continue;
      queued_.push_back({a.ready, +1});
      queued_.push_back({std::max(a.sent, a.ready), -1});
    }
  }

  // Spawns on the driver's thread 2: its communication thread, which reads no result meanwhile.
  void add_spawns() {
    for (const auto& s : log_.spawns)
      slices_.push_back({driver_pid(s.segment),
                         2,
                         us(s.start),
                         s.took,
                         fmt::format("spawn {} agent(s), {} worker(s)", s.agents, s.executors),
                         "spawn",
                         fmt::format(R"("pool":{},"agents":{},"executors":{})", s.pool, s.agents, s.executors),
                         {}});
  }

  // Actor calls as async events on their process's agent (a threaded actor's calls overlap).
  void add_actor_calls() {
    std::uint64_t n = 0;
    for (const auto& a : log_.actor_calls) {
      if (a.start == 0) continue;  // not timed by its process
      const int pid = agent_pid(a.segment, a.pool, a.worker);
      const std::string id = fmt::format("\"a.{}.{}.{}\"", a.segment, a.pool, ++n);
      const std::string name = json_string(a.ctor ? a.fn + " (constructor)" : a.fn);
      out_.push_back(fmt::format(
          R"({{"name":{},"cat":"actor","ph":"b","id":{},"ts":{},"pid":{},"tid":{},"args":{{"actor":{},"status":{}}}}})",
          name, id, us(a.start), pid, a.exec, a.actor, json_string(a.status)));
      out_.push_back(fmt::format(R"({{"name":{},"cat":"actor","ph":"e","id":{},"ts":{},"pid":{},"tid":{}}})", name, id,
                                 us(a.start + a.run), pid, a.exec));
    }
  }

  // fibra::tune's trials on the driver's thread 3, as async events (they overlap) from a trial's
  // first start to its end (or the log's last event), and per experiment a counter of the best
  // value of its metric so far, at each result.
  void add_trials() {
    for (std::size_t x = 0; x < log_.tunes.size(); ++x) {
      const TuneRecord& tune = log_.tunes[x];
      const int pid = driver_pid(tune.segment);
      const bool min = tune.mode == "min";
      std::vector<std::pair<std::int64_t, double>> results;
      for (const auto& r : log_.trials) {
        if (r.experiment != x) continue;
        const std::string id = fmt::format("\"t.{}.{}\"", x, r.trial);
        const std::string name = json_string(fmt::format("trial {}", r.trial));
        out_.push_back(fmt::format(
            R"({{"name":{},"cat":"trial","ph":"b","id":{},"ts":{},"pid":{},"tid":3,"args":{{"config":{},"status":{},"failures":{}}}}})",
            name, id, us(r.started), pid, json_string(r.config), json_string(r.status), r.failures));
        out_.push_back(fmt::format(R"({{"name":{},"cat":"trial","ph":"e","id":{},"ts":{},"pid":{},"tid":3}})", name, id,
                                   us(std::max(r.started, r.ended ? r.ended : log_.last)), pid));
        for (const auto& p : r.points)
          if (std::isfinite(p.value)) results.push_back({p.t, p.value});  // (when the driver had it)
      }
      std::sort(results.begin(), results.end());
      const std::string counter = json_string(fmt::format("best {} ({})", tune.metric, tune.trainable));
      bool any = false;
      double best = 0;
      for (const auto& [t, v] : results) {
        if (any && (min ? v >= best : v <= best)) continue;
        best = v, any = true;
        out_.push_back(fmt::format(R"({{"name":{},"ph":"C","ts":{},"pid":{},"tid":0,"args":{{"best":{}}}}})", counter,
                                   us(std::max(t, log_.first)), pid, best));
      }
    }
  }

  void add_workers() {
    for (const auto& w : log_.workers) {
      const int pid = agent_pid(w.segment, w.pool, w.worker);
      if (w.started)
        out_.push_back(
            fmt::format(R"({{"name":"started","ph":"i","s":"p","ts":{},"pid":{},"tid":0}})", us(w.started), pid));
      if (w.left)
        out_.push_back(fmt::format(R"({{"name":"left","ph":"i","s":"p","ts":{},"pid":{},"tid":0}})", us(w.left), pid));
      if (w.lost)
        out_.push_back(fmt::format(R"({{"name":"lost","ph":"i","s":"p","ts":{},"pid":{},"tid":0,"args":{{"why":{}}}}})",
                                   us(w.lost), pid, json_string(w.why)));
    }
  }

  // A counter's value after each change (changes at the same microsecond taken together).
  void counter(const char* name, const char* key, std::vector<std::pair<std::int64_t, int>>& changes, int pid) {
    std::sort(changes.begin(), changes.end());
    long value = 0;
    for (std::size_t i = 0; i < changes.size(); ++i) {
      value += changes[i].second;
      if (i + 1 < changes.size() && changes[i + 1].first == changes[i].first) continue;
      out_.push_back(fmt::format(R"({{"name":"{}","ph":"C","ts":{},"pid":{},"tid":0,"args":{{"{}":{}}}}})", name,
                                 us(changes[i].first), pid, key, std::max(0L, value)));
    }
  }

  // A worker refused at the join listener: an instant on its driver's track, saying who and why.
  void add_refused_joins() {
    for (const auto& r : log_.refused_joins)
      out_.push_back(fmt::format(
          R"({{"name":"join refused","ph":"i","s":"p","ts":{},"pid":{},"tid":0,"args":{{"from":{},"worker":{},"why":{}}}}})",
          us(r.t), driver_pid(r.segment), json_string(r.from), json_string(r.worker()), json_string(r.why)));
  }

  void add_counters() {
    const int driver = driver_pid(0);
    counter("queued chunks", "queued", queued_, driver);
    counter("busy executors", "busy", busy_, driver);
    std::sort(results_.begin(), results_.end());  // results a second, per whole second of the run
    std::vector<long> per_second;                 // every second of the run, those without a result too
    for (auto t : results_) {
      const auto second = static_cast<std::size_t>(us(t) / 1'000'000);
      if (per_second.size() <= second) per_second.resize(second + 1, 0);
      ++per_second[second];
    }
    for (std::size_t second = 0; second < per_second.size(); ++second)
      out_.push_back(fmt::format(R"({{"name":"results/s","ph":"C","ts":{},"pid":{},"tid":0,"args":{{"results":{}}}}})",
                                 std::int64_t(second) * 1'000'000, driver, per_second[second]));
  }

  // Slices on one thread must nest: each inside the one it starts in, or after it. One that would
  // overlap another without nesting (runs of one executor on two threads at once, or an attempt
  // timed by the driver's clock against one timed by the executor's) goes to a thread of the
  // same executor's of its own, numbered overlap_tid apart, rather than be moved or cut.
  static constexpr std::int64_t overlap_tid = 10'000'000;
  void nest() {
    std::stable_sort(slices_.begin(), slices_.end(), [](const Slice& a, const Slice& b) {
      return std::tie(a.pid, a.tid, a.ts) < std::tie(b.pid, b.tid, b.ts) ||
             (std::tie(a.pid, a.tid, a.ts) == std::tie(b.pid, b.tid, b.ts) && a.dur > b.dur);
    });
    std::vector<std::vector<std::int64_t>> lanes;  // each: the ends of the slices it is inside of
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      Slice& x = slices_[i];
      if (i == 0 || slices_[i - 1].pid != x.pid || slices_[i - 1].tid % overlap_tid != x.tid % overlap_tid)
        lanes.clear();
      const std::int64_t end = x.ts + x.dur;
      std::size_t k = 0;
      for (; k < lanes.size(); ++k) {
        auto& stack = lanes[k];
        while (!stack.empty() && stack.back() <= x.ts) stack.pop_back();
        if (stack.empty() || end <= stack.back()) break;
      }
      if (k == lanes.size()) lanes.emplace_back();
      lanes[k].push_back(end);
      x.tid += static_cast<std::int64_t>(k) * overlap_tid;
    }
  }

  void add_names() {
    for (auto [segment, pid] : drivers_) {
      const auto& s = log_.segments.at(static_cast<std::size_t>(segment));
      meta("process_name", pid, -1, fmt::format("driver {} on {} (pid {})", s.program, s.host, s.pid));
      meta("process_sort_index", pid, -1, "", pid);
      meta("thread_name", pid, 1, "submissions");
      meta("thread_name", pid, 2, "spawns (the communication thread)");
      meta("thread_name", pid, 3, "tune trials");
      meta("thread_name", pid, 0, "counters");
    }
    std::map<std::tuple<int, std::uint64_t, int>, const WorkerRecord*> known;
    for (const auto& w : log_.workers) known[{w.segment, w.pool, w.worker}] = &w;
    for (const auto& [key, pid] : agents_) {
      const auto it = known.find(key);
      const WorkerRecord* w = it == known.end() ? nullptr : it->second;
      meta("process_name", pid, -1,
           w ? fmt::format("agent {} (pool {}, slot {}) on {} (pid {}){}", w->worker, w->pool, w->slot, w->host, w->pid,
                           w->lost ? ", lost" : "")
             : fmt::format("agent {} (pool {})", std::get<2>(key), std::get<1>(key)));
      meta("process_sort_index", pid, -1, "", pid);
    }
    std::map<std::pair<int, std::int64_t>, bool> threads;
    for (const auto& x : slices_)
      if (x.cat == "attempt") threads[{x.pid, x.tid}] = true;
    for (const auto& [track, _] : threads) {
      const std::int64_t exec = track.second % overlap_tid, lane = track.second / overlap_tid;
      std::string name = exec ? fmt::format("executor {}", exec) : std::string("no executor reported (lost)");
      if (lane > 0) name += fmt::format(" (overlapping runs, {})", lane);
      meta("thread_name", track.first, track.second, name);
    }
  }

  void meta(const char* what, int pid, std::int64_t tid, const std::string& name, int sort_index = 0) {
    const std::string args = std::string(what) == "process_sort_index" ? fmt::format(R"("sort_index":{})", sort_index)
                                                                       : "\"name\":" + json_string(name);
    out_.push_back(
        fmt::format(R"({{"name":"{}","ph":"M","pid":{},"tid":{},"args":{{{}}}}})", what, pid, tid < 0 ? 0 : tid, args));
  }

  const EventLogRecord& log_;
  const std::int64_t base_;
  int next_pid_ = 1;
  std::uint64_t next_flow_ = 0;
  std::map<int, int> drivers_;
  std::map<std::tuple<int, std::uint64_t, std::uint64_t>, std::int64_t> queued_at_;  // (segment, pool, chunk)
  std::map<std::tuple<int, std::uint64_t, int>, int> agents_;
  std::vector<Slice> slices_;
  std::vector<std::string> out_;
  std::vector<std::pair<std::int64_t, int>> queued_, busy_;
  std::vector<std::int64_t> results_;
};

}  // namespace

std::string chrome_trace(const EventLogRecord& log) { return TraceWriter(log).write(); }

}  // namespace fibra::observe
