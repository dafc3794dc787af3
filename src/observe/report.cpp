// src/observe/report.cpp: `fibra report` (src/observe/report.hpp).
//
// The page's tables are written here as HTML; its charts (the timeline's bars, busy executors over
// time, the histogram) are drawn on canvases by the script inside it, from the data inside it. The
// script marks <body data-bars="N"> with the bars it drew, so a test can tell that it ran.
#include "observe/report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "observe/event_reader.hpp"

namespace fibra::observe {

namespace {

using Json = nlohmann::json;
constexpr std::size_t most_failure_rows = 1000, slowest_rows = 20, busy_points = 800;

std::string escaped(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

class Report {
 public:
  explicit Report(const EventLogRecord& log) : log_(log), base_(log.first) {
    for (const auto& w : log.workers) workers_[{w.segment, w.pool, w.worker}] = &w;
  }

  std::string write() {
    collect();
    std::string page = head();
    page += summary();
    page += timeline();
    page += R"(<h2>Busy executors</h2><canvas id="busy" width="680" height="160" style="margin-left:420px"></canvas>)";
    page += R"(<h2>Run times of done attempts</h2><canvas id="hist" width="1100" height="180"></canvas>)";
    page += slowest();
    page += failures();
    page += losses();
    page += trials();
    page += "<script id=\"data\" type=\"application/json\">" + data_json() + "</script>\n";
    page += script();
    page += "</body></html>\n";
    return page;
  }

 private:
  using Track = std::tuple<int, std::uint64_t, int, std::int64_t>;  // segment, pool, worker, executor

  double ms(std::int64_t t) const { return double(t - base_) / 1000.0; }

  std::string worker_label(int segment, std::uint64_t pool, int worker) const {
    auto it = workers_.find({segment, pool, worker});
    if (it == workers_.end()) return fmt::format("agent {}", worker);
    const WorkerRecord& w = *it->second;
    return fmt::format("agent {} (slot {}, pid {})", w.worker, w.slot, w.pid);
  }
  std::string host_of(int segment, std::uint64_t pool, int worker) const {
    auto it = workers_.find({segment, pool, worker});
    return it == workers_.end() ? std::string("?") : it->second->host;
  }

  void collect() {
    std::map<Track, int> rows;
    for (const auto& c : log_.chunks)
      for (const auto& a : c.attempts)
        if (a.reached_a_worker()) rows.try_emplace({c.segment, c.pool, a.worker, a.exec}, 0);
    for (auto& [track, index] : rows) {
      index = static_cast<int>(row_names_.size());
      const auto [segment, pool, worker, exec] = track;
      row_names_.push_back(worker_label(segment, pool, worker) + " · " +
                           (exec ? fmt::format("executor {}", exec) : std::string("no executor reported")) + " · " +
                           host_of(segment, pool, worker));
    }
    std::vector<std::pair<std::int64_t, int>> busy;
    for (const auto& c : log_.chunks) {
      for (const auto& a : c.attempts) {
        if (!a.reached_a_worker()) continue;
        ++attempts_;
        const int row = rows.at({c.segment, c.pool, a.worker, a.exec});
        std::int64_t start = std::max(a.start, base_), end = std::max(a.start + a.run, start);
        if (a.start == 0) {  // timed by the driver: from its sending to its report or end
          start = a.sent;
          end = a.reported ? a.reported : a.ended ? a.ended : log_.last;
        }
        const int code = a.outcome == "done" ? 0 : a.outcome == "failed" ? 1 : 2;
        for (double v : {double(row), ms(start), std::max(0.0, ms(end) - ms(start)), double(code)}) bars_.push_back(v);
        span_ms_ = std::max(span_ms_, ms(end));
        if (a.start > 0) {
          busy.push_back({a.start, +1});
          busy.push_back({a.start + a.run, -1});
        }
        if (a.outcome == "done" && a.start > 0) {
          ++done_;
          runs_ms_.push_back(double(a.run) / 1000.0);
          slow_.push_back({double(a.run) / 1000.0, &c, &a});
        }
        if (a.outcome == "failed") failed_.push_back({&c, &a});
      }
    }
    span_ms_ = std::max(span_ms_, ms(log_.last));
    // Busy executors, the largest value in each of busy_points equal spans of the run (a span
    // without a change keeps the value it started with).
    std::sort(busy.begin(), busy.end());
    std::vector<int> peak(busy_points, 0);
    int now = 0;
    std::size_t bin = 0;
    for (const auto& [t, d] : busy) {
      const auto at = std::min<std::size_t>(
          busy_points - 1, static_cast<std::size_t>(std::max(0.0, ms(t)) / std::max(span_ms_, 1e-3) * busy_points));
      for (; bin < at; ++bin) peak[bin + 1] = std::max(peak[bin + 1], now);
      now += d;
      peak[at] = std::max(peak[at], now);
    }
    busy_ = peak;
    std::sort(slow_.begin(), slow_.end(), [](auto& x, auto& y) { return std::get<0>(x) > std::get<0>(y); });
    if (slow_.size() > slowest_rows) slow_.resize(slowest_rows);
  }

  std::string head() const {
    const auto& s = log_.segments.front();
    return fmt::format(R"(<!DOCTYPE html><html><head><meta charset="utf-8"><title>fibra report: {} on {}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 20px; color: #222; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f3f3f3; }} td.error {{ font-family: monospace; white-space: pre-wrap; max-width: 700px; }}
.row {{ display: flex; align-items: center; height: 16px; }} .row .label {{ width: 420px; font-size: 11px; white-space: nowrap; overflow: hidden; }}
.row canvas {{ border-left: 1px solid #999; }} .legend span {{ display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; }}
</style></head><body>
)",
                       escaped(s.program), escaped(s.host));
  }

  std::string summary() const {
    const auto& s = log_.segments.front();
    std::size_t lost = 0;
    for (const auto& w : log_.workers) lost += w.lost != 0;
    std::string text = fmt::format(
        "<h1>fibra report: {} on {} (pid {})</h1>\n<table id=\"summary\">"
        "<tr><th>run</th><td>{:.3f} s{}</td></tr><tr><th>chunks</th><td>{}</td></tr>"
        "<tr><th>attempts</th><td>{} ({} done, {} failed)</td></tr><tr><th>workers</th><td>{} agents, {} lost</td></tr>"
        "<tr><th>executors seen</th><td>{}</td></tr>",
        escaped(s.program), escaped(s.host), s.pid, span_ms_ / 1000.0,
        s.ended ? "" : " (the log has no end: the driver was killed, or still runs)", log_.chunks.size(), attempts_,
        done_, failed_.size(), log_.workers.size(), lost, row_names_.size());
    if (!log_.spawns.empty()) {
      std::int64_t total = 0, longest = 0;
      for (const auto& sp : log_.spawns) {
        total += sp.took;
        longest = std::max(longest, sp.took);
      }
      text += fmt::format(
          "<tr><th>spawns</th><td>{}, {:.3f} s in all, the longest {:.3f} s (no result is read meanwhile)</td></tr>",
          log_.spawns.size(), double(total) / 1e6, double(longest) / 1e6);
    }
    if (!log_.actor_calls.empty())
      text += fmt::format("<tr><th>actor calls</th><td>{}</td></tr>", log_.actor_calls.size());
    std::size_t nested = 0, waited = 0;
    for (const auto& c : log_.chunks) {
      nested += c.asked_by_worker >= 0;
      waited += !c.after.empty();
    }
    if (nested) text += fmt::format("<tr><th>chunks a task asked for</th><td>{}</td></tr>", nested);
    std::int64_t run = 0, wait = 0;
    std::size_t waiting = 0;
    for (const auto& c : log_.chunks)
      for (const auto& a : c.attempts) {
        run += a.run;
        wait += a.wait;
        waiting += a.wait > 0;
      }
    if (wait > 0)
      text += fmt::format(
          "<tr><th>waits in tasks</th><td>{:.3f} s of {:.3f} s run ({:.1f}%), in {} attempts: on Futures, queues and "
          "pipes</td></tr>",
          double(wait) / 1e6, double(run) / 1e6, run > 0 ? 100.0 * double(wait) / double(run) : 0.0, waiting);
    if (waited) text += fmt::format("<tr><th>tasks that waited for others</th><td>{}</td></tr>", waited);
    if (!log_.checkpoints.empty()) {
      const CheckpointRecord& last = log_.checkpoints.back();
      text += fmt::format(
          "<tr><th>checkpoint writes</th><td>{}; the last ({}, {:.3f} s): {} of {} items in {}</td></tr>",
          log_.checkpoints.size(), escaped(last.how), ms(last.t) / 1000.0, last.done, last.of, escaped(last.path));
    }
    if (log_.dropped) text += fmt::format("<tr><th>dropped events</th><td>{}</td></tr>", log_.dropped);
    if (log_.unreadable)
      text += fmt::format("<tr><th>unreadable lines</th><td>{} of {}</td></tr>", log_.unreadable, log_.lines);
    return text + "</table>\n";
  }

  std::string timeline() const {
    std::string text =
        "<h2>Timeline: a row per executor</h2><div class=\"legend\"><span style=\"background:#4a7\"></span>done"
        "<span style=\"background:#d33\"></span>failed<span style=\"background:#999\"></span>other</div>\n"
        "<div id=\"timeline\">\n";
    for (std::size_t i = 0; i < row_names_.size(); ++i)
      text += fmt::format(
          "<div class=\"row\" data-row=\"{}\"><span class=\"label\" title=\"{}\">{}</span><canvas width=\"680\" "
          "height=\"14\"></canvas></div>\n",
          i, escaped(row_names_[i]), escaped(row_names_[i]));
    return text + "</div>\n";
  }

  std::string slowest() const {
    std::string text =
        "<h2>Slowest chunks</h2><table id=\"slowest\"><tr><th>function</th><th>items</th><th>attempt</th>"
        "<th>worker</th><th>host</th><th>executor</th><th>run (ms)</th><th>of it waiting (ms)</th></tr>\n";
    for (const auto& [run, c, a] : slow_)
      text += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td></tr>\n",
          escaped(c->fn), c->items(), a->attempt, escaped(worker_label(c->segment, c->pool, a->worker)),
          escaped(host_of(c->segment, c->pool, a->worker)), a->exec, run, double(a->wait) / 1000.0);
    return text + "</table>\n";
  }

  std::string failures() const {
    std::string text = fmt::format(
        "<h2>Failed attempts ({})</h2><table id=\"failures\"><tr><th>function</th><th>items</th><th>attempt</th>"
        "<th>how</th><th>retried</th><th>worker</th><th>host</th><th>executor</th><th>error</th></tr>\n",
        failed_.size());
    for (std::size_t i = 0; i < failed_.size() && i < most_failure_rows; ++i) {
      const auto& [c, a] = failed_[i];
      text += fmt::format(
          "<tr class=\"failure\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td class=\"error\">{}</td></tr>\n",
          escaped(c->fn), c->items(), a->attempt, escaped(a->kind), a->retried ? "yes" : "no",
          escaped(worker_label(c->segment, c->pool, a->worker)), escaped(host_of(c->segment, c->pool, a->worker)),
          a->exec ? std::to_string(a->exec) : std::string("-"), escaped(a->error));
    }
    text += "</table>\n";
    if (failed_.size() > most_failure_rows)
      text += fmt::format("<p>... and {} more failed attempts (the event log has them all).</p>\n",
                          failed_.size() - most_failure_rows);
    return text;
  }

  std::string losses() const {
    std::string text =
        "<h2>Lost workers</h2><table id=\"losses\"><tr><th>worker</th><th>host</th><th>at (s)</th><th>why</th></tr>\n";
    for (const auto& w : log_.workers)
      if (w.lost)
        text += fmt::format(
            "<tr class=\"lost\"><td>{}</td><td>{}</td><td>{:.3f}</td><td class=\"error\">{}</td></tr>\n",
            escaped(worker_label(w.segment, w.pool, w.worker)), escaped(w.host), ms(w.lost) / 1000.0, escaped(w.why));
    text += "</table>\n";
    if (!log_.queues.empty()) {
      text +=
          "<h2>Queues and pipes</h2><table id=\"queues\"><tr><th>gone at (s)</th><th>kind</th><th>id</th><th>put</th>"
          "<th>bytes</th><th>taken</th><th>came back</th><th>most held</th><th>left</th></tr>\n";
      for (const auto& q : log_.queues)
        text += fmt::format(
            "<tr><td>{:.3f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</"
            "td>"
            "</tr>\n",
            ms(q.t) / 1000.0, escaped(q.kind), q.id, q.put, q.bytes, q.taken, q.came_back, q.most, q.left);
      text += "</table>\n";
    }
    if (log_.refused_joins.empty()) return text;
    text +=
        "<h2>Joins refused</h2><table id=\"refused-joins\"><tr><th>at (s)</th><th>from</th><th>worker</th>"
        "<th>why</th></tr>\n";
    for (const auto& r : log_.refused_joins)
      text += fmt::format("<tr><td>{:.3f}</td><td>{}</td><td>{}</td><td class=\"error\">{}</td></tr>\n",
                          ms(r.t) / 1000.0, escaped(r.from), escaped(r.worker()), escaped(r.why));
    return text + "</table>\n";
  }

  // Per fibra::tune experiment: a canvas for its trials' curves (the metric by iteration, drawn by
  // the script) and a table of its trials.
  std::string trials() const {
    std::string text;
    for (std::size_t x = 0; x < log_.tunes.size(); ++x) {
      const TuneRecord& tune = log_.tunes[x];
      const bool max = tune.mode != "min";
      text += fmt::format(
          "<h2>Trials of '{}' ({} {}, {} trials, {})</h2>"
          "<canvas class=\"curves\" data-experiment=\"{}\" width=\"1100\" height=\"240\"></canvas>\n"
          "<table class=\"trials\" id=\"trials-{}\"><tr><th>trial</th><th>config</th><th>status</th>"
          "<th>iterations</th><th>last</th><th>best</th><th>failures</th><th>last failure, or why it "
          "stopped</th></tr>\n",
          escaped(tune.trainable), max ? "max" : "min", escaped(tune.metric), tune.trials, escaped(tune.scheduler), x,
          x);
      std::size_t rows = 0;
      for (const auto& r : log_.trials) {
        if (r.experiment != x) continue;
        if (++rows > most_failure_rows) continue;
        const TrialPoint* top = best_point(r, !max);
        const double best = top ? top->value : std::numeric_limits<double>::quiet_NaN();
        double last = std::numeric_limits<double>::quiet_NaN();
        for (const auto& p : r.points)
          if (std::isfinite(p.value)) last = p.value;
        const auto number = [](double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("-"); };
        text += fmt::format(
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td class=\"error\">{}</td></tr>\n",
            escaped(r.status), r.trial, escaped(r.config), escaped(r.status),
            r.points.empty() ? 0 : r.points.back().iteration, number(last), number(best), r.failures, escaped(r.error));
      }
      text += "</table>\n";
      if (rows > most_failure_rows)
        text += fmt::format("<p>... and {} more trials (the event log has them all).</p>\n", rows - most_failure_rows);
    }
    return text;
  }

  std::string data_json() const {
    // Run times in 30 bins spaced evenly on a log scale between the shortest and the longest.
    Json hist = {{"edges", Json::array()}, {"counts", Json::array()}};
    if (!runs_ms_.empty()) {
      const double lo = std::max(1e-3, *std::min_element(runs_ms_.begin(), runs_ms_.end()));
      const double hi = std::max(lo * 1.0001, *std::max_element(runs_ms_.begin(), runs_ms_.end()));
      constexpr int bins = 30;
      std::vector<long> counts(bins, 0);
      for (double r : runs_ms_) {
        const double f = (std::log(std::max(r, lo)) - std::log(lo)) / (std::log(hi) - std::log(lo));
        ++counts[std::clamp(static_cast<int>(f * bins), 0, bins - 1)];
      }
      for (int i = 0; i <= bins; ++i) hist["edges"].push_back(lo * std::pow(hi / lo, double(i) / bins));
      hist["counts"] = counts;
    }
    Json bars = Json::array();
    for (double v : bars_) bars.push_back(std::round(v * 1000.0) / 1000.0);
    // Each experiment's curves: a trial's iterations and values (null where it reported none).
    Json curves = Json::array();
    for (std::size_t x = 0; x < log_.tunes.size(); ++x) {
      Json lines = Json::array();
      for (const auto& r : log_.trials) {
        if (r.experiment != x || r.points.empty()) continue;
        Json xs = Json::array(), ys = Json::array();
        for (const auto& p : r.points) {
          xs.push_back(p.iteration);
          ys.push_back(std::isnan(p.value) ? Json() : Json(p.value));
        }
        lines.push_back({{"trial", r.trial}, {"x", xs}, {"y", ys}});
      }
      curves.push_back(std::move(lines));
    }
    const Json data = {
        {"rows", row_names_.size()}, {"span_ms", span_ms_}, {"bars", bars}, {"busy", busy_}, {"hist", hist},
        {"curves", curves}};
    std::string text = data.dump(-1, ' ', false, Json::error_handler_t::replace);
    // Inside <script>, "</" would end it.
    for (std::size_t at = text.find("</"); at != std::string::npos; at = text.find("</", at + 2))
      text.insert(at + 1, "\\");
    return text;
  }

  static std::string script() {
    return R"(<script>
(function () {
  const d = JSON.parse(document.getElementById('data').textContent);
  const colors = ['#4a7', '#d33', '#999'];
  const rows = document.querySelectorAll('#timeline .row canvas');
  const span = Math.max(d.span_ms, 1e-3);
  let drawn = 0;
  for (let i = 0; i < d.bars.length; i += 4) {
    const c = rows[d.bars[i]];
    if (!c) continue;
    const g = c.getContext('2d');
    g.fillStyle = colors[d.bars[i + 3]] || '#999';
    const x = d.bars[i + 1] / span * c.width;
    g.fillRect(x, 1, Math.max(1, d.bars[i + 2] / span * c.width), c.height - 2);
    drawn++;
  }
  function plot(id, values, bar) {
    const c = document.getElementById(id), g = c.getContext('2d');
    const top = Math.max(1, ...values), w = c.width / Math.max(1, values.length);
    g.fillStyle = '#47a';
    values.forEach((v, i) => {
      const h = v / top * (c.height - 20);
      g.fillRect(i * w, c.height - 10 - h, bar ? Math.max(1, w - 2) : Math.max(1, w), h);
    });
    g.fillStyle = '#222';
    g.fillText('max ' + top, 4, 10);
  }
  plot('busy', d.busy, false);
  plot('hist', d.hist.counts, true);
  const e = d.hist.edges;
  if (e.length) {
    const g = document.getElementById('hist').getContext('2d');
    g.fillText(e[0].toPrecision(3) + ' ms', 4, 178);
    g.fillText(e[e.length - 1].toPrecision(3) + ' ms', 1040, 178);
  }
  // Each experiment's trials: the metric by iteration, a line per trial, on common axes.
  let lines = 0;
  document.querySelectorAll('canvas.curves').forEach((c) => {
    const trials = d.curves[Number(c.dataset.experiment)] || [];
    const g = c.getContext('2d');
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    trials.forEach((t) => {
      t.x.forEach((x) => { x0 = Math.min(x0, x); x1 = Math.max(x1, x); });
      t.y.forEach((y) => { if (y !== null) { y0 = Math.min(y0, y); y1 = Math.max(y1, y); } });
    });
    if (!isFinite(y0)) return;
    if (y1 === y0) { y0 -= 1; y1 += 1; }
    if (x1 === x0) x1 = x0 + 1;
    const px = (x) => 40 + (x - x0) / (x1 - x0) * (c.width - 50), py = (y) => c.height - 15 - (y - y0) / (y1 - y0) * (c.height - 30);
    trials.forEach((t, i) => {
      g.strokeStyle = 'hsl(' + (i * 137 % 360) + ',60%,45%)';
      g.beginPath();
      let on = false;
      t.x.forEach((x, k) => {
        if (t.y[k] === null) { on = false; return; }
        if (on) g.lineTo(px(x), py(t.y[k])); else g.moveTo(px(x), py(t.y[k]));
        on = true;
      });
      g.stroke();
      lines++;
    });
    g.fillStyle = '#222';
    g.fillText(y1.toPrecision(4), 2, 12);
    g.fillText(y0.toPrecision(4), 2, c.height - 15);
    g.fillText('iteration ' + x0, 40, c.height - 2);
    g.fillText('iteration ' + x1, c.width - 90, c.height - 2);
  });
  document.body.dataset.curves = String(lines);
  document.body.dataset.bars = String(drawn);
})();
</script>
)";
  }

  const EventLogRecord& log_;
  const std::int64_t base_;
  std::map<std::tuple<int, std::uint64_t, int>, const WorkerRecord*> workers_;
  std::vector<std::string> row_names_;
  std::vector<double> bars_;  // row, start (ms), length (ms), outcome: 4 numbers a bar
  std::vector<int> busy_;
  std::vector<double> runs_ms_;
  std::vector<std::tuple<double, const ChunkRecord*, const AttemptRecord*>> slow_;
  std::vector<std::pair<const ChunkRecord*, const AttemptRecord*>> failed_;
  std::size_t attempts_ = 0, done_ = 0;
  double span_ms_ = 0;
};

}  // namespace

std::string html_report(const EventLogRecord& log) { return Report(log).write(); }

}  // namespace fibra::observe
