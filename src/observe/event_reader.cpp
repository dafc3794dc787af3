// src/observe/event_reader.cpp: events.jsonl read back (src/observe/event_reader.hpp).
#include "observe/event_reader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace fibra::observe {

namespace {

using Json = nlohmann::json;

template <class T>
T field(const Json& e, const char* name, T otherwise = {}) {
  auto it = e.find(name);
  if (it == e.end() || it->is_null()) return otherwise;
  return it->get<T>();
}

class Reader {
 public:
  explicit Reader(EventLogRecord& log) : log_(log) {}

  void take(const Json& e) {
    const auto ev = field<std::string>(e, "ev");
    const auto t = field<std::int64_t>(e, "t");
    if (t > 0) {
      log_.first = log_.first ? std::min(log_.first, t) : t;
      log_.last = std::max(log_.last, t);
    }
    if (ev == "log") {
      log_.segments.push_back(
          {field<std::int64_t>(e, "pid"), t, field<std::string>(e, "host"), field<std::string>(e, "program"), false});
      return;
    }
    const int seg = std::max<int>(0, static_cast<int>(log_.segments.size()) - 1);
    const auto pool = field<std::uint64_t>(e, "pool");
    if (ev == "end") {
      if (!log_.segments.empty()) log_.segments.back().ended = true;
    } else if (ev == "dropped") {
      log_.dropped += field<std::uint64_t>(e, "count");
    } else if (ev == "worker") {
      WorkerRecord& w = worker(seg, pool, field<int>(e, "worker"));
      w.slot = field<int>(e, "slot");
      w.executors = field<int>(e, "executors");
      w.host = field<std::string>(e, "host");
      w.pid = field<std::int64_t>(e, "pid");
      w.started = t;
    } else if (ev == "spawn") {
      log_.spawns.push_back({seg, pool, field<int>(e, "agents"), field<int>(e, "executors"),
                             field<std::int64_t>(e, "start"), field<std::int64_t>(e, "took")});
    } else if (ev == "actor_call") {
      ActorCallRecord a;
      a.segment = seg;
      a.pool = pool;
      a.actor = field<std::uint64_t>(e, "actor");
      a.fn = field<std::string>(e, "fn");
      a.status = field<std::string>(e, "status");
      a.ctor = field<bool>(e, "ctor");
      a.worker = field<int>(e, "worker");
      a.exec = field<std::int64_t>(e, "exec");
      a.start = field<std::int64_t>(e, "start");
      a.run = field<std::int64_t>(e, "run");
      a.reported = t;
      log_.actor_calls.push_back(std::move(a));
    } else if (ev == "checkpoint") {
      log_.checkpoints.push_back({seg, pool, t, field<std::string>(e, "path"), field<std::string>(e, "how"),
                                  field<std::uint64_t>(e, "done"), field<std::uint64_t>(e, "of")});
    } else if (ev == "tune") {
      const auto number = field<std::uint64_t>(e, "experiment");
      tune_of_[{seg, pool, number}] = log_.tunes.size();
      log_.tunes.push_back({seg, pool, number, field<std::string>(e, "trainable"), field<std::string>(e, "metric"),
                            field<std::string>(e, "mode"), field<std::string>(e, "scheduler"),
                            field<std::size_t>(e, "trials"), t});
    } else if (ev.starts_with("trial_")) {
      take_trial(ev, e, seg, pool, t);
    } else if (ev == "join_refused") {
      log_.refused_joins.push_back({seg, t, field<std::string>(e, "from"), field<std::string>(e, "origin"),
                                    field<std::string>(e, "host"), field<std::int64_t>(e, "pid"),
                                    field<std::string>(e, "why")});
    } else if (ev == "queue") {
      log_.queues.push_back({seg, t, field<std::uint64_t>(e, "id"), field<std::string>(e, "kind"),
                             field<std::uint64_t>(e, "put"), field<std::uint64_t>(e, "bytes"),
                             field<std::uint64_t>(e, "taken"), field<std::uint64_t>(e, "came_back"),
                             field<std::uint64_t>(e, "most"), field<std::uint64_t>(e, "left")});
    } else if (ev == "left") {
      worker(seg, pool, field<int>(e, "worker")).left = t;
    } else if (ev == "lost") {
      WorkerRecord& w = worker(seg, pool, field<int>(e, "worker"));
      w.lost = t;
      w.why = field<std::string>(e, "why");
    } else if (ev == "queued") {
      const auto id = field<std::uint64_t>(e, "chunk");
      chunk_at_[{seg, pool, id}] = log_.chunks.size();
      ChunkRecord c;
      c.segment = seg;
      c.pool = pool;
      c.chunk = id;
      c.call = field<std::uint64_t>(e, "call");
      c.first = field<std::uint64_t>(e, "first");
      c.count = field<std::uint32_t>(e, "count");
      c.fn = field<std::string>(e, "fn");
      c.task = field<bool>(e, "task");
      c.queued = field<std::int64_t>(e, "submitted", t);
      c.after = field<std::vector<std::uint64_t>>(e, "after");
      if (auto a = e.find("asked_by"); a != e.end() && a->is_object()) {
        c.asked_by_worker = field<int>(*a, "worker", -1);
        c.asked_by_route = field<std::uint64_t>(*a, "route");
      }
      log_.chunks.push_back(std::move(c));
    } else if (ev == "sent") {
      if (ChunkRecord* c = chunk(seg, pool, e)) {
        AttemptRecord a;
        a.attempt = field<std::uint32_t>(e, "attempt");
        a.worker = field<int>(e, "worker");
        a.sent = t;
        a.ready = c->queued;
        for (const auto& before : c->attempts)
          if (before.ended > 0 && before.ended <= t) a.ready = std::max(a.ready, before.ended);
        c->attempts.push_back(std::move(a));
      }
    } else if (ev == "ran") {
      if (AttemptRecord* a = attempt(seg, pool, e)) {
        a->exec = field<std::int64_t>(e, "exec");
        a->start = field<std::int64_t>(e, "start");
        a->run = field<std::int64_t>(e, "run");
        a->wait = field<std::int64_t>(e, "wait");
        a->status = field<std::string>(e, "status");
        a->reported = t;
      }
    } else if (ev == "done" || ev == "late" || ev == "cancelled" || ev == "abandoned" || ev == "requeued" ||
               ev == "failed") {
      if (AttemptRecord* a = attempt(seg, pool, e)) {
        if (ev == "late" && !a->outcome.empty()) return;  // a duplicate of an attempt already settled
        a->outcome = ev;
        a->ended = t;
        if (ev == "failed") {
          a->kind = field<std::string>(e, "kind");
          a->error = field<std::string>(e, "error");
          a->retried = field<bool>(e, "retried");
        }
      }
    }
  }

