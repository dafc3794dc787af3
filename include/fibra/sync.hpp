// fibra/sync.hpp: multiprocessing's Lock, RLock, Semaphore, BoundedSemaphore, Condition and
// Barrier, shared by the driver and tasks, actors and processes on any node. Each lives in the
// driver (src/driver/sync_store.cpp), as queues do; a handle is a value that travels as an argument.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "fibra/detail/channel.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"
#include "fibra/queue.hpp"

namespace fibra {

namespace detail {

/// What the handles of sync.hpp and shared.hpp are: one object in the driver, opened at first use.
class SharedHandle {
 public:
  /// @brief Its number among the program's objects of its kind (in messages: "lock #3").
  std::uint64_t id() const { return ref_->id(); }

 protected:
  SharedHandle(ChannelKind kind, std::uint64_t n, ChannelItems init = {})
      : ref_(std::make_shared<LazyChannel>(kind, n, std::move(init))) {}
  explicit SharedHandle(std::shared_ptr<LazyChannel> ref) : ref_(std::move(ref)) {}
  ChannelResult call(ChannelOp op, std::uint64_t n = 0, std::optional<double> timeout_s = std::nullopt,
                     ChannelItems items = {}, std::uint64_t count = 0) const {
    return channel_call(op, ref_->id(), ref_->kind(), n, timeout_s, std::move(items), count);
  }

 private:
  friend struct SharedHandleAccess;
  std::shared_ptr<LazyChannel> ref_;
};

struct SharedHandleAccess {
  static const std::shared_ptr<LazyChannel>& ref(const SharedHandle& h) { return h.ref_; }
  template <class H>
  static H make(std::shared_ptr<ChannelRef> r) {
    return H(std::make_shared<LazyChannel>(std::move(r)));
  }
};

/// What Lock, RLock and the semaphores share: units taken and given back.
class LockHandle : public SharedHandle {
 public:
  /// @brief Takes a unit, waiting for one. @throws HolderDied if a holder's process died meanwhile.
  void acquire() { call(ChannelOp::acquire, 1); }
  /// @brief Takes a unit, waiting at most `timeout`: whether it did.
  template <class Rep, class Period>
  bool acquire(std::chrono::duration<Rep, Period> timeout) {
    return call(ChannelOp::acquire, 1, seconds_of(timeout)).flag;
  }
  /// @brief Takes a unit if one is free now: whether it did.
  bool try_acquire() { return call(ChannelOp::acquire, 1, 0.0).flag; }
  /// @brief Gives a unit back. @throws ConfigError if none was taken (an RLock: by this thread).
  void release() { call(ChannelOp::unlock, 1); }
  // std::lock_guard, std::unique_lock and std::scoped_lock take it (BasicLockable, Lockable).
  void lock() { acquire(); }
  void unlock() { release(); }
  bool try_lock() { return try_acquire(); }

 protected:
  using SharedHandle::SharedHandle;
  std::uint64_t units() const { return call(ChannelOp::info, 0, 0.0).value; }
};

}  // namespace detail

/// @brief multiprocessing.Lock, on any node: one holder at a time; any thread or process may
/// release it. Takes std::lock_guard. If the process that holds it dies, it is free again and each
/// acquire that waited then throws HolderDied (never left waiting).
/// @code
///   fibra::Lock lock;  fibra::Value<long> counter(0);
///   void add(fibra::Lock lock, fibra::Value<long> c) { std::lock_guard g(lock); c.set(c.get() + 1); }
/// @endcode
class Lock : public detail::LockHandle {
 public:
  Lock() : LockHandle(detail::ChannelKind::lock, 1) {}
  /// @brief Whether someone holds it now.
  bool locked() const { return units() == 0; }

 private:
  friend struct detail::SharedHandleAccess;
  explicit Lock(std::shared_ptr<detail::LazyChannel> ref) : LockHandle(std::move(ref)) {}
};

/// @brief multiprocessing.RLock: the thread (of whichever process) that holds it may acquire it
/// again, and holds it until it released it as often; only it may release it.
class RLock : public detail::LockHandle {
 public:
  RLock() : LockHandle(detail::ChannelKind::rlock, 1) {}

 private:
  friend struct detail::SharedHandleAccess;
  explicit RLock(std::shared_ptr<detail::LazyChannel> ref) : LockHandle(std::move(ref)) {}
};

/// @brief multiprocessing.Semaphore: a counter that acquire takes one from, waiting while it is 0,
/// and release adds one to.
class Semaphore : public detail::LockHandle {
 public:
  explicit Semaphore(std::uint64_t value = 1) : LockHandle(detail::ChannelKind::semaphore, value) {}
  /// @brief Its value now (others may change it at once).
  std::uint64_t get_value() const { return units(); }

