// fibra/detail/deps.hpp: tasks whose arguments are Futures of other calls (Pool::submit). Such a
// task waits in the driver until every Future it was given has its outcome, then is queued with
// their values; if one of them failed, the task fails with DependencyFailed naming the chain.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fibra/detail/call_checks.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/stream.hpp"
#include "fibra/error.hpp"
#include "fibra/future.hpp"

namespace fibra::detail {

template <class T>
struct future_of : std::false_type {};
template <class T>
struct future_of<Future<T>> : std::true_type {
  using type = T;
};
template <class X>
inline constexpr bool is_future_v = future_of<std::remove_cvref_t<X>>::value;

/// The compile-time checks of one argument: a Future's value type stands for the Future.
template <class X, class P>
constexpr bool check_arg() {
  if constexpr (is_future_v<X>) {
    using T = typename future_of<std::remove_cvref_t<X>>::type;
    static_assert(!std::is_void_v<T>, "fibra: a Future<void> has no value to pass as an argument");
    if constexpr (!std::is_void_v<T>) return check_item<T, P>();
    return false;
  } else {
    return check_item<X, P>();
  }
}

/// An argument as the function receives it: a Future's value, or the argument itself.
template <class X>
decltype(auto) resolve(const X& x) {
  if constexpr (is_future_v<X>)
    return x.get();
  else
    return (x);
}

/// One call's arguments (some of them Futures), waiting for the Futures' outcomes.
template <class Args, class... P>
struct WaitingTask {
  std::shared_ptr<PoolCore> core;
  std::shared_ptr<JobState> job;
  Args args;
  std::atomic<std::size_t> left{0};
  std::uint64_t actor = 0;  ///< an actor call (its place reserved: PoolCore::reserve_actor_call); 0: a task

  // Gives up the reserved place of an actor call that will not run (its outcome is delivered).
  void drop_actor_call() {
    if (actor != 0) core->fill_actor_call(actor, job, {}, true);
  }

  // On fibra's task thread, once every Future argument has its outcome.
  void run() {
    if (job->cancel_requested()) {  // fibra::cancel delivered its TaskCancelled (or this does, once)
      drop_actor_call();
      if (job->claim_cancel_delivery())
        job->deliver({0,
                      1,
                      {},
                      std::make_exception_ptr(TaskCancelled("fibra: " + job->name() +
                                                            " was cancelled (fibra::cancel) while it waited "
                                                            "for its Future arguments")),
                      {}});
      return;
    }
    std::exception_ptr failed;
    std::size_t i = 0;
    std::apply([&](const auto&... x) { (check(x, ++i, failed), ...); }, args);
    if (failed) {
      drop_actor_call();
      return job->deliver({0, 1, {}, failed, {}});  // the caller releases the hold
    }
    try {
      std::string payload;
      Writer w(payload);
      std::vector<ObjectArg> objects;
      if constexpr (sizeof...(P) > 1 && is_raw_v<std::tuple<std::remove_cvref_t<P>...>>) {
        // A tuple of raw types travels as its bytes, not argument by argument: values, not references.
        std::apply([&](const auto&... x) { encode(w, std::tuple<std::remove_cvref_t<P>...>(resolve(x)...)); }, args);
      } else {
        // Argument by argument (as Codec<std::tuple> and SingleArg write them); a stored object
        // (fibra::put) of the parameter's own type leaves a gap where its bytes belong.
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          (one<std::remove_cvref_t<P>>(w, std::get<I>(args), objects), ...);
        }
        (std::index_sequence_for<P...>{});
      }
      if (!objects.empty()) job->set_objects(std::move(objects));
      if (actor != 0)
        core->fill_actor_call(actor, job, std::move(payload), false);
      else
        core->submit_dependent(job, std::move(payload));
    } catch (...) {  // the pool was terminated meanwhile, say: the task's future says so
      try {
        drop_actor_call();
      } catch (...) {
      }
      job->deliver({0, 1, {}, std::current_exception(), {}});
    }
  }

  void run_and_release() {
    run();
    core->hold_dependent(-1);
  }

  // One argument, for the parameter of type A: its bytes, or the gap of a stored object.
  template <class A, class X>
  static void one(Writer& w, const X& x, std::vector<ObjectArg>& objects) {
    if constexpr (is_future_v<X>) {
      if constexpr (std::is_same_v<typename future_of<X>::type, A>) {
        if (const auto& o = x.detail_job()->object()) {
          objects.push_back({o, w.buffer().size()});
          return;
        }
      }
    }
    SingleArg<A>::one(w, resolve(x));
  }

  template <class X>
  void check(const X& x, std::size_t i, std::exception_ptr& failed) const {
    if constexpr (is_future_v<X>) {
      if (failed || x.detail_job()->object()) return;  // a stored object (fibra::put) never failed
      std::string why;
      try {
        (void)x.get();
        return;
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
        why = "an exception that is not a std::exception";
      }
      failed = std::make_exception_ptr(DependencyFailed("fibra: " + job->name() + " did not run: its argument " +
                                                        std::to_string(i) + " is the result of " +
                                                        x.detail_job()->name() + ", which failed: " + why));
    }
  }
};

/// Queues `job` on `core` once every Future among `args` has its outcome (at once if they all do);
/// with `actor`, as a call to that actor whose place among its calls is taken now.
template <class... P, class Args>
void submit_after(std::shared_ptr<PoolCore> core, std::shared_ptr<JobState> job, Args args, std::uint64_t actor = 0) {
  auto t = std::make_shared<WaitingTask<Args, P...>>();
  t->core = std::move(core);
  t->job = std::move(job);
  t->args = std::move(args);
  t->actor = actor;
  if (actor != 0) t->core->reserve_actor_call(actor, t->job);
  std::vector<std::shared_ptr<JobState>> deps;
  std::apply(
      [&](const auto&... x) {
        auto add = [&](const auto& a) {
          if constexpr (is_future_v<decltype(a)>) deps.push_back(a.detail_job());
        };
        (add(x), ...);
      },
      t->args);
  t->left.store(deps.size());
  if (!deps.empty()) t->core->note_dependencies(t->job, deps);
  if (actor == 0) t->job->set_pool_uid(waiting_for_arguments);  // fibra::cancel: not queued yet
  t->core->hold_dependent(+1);                                  // join() waits for it
  for (auto& d : deps) {
    d->note_dependent();  // a large result of it stays where it is made (PoolOptions::keep_results_from)
    d->on_delivered([t] {
      if (t->left.fetch_sub(1) == 1) run_later([t] { t->run_and_release(); });
    });
  }
}

}  // namespace fibra::detail
