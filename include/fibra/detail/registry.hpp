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
#include <vector>

#include "fibra/detail/codec.hpp"

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

/// Runs `count` encoded items through a function, appending encoded results to `out`, and stores
/// the index of the item it is on in `cursor` (shared memory the agent reads if the process dies).
/// Returns false and fills `fail` at the first item that throws.
using Cursor = std::atomic<std::uint32_t>;
using ChunkRunner = bool (*)(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail,
                             Cursor& cursor);

struct FunctionEntry {
  std::string name;
  std::uint64_t id = 0;            ///< hash of the name; what travels in messages
  const void* address = nullptr;   ///< the function's address in this process
  std::string signature;           ///< mangled type, to detect a driver/worker mismatch
  ChunkRunner run_single = nullptr;  ///< null unless the function takes exactly one argument
  ChunkRunner run_tuple = nullptr;
};

std::uint64_t hash_name(std::string_view s) noexcept;
std::string demangle(const char* mangled);
std::string exception_type_name(const std::exception_ptr& e);

/// Adds a function; a second registration of the same function is a no-op, and a clash of names
/// is recorded and reported when the Runtime starts (throwing during static init would abort).
bool add_function(FunctionEntry e) noexcept;

/// Looks up by address (driver side); throws ConfigError naming the fix if it is not registered.
const FunctionEntry& function_by_address(const void* address, const char* what_call);
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

template <auto F>
struct Remote;

template <class R, class... Args, R (*F)(Args...)>
struct Remote<F> {
  using Result = stored_t<R>;
  using Tuple = std::tuple<stored_t<Args>...>;
  static_assert(!std::is_void_v<R>, "fibra: a remote function must return a value (return an int, say)");

  static bool fail_at(std::uint32_t i, ItemFailure& fail) {
    fail.offset = i;
    auto e = std::current_exception();
    fail.type = exception_type_name(e);
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      fail.message = ex.what();
    } catch (...) {
      fail.message = "(an exception that is not a std::exception)";
    }
    return false;
  }

  static bool run_tuple(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail,
                        Cursor& cursor) {
    Reader r(in);
    Writer w(out);
    for (std::uint32_t i = 0; i < count; ++i) {
      cursor.store(i, std::memory_order_relaxed);
      try {
        Tuple args{};
        decode(r, args);
        encode(w, std::apply(F, std::move(args)));
      } catch (...) {
        return fail_at(i, fail);
      }
    }
    return true;
  }

  static bool run_single(std::string_view in, std::uint32_t count, std::string& out, ItemFailure& fail,
                         Cursor& cursor) {
    if constexpr (sizeof...(Args) == 1) {
      using A = std::tuple_element_t<0, Tuple>;
      Reader r(in);
      if constexpr (is_raw_v<A> && is_raw_v<Result>) {
        // Fast path: items and results are plain bytes; no per-item codec calls.
        std::size_t at = out.size();
        out.resize(at + std::size_t(count) * sizeof(Result));
        char* dst = out.data() + at;
        for (std::uint32_t i = 0; i < count; ++i) {
          cursor.store(i, std::memory_order_relaxed);
          try {
            A a = r.pod<A>();
            Result res = F(a);
            std::memcpy(dst + std::size_t(i) * sizeof(Result), &res, sizeof(Result));
          } catch (...) {
            out.resize(at + std::size_t(i) * sizeof(Result));
            return fail_at(i, fail);
          }
        }
        return true;
      } else {
        Writer w(out);
        for (std::uint32_t i = 0; i < count; ++i) {
          cursor.store(i, std::memory_order_relaxed);
          try {
            A a{};
            decode(r, a);
            encode(w, F(std::move(a)));
          } catch (...) {
            return fail_at(i, fail);
          }
        }
        return true;
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
