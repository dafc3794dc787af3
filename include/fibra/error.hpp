// fibra/error.hpp: the exceptions a fibra user may catch.
//
// Every error derives from fibra::Error (a std::runtime_error). Messages say what happened, where
// (function, item, worker, host, pid) and what to do about it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace fibra {

/// @brief Base of every exception fibra throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief Where a remote failure happened.
struct RemoteSite {
  std::string function;    ///< registered name of the function
  std::uint64_t item = 0;  ///< index of the input item (in the call's input order)
  int worker = -1;         ///< fibra worker id
  std::string host;        ///< host name of the worker
  long pid = 0;            ///< pid of the executor process that ran the item
};

/// @brief A task failed on a worker: it threw, or its executor process died.
///
/// `type_name()` is the demangled type of the remote exception ("std::invalid_argument"), or
/// "signal" / "exit" when the executor process died; `remote_message()` is its what() text.
class RemoteError : public Error {
 public:
  RemoteError(const std::string& what, std::string type_name, std::string remote_message, RemoteSite site)
      : Error(what),
        type_name_(std::move(type_name)),
        remote_message_(std::move(remote_message)),
        site_(std::move(site)) {}
  const std::string& type_name() const noexcept { return type_name_; }
  const std::string& remote_message() const noexcept { return remote_message_; }
  const RemoteSite& site() const noexcept { return site_; }

 private:
  std::string type_name_;
  std::string remote_message_;
  RemoteSite site_;
};

/// @brief Where a task's exception of a registered type came from (FIBRA_EXCEPTION): what a
/// RemoteError says, for an exception that is rethrown as its own type. Reach it from the caught
/// exception with `dynamic_cast<const fibra::RemoteOrigin*>(&e)`, or catch it as such.
class RemoteOrigin {
 public:
  RemoteOrigin(std::string context, std::string type_name, std::string remote_message, RemoteSite site)
      : context_(std::move(context)),
        type_name_(std::move(type_name)),
        remote_message_(std::move(remote_message)),
        site_(std::move(site)) {}
  virtual ~RemoteOrigin() = default;
  /// The sentence a RemoteError would have as its what(): function, item, worker, host, pid.
  const std::string& context() const noexcept { return context_; }
  const std::string& type_name() const noexcept { return type_name_; }
  const std::string& remote_message() const noexcept { return remote_message_; }
  const RemoteSite& site() const noexcept { return site_; }

 private:
  std::string context_, type_name_, remote_message_;
  RemoteSite site_;
};

/// @brief A task's exception of a type registered with FIBRA_EXCEPTION(E), rethrown in the caller
/// as that type: catch it as `E` (its what() is the task's message), as `std::exception`, or as
/// `RemoteOrigin` for where it came from. It does not derive from RemoteError: with two
/// std::exception bases (E's and RemoteError's), `catch (const std::exception&)` would miss it.
template <class E>
class RemoteException final : public E, public RemoteOrigin {
 public:
  RemoteException(std::string context, std::string type_name, std::string remote_message, RemoteSite site)
      : E(remote_message), RemoteOrigin(std::move(context), std::move(type_name), remote_message, std::move(site)) {}
};

/// @brief The executor process running a task died (signal, exit, killed for memory).
class ExecutorCrashed : public RemoteError {
 public:
  using RemoteError::RemoteError;
};

/// @brief A worker stopped answering and was declared lost, and the work it held ran out of
/// retries; or no worker could be started.
class WorkerLost : public Error {
 public:
  using Error::Error;
};

/// @brief A task ran past its time limit (MapOptions::task_timeout_s); its executor was killed.
class TaskTimeout : public RemoteError {
 public:
  using RemoteError::RemoteError;
};

/// @brief The pool was closed or terminated, or can no longer run work.
class PoolClosed : public Error {
 public:
  using Error::Error;
};

/// @brief A task did not run because a Future it was given as an argument failed. The message
/// names the chain: which argument, which task it came from, and that task's own error.
class DependencyFailed : public Error {
 public:
  using Error::Error;
};

/// @brief An actor's process died (or its worker was lost) before the call finished, or the actor
/// could not be started, or it is gone for good (no restarts left). The message says which.
class ActorDied : public Error {
 public:
  explicit ActorDied(const std::string& what, std::string cause = {}) : Error(what), cause_(std::move(cause)) {}
  /// @brief How its process ended, where the call was running in it ("killed by signal 11
  ///        (SIGSEGV) (worker 2 on node7, pid 4242)"); "" otherwise.
  const std::string& cause() const noexcept { return cause_; }

 private:
  std::string cause_;
};

/// @brief A task was cancelled (fibra::cancel) before it ran, or stopped by force while it ran.
class TaskCancelled : public Error {
 public:
  using Error::Error;
};

/// @brief Future::get(timeout) found no result in time; the call goes on, and the future can be
/// waited on again.
class GetTimeout : public Error {
 public:
  using Error::Error;
};

/// @brief Queue::put with a timeout found the queue still full when it ran out (Python's queue.Full).
class QueueFull : public Error {
 public:
  using Error::Error;
};

/// @brief Queue::get (or Connection::recv) with a timeout found nothing in time (Python's
/// queue.Empty).
class QueueEmpty : public Error {
 public:
  using Error::Error;
};

/// @brief The queue was closed (Queue::close) and every item in it was taken: the end of the
/// stream. Also a put into a closed queue, and any use of a queue that is gone.
class QueueClosed : public Error {
 public:
  using Error::Error;
};

/// @brief The other end of a Pipe was closed, or the process that held it died, and nothing it
/// sent is left to receive (Python's EOFError); also a send on a closed end.
class PipeClosed : public Error {
 public:
  using Error::Error;
};

/// @brief The process that held a Lock, RLock, Semaphore or Condition (fibra/sync.hpp) died holding
/// it: what it held is free again, and each acquire that waited then is told, since what the lock
/// kept may be half-changed. Later acquires go on as usual.
class HolderDied : public Error {
 public:
  using Error::Error;
};

/// @brief A Barrier was broken (Python's BrokenBarrierError): a wait timed out, it was aborted or
/// reset, or a party's process died while waiting.
class BrokenBarrier : public Error {
 public:
  using Error::Error;
};

/// @brief A key not in a Dict, or an index outside a List or Array (Python's LookupError, the base
/// of its KeyError and IndexError).
class LookupError : public Error {
 public:
  using Error::Error;
};

/// @brief A checkpoint cannot be used (wrong run, damaged, not a fibra file).
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// @brief A setting, argument or environment is wrong (unregistered function, bad option, ...).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// @brief An MPI call failed; the message carries MPI's own text.
class MpiError : public Error {
 public:
  using Error::Error;
};

// An HDF5 call's failure is fibra::Hdf5Error, beside the library that throws it
// (<fibra/hdf5_io/error.hpp>, which <fibra/fibra.hpp> includes); a Slurm command's is
// fibra::slurm::SlurmError (<fibra/slurm/error.hpp>). CheckpointError stays here: the core throws
// it too, for a map's checkpoint of another run.

}  // namespace fibra

// Code written when Hdf5Error was declared here still finds it through this header, where the HDF5
// store's headers are on the include path (as they are for whatever links fibra).
#if __has_include(<fibra/hdf5_io/error.hpp>)
#include <fibra/hdf5_io/error.hpp>
#endif