 protected:
  Semaphore(detail::ChannelKind kind, std::uint64_t value) : LockHandle(kind, value) {}
  explicit Semaphore(std::shared_ptr<detail::LazyChannel> ref) : LockHandle(std::move(ref)) {}

 private:
  friend struct detail::SharedHandleAccess;
};

/// @brief multiprocessing.BoundedSemaphore: a Semaphore whose release past its first value is a
/// ConfigError (a release too many).
class BoundedSemaphore : public Semaphore {
 public:
  explicit BoundedSemaphore(std::uint64_t value = 1) : Semaphore(detail::ChannelKind::bounded_semaphore, value) {}

 private:
  friend struct detail::SharedHandleAccess;
  explicit BoundedSemaphore(std::shared_ptr<detail::LazyChannel> ref) : Semaphore(std::move(ref)) {}
};

/// @brief multiprocessing.Condition over an RLock (its own, or one given) or a Lock: wait()
/// releases the lock, waits for a notify, and takes the lock again before it returns.
/// @code
///   std::unique_lock g(cond);                     // as `with cond:`
///   cond.wait_for([&] { return ready.get(); }, std::chrono::seconds(10));
/// @endcode
class Condition : public detail::SharedHandle {
 public:
  Condition() : Condition(RLock(), detail::ChannelKind::rlock) {}
  explicit Condition(Lock lock) : Condition(std::move(lock), detail::ChannelKind::lock) {}
  explicit Condition(RLock lock) : Condition(std::move(lock), detail::ChannelKind::rlock) {}

  void acquire() { lock_.acquire(); }
  template <class Rep, class Period>
  bool acquire(std::chrono::duration<Rep, Period> timeout) {
    return lock_.acquire(timeout);
  }
  void release() { lock_.release(); }
  void lock() { lock_.acquire(); }
  void unlock() { lock_.release(); }
  bool try_lock() { return lock_.try_acquire(); }

  /// @brief Releases the lock (which this thread must hold), waits for a notify, takes the lock
  /// again. @throws ConfigError if this thread does not hold the lock.
  void wait() { call(detail::ChannelOp::wait, 0, std::nullopt, {}, lock_.id()); }
  /// @brief As wait(), waiting at most `timeout` for the notify (then for the lock as long as it
  /// takes): whether it was notified in time.
  template <class Rep, class Period>
  bool wait(std::chrono::duration<Rep, Period> timeout) {
    return call(detail::ChannelOp::wait, 0, detail::seconds_of(timeout), {}, lock_.id()).flag;
  }
  /// @brief Waits until `pred()` (called with the lock held) is true.
  template <class Pred>
  bool wait_for(Pred pred) {
    while (!pred()) wait();
    return true;
  }
  /// @brief As wait_for(pred), for at most `timeout` in all: pred()'s last value.
  template <class Pred, class Rep, class Period>
  bool wait_for(Pred pred, std::chrono::duration<Rep, Period> timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (bool r = pred(); !r; r = pred()) {
      const auto left = end - std::chrono::steady_clock::now();
      if (left <= left.zero()) return false;
      wait(left);
    }
    return true;
  }
  /// @brief Wakes `n` of the waiters (the longest waiting first). This thread must hold the lock.
  void notify(std::uint64_t n = 1) { call(detail::ChannelOp::notify, n, std::nullopt, {}, lock_.id()); }
  void notify_all() { notify(~std::uint64_t(0)); }