 private:
  WorkerRecord& worker(int seg, std::uint64_t pool, int id) {
    auto [it, added] = worker_at_.try_emplace({seg, pool, static_cast<std::uint64_t>(id)}, log_.workers.size());
    if (added) {
      WorkerRecord w;
      w.segment = seg;
      w.pool = pool;
      w.worker = id;
      log_.workers.push_back(std::move(w));
    }
    return log_.workers[it->second];
  }
  ChunkRecord* chunk(int seg, std::uint64_t pool, const Json& e) {
    auto it = chunk_at_.find({seg, pool, field<std::uint64_t>(e, "chunk")});
    return it == chunk_at_.end() ? nullptr : &log_.chunks[it->second];
  }
  // The chunk's attempt the event names; one is added (never sent: a chunk cancelled while queued)
  // if the log has none.
  AttemptRecord* attempt(int seg, std::uint64_t pool, const Json& e) {
    ChunkRecord* c = chunk(seg, pool, e);
    if (!c) return nullptr;
    const auto n = field<std::uint32_t>(e, "attempt");
    for (auto it = c->attempts.rbegin(); it != c->attempts.rend(); ++it)
      if (it->attempt == n) return &*it;
    AttemptRecord a;
    a.attempt = n;
    c->attempts.push_back(std::move(a));
    return &c->attempts.back();
  }

  // trial_start, trial_result, trial_failed, trial_paused, trial_end: of the experiment they name.
  void take_trial(const std::string& ev, const Json& e, int seg, std::uint64_t pool, std::int64_t t) {
    const auto tune = tune_of_.find({seg, pool, field<std::uint64_t>(e, "experiment")});
    if (tune == tune_of_.end()) return;  // (a log cut before its `tune` event)
    const auto id = field<std::size_t>(e, "trial");
    auto [at, added] = trial_at_.try_emplace({seg, pool, tune->second, id}, log_.trials.size());
    if (added) {
      TrialRecord r;
      r.segment = seg;
      r.pool = pool;
      r.experiment = tune->second;
      r.trial = id;
      r.started = t;
      log_.trials.push_back(std::move(r));
    }
    TrialRecord& r = log_.trials[at->second];
    if (ev == "trial_start") {
      r.status = "running";
      r.config = field<std::string>(e, "config");
      const auto from = field<std::int64_t>(e, "iteration");
      std::erase_if(r.points, [&](const TrialPoint& p) { return p.iteration > from; });
    } else if (ev == "trial_result") {
      const std::string& metric = log_.tunes[tune->second].metric;
      double value = std::numeric_limits<double>::quiet_NaN();
      if (auto m = e.find("metrics"); m != e.end() && m->is_object())
        if (auto v = m->find(metric); v != m->end() && v->is_number()) value = v->get<double>();
      r.points.push_back({field<std::int64_t>(e, "iteration"), t, value});
    } else if (ev == "trial_paused") {
      r.status = "pending";
    } else if (ev == "trial_failed") {
      r.status = "pending";
      ++r.failures;
      r.error = field<std::string>(e, "error");
    } else if (ev == "trial_end") {
      r.status = field<std::string>(e, "status");
      r.ended = t;
      if (r.status == "error") ++r.failures;
      if (auto why = field<std::string>(e, "error"); !why.empty()) r.error = std::move(why);
    }
  }

