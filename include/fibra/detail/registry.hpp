// fibra/detail/registry.hpp: the table of remote functions, filled by FIBRA_REMOTE at static
// initialisation in every process (driver, agents and executors run the same binary).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <cstring>
#include <vector>

#include "fibra/detail/call_checks.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"

namespace fibra::detail {

/// How the items of a chunk map onto a function's parameters.
enum class CallMode : std::uint8_t {
  single = 0,  ///< each item is the function's only argument (map, imap)
  tuple = 1,   ///< each item is a std::tuple of all its arguments (starmap, apply_async)
};

/// The first failing item of a chunk, as seen in the executor.
struct ItemFailure {
  std::uint32_t offset = 0;  ///< index of the item within its chunk
  std::string type;          ///< demangled exception type
  std::string message;       ///< what()
};

/// How an executor runs one chunk beyond the plain case.
struct RunControl {
  /// Record each failing item in `failures` (its result is R{}) and go on, instead of stopping
  /// at the first (calls with MapOptions::errors).
  bool keep_going = false;
  /// Offsets of items not to run (sorted): poison items that already used up their retries. They
  /// are recorded in `failures` with type "skipped" and get R{}.
  std::vector<std::uint32_t> skip;
  std::vector<ItemFailure>* failures = nullptr;
  bool plain() const { return !keep_going && skip.empty(); }
};

/// Runs `count` encoded items through a function, appending encoded results to `out`, and stores
/// the index of the item it is on in `cursor` (shared memory the agent reads if the process dies).
/// Returns false and fills `fail` at the first item that throws (unless ctl.keep_going).
using Cursor = std::atomic<std::uint32_t>;
using ChunkRunner = bool (*)(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail,
                             Cursor& cursor, const RunControl& ctl);

struct FunctionEntry {
  std::string name;
  std::uint64_t id = 0;              ///< hash of the name; what travels in messages
  const void* address = nullptr;     ///< the function's address in this process
  std::string signature;             ///< mangled type, to detect a driver/worker mismatch
  ChunkRunner run_single = nullptr;  ///< null unless the function takes exactly one argument
  ChunkRunner run_tuple = nullptr;
  /// Actor methods only: the bytes of the member-function pointer and its class's type name, by
  /// which a driver finds the entry of `&Class::method` (actor.hpp).
  std::string method_key;
};

/// Makes the RemoteException<E> of a registered exception type (FIBRA_EXCEPTION).
using ExceptionMaker = std::exception_ptr (*)(std::string context, std::string type_name, std::string message,
                                              RemoteSite site);
/// Registers `t` (by its demangled name, which is what a task's failure carries); a no-op the
/// second time.
bool add_exception(const std::type_info& t, ExceptionMaker make) noexcept;
/// The exception of registered type `type_name` (demangled), or nullptr if it is not registered.
std::exception_ptr make_registered_exception(const std::string& type_name, std::string context, std::string message,
                                             RemoteSite site);

template <class E>
bool register_exception() noexcept {
  static_assert(std::is_class_v<E> && std::is_constructible_v<E, std::string>,
                "fibra: FIBRA_EXCEPTION(E) needs a class E constructible from its message (a std::string), as "
                "std::runtime_error is: the caller's copy is made from the task's what()");
  static_assert(!std::is_final_v<E>,
                "fibra: FIBRA_EXCEPTION(E): E must not be final (it is rethrown as a class "
                "derived from it, fibra::RemoteException<E>)");
  return add_exception(typeid(E), [](std::string context, std::string type, std::string message, RemoteSite site) {
    return std::make_exception_ptr(
        RemoteException<E>(std::move(context), std::move(type), std::move(message), std::move(site)));
  });
}

std::uint64_t hash_name(std::string_view s) noexcept;
std::string demangle(const char* mangled);
std::string exception_type_name(const std::exception_ptr& e);

/// Adds a function; a second registration of the same function is a no-op, and a clash of names
/// is recorded and reported when the Runtime starts (throwing during static init would abort).
bool add_function(FunctionEntry e) noexcept;

/// Looks up by address (driver side); throws ConfigError naming the fix if it is not registered.
const FunctionEntry& function_by_address(const void* address, const char* what_call);
/// Looks up an actor method by FunctionEntry::method_key; nullptr if it is not registered.
const FunctionEntry* function_by_method(std::string_view key) noexcept;
/// Looks up by id (executor side); nullptr if unknown.
const FunctionEntry* function_by_id(std::uint64_t id) noexcept;
/// A hash of every registered name and signature: equal in processes that run the same binary.
std::uint64_t registry_fingerprint() noexcept;
std::size_t registry_size() noexcept;
/// Names of all registered functions, sorted (for messages).
std::vector<std::string> registry_names();
/// Throws ConfigError if FIBRA_REMOTE saw two different functions under one name.
void check_registry();

template <class T>
using stored_t = std::remove_cvref_t<T>;

/// The object of the actor an executor hosts (one per executor process; actor.hpp).
struct ActorSlot {
  void* object = nullptr;
  void (*destroy)(void*) = nullptr;
  const char* type = nullptr;  ///< typeid(T).name() of the object
};
ActorSlot& actor_slot() noexcept;

/// FIBRA_REMOTE of something that is not a free function.
template <auto F>
struct Remote {
  static_assert(!std::is_member_function_pointer_v<decltype(F)>,
                "fibra: FIBRA_REMOTE takes a free function; a member function needs an object that the worker "
                "does not have: make it a static member, or a free function that takes the object as a parameter");
  static_assert(std::is_member_function_pointer_v<decltype(F)> ||
                    !std::is_function_v<std::remove_pointer_t<decltype(F)>>,
                "fibra: FIBRA_REMOTE cannot register a noexcept function yet: remove noexcept");
  static_assert(std::is_member_function_pointer_v<decltype(F)> ||
                    std::is_function_v<std::remove_pointer_t<decltype(F)>>,
                "fibra: FIBRA_REMOTE takes a free function (at namespace scope, or a static member function); "
                "a lambda or a variable cannot be called by name in another process");
  static bool add(const char*) noexcept { return false; }
};

/// The item loops every runner shares: a function's (Remote) and an actor's constructor and
/// methods (actor.hpp). `Result` is what one item returns.
template <class Result>
struct Items {
  static ItemFailure failure_at(std::uint32_t i) {
    ItemFailure fail;
    fail.offset = i;
    auto e = std::current_exception();
    fail.type = exception_type_name(e);
    try {
      std::rethrow_exception(e);
    } catch (const RemoteOrigin& o) {  // a registered type from a nested task: passed on as it was, not wrapped
      fail.type = o.type_name();
      fail.message = o.remote_message();
    } catch (const std::exception& ex) {
      fail.message = ex.what();
    } catch (const std::string& s) {  // what is not a std::exception keeps its text where it has one
      fail.message = s;
    } catch (const char* s) {
      fail.message = s ? s : "(null)";
    } catch (...) {
      fail.message = "(an exception that is not a std::exception)";
    }
    return fail;
  }

