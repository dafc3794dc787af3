// fibra/slurm/render.hpp: a job spec as an sbatch script.
//
//   std::string script = fibra::slurm::render_script(fibra::slurm::parse_spec_file("job.toml"));
#pragma once

#include <fibra/slurm/spec.hpp>

#include <string>
#include <string_view>

namespace fibra::slurm {

/// @brief The exit status by which a fibra driver says "I stopped for a checkpoint; run me again"
/// (EX_TEMPFAIL). The batch script requeues the job when it sees it and requeue is on.
inline constexpr int checkpoint_exit_status = 75;

/// @brief The sbatch script for a spec: `#SBATCH` lines, the set-up lines, the environment
/// (FIBRA_CHECKPOINT, FIBRA_JOB_SPEC, FIBRA_OVERSUBSCRIBE), `mpirun --enable-recovery ... -n 1
/// <program>` run in the background, the forwarding of the warning signal to it, and the requeue
/// when the driver exits with checkpoint_exit_status. The text depends only on the spec.
std::string render_script(const JobSpec& spec);

/// @brief `s` quoted for a POSIX shell: unchanged if it is safe, else in single quotes.
std::string shell_quote(std::string_view s);

}  // namespace fibra::slurm