  EventLogRecord& log_;
  std::map<std::tuple<int, std::uint64_t, std::uint64_t>, std::size_t> chunk_at_, worker_at_;
  std::map<std::tuple<int, std::uint64_t, std::uint64_t>, std::size_t> tune_of_;  // (segment, pool, experiment)
  std::map<std::tuple<int, std::uint64_t, std::size_t, std::size_t>, std::size_t> trial_at_;
};

}  // namespace

ChunkState state_of(const ChunkRecord& c) {
  for (auto a = c.attempts.rbegin(); a != c.attempts.rend(); ++a) {
    if (a->sent == 0 && a->outcome.empty()) continue;
    if (a->outcome == "done") return ChunkState::done;
    if (a->outcome == "failed") return a->retried ? ChunkState::waiting : ChunkState::failed;
    if (a->outcome == "requeued") return ChunkState::waiting;
    if (a->outcome.empty()) return ChunkState::running;
    return ChunkState::other;  // cancelled, abandoned
  }
  return ChunkState::waiting;
}

const TrialPoint* best_point(const TrialRecord& r, bool min) {
  const TrialPoint* best = nullptr;
  for (const auto& p : r.points)
    if (std::isfinite(p.value) && (!best || (min ? p.value < best->value : p.value > best->value))) best = &p;
  return best;
}

WorkerCounts count_workers(const EventLogRecord& log, int segment) {
  WorkerCounts n;
  for (const auto& w : log.workers) {
    if (w.segment != segment) continue;
    if (w.lost) {
      ++n.lost;
    } else if (w.left) {  // retired (resize, max_tasks_per_child), or the pool ended
      ++n.left;
    } else {
      ++n.alive;
      n.executors += w.executors;
      n.executors_by_host[w.host] += w.executors;
    }
  }
  return n;
}

struct EventLogFollower::Impl {
  std::string file;
  std::ifstream in;
  std::string partial;  // a last line not yet ended by its newline
  EventLogRecord log;
  Reader reader{log};
};

EventLogFollower::EventLogFollower(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->file = path;
  if (std::filesystem::is_directory(path)) impl_->file = (std::filesystem::path(path) / "events.jsonl").string();
  impl_->in.open(impl_->file, std::ios::binary);
  if (!impl_->in)
    throw std::runtime_error("cannot read " + impl_->file + " (is it a fibra event log, PoolOptions::events?)");
}

EventLogFollower::~EventLogFollower() = default;

bool EventLogFollower::poll() {
  Impl& m = *impl_;
  m.in.clear();  // past the end the last time: read on from there
  std::string chunk(1 << 16, '\0');
  bool any = false;
  for (;;) {
    m.in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<std::size_t>(m.in.gcount());
    if (got == 0) break;
    m.partial.append(chunk.data(), got);
    std::size_t from = 0;
    for (std::size_t nl; (nl = m.partial.find('\n', from)) != std::string::npos; from = nl + 1) {
      const std::string_view line(m.partial.data() + from, nl - from);
      if (line.empty()) continue;
      any = true;
      ++m.log.lines;
      Json e = Json::parse(line, nullptr, false);
      if (e.is_discarded() || !e.is_object()) {
        ++m.log.unreadable;
        continue;
      }
      try {
        m.reader.take(e);
      } catch (const Json::exception&) {  // a field of the wrong type
        ++m.log.unreadable;
      }
    }
    m.partial.erase(0, from);
  }
  return any;
}

const EventLogRecord& EventLogFollower::log() const { return impl_->log; }
const std::string& EventLogFollower::file() const { return impl_->file; }
bool EventLogFollower::ends_mid_line() const { return !impl_->partial.empty(); }

std::string RefusedJoinRecord::worker() const {
  return origin.empty() ? std::string() : origin + " on " + host + " (pid " + std::to_string(pid) + ")";
}

EventLogRecord read_event_log(const std::string& path) {
  EventLogFollower f(path);
  f.poll();
  EventLogRecord log = f.log();
  if (f.ends_mid_line()) ++log.unreadable;  // a last line cut by a killed driver
  if (log.segments.empty())
    throw std::runtime_error(f.file() + " holds no fibra event log (no `log` event in its " +
                             std::to_string(log.lines) + " lines)");
  return log;
}

}  // namespace fibra::observe
