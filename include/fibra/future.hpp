// fibra/future.hpp: fibra::Future<T>, the result of a call that runs elsewhere, and
// fibra::AsyncResult<T>, the result of a whole map_async or starmap_async.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "fibra/detail/core.hpp"
#include "fibra/error.hpp"

namespace fibra {

namespace detail {
/// A result's value for get() && (Future, AsyncResult): moved out when no other copy of the state
/// that holds it (`shared`) is left to read it again, else copied.
template <class S, class T>
T move_if_last(const std::shared_ptr<S>& shared, T& value) {
  if (shared.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);  // after what other copies, now gone, did
    return std::move(value);
  }
  return value;
}
}  // namespace detail

/// @brief The eventual result of `Pool::apply_async`. Copies share one result.
///
/// @code
///   fibra::Future<double> f = pool.apply_async(rollout, params);
///   if (f.wait_for(std::chrono::seconds(1))) use(f.get());
/// @endcode
template <class T>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::JobState> job) : job_(std::move(job)) {
    if (job_) job_->add_future();
  }
  Future(const Future& o) : job_(o.job_) {
    if (job_) job_->add_future();
  }
  Future(Future&& o) noexcept = default;
  Future& operator=(const Future& o) {
    if (this != &o) *this = Future(o);
    return *this;
  }
  Future& operator=(Future&& o) noexcept {
    if (this != &o) {
      release();
      job_ = std::move(o.job_);
    }
    return *this;
  }
  ~Future() { release(); }

  /// @brief Waits for the result and returns it.
  /// @throws RemoteError if the task threw (its type and message are kept), ExecutorCrashed if its
  ///         process died, PoolClosed if the pool was terminated first.
  T get() const& {
    Settled& s = settle();
    if (s.error) std::rethrow_exception(s.error);
    return *s.value;  // a copy: get() may be called again, on this future or a copy of it
  }
  /// @brief As get(), on a future that is not kept (`pool.apply_async(f, x).get()`,
  ///        `std::move(future).get()`): when no copy of it is left to read the result again, the
  ///        result is moved out, not copied (for a 64 MiB vector, a copy of 64 MiB less).
  T get() && {
    Settled& s = settle();
    if (s.error) std::rethrow_exception(s.error);
    if (job_->futures() == 1) {
      std::atomic_thread_fence(std::memory_order_acquire);  // after what other copies, now gone, did
      return std::move(*s.value);
    }
    return *s.value;
  }
  /// @brief As get(), waiting at most `timeout`.
  /// @throws GetTimeout if the result is not there by then: the call goes on, and this future can
  ///         be waited on (or read) again.
  template <class Rep, class Period>
  T get(std::chrono::duration<Rep, Period> timeout) const {
    if (!wait_for(timeout))
      throw GetTimeout("fibra: no result of " + job_->name() + " within " +
                       std::to_string(std::chrono::duration<double>(timeout).count()) +
                       " s (Future::get(timeout)); the call goes on, and the future can be waited on again");
    return get();
  }
  /// @brief Runs `callback(future)` (this future, ready) once the result or its error is there,
  ///        in the driver, on fibra's task thread: never on the caller's thread, and never on a
  ///        pool's communication thread, so the callback may submit more work or get() the value.
  ///        At once (on that thread) if it is there already. Returns at once.
  /// @code
  ///   f.then([](const fibra::Future<double>& done) { std::printf("%g\n", done.get()); });
  /// @endcode
  template <class F>
  void then(F&& callback) const {
    check();
    detail::when_delivered(job_, [self = *this, cb = std::forward<F>(callback)]() mutable { cb(self); });
  }
  /// @brief Waits until the result (or its error) is there.
  void wait() const {
    if (!settled()) job_->wait_delivered(1, std::nullopt);
  }
  /// @brief Waits at most `d`; returns whether the result is there.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return settled() || job_->wait_delivered(1, std::chrono::duration_cast<std::chrono::nanoseconds>(d));
  }
  /// @brief Whether the result (or its error) is there, without waiting.
  bool ready() const { return settled() || job_->delivered() >= 1; }
  /// @brief Whether this future refers to a call (a default-constructed one does not).
  bool valid() const noexcept { return job_ != nullptr; }
  /// The call's state, for fibra's own use (fibra::wait, dependencies).
  const std::shared_ptr<detail::JobState>& detail_job() const {
    check();
    return job_;
  }

 private:
  // The outcome decoded, kept in the call's state (copies of a Future share it): made by the first
  // get(), from whichever copy.
  struct Settled final : detail::JobState::Settled {
    std::optional<T> value;
    std::exception_ptr error;
  };

  static void fill(detail::JobState::Settled& box, detail::ChunkOutcome& o) noexcept {
    auto& s = static_cast<Settled&>(box);
    if (o.error) {
      s.error = o.error;
      return;
    }
    try {
      T v{};
      detail::decode_items(o.bytes(), &v, 1);
      s.value = std::move(v);
    } catch (...) {
      s.error = std::current_exception();
    }
  }

  bool settled() const {
    check();
    return job_->settled() != nullptr;
  }

  void check() const {
    if (!job_) throw Error("fibra: this Future is empty (default-constructed); get it from apply_async");
  }

  Settled& settle() const {
    check();
    if (auto* s = job_->settled()) return checked(*s);
    return checked(job_->settle(std::make_unique<Settled>(), &fill));
  }
  // One call's state is read by Futures of one type; a state settled as another type is fibra's bug.
  static Settled& checked(detail::JobState::Settled& s) {
    auto* mine = dynamic_cast<Settled*>(&s);
    if (!mine) throw Error("fibra: internal error: a call's result read as two different types");
    return *mine;
  }

  void release() noexcept {
    if (job_) job_->drop_future();
  }

  std::shared_ptr<detail::JobState> job_;
};

