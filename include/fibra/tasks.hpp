// fibra/tasks.hpp: Ray-style remote tasks: fibra::submit and fibra::wait, on the default pool.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fibra/detail/call_checks.hpp"
#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "fibra/options.hpp"
#include "fibra/pool.hpp"
#include "fibra/resources.hpp"

namespace fibra {

/// @brief The pool that fibra::submit and fibra::Actor<T>::start use. It starts at its first use,
/// with `workers` workers (0: the FIBRA_WORKERS environment variable, else one per core) and
/// `options`, and stops when the Runtime ends. Call it first, with arguments, to choose them.
/// @throws ConfigError if it already runs with another number of workers.
Pool& default_pool(int workers = 0, const PoolOptions& options = {});

/// @brief True in code that runs inside a task or an actor (on a worker), false in the driver. A
/// library can refuse there what only the driver can do (fibra::tune::run does).
bool in_task() noexcept;

/// @brief Runs `fn(args...)` on the default pool; see Pool::submit. An argument may be a Future of
/// another call: the task runs after it, with its value.
/// @code
///   fibra::Future<double> a = fibra::submit(square, 3.0);
///   fibra::Future<double> b = fibra::submit(add, a, 1.0);  // waits for a, in the driver
/// @endcode
template <class R, class... P, class... Args>
Future<std::remove_cvref_t<R>> submit(R (*fn)(P...), Args&&... args) {
  return default_pool().submit(fn, std::forward<Args>(args)...);
}

/// @brief Like submit, on a worker of the default pool that offers at least `needs`.
template <class R, class... P, class... Args>
Future<std::remove_cvref_t<R>> submit(const Resources& needs, R (*fn)(P...), Args&&... args) {
  return default_pool().submit(needs, fn, std::forward<Args>(args)...);
}

/// @brief Like submit, with this task's own TaskOptions (retries, time limit, name, needs).
template <class R, class... P, class... Args>
Future<std::remove_cvref_t<R>> submit(const TaskOptions& options, R (*fn)(P...), Args&&... args) {
  return default_pool().submit(options, fn, std::forward<Args>(args)...);
}

// A lambda, a function object or a member function lands here, where a static_assert says so in
// fibra's words instead of "no matching function" (`auto`: the first error; see refuse_function).
// ADL finds these for any unqualified call named submit with an argument of fibra's, so they take
// only a callable first (detail::callable_object), and as a bare pack: a user's own submit template
// with a parameter of its own for the callable is more specialized, and wins.
template <class... Args>
requires detail::callable_object<detail::first_arg_t<Args...>>
auto submit(Args&&...) { detail::refuse_function<detail::first_arg_t<Args...>, false>(); }
template <class... Args>
requires detail::callable_object<detail::first_arg_t<Args...>>
auto submit(const Resources&, Args&&...) { detail::refuse_function<detail::first_arg_t<Args...>, false>(); }
template <class... Args>
requires detail::callable_object<detail::first_arg_t<Args...>>
auto submit(const TaskOptions&, Args&&...) { detail::refuse_function<detail::first_arg_t<Args...>, false>(); }

namespace detail {
template <class Tuple, std::size_t... I>
auto split_results(const Future<Tuple>& whole, std::index_sequence<I...>) {
  const auto& job = whole.detail_job();
  std::array<std::shared_ptr<JobState>, sizeof...(I)> parts{
      (static_cast<void>(I), std::make_shared<JobState>(job->fn(), job->mode(), job->policy()))...};
  for (std::size_t i = 0; i < parts.size(); ++i)
    parts[i]->set_name(job->name() + " [return " + std::to_string(i) + "]");
  whole.then([parts](const Future<Tuple>& done) {
    std::array<std::string, sizeof...(I)> encoded;
    try {  // every part encoded before any is delivered: each gets one outcome
      const Tuple value = done.get();
      ((encoded[I] = encode_value(std::get<I>(value))), ...);
    } catch (...) {
      for (const auto& p : parts) p->deliver(ChunkOutcome{0, 1, {}, std::current_exception(), {}});
      return;
    }
    for (std::size_t i = 0; i < parts.size(); ++i)
      parts[i]->deliver(ChunkOutcome{0, 1, std::move(encoded[i]), nullptr, {}});
  });
  return std::make_tuple(Future<std::tuple_element_t<I, Tuple>>(parts[I])...);
}
}  // namespace detail

/// @brief Ray's `num_returns`: the parts of a task's std::tuple (or std::pair) result, each a
/// Future of its own, ready when the task is, and each usable alone as another task's argument.
/// If the task fails, each part's get() throws its error.
/// @code
///   std::tuple<Batch, Stats> rollout(Policy p);                 // FIBRA_REMOTE(rollout)
///   auto [batch, stats] = fibra::split(fibra::submit(rollout, p));
///   fibra::submit(learn, batch);                                 // waits for the batch alone
/// @endcode
/// In the driver (a part is made ready on fibra's task thread, as Future::then runs); cancel the task
/// through its own Future, not a part's.
template <class... T>
std::tuple<Future<T>...> split(const Future<std::tuple<T...>>& whole) {
  return detail::split_results(whole, std::index_sequence_for<T...>{});
}
template <class A, class B>
std::tuple<Future<A>, Future<B>> split(const Future<std::pair<A, B>>& whole) {
  return detail::split_results(whole, std::index_sequence<0, 1>{});
}

/// @brief Cancels a task (Pool::submit, apply_async, fibra::submit), as `ray.cancel` does: one
/// not yet handed to a worker (queued, or waiting for its Future arguments) never runs; with
/// `force`, one that runs is stopped by ending its executor (which its agent starts again). Its
/// get() then throws TaskCancelled, and tasks given its Future throw DependencyFailed. Returns
/// whether it will be cancelled: false if it finished already, or runs and `force` is false.
/// An actor's call is cancelled while it waits in the driver (behind its actor's running call):
/// it never runs; once sent to the actor's process it runs (false).
/// @throws ConfigError for an actor's call with `force`, or when called inside a task.
template <class T>
bool cancel(const Future<T>& future, bool force = false) {
  return detail::cancel_job(future.detail_job(), force);
}

/// @brief What fibra::wait returns: the futures that are ready (at most the number asked for, in
/// the order given) and the others, in the order given.
template <class T>
struct WaitResult {
  std::vector<Future<T>> ready;
  std::vector<Future<T>> pending;
};

namespace detail {

struct WaitLatch {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t delivered = 0;
};

template <class T>
WaitResult<T> wait_for_some(const std::vector<Future<T>>& futures, std::size_t num_ready,
                            std::optional<std::chrono::nanoseconds> timeout) {
  if (num_ready > futures.size())
    throw ConfigError("fibra::wait: asked for " + std::to_string(num_ready) + " ready futures out of " +
                      std::to_string(futures.size()));
  auto count_ready = [&] {
    std::size_t n = 0;
    for (const auto& f : futures) n += f.ready();
    return n;
  };
  for (const auto& f : futures)
    if (!f.valid()) throw ConfigError("fibra::wait: a Future in the list is empty (default-constructed)");
  // Inside a task, the task's thread waits as Future::get does: running the batches that come.
  if (wait_with_hook([&] { return count_ready() >= num_ready; }, timeout) < 0) {
    auto latch = std::make_shared<WaitLatch>();
    std::vector<std::pair<const Future<T>*, std::uint64_t>> tokens;
    for (const auto& f : futures) {
      tokens.emplace_back(&f, f.detail_job()->on_delivered([latch] {
        {
          std::lock_guard lk(latch->mu);
          ++latch->delivered;
        }
        latch->cv.notify_all();
      }));
    }
    {
      std::unique_lock lk(latch->mu);
      auto enough = [&] { return latch->delivered >= num_ready; };
      if (timeout)
        latch->cv.wait_for(lk, *timeout, enough);
      else
        latch->cv.wait(lk, enough);
    }
    // The callbacks of futures still pending go: a loop of waits must not pile them up.
    for (auto& [f, token] : tokens) f->detail_job()->forget_on_delivered(token);
  }
  WaitResult<T> r;
  for (const auto& f : futures) (r.ready.size() < num_ready && f.ready() ? r.ready : r.pending).push_back(f);
  return r;
}

}  // namespace detail

/// @brief Waits until `num_ready` of `futures` are ready (default: all), as `ray.wait` does.
/// @code
///   auto [ready, pending] = fibra::wait(futures, 1);   // the first to finish
/// @endcode
template <class T>
WaitResult<T> wait(const std::vector<Future<T>>& futures, std::size_t num_ready) {
  return detail::wait_for_some(futures, num_ready, std::nullopt);
}
template <class T>
WaitResult<T> wait(const std::vector<Future<T>>& futures) {
  return detail::wait_for_some(futures, futures.size(), std::nullopt);
}
/// @brief Like wait, but returns after `timeout` at the latest, with fewer ready futures then.
template <class T, class Rep, class Period>
WaitResult<T> wait(const std::vector<Future<T>>& futures, std::size_t num_ready,
                   std::chrono::duration<Rep, Period> timeout) {
  return detail::wait_for_some(futures, num_ready, std::chrono::duration_cast<std::chrono::nanoseconds>(timeout));
}

}  // namespace fibra
