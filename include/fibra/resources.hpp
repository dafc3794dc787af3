// fibra/resources.hpp: fibra::Resources, what a worker offers and what a task or actor asks for.
#pragma once

namespace fibra {

/// @brief CPUs, GPUs and memory: what each worker of a pool offers (PoolOptions::offers) and
/// what a task, a map or an actor needs (Pool::submit, MapOptions::resources,
/// ActorOptions::resources). In a request a field left at 0 asks for nothing in particular. See
/// docs/resources.md.
struct Resources {
  double cpus = 0;     ///< cores (an executor runs one task at a time; its threads may use these)
  int gpus = 0;        ///< GPUs: each worker sees its own through CUDA_VISIBLE_DEVICES
  long memory_mb = 0;  ///< memory in MiB (a worker's: 0 means not known, and not checked)
};

}  // namespace fibra
