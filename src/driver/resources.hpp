// src/driver/resources.hpp: what each worker of a pool offers, from its options and the allocation.
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

/// PoolOptions::offers and gpu_ids, with the fields left at 0 taken from the environment
/// (Slurm's variables, CUDA_VISIBLE_DEVICES). Throws ConfigError for what cannot be met.
WorkerResources resolve_resources(const PoolOptions& o, int workers);

/// "0,1,3" -> {"0", "1", "3"}; empty parts dropped. Slurm's "gpu:2" style (type and count) is not a list.
std::vector<std::string> split_ids(const std::string& s);

/// Slurm's compressed host list ("vnode[1-3],gpu[08-09],login") as names, in order; throws
/// ConfigError for what it cannot read.
std::vector<std::string> expand_hostlist(const std::string& list);

/// Where a pool's agents go: the policy and the hosts, each with the processes it takes (0: not
/// known).
struct Placement {
  bool pack = false;
  std::vector<std::string> hosts;  ///< empty: MPI decides (the driver's host, on a workstation)
  std::vector<int> slots;
  std::string source;  ///< where the hosts came from: "PoolOptions::hosts" or "SLURM_JOB_NODELIST"
};

/// PoolOptions::placement and hosts resolved: the hosts are PoolOptions::hosts ("name" or
/// "name:slots"), else the nodes of a Slurm allocation of more than one node (SLURM_JOB_NODELIST,
/// with SLURM_TASKS_PER_NODE as their slots), else none. "none" turns placement off. Throws
/// ConfigError for an unknown policy or a malformed host.
Placement resolve_placement(const PoolOptions& o);

/// Throws ConfigError naming the first of the placement's hosts that this machine cannot resolve
/// (getaddrinfo), and where the name came from: Open MPI, asked to spawn there, never returns
/// from MPI_Comm_spawn (its ssh fails, and ORTE waits for a daemon that never calls back).
/// `my_host` (this machine, known without a lookup) is not looked up.
void check_hosts_resolve(const Placement& p, const std::string& my_host);

/// What a host runs already: MPI processes (the driver and agents) and workers (the driver counts
/// as one).
struct HostLoad {
  int processes = 0;
  int workers = 0;
};

/// Which host the agent of `slot` (1, 2, ...), with `workers` workers, goes to, among those with
/// `usable` set. Spread: host (slot - 1) mod n, or the next one with a free slot for one more MPI
/// process; pack: the first host whose slots (Slurm's tasks, a CPU each) hold its workers and the
/// new agent's. A host with slots 0 always has room. When none has room, spread's own choice
/// (pack: the first usable host): Open MPI then refuses or oversubscribes. Returns hosts.size()
/// when no host is usable.
std::size_t choose_host(const Placement& p, const std::vector<bool>& usable, const std::vector<HostLoad>& load,
                        int workers, int slot);

/// Slurm's tasks per node ("2(x3),1") as counts, one per node ({2, 2, 2, 1}); throws ConfigError
/// for what it cannot read.
std::vector<int> expand_tasks_per_node(const std::string& text);

/// "2 CPUs, 1 GPU, 4000 MiB", "nothing in particular" for an empty request.
std::string describe(const Resources& r);

}  // namespace fibra::detail
