// A pool's workers that joined from launches of their own (joined_workers.hpp).
#include "driver/joined_workers.hpp"

#include <string_view>

#include "driver/liveness.hpp"

namespace fibra::detail {

void JoinedWorkers::note_origin(const std::string& origin) {
  constexpr std::string_view slurm = "Slurm job ";
  if (origin.rfind(slurm, 0) == 0) jobs_.insert(origin.substr(slurm.size()));
}

std::string JoinedWorkers::leave_reason(Worker& w, double now, int total,
                                        const std::function<bool()>& hosts_actor) const {
  // (One rank of a launch of several that left alone would end the others: Open MPI ends a job
  // whose process exits without MPI_Finalize, and the others are not done. They stay.)
  if (!w.joined || w.state != Worker::State::ready || w.joined_ranks > 1) return {};
  // (Not Worker::last_busy: a batch through a lane is no message.)
  if (!w.batches.empty() || w.blocked > 0 || w.idle_since == 0) w.idle_since = now;
  if (w.job_ends_at > 0 && now >= w.job_ends_at - drain_before_s_)
    return ": its Slurm job's time limit is " + seconds_text(w.job_ends_at - now) +
           " away (AdaptOptions::drain_before_s): it finishes what it runs and leaves the pool";
  if (idle_s_ > 0 && now - w.idle_since >= idle_s_ && total - w.executors >= min_ && !hosts_actor())
    return " was idle for " + seconds_text(now - w.idle_since) + " (AdaptOptions::idle_timeout_s): it leaves the pool";
  return {};
}

}  // namespace fibra::detail
