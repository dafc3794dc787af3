// fibra/pool.hpp: fibra::Pool, Python's multiprocessing.Pool over MPI-spawned workers.
//
// What can be set for a pool and a call is in options.hpp (PoolOptions, MapOptions, ItemError);
// the machinery behind the templates below is in detail/ (stream.hpp feeds a call's inputs to the
// pool, imap.hpp is the range imap returns, call_checks.hpp the compile-time refusals).
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fibra/detail/call_checks.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/detail/core.hpp"
#include "fibra/detail/deps.hpp"
#include "fibra/detail/imap.hpp"
#include "fibra/detail/registry.hpp"
#include "fibra/detail/stream.hpp"
#include "fibra/error.hpp"
#include "fibra/future.hpp"
#include "fibra/options.hpp"
#include "fibra/stats.hpp"

namespace fibra {

class Pool;
Pool& default_pool(int workers, const PoolOptions& options);

/// @brief A pool of worker processes, spawned with MPI_Comm_spawn, with the API of Python's
/// `multiprocessing.Pool`.
///
/// @code
///   fibra::Pool pool(8);
///   std::vector<double> r = pool.map(rollout, params);          // ordered results
///   for (auto&& [i, v] : pool.imap_unordered(rollout, params)) { ... }
///   fibra::Future<double> f = pool.apply_async(rollout, p);
/// @endcode
/// Functions must be registered with FIBRA_REMOTE. Their arguments and results travel as bytes
/// (raw types), or encoded by fibra (std::string, std::vector, std::array, std::pair, std::tuple,
/// std::optional), or through their serialize(), which needs #include <fibra/serialization.hpp>
/// (docs/remote-functions.md). A task that throws makes the call throw fibra::RemoteError; the pool
/// keeps working. The destructor terminates the workers.
class Pool {
 public:
  /// @brief Starts `workers` workers (0: one per core of this machine) and waits until all are ready.
  /// @throws MpiError if MPI cannot spawn them (too few slots: the message says what to set),
  ///         ConfigError if fibra::Runtime was not created first.
  explicit Pool(int workers = 0, PoolOptions options = {});
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  Pool(Pool&&) noexcept = default;
  Pool& operator=(Pool&&) noexcept = default;

  /// @brief Number of workers the pool runs.
  int size() const { return core().size(); }

  /// @brief Applies `fn` to every item of `inputs`; returns the results in input order.
  /// @throws RemoteError for the first item whose task threw (the pool keeps working).
  template <class R, class A, std::ranges::input_range Range>
  std::vector<detail::mapped_t<R>> map(R (*fn)(A), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, A>() && detail::check_item<std::ranges::range_reference_t<Range>, A>());
    using Enc = detail::SingleArg<std::remove_cvref_t<A>>;
    return collect<std::remove_cvref_t<R>, Enc>(fn, detail::CallMode::single, std::forward<Range>(inputs), o, "map");
  }