  // The careful loop: skips poison items and, with keep_going, records failures and goes on.
  // `one(i)` runs item i and appends its result, setting `decoded` once its input is read;
  // `skip_input()` consumes an item's input unread; `empty_result()` appends R{}.
  template <class One, class SkipInput, class Empty>
  static bool run_careful(std::uint32_t count, ItemFailure& fail, Cursor& cursor, const RunControl& ctl, bool& decoded,
                          One&& one, SkipInput&& skip_input, Empty&& empty_result) {
    std::size_t next_skip = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
      cursor.store(i, std::memory_order_relaxed);
      if (next_skip < ctl.skip.size() && ctl.skip[next_skip] == i) {
        ++next_skip;
        skip_input();
        empty_result();
        if (ctl.failures) ctl.failures->push_back({i, "skipped", "not run again"});
        continue;
      }
      decoded = false;
      try {
        one(i);
      } catch (...) {
        fail = failure_at(i);
        // An input that cannot be decoded leaves the rest unreadable: stop there.
        if (!ctl.keep_going || !decoded) return false;
        empty_result();
        if (ctl.failures) ctl.failures->push_back(fail);
      }
    }
    return true;
  }

  // Runs `count` codec-encoded items of type In through `call`, appending encoded results: every
  // path but the raw fast one.
  template <class In, class Call>
  static bool run_encoded(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail, Cursor& cursor,
                          const RunControl& ctl, Call&& call) {
    Reader r(in);
    Writer w(out);
    if (!ctl.plain()) {
      bool decoded = false;
      return run_careful(
          count, fail, cursor, ctl, decoded,
          [&](std::uint32_t) {
            In x{};
            decode(r, x);
            decoded = true;
            Result res = call(std::move(x));
            encode(w, res);
          },
          [&] {
            In unused{};
            decode(r, unused);
          },
          [&] { encode(w, Result{}); });
    }
    for (std::uint32_t i = 0; i < count; ++i) {
      cursor.store(i, std::memory_order_relaxed);
      try {
        In x{};
        decode(r, x);
        encode(w, call(std::move(x)));
      } catch (...) {
        fail = failure_at(i);
        return false;
      }
    }
    return true;
  }
};