/// @brief The end of a call that returns nothing (an actor's void method): get() returns once it
/// ran, or throws its error.
template <>
class Future<void> {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::JobState> job) : f_(std::move(job)) {}
  void get() const { (void)f_.get(); }
  template <class Rep, class Period>
  void get(std::chrono::duration<Rep, Period> timeout) const {
    (void)f_.get(timeout);
  }
  template <class F>
  void then(F&& callback) const {
    f_.then([self = *this, cb = std::forward<F>(callback)](const Future<detail::Unit>&) mutable { cb(self); });
  }
  void wait() const { f_.wait(); }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return f_.wait_for(d);
  }
  bool ready() const { return f_.ready(); }
  bool valid() const noexcept { return f_.valid(); }
  const std::shared_ptr<detail::JobState>& detail_job() const { return f_.detail_job(); }

 private:
  Future<detail::Unit> f_;
};

namespace detail {

/// What an AsyncResult and the thread of its call share: the outcome, once it is set.
template <class T>
struct AsyncState {
  explicit AsyncState(std::string what) : name(std::move(what)) {}
  const std::string name;  ///< "map_async square", for messages
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // under mu, as the two below
  std::optional<T> value;
  std::exception_ptr error;

  void set(std::optional<T> v, std::exception_ptr e) {
    {
      std::lock_guard lk(mu);
      value = std::move(v);
      error = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
  bool wait(std::optional<std::chrono::nanoseconds> timeout) {
    std::unique_lock lk(mu);
    if (!timeout) {
      cv.wait(lk, [&] { return done; });
      return true;
    }
    return cv.wait_for(lk, *timeout, [&] { return done; });
  }
  bool is_done() {
    std::lock_guard lk(mu);
    return done;
  }
};

/// The end of an async call's thread: its callback (with the value) or its error_callback (with
/// the error) runs first, then the result is set, so that get() returns after the callback ran,
/// as Python's AsyncResult does. A callback that throws is rethrown once the result is set (the
/// thread's runner logs it); the result stays what the call gave.
template <class T>
void finish_async(AsyncState<T>& state, std::optional<T> value, std::exception_ptr error,
                  const std::function<void(const T&)>& callback,
                  const std::function<void(std::exception_ptr)>& error_callback) {
  std::exception_ptr thrown;
  try {
    if (error && error_callback)
      error_callback(error);
    else if (!error && callback)
      callback(*value);
  } catch (...) {
    thrown = std::current_exception();
  }
  state.set(std::move(value), std::move(error));
  if (thrown) std::rethrow_exception(thrown);
}

}  // namespace detail

/// @brief The eventual result of `Pool::map_async` or `Pool::starmap_async` (Python's
/// AsyncResult): every result of the call, in input order, or the error that ended it. Copies
/// share one result.
///
/// @code
///   fibra::AsyncResult<std::vector<long>> r = pool.map_async(square, inputs);
///   if (r.wait_for(std::chrono::seconds(5)) && r.successful()) use(r.get());
/// @endcode
template <class T>
class AsyncResult {
 public:
  AsyncResult() = default;
  explicit AsyncResult(std::shared_ptr<detail::AsyncState<T>> state) : s_(std::move(state)) {}

  /// @brief Waits for the result and returns it (after the call's callback, if any, ran).
  /// @throws what the call threw: RemoteError for an item whose task threw (or a type registered
  ///         with FIBRA_EXCEPTION), ExecutorCrashed, TaskTimeout, WorkerLost, PoolClosed.
  T get() const& {
    wait();
    if (s_->error) std::rethrow_exception(s_->error);
    return *s_->value;  // a copy: get() may be called again
  }
  /// @brief As get(); when no copy of this result is left to read it again, the value is moved out.
  T get() && {
    wait();
    if (s_->error) std::rethrow_exception(s_->error);
    return detail::move_if_last(s_, *s_->value);
  }
  /// @brief As get(), waiting at most `timeout` (Python's get(timeout)).
  /// @throws GetTimeout if the result is not there by then: the call goes on, and this result can
  ///         be waited on (or read) again.
  template <class Rep, class Period>
  T get(std::chrono::duration<Rep, Period> timeout) const {
    if (!wait_for(timeout))
      throw GetTimeout("fibra: no result of " + s_->name + " within " +
                       std::to_string(std::chrono::duration<double>(timeout).count()) +
                       " s (AsyncResult::get(timeout)); the call goes on, and the result can be waited on again");
    return get();
  }
  /// @brief Waits until the result (or its error) is there.
  void wait() const { state().wait(std::nullopt); }
  /// @brief Waits at most `d` (Python's wait(timeout)); returns whether the result is there.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return state().wait(std::chrono::duration_cast<std::chrono::nanoseconds>(d));
  }
  /// @brief Whether the call has ended (with its results or an error), without waiting.
  bool ready() const { return state().is_done(); }
  /// @brief Whether the call ended without an error.
  /// @throws Error if it has not ended yet (as Python's raises ValueError): wait() first.
  bool successful() const {
    auto& s = state();
    std::lock_guard lk(s.mu);
    if (!s.done) throw Error("fibra: successful() on " + s.name + ", which has not ended yet: wait() first");
    return !s.error;
  }
  /// @brief Whether this refers to a call (a default-constructed one does not).
  bool valid() const noexcept { return s_ != nullptr; }

 private:
  detail::AsyncState<T>& state() const {
    if (!s_) throw Error("fibra: this AsyncResult is empty (default-constructed); get it from map_async");
    return *s_;
  }
  std::shared_ptr<detail::AsyncState<T>> s_;
};

}  // namespace fibra