  /// @brief Like map for a function of several parameters: each item is a tuple (or pair) of them.
  template <class R, class... P, std::ranges::input_range Range>
  std::vector<detail::mapped_t<R>> starmap(R (*fn)(P...), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, P...>() &&
                  detail::check_tuple_item<std::ranges::range_value_t<Range>, P...>());
    using Enc = detail::TupleArgs<std::tuple<std::remove_cvref_t<P>...>>;
    return collect<std::remove_cvref_t<R>, Enc>(fn, detail::CallMode::tuple, std::forward<Range>(inputs), o, "starmap");
  }

  /// @brief map without waiting, as multiprocessing's Pool.map_async: returns at once; the call
  /// reads its input, collects its results and runs `callback` on a thread of its own (one per
  /// call, never the caller's nor a pool's communication thread). `callback` gets every result,
  /// in input order, once; `error_callback` the error that ended the call instead. Either runs
  /// before the AsyncResult turns ready, so it must not wait for that result, and should be short.
  /// An lvalue input range (and MapOptions::errors) must outlive the call; a temporary is moved in.
  /// @code
  ///   auto r = pool.map_async(square, inputs, {}, [](const std::vector<long>& all) { use(all); });
  ///   r.wait();
  /// @endcode
  /// @throws at once what map throws before any work is sent (ConfigError, CheckpointError,
  ///         PoolClosed); what a task throws reaches get() and error_callback.
  template <class R, class A, std::ranges::input_range Range>
  AsyncResult<std::vector<detail::mapped_t<R>>> map_async(
      R (*fn)(A), Range&& inputs, const MapOptions& o = {},
      std::type_identity_t<std::function<void(const std::vector<detail::mapped_t<R>>&)>> callback = {},
      std::function<void(std::exception_ptr)> error_callback = {}) {
    static_assert(detail::check_signature<R, A>() && detail::check_item<std::ranges::range_reference_t<Range>, A>());
    using Enc = detail::SingleArg<std::remove_cvref_t<A>>;
    return collect_async<std::remove_cvref_t<R>, Enc>(fn, detail::CallMode::single, std::forward<Range>(inputs), o,
                                                      "map_async", std::move(callback), std::move(error_callback));
  }

  /// @brief starmap without waiting, as multiprocessing's Pool.starmap_async (see map_async).
  template <class R, class... P, std::ranges::input_range Range>
  AsyncResult<std::vector<detail::mapped_t<R>>> starmap_async(
      R (*fn)(P...), Range&& inputs, const MapOptions& o = {},
      std::type_identity_t<std::function<void(const std::vector<detail::mapped_t<R>>&)>> callback = {},
      std::function<void(std::exception_ptr)> error_callback = {}) {
    static_assert(detail::check_signature<R, P...>() &&
                  detail::check_tuple_item<std::ranges::range_value_t<Range>, P...>());
    using Enc = detail::TupleArgs<std::tuple<std::remove_cvref_t<P>...>>;
    return collect_async<std::remove_cvref_t<R>, Enc>(fn, detail::CallMode::tuple, std::forward<Range>(inputs), o,
                                                      "starmap_async", std::move(callback), std::move(error_callback));
  }

  /// @brief Lazily applies `fn` over `inputs`, yielding results in input order as they are ready.
  /// Keeps at most MapOptions::max_inflight_chunks chunks in memory, so the input may be huge.
  /// The input range must outlive the iteration if passed as an lvalue.
  template <class R, class A, std::ranges::input_range Range>
  auto imap(R (*fn)(A), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, A>() && detail::check_item<std::ranges::range_reference_t<Range>, A>());
    return stream<detail::mapped_t<R>, detail::SingleArg<std::remove_cvref_t<A>>, true>(fn, std::forward<Range>(inputs),
                                                                                        o, "imap");
  }

  /// @brief Like imap, but yields `{index, result}` pairs in the order they finish.
  template <class R, class A, std::ranges::input_range Range>
  auto imap_unordered(R (*fn)(A), Range&& inputs, const MapOptions& o = {}) {
    static_assert(detail::check_signature<R, A>() && detail::check_item<std::ranges::range_reference_t<Range>, A>());
    return stream<detail::mapped_t<R>, detail::SingleArg<std::remove_cvref_t<A>>, false>(
        fn, std::forward<Range>(inputs), o, "imap_unordered");
  }

  /// @brief Runs `fn(args...)` on a worker; the future holds its result.
  template <class R, class... P, class... Args>
  Future<std::remove_cvref_t<R>> apply_async(R (*fn)(P...), Args&&... args) {
    static_assert(sizeof...(P) == sizeof...(Args),
                  "fibra: apply_async got a different number of arguments than the function takes");
    static_assert(detail::check_signature<R, P...>());
    if constexpr (sizeof...(P) == sizeof...(Args)) static_assert((detail::check_item<Args, P>() && ...));
    return async_impl(fn, this->core().default_policy(), "apply_async", nullptr, std::forward<Args>(args)...);
  }

  /// @brief Runs `fn(args...)` on a worker and returns its result once it is there, as
  /// multiprocessing's Pool.apply: apply_async(fn, args...).get(). What the function threw is thrown
  /// here (RemoteError, or a type registered with FIBRA_EXCEPTION as itself).
  template <class R, class... P, class... Args>
  std::remove_cvref_t<R> apply(R (*fn)(P...), Args&&... args) {
    return apply_async(fn, std::forward<Args>(args)...).get();
  }

  /// @brief Runs `fn(args...)` on a worker, as apply_async does, but an argument may also be a
  /// Future of another call (of this pool or another): the task then runs once that call has
  /// finished, with its value, so a graph of tasks is built as the program runs. If such a call
  /// failed, this one fails with DependencyFailed, whose message names the chain.
  /// @code
  ///   fibra::Future<double> a = pool.submit(square, 3.0);
  ///   fibra::Future<double> b = pool.submit(add, a, 1.0);  // runs after `a`, with its result
  /// @endcode
  template <class R, class... P, class... Args>
  Future<std::remove_cvref_t<R>> submit(R (*fn)(P...), Args&&... args) {
    return submit_impl(nullptr, fn, std::forward<Args>(args)...);
  }
  /// @brief Like submit, on a worker that offers at least `needs` (GPUs, say; docs/resources.md).
  /// @throws ConfigError at once if no worker of this pool can ever offer that much.
  template <class R, class... P, class... Args>
  Future<std::remove_cvref_t<R>> submit(const Resources& needs, R (*fn)(P...), Args&&... args) {
    TaskOptions o;
    o.resources = needs;
    return submit_impl(&o, fn, std::forward<Args>(args)...);
  }
  /// @brief Like submit, with this task's own retries, time limit, name and needs (TaskOptions)
  /// over the pool's defaults.
  /// @code
  ///   auto f = pool.submit(fibra::TaskOptions{.retries = 0, .task_timeout_s = 5, .name = "probe"}, probe, 3);
  /// @endcode
  /// @throws ConfigError at once for a bad time limit, or needs no worker of this pool can offer.
  template <class R, class... P, class... Args>
  Future<std::remove_cvref_t<R>> submit(const TaskOptions& options, R (*fn)(P...), Args&&... args) {
    return submit_impl(&options, fn, std::forward<Args>(args)...);
  }

 private:
  template <class R, class... P, class... Args>
  Future<std::remove_cvref_t<R>> submit_impl(const TaskOptions* o, R (*fn)(P...), Args&&... args) {
    static_assert(sizeof...(P) == sizeof...(Args),
                  "fibra: submit got a different number of arguments than the function takes");
    static_assert(detail::check_signature<R, P...>());
    if constexpr (sizeof...(P) == sizeof...(Args)) static_assert((detail::check_arg<Args, P>() && ...));
    const auto& core = live_core();  // a moved-from pool throws PoolClosed before anything else
    detail::RetryPolicy policy = core->default_policy();
    if (o) {
      policy = detail::make_policy(policy, o->retries, o->retry_exceptions,
                                   o->task_timeout_s ? o->task_timeout_s : o->timeout_s.value);
      policy.need = o->resources;
    }
    const std::string* name = o && !o->name.empty() ? &o->name : nullptr;
    if constexpr (!(detail::is_future_v<Args> || ...)) {
      return async_impl(fn, policy, "submit", name, std::forward<Args>(args)...);
    } else {
      const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), "submit");
      // Refused now, as a submit without Future arguments is, rather than at get() once they are ready.
      if (core->closed()) throw PoolClosed("fibra: work was submitted to a pool that " + core->closed_reason());
      auto job = std::make_shared<detail::JobState>(
          entry, sizeof...(P) == 1 ? detail::CallMode::single : detail::CallMode::tuple, policy);
      if (name) job->set_name(*name);
      job->set_task();
      core->check_need(policy.need, job->name());
      detail::submit_after<P...>(core, job, std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...));
      return Future<std::remove_cvref_t<R>>(std::move(job));
    }
  }

  template <class R, class... P, class... Args>
  Future<std::remove_cvref_t<R>> async_impl(R (*fn)(P...), const detail::RetryPolicy& policy, const char* call,
                                            const std::string* name, Args&&... args) {
    auto& core = this->core();  // a moved-from pool throws PoolClosed before anything else
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), call);
    std::string payload;
    detail::Writer w(payload);
    detail::CallMode mode = detail::CallMode::tuple;
    if constexpr (sizeof...(P) == 1) {
      mode = detail::CallMode::single;
      (detail::SingleArg<std::remove_cvref_t<P>>::one(w, args), ...);
    } else {
      detail::encode(w, std::tuple<std::remove_cvref_t<P>...>(std::forward<Args>(args)...));
    }
    auto job = std::make_shared<detail::JobState>(entry, mode, policy);
    if (name) job->set_name(*name);
    job->set_task();
    core.submit(job, 0, 1, std::move(payload));
    return Future<std::remove_cvref_t<R>>(std::move(job));
  }

 public:
  // What is not a free function (a lambda, a member function) or has the wrong number of parameters
  // lands here, where a static_assert says so in fibra's words instead of "no matching function".
  // They return `auto`, not `void`, so that this sentence is the first error (see refuse_function).
  template <class F, class Range>
  requires(detail::arity_v<F> != 1) auto map(F&&, Range&&, const MapOptions& = {}) {
    detail::refuse_function<F, true>();
  }
  template <class F, class Range>
  requires(detail::arity_v<F> != 1) auto imap(F&&, Range&&, const MapOptions& = {}) {
    detail::refuse_function<F, true>();
  }
  template <class F, class Range>
  requires(detail::arity_v<F> != 1) auto imap_unordered(F&&, Range&&, const MapOptions& = {}) {
    detail::refuse_function<F, true>();
  }
  template <class F, class Range>
  requires(detail::arity_v<F> < 0) auto starmap(F&&, Range&&, const MapOptions& = {}) {
    detail::refuse_function<F, false>();
  }
  template <class F, class Range, class... Callbacks>
  requires(detail::arity_v<F> != 1) auto map_async(F&&, Range&&, const MapOptions& = {}, Callbacks&&...) {
    detail::refuse_function<F, true>();
  }
  template <class F, class Range, class... Callbacks>
  requires(detail::arity_v<F> < 0) auto starmap_async(F&&, Range&&, const MapOptions& = {}, Callbacks&&...) {
    detail::refuse_function<F, false>();
  }
  template <class F, class... Args>
  requires(detail::arity_v<F> < 0) auto apply_async(F&&, Args&&...) { detail::refuse_function<F, false>(); }
  template <class F, class... Args>
  requires(detail::arity_v<F> < 0) auto apply(F&&, Args&&...) { detail::refuse_function<F, false>(); }
  template <class F, class... Args>
  requires(detail::arity_v<F> < 0 && !std::is_same_v<std::remove_cvref_t<F>, Resources> &&
           !std::is_same_v<std::remove_cvref_t<F>, TaskOptions>) auto submit(F&&, Args&&...) {
    detail::refuse_function<F, false>();
  }
  template <class F, class... Args>
  requires(detail::arity_v<F> < 0) auto submit(const Resources&, F&&, Args&&...) {
    detail::refuse_function<F, false>();
  }
  template <class F, class... Args>
  requires(detail::arity_v<F> < 0) auto submit(const TaskOptions&, F&&, Args&&...) {
    detail::refuse_function<F, false>();
  }

  /// @brief Counters of work done, failures seen, retries and lost workers (see docs/fault-tolerance.md).
  PoolStats stats() const { return core().stats(); }

  /// @brief The pool's agents since it started (lost and gone ones too): where each runs (host,
  /// pid), how many workers, in what state.
  std::vector<WorkerInfo> workers() const { return core().workers(); }

  /// @brief Grows or shrinks the pool to `workers` while it runs.
  void resize(int workers) { core().resize(workers); }
  /// @brief From now on, keeps the pool between `min_workers` and `max_workers` workers (its own
  /// and those that joined) with Slurm worker jobs that join it: submitted with sbatch while work
  /// waits, a joined worker leaving once idle for AdaptOptions::idle_timeout_s; every worker job
  /// still running is cancelled when the pool ends. Needs FIBRA_JOIN_FILE (docs/elastic.md).
  /// @throws ConfigError on bounds that cannot hold, without FIBRA_JOIN_FILE, or without sbatch.
  void adapt(int min_workers, int max_workers, AdaptOptions options = {}) {
    core().adapt(min_workers, max_workers, options);
  }
  /// @brief No more work may be submitted; queued work still runs.
  void close() { core().close(); }
  /// @brief After close(): waits for queued work to finish, then stops the workers.
  void join() { core().join(); }
  /// @brief Stops the workers now; unfinished futures fail with PoolClosed.
  void terminate() { core().terminate(); }

 private:
  detail::PoolCore& core() const { return *live_core(); }
  template <class T>
  friend class Actor;
  friend Pool& default_pool(int, const PoolOptions&);
  explicit Pool(std::shared_ptr<detail::PoolCore> core) : core_(std::move(core)) {}
  // The pool's core, shared with a call's stream; a moved-from pool has none.
  const std::shared_ptr<detail::PoolCore>& live_core() const {
    if (!core_) throw PoolClosed("fibra: this Pool was moved from");
    return core_;
  }

  template <class R, class Enc, class Fn, class Range>
  std::vector<R> collect(Fn fn, detail::CallMode mode, Range&& inputs, const MapOptions& o, const char* call) {
    static_assert(!std::is_same_v<R, bool>,
                  "fibra: map/starmap cannot return bool results (std::vector<bool> is packed): return int or char");
    const auto& core = live_core();  // a moved-from pool throws PoolClosed before anything else
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), call);
    using View = std::views::all_t<Range>;
    detail::ChunkStream<View, Enc> s(core, entry, mode, std::views::all(std::forward<Range>(inputs)), o, call);
    detail::attach_checkpoint<R>(s, entry, o, call);
    return drain<R>(s, o.errors);
  }

  // Every outcome of a call's stream, decoded in input order (map's loop, and map_async's thread's).
  template <class R, class Stream>
  static std::vector<R> drain(Stream& s, std::vector<ItemError>* errors) {
    std::vector<R> out;
    const std::size_t errors_before = errors ? errors->size() : 0;
    if (auto n = s.known_size()) out.resize(*n);
    detail::ChunkOutcome c;
    while (s.next(c)) {
      if (out.size() < c.first + c.count) out.resize(c.first + c.count);
      detail::decode_items(c.bytes(), out.data() + c.first, c.count);
      s.release();
      c = detail::ChunkOutcome{};  // a result left in shared memory gives its slot back now
    }
    if (errors)  // only what this call added
      std::stable_sort(errors->begin() + static_cast<std::ptrdiff_t>(errors_before), errors->end(),
                       [](auto& a, auto& b) { return a.index < b.index; });
    return out;
  }

  // map_async and starmap_async: the stream is made here, so that what map refuses before sending
  // anything is refused in the caller's thread; its outcomes are drained on a thread of the call's own.
  template <class R, class Enc, class Fn, class Range>
  AsyncResult<std::vector<R>> collect_async(Fn fn, detail::CallMode mode, Range&& inputs, const MapOptions& o,
                                            const char* call, std::function<void(const std::vector<R>&)> callback,
                                            std::function<void(std::exception_ptr)> error_callback) {
    static_assert(!std::is_same_v<R, bool>,
                  "fibra: map/starmap cannot return bool results (std::vector<bool> is packed): return int or char");
    const auto& core = live_core();  // a moved-from pool throws PoolClosed before anything else
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), call);
    using View = std::views::all_t<Range>;
    using Stream = detail::ChunkStream<View, Enc>;
    auto s = std::make_shared<Stream>(core, entry, mode, std::views::all(std::forward<Range>(inputs)), o, call);
    detail::attach_checkpoint<R>(*s, entry, o, call);
    auto state = std::make_shared<detail::AsyncState<std::vector<R>>>(std::string(call) + " " + entry.name);
    detail::run_async_call([s, state, errors = o.errors, callback = std::move(callback),
                            error_callback = std::move(error_callback)]() mutable {
      std::optional<std::vector<R>> out;
      std::exception_ptr error;
      try {
        out = drain<R>(*s, errors);
      } catch (...) {
        error = std::current_exception();
      }
      s.reset();  // the call's job and checkpoint end before its result is announced
      detail::finish_async(*state, std::move(out), error, callback, error_callback);
    });
    return AsyncResult<std::vector<R>>(std::move(state));
  }

  template <class R, class Enc, bool Ordered, class Fn, class Range>
  auto stream(Fn fn, Range&& inputs, const MapOptions& o, const char* call) {
    const auto& core = live_core();  // a moved-from pool throws PoolClosed before anything else
    const auto& entry = detail::function_by_address(reinterpret_cast<const void*>(fn), call);
    using View = std::views::all_t<Range>;
    auto s = std::make_unique<detail::ChunkStream<View, Enc>>(core, entry, detail::CallMode::single,
                                                              std::views::all(std::forward<Range>(inputs)), o, call);
    detail::attach_checkpoint<R>(*s, entry, o, call);
    return detail::ImapResults<R, View, Enc, Ordered>(std::move(s));
  }

  std::shared_ptr<detail::PoolCore> core_;
};

}  // namespace fibra
