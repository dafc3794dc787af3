// src/common/error_types.hpp: fibra's own error types (include/fibra/error.hpp), listed once. An
// error travels between processes as its type's name (exception_type_name: "fibra::GetTimeout")
// and its texts; the process that receives it makes the same type again from this list, whichever
// way it travelled (a task's failure to the driver, the driver's answer to a task's call).
#pragma once

#include <exception>
#include <string>

#include "fibra/detail/registry.hpp"
#include "fibra/error.hpp"
#include "fibra/hdf5_io/error.hpp"

namespace fibra::detail {

template <class... E>
struct ErrorTypes {};

/// The types whose only state is their message: each but Error itself also travels as a type
/// registered with FIBRA_EXCEPTION does (RemoteException<E>), so that one escaping a task is caught
/// as itself; a plain fibra::Error from a task stays a RemoteError, which says where it came from.
using MessageErrors = ErrorTypes<Error, WorkerLost, PoolClosed, DependencyFailed, ActorDied, TaskCancelled, GetTimeout,
                                 QueueFull, QueueEmpty, QueueClosed, PipeClosed, HolderDied, BrokenBarrier, LookupError,
                                 CheckpointError, ConfigError, MpiError, Hdf5Error>;
/// The types that say where a task failed (RemoteError's type name, message and site).
using SiteErrors = ErrorTypes<RemoteError, ExecutorCrashed, TaskTimeout>;

/// The error of fibra's type named `type` ("fibra::TaskCancelled") with what() `what` (and, for a
/// RemoteError, the remote type and message; its site is not known here); nullptr if `type` is none
/// of fibra's.
std::exception_ptr make_fibra_error(const std::string& type, const std::string& what, const std::string& remote_type,
                                    const std::string& remote_message);

/// Calls `add(name, maker)` for each of MessageErrors but Error, `maker` making its RemoteException<E>.
template <class Add, class... E>
void for_each_message_error(ErrorTypes<E...>, Add&& add) {
  ((std::is_same_v<E, Error> ? void()
                             : add(demangle(typeid(E).name()), ExceptionMaker([](std::string context, std::string type,
                                                                                 std::string message, RemoteSite site) {
                                     return std::make_exception_ptr(RemoteException<E>(
                                         std::move(context), std::move(type), std::move(message), std::move(site)));
                                   }))),
   ...);
}

}  // namespace fibra::detail
