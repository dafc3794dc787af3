// run_command: a child process with its output captured (see fibra/slurm/client.hpp).
#include <fibra/slurm/client.hpp>

#include <utility>

#include "common/command.hpp"

namespace fibra::slurm {

CommandResult run_command(const std::vector<std::string>& argv) {
  std::string error;
  detail::CommandOutput o = detail::run_command(argv, {}, error);
  if (!error.empty()) throw SlurmError(error);
  return {o.status, std::move(o.out), std::move(o.err)};
}

}  // namespace fibra::slurm