 private:
  friend struct detail::SharedHandleAccess;
  friend struct detail::Codec<Condition>;
  Condition(detail::LockHandle lock, detail::ChannelKind lock_kind)
      : SharedHandle(detail::ChannelKind::condition, 0), lock_(std::move(lock)), lock_kind_(lock_kind) {}
  Condition(std::shared_ptr<detail::LazyChannel> ref, detail::LockHandle lock, detail::ChannelKind lock_kind)
      : SharedHandle(std::move(ref)), lock_(std::move(lock)), lock_kind_(lock_kind) {}
  detail::LockHandle lock_;  // (the store ties the condition to the first lock its calls name)
  detail::ChannelKind lock_kind_;
};

/// @brief multiprocessing.Barrier: `parties` threads or processes wait until all of them came;
/// each wait returns its arrival's index (0 to parties - 1). A wait that times out, abort(), or a
/// waiting party's process that dies breaks it: every wait then throws BrokenBarrier until reset().
class Barrier : public detail::SharedHandle {
 public:
  /// @brief `timeout`: the default for wait() (none: as long as it takes).
  explicit Barrier(std::uint64_t parties, std::optional<double> timeout_s = std::nullopt)
      : SharedHandle(detail::ChannelKind::barrier, parties), timeout_s_(timeout_s) {
    if (parties == 0) throw ConfigError("fibra: a Barrier needs at least 1 party (Barrier(0))");
  }
  /// @brief A handle to be assigned (a task's argument decodes into one); a wait on it is a
  /// ConfigError.
  Barrier() : SharedHandle(detail::ChannelKind::barrier, 0) {}
  /// @brief Waits for the others. @throws BrokenBarrier (see above).
  std::uint64_t wait() { return call(detail::ChannelOp::wait, 0, timeout_s_).value; }
  template <class Rep, class Period>
  std::uint64_t wait(std::chrono::duration<Rep, Period> timeout) {
    return call(detail::ChannelOp::wait, 0, detail::seconds_of(timeout)).value;
  }
  /// @brief Breaks it: its waiters, and later waits, throw BrokenBarrier.
  void abort() { call(detail::ChannelOp::abort); }
  /// @brief Its waiters throw BrokenBarrier; it is whole and empty again.
  void reset() { call(detail::ChannelOp::reset); }
  std::uint64_t parties() const { return info().maxsize; }
  std::uint64_t n_waiting() const { return info().value; }
  bool broken() const { return info().flag; }

 private:
  friend struct detail::SharedHandleAccess;
  friend struct detail::Codec<Barrier>;
  explicit Barrier(std::shared_ptr<detail::LazyChannel> ref) : SharedHandle(std::move(ref)) {}
  detail::ChannelResult info() const { return call(detail::ChannelOp::info, 0, 0.0); }
  std::optional<double> timeout_s_;
};

namespace detail {

/// The handles travel as their id: the copy a task gets reaches the same object, in the driver.
template <class H, ChannelKind K>
struct SharedHandleCodec {
  static void encode(Writer& w, const H& h) { w.pod(SharedHandleAccess::ref(h)->id()); }
  static void decode(Reader& r, H& h) { h = SharedHandleAccess::make<H>(adopt_channel(r.pod<std::uint64_t>(), K)); }
};
#define FIBRA_DETAIL_SHARED_HANDLE(H, K)    \
  template <>                               \
  struct codable<H> : std::true_type {};    \
  template <>                               \
  struct via_boost<H> : std::false_type {}; \
  template <>                               \
  struct Codec<H> : SharedHandleCodec<H, ChannelKind::K> {};
FIBRA_DETAIL_SHARED_HANDLE(Lock, lock)
FIBRA_DETAIL_SHARED_HANDLE(RLock, rlock)
FIBRA_DETAIL_SHARED_HANDLE(Semaphore, semaphore)
FIBRA_DETAIL_SHARED_HANDLE(BoundedSemaphore, bounded_semaphore)

/// A Condition travels as its id and its lock's; a Barrier as its id and its default timeout.
template <>
struct codable<Condition> : std::true_type {};
template <>
struct via_boost<Condition> : std::false_type {};
template <>
struct Codec<Condition> {
  static void encode(Writer& w, const Condition& c) {
    w.pod(SharedHandleAccess::ref(c)->id());
    w.pod(SharedHandleAccess::ref(c.lock_)->id());
    w.pod(static_cast<std::uint8_t>(c.lock_kind_));
  }
  static void decode(Reader& r, Condition& c) {
    const auto id = r.pod<std::uint64_t>();
    const auto lock = r.pod<std::uint64_t>();
    const auto kind = static_cast<ChannelKind>(r.pod<std::uint8_t>());
    if (kind != ChannelKind::lock && kind != ChannelKind::rlock) throw Error("fibra: a Condition's lock is malformed");
    c = Condition(std::make_shared<LazyChannel>(adopt_channel(id, ChannelKind::condition)),
                  SharedHandleAccess::make<Lock>(adopt_channel(lock, kind)), kind);
  }
};
template <>
struct codable<Barrier> : std::true_type {};
template <>
struct via_boost<Barrier> : std::false_type {};
template <>
struct Codec<Barrier> {
  static void encode(Writer& w, const Barrier& b) {
    w.pod(SharedHandleAccess::ref(b)->id());
    w.pod<double>(b.timeout_s_.value_or(-1.0));
  }
  static void decode(Reader& r, Barrier& b) {
    b = SharedHandleAccess::make<Barrier>(adopt_channel(r.pod<std::uint64_t>(), ChannelKind::barrier));
    const double t = r.pod<double>();
    if (t >= 0) b.timeout_s_ = t;
  }
};

}  // namespace detail

}  // namespace fibra