template <class R, class... Args, R (*F)(Args...)>
struct Remote<F> {
  using Result = std::conditional_t<std::is_void_v<R>, Unit, stored_t<R>>;  // a void function sends Unit
  using Tuple = std::tuple<stored_t<Args>...>;
  static_assert(check_signature<R, Args...>());

  using I = Items<Result>;

  static bool run_tuple(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail, Cursor& cursor,
                        const RunControl& ctl) {
    return I::template run_encoded<Tuple>(in, count, out, fail, cursor, ctl, [](Tuple&& args) -> Result {
      if constexpr (std::is_void_v<R>) {
        std::apply(F, std::move(args));
        return Unit{};
      } else {
        return std::apply(F, std::move(args));
      }
    });
  }

  static bool run_single(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail, Cursor& cursor,
                         const RunControl& ctl) {
    if constexpr (sizeof...(Args) == 1) {
      using A = std::tuple_element_t<0, Tuple>;
      Reader r(in);
      if constexpr (is_raw_v<A> && is_raw_v<Result> && !std::is_void_v<R>) {
        // Fast path: items and results are plain bytes; no per-item codec calls.
        std::size_t at = out.size();
        out.resize(at + std::size_t(count) * sizeof(Result));
        char* dst = out.data() + at;
        if (!ctl.plain()) {
          bool decoded = false;
          return I::run_careful(
              count, fail, cursor, ctl, decoded,
              [&](std::uint32_t i) {
                A a = r.pod<A>();
                decoded = true;
                Result res = F(a);
                std::memcpy(dst + std::size_t(i) * sizeof(Result), &res, sizeof(Result));
              },
              [&] { (void)r.pod<A>(); },
              [&] {  // the slot of the item the cursor is on gets Result{}
                const Result empty{};
                std::memcpy(dst + std::size_t(cursor.load(std::memory_order_relaxed)) * sizeof(Result), &empty,
                            sizeof(Result));
              });
        }
        for (std::uint32_t i = 0; i < count; ++i) {
          cursor.store(i, std::memory_order_relaxed);
          try {
            A a = r.pod<A>();
            Result res = F(a);
            std::memcpy(dst + std::size_t(i) * sizeof(Result), &res, sizeof(Result));
          } catch (...) {
            out.resize(at + std::size_t(i) * sizeof(Result));
            fail = I::failure_at(i);
            return false;
          }
        }
        return true;
      } else {
        return I::template run_encoded<A>(in, count, out, fail, cursor, ctl, [](A&& a) -> Result {
          if constexpr (std::is_void_v<R>) {
            F(std::move(a));
            return Unit{};
          } else {
            return F(std::move(a));
          }
        });
      }
    } else {
      return false;
    }
  }

  static bool add(const char* name) noexcept {
    FunctionEntry e;
    e.name = name;
    e.id = hash_name(name);
    e.address = reinterpret_cast<const void*>(F);
    e.signature = typeid(R(Args...)).name();
    e.run_tuple = &run_tuple;
    if constexpr (sizeof...(Args) == 1) e.run_single = &run_single;
    return add_function(std::move(e));
  }
};

}  // namespace fibra::detail
