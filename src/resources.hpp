// src/resources.hpp: what each worker of a pool offers, from its options and the allocation.
#pragma once

#include <string>
#include <vector>

#include "fibra/options.hpp"
#include "fibra/resources.hpp"

namespace fibra::detail {

struct WorkerResources {
  Resources each;                    ///< what one worker offers (its GPUs: how many it gets at most)
  std::vector<std::string> gpu_ids;  ///< the GPUs shared out among workers, `each.gpus` per worker
};

/// PoolOptions::resources and gpu_ids, with the fields left at 0 taken from the environment
/// (Slurm's variables, CUDA_VISIBLE_DEVICES). Throws ConfigError for what cannot be met.
WorkerResources resolve_resources(const PoolOptions& o, int workers);

/// "0,1,3" -> {"0", "1", "3"}; empty parts dropped. Slurm's "gpu:2" style (type and count) is not a list.
std::vector<std::string> split_ids(const std::string& s);

/// Slurm's compressed host list ("vnode[1-3],gpu[08-09],login") as names, in order; throws
/// ConfigError for what it cannot read.
std::vector<std::string> expand_hostlist(const std::string& list);

/// The hosts a pool's agents go to, one after another (spread): PoolOptions::hosts, else the nodes
/// of a Slurm allocation of more than one node (SLURM_JOB_NODELIST), else none (MPI decides:
/// the driver's host, on a workstation). `placement` "none" turns it off.
std::vector<std::string> placement_hosts(const PoolOptions& o);

/// "2 CPUs, 1 GPU, 4000 MiB", "nothing in particular" for an empty request.
std::string describe(const Resources& r);

}  // namespace fibra::detail
