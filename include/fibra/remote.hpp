// fibra/remote.hpp: FIBRA_REMOTE, which makes a function callable on workers.
#pragma once

#include "fibra/detail/registry.hpp"

#define FIBRA_DETAIL_CAT2(a, b) a##b
#define FIBRA_DETAIL_CAT(a, b) FIBRA_DETAIL_CAT2(a, b)

/// @brief Registers a free function by name in every process of the run.
///
/// Put it at namespace scope next to the function's definition:
/// @code
///   double rollout(const Params& p) { ... }
///   FIBRA_REMOTE(rollout);
/// @endcode
/// Arguments and the result must be serializable (see docs/remote-functions.md); the function must
/// return a value. Registering the same function twice is harmless; two functions under one name
/// are reported when fibra::Runtime starts.
// The variable is named by __COUNTER__, not __LINE__: a FIBRA_REMOTE in a header and one in the
// file that includes it may stand on the same line number (two did, in tests/compile_fail/).
#define FIBRA_REMOTE(fn)                                                                       \
  [[maybe_unused]] static const bool FIBRA_DETAIL_CAT(fibra_remote_registered_, __COUNTER__) = \
      ::fibra::detail::Remote<&fn>::add(#fn)

/// @brief Registers an exception type, so that a task that throws it is rethrown in the caller as
/// that type (fibra::RemoteException<E>, derived from E and from fibra::RemoteOrigin), through
/// nested tasks too, instead of as a RemoteError. E must be constructible from a std::string (its
/// message), as std::runtime_error is. Put it at namespace scope, in the binary that runs the tasks:
/// @code
///   struct BadSeed : std::runtime_error { using std::runtime_error::runtime_error; };
///   FIBRA_EXCEPTION(BadSeed);
///   try { f.get(); } catch (const BadSeed& e) { ... }
/// @endcode
#define FIBRA_EXCEPTION(E)                                                                        \
  [[maybe_unused]] static const bool FIBRA_DETAIL_CAT(fibra_exception_registered_, __COUNTER__) = \
      ::fibra::detail::register_exception<E>()
