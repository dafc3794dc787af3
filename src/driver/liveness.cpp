// Whether a pool's agents are alive (liveness.hpp).
#include "driver/liveness.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace fibra::detail {

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

bool Liveness::process_gone_here(const Worker& w) const {
  return w.pid > 0 && w.host == my_host_ && ::kill(static_cast<pid_t>(w.pid), 0) != 0 && errno == ESRCH;
}

void Liveness::sweep(double now, const std::vector<std::unique_ptr<Worker>>& workers, const Act& act) {
  if (now < next_sweep_) return;
  next_sweep_ = now + 0.010;
  // Whether its process is gone from this host: a kill(pid, 0) at most every 50 ms for each agent
  // (a small pool's sweep covers every agent every 10 ms), and one for adjacent agents of one
  // process (the scale simulation's: one rank of one group).
  const Worker* last = nullptr;
  bool last_gone = false;
  const auto gone_here = [&](Worker& w) {
    if (now - w.pid_checked < 0.05) return false;
    w.pid_checked = now;
    if (!last || last->group != w.group || last->rank != w.rank || last->pid != w.pid) last_gone = process_gone_here(w);
    last = &w;
    return last_gone;
  };
  const std::size_t n = workers.size();
  const std::size_t slice = std::min(n, std::max<std::size_t>(64, (n + 9) / 10));
  for (std::size_t i = 0; i < slice; ++i) {
    if (next_ >= n) next_ = 0;
    Worker& w = *workers[next_++];
    if (w.state == Worker::State::lost && (w.read_after_loss || w.holds_slot)) {
      const bool gone = gone_here(w);
      if (gone) w.read_after_loss = false;  // nothing more comes from it (still_heard)
      // Its slot is free once its process is: gone from this host, or past the orphan guard.
      if (w.holds_slot && (gone || now - w.lost_at > r_.driver_silence_s + 2 * r_.heartbeat_s))
        act(w, Verdict::free_slot, {});
    }
    if (!w.alive()) continue;
    if (w.state == Worker::State::starting) {
      if (now - w.spawned_at > r_.start_timeout_s)
        act(w, Verdict::lost,
            "it did not start within " + seconds_text(r_.start_timeout_s) + " (PoolOptions::start_timeout_s)");
      continue;
    }
    if (now - last_read_ < 0.5 * r_.heartbeat_s && now - w.last_heard > r_.worker_silence_s) {
      act(w, Verdict::lost,
          "it has been silent for " + seconds_text(now - w.last_heard) +
              " (PoolOptions::worker_silence_s = " + seconds_text(r_.worker_silence_s) + ")");
      continue;
    }
    if (gone_here(w)) {
      act(w, Verdict::lost, "its process is gone");
      continue;
    }
    const bool working = w.state == Worker::State::ready || w.state == Worker::State::retiring;
    if (working && now - w.last_sent > r_.heartbeat_s) act(w, Verdict::heartbeat, {});
  }
}

}  // namespace fibra::detail
