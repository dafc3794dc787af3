// fibra/fibra.hpp: the whole public API of fibra.
//
//   runtime.hpp        fibra::Runtime: first line of main; turns spawned copies into workers
//   remote.hpp         FIBRA_REMOTE(fn): registers a function for remote calls
//   pool.hpp           fibra::Pool: map, imap, imap_unordered, starmap, apply_async, resize, close/join
//   options.hpp        fibra::PoolOptions, fibra::MapOptions (a pool's and a call's settings), ItemError
//   stats.hpp          fibra::PoolStats: a pool's counters of work and failures (Pool::stats())
//   future.hpp         fibra::Future<T>: get, wait, wait_for, ready
//   tasks.hpp          fibra::submit, fibra::wait, fibra::default_pool: remote tasks, nested and with dependencies
//   object.hpp         fibra::put: the object store, a value kept once that tasks take by reference
//   actor.hpp          fibra::Actor<T>, fibra::Manager, FIBRA_ACTOR: objects with state in processes of their own
//   process.hpp        fibra::Process: a registered function in a process of its own (start, join, exitcode)
//   queue.hpp          fibra::Queue<T>, SimpleQueue<T>, Pipe<T>/Connection<T>, Event: shared by processes on any node
//   sync.hpp           fibra::Lock, RLock, Semaphore, BoundedSemaphore, Condition, Barrier: on any node
//   shared.hpp         fibra::Value<T>, Array<T>, Dict<K, V>, List<T>: shared state in the driver
//   resources.hpp      fibra::Resources: CPUs, GPUs and memory a pool's workers offer and a call needs
//   error.hpp          fibra::Error and its subclasses (RemoteError, ExecutorCrashed, ConfigError, ...)
//   hdf5_io/error.hpp  fibra::Hdf5Error, beside the HDF5 store that throws it (fibra links that store)
//   log.hpp            fibra::log: the level of fibra's own lines (FIBRA_LOG_LEVEL) and where they go
//   version.hpp        fibra::version
//
// Not included here: serialization.hpp, for types sent with a Boost.Serialization serialize().
// Include it yourself in the files that send them (it brings Boost's archive headers, which
// files sending only raw types, std::string and std containers do not need).
// detail/ holds what the templates need; nothing in it is API.
#pragma once

#include "fibra/actor.hpp"
#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "fibra/hdf5_io/error.hpp"
#include "fibra/log.hpp"
#include "fibra/object.hpp"
#include "fibra/options.hpp"
#include "fibra/pool.hpp"
#include "fibra/process.hpp"
#include "fibra/queue.hpp"
#include "fibra/remote.hpp"
#include "fibra/resources.hpp"
#include "fibra/runtime.hpp"
#include "fibra/shared.hpp"
#include "fibra/stats.hpp"
#include "fibra/sync.hpp"
#include "fibra/tasks.hpp"
#include "fibra/version.hpp"
