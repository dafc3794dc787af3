// fibra/queue.hpp: Fiber's multiprocessing.Queue, SimpleQueue, JoinableQueue, Pipe and Event,
// shared by the driver and tasks and actors on any node.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fibra/detail/channel.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"

namespace fibra {

namespace detail {
template <class Rep, class Period>
double seconds_of(std::chrono::duration<Rep, Period> d) {
  return std::max(0.0, std::chrono::duration<double>(d).count());
}
template <class T>
ChannelItems items_of(const std::vector<T>& values) {
  ChannelItems out;
  if constexpr (is_raw_v<T>) out.reserve(values.size() * sizeof(T));  // (as they are in memory: ChannelItems::stride)
  for (const auto& v : values) out.add(v);
  return out;
}
template <class T>
ChannelItems item_of(const T& value) {
  ChannelItems out;
  out.add(value);
  return out;
}
/// What the handles of queue.hpp hold, for their Codecs (defined below).
struct ChannelHandleAccess;
}  // namespace detail

/// @brief A FIFO queue of T that the driver, tasks, actors and processes on any node share, as
/// Python's multiprocessing.Queue (Fiber's, cluster-wide). Items stay in the driver until a `get`
/// asks for one: one that is slow, idle or dies strands nothing. Each item goes to exactly one
/// `get`, in the order each writer put them. The handle is a value: copy it, pass it to a task or
/// an actor as an argument (a parameter `fibra::Queue<T>`), return it from one.
/// @code
///   fibra::Queue<Episode> episodes(1000);            // at most 1,000 waiting: put() blocks then
///   fibra::submit(rollouts, episodes, 4);            // tasks put, the driver gets
///   Episode e = episodes.get(std::chrono::seconds(60));
///   episodes.close();                                // gets end with QueueClosed once it is empty
/// @endcode
/// The queue lives while a handle to it is kept in the driver (a queue made in a task, until the
/// program ends); a task's use of a queue that is gone throws QueueClosed naming it.
template <class T>
class Queue {
 public:
  /// @brief A new queue: `maxsize` items at most (0: no limit).
  explicit Queue(std::size_t maxsize = 0)
      : ref_(std::make_shared<detail::LazyChannel>(detail::ChannelKind::queue, maxsize)) {}

  /// @brief Puts `value` at the end, waiting while the queue is full.
  /// @throws QueueClosed after close().
  void put(const T& value) { call(detail::ChannelOp::put, 0, std::nullopt, detail::item_of(value)); }
  /// @brief Puts `value`, waiting at most `timeout` for room. @throws QueueFull after it.
  template <class Rep, class Period>
  void put(const T& value, std::chrono::duration<Rep, Period> timeout) {
    call(detail::ChannelOp::put, 0, detail::seconds_of(timeout), detail::item_of(value));
  }
  /// @brief Puts all of `values` in one message, in order, when there is room for all of them
  /// (none is put before that). @throws ConfigError if they are more than maxsize.
  void put_many(const std::vector<T>& values) {
    if (!values.empty()) call(detail::ChannelOp::put, 0, std::nullopt, detail::items_of(values));
  }
  template <class Rep, class Period>
  void put_many(const std::vector<T>& values, std::chrono::duration<Rep, Period> timeout) {
    if (!values.empty()) call(detail::ChannelOp::put, 0, detail::seconds_of(timeout), detail::items_of(values));
  }

  /// @brief Takes the first item, waiting for one. @throws QueueClosed once it is closed and empty.
  T get() { return one(call(detail::ChannelOp::get, 1, std::nullopt)); }
  /// @brief Takes the first item, waiting at most `timeout`. @throws QueueEmpty after it.
  template <class Rep, class Period>
  T get(std::chrono::duration<Rep, Period> timeout) {
    return one(call(detail::ChannelOp::get, 1, detail::seconds_of(timeout)));
  }
  /// @brief The first item if there is one now, else nothing. @throws QueueClosed once it is
  /// closed and empty.
  std::optional<T> try_get() {
    try {
      return one(call(detail::ChannelOp::get, 1, 0.0));
    } catch (const QueueEmpty&) {
      return std::nullopt;
    }
  }
  /// @brief Takes up to `n` items in one message: waits for the first, then takes what is there.
  std::vector<T> get_many(std::size_t n) {
    return call(detail::ChannelOp::get, n, std::nullopt).items.template decode_all<T>();
  }
  /// @brief As get_many(n), waiting at most `timeout` for the first. @throws QueueEmpty after it.
  template <class Rep, class Period>
  std::vector<T> get_many(std::size_t n, std::chrono::duration<Rep, Period> timeout) {
    return call(detail::ChannelOp::get, n, detail::seconds_of(timeout)).items.template decode_all<T>();
  }

  /// @brief Items in the queue now (others may change it at once, as in Python).
  std::size_t qsize() const { return info().value; }
  bool empty() const { return qsize() == 0; }
  bool full() const {
    const auto i = info();
    return i.maxsize != 0 && i.value >= i.maxsize;
  }
  /// @brief No more puts: the items in it can still be taken, then every get throws QueueClosed
  /// (the end of the stream; no sentinel needed). Gets that wait are woken.
  void close() { call(detail::ChannelOp::close, 0, std::nullopt); }
  /// @brief Whether close() was called.
  bool closed() const { return info().closed; }
  /// @brief Its number among the program's queues (in messages: "queue #3").
  std::uint64_t id() const { return ref_->id(); }

 protected:
  explicit Queue(std::shared_ptr<detail::LazyChannel> ref) : ref_(std::move(ref)) {}
  detail::ChannelResult call(detail::ChannelOp op, std::uint64_t n, std::optional<double> timeout_s,
                             detail::ChannelItems items = {}) const {
    return detail::channel_call(op, ref_->id(), ref_->kind(), n, timeout_s, std::move(items));
  }
  detail::ChannelResult info() const { return call(detail::ChannelOp::info, 0, 0.0); }
  static T one(const detail::ChannelResult& r) { return detail::decode_value<T>(r.items.front()); }

 private:
  friend struct detail::ChannelHandleAccess;
  std::shared_ptr<detail::LazyChannel> ref_;
};

/// @brief multiprocessing.SimpleQueue: an unbounded Queue with put, get, empty and close.
template <class T>
class SimpleQueue : private Queue<T> {
 public:
  SimpleQueue() : Queue<T>(0) {}
  using Queue<T>::put;
  using Queue<T>::get;
  using Queue<T>::empty;
  using Queue<T>::close;
  using Queue<T>::id;

 private:
  friend struct detail::ChannelHandleAccess;
  explicit SimpleQueue(std::shared_ptr<detail::LazyChannel> ref) : Queue<T>(std::move(ref)) {}
};

/// @brief multiprocessing.JoinableQueue: a Queue whose readers say when they have handled an item
/// (task_done), so that join() can wait until every item put was handled.
template <class T>
class JoinableQueue : public Queue<T> {
 public:
  explicit JoinableQueue(std::size_t maxsize = 0) : Queue<T>(maxsize) {}
  /// @brief One item (`n` items) taken with get was handled.
  /// @throws ConfigError if that is more than were put and not yet marked done.
  void task_done(std::uint64_t n = 1) { this->call(detail::ChannelOp::task_done, n, std::nullopt); }
  /// @brief Waits until every item put was marked done.
  void join() { this->call(detail::ChannelOp::join, 0, std::nullopt); }
  /// @brief As join(), waiting at most `timeout`: whether every item was marked done in time.
  template <class Rep, class Period>
  bool join(std::chrono::duration<Rep, Period> timeout) {
    return this->call(detail::ChannelOp::join, 0, detail::seconds_of(timeout)).flag;
  }

 private:
  friend struct detail::ChannelHandleAccess;
  explicit JoinableQueue(std::shared_ptr<detail::LazyChannel> ref) : Queue<T>(std::move(ref)) {}
};

/// @brief multiprocessing.Event, shared by the driver and any task: a flag that starts clear, and
/// waits until someone sets it (the stop flag of a rollout loop).
class Event {
 public:
  Event() : ref_(std::make_shared<detail::LazyChannel>(detail::ChannelKind::event, 0)) {}
  void set() { call(detail::ChannelOp::set, 1, std::nullopt); }
  void clear() { call(detail::ChannelOp::set, 0, std::nullopt); }
  bool is_set() const { return call(detail::ChannelOp::info, 0, 0.0).flag; }
  /// @brief Waits until it is set.
  void wait() { call(detail::ChannelOp::wait, 0, std::nullopt); }
  /// @brief Waits at most `timeout`: whether it is set.
  template <class Rep, class Period>
  bool wait(std::chrono::duration<Rep, Period> timeout) {
    return call(detail::ChannelOp::wait, 0, detail::seconds_of(timeout)).flag;
  }
  std::uint64_t id() const { return ref_->id(); }

 private:
  friend struct detail::ChannelHandleAccess;
  explicit Event(std::shared_ptr<detail::LazyChannel> ref) : ref_(std::move(ref)) {}
  detail::ChannelResult call(detail::ChannelOp op, std::uint64_t n, std::optional<double> timeout_s) const {
    return detail::channel_call(op, ref_->id(), detail::ChannelKind::event, n, timeout_s);
  }
  std::shared_ptr<detail::LazyChannel> ref_;
};

/// @brief One end of a Pipe (multiprocessing.Connection): it sends into one direction and
/// receives from the other. A handle that travels, as a Queue does.
template <class T>
class Connection {
 public:
  Connection() = default;
  /// @brief Sends `value` to the other end. @throws PipeClosed if this end or the other was closed,
  /// or ConfigError on the receiving end of a one-way pipe.
  void send(const T& value) {
    detail::channel_call(detail::ChannelOp::put, need(out_, "send on").id(), detail::ChannelKind::pipe, 0, std::nullopt,
                         detail::item_of(value));
  }
  /// @brief Receives the next value, waiting for it.
  /// @throws PipeClosed when the other end was closed (or its process died) and all it sent was received.
  T recv() { return one(std::nullopt); }
  /// @brief As recv(), waiting at most `timeout`. @throws QueueEmpty after it.
  template <class Rep, class Period>
  T recv(std::chrono::duration<Rep, Period> timeout) {
    return one(detail::seconds_of(timeout));
  }
  /// @brief Whether a value can be received now (or within `timeout`), or the other end is
  /// closed (a recv would then throw PipeClosed at once), as Python's poll.
  bool poll() { return poll(std::chrono::seconds(0)); }
  template <class Rep, class Period>
  bool poll(std::chrono::duration<Rep, Period> timeout) {
    return detail::channel_call(detail::ChannelOp::wait, need(in_, "poll on").id(), detail::ChannelKind::pipe, 0,
                                detail::seconds_of(timeout))
        .flag;
  }
  /// @brief Closes this end: the other end receives what was sent, then PipeClosed; this end
  /// neither sends nor receives again.
  void close() {
    for (auto* r : {&out_, &in_})
      if (*r) detail::channel_call(detail::ChannelOp::close, (*r)->id(), detail::ChannelKind::pipe, 0, std::nullopt);
  }
  bool valid() const noexcept { return in_ || out_; }

 private:
  friend struct detail::ChannelHandleAccess;
  static const detail::ChannelRef& need(const std::shared_ptr<detail::ChannelRef>& r, const char* what) {
    if (!r)
      throw ConfigError(std::string("fibra: ") + what +
                        " the wrong end of a one-way Pipe (Pipe<T>(false): the first end receives, the second sends)");
    return *r;
  }
  T one(std::optional<double> timeout_s) {
    auto r = detail::channel_call(detail::ChannelOp::get, need(in_, "recv on").id(), detail::ChannelKind::pipe, 1,
                                  timeout_s);
    return detail::decode_value<T>(r.items.front());
  }
  std::shared_ptr<detail::ChannelRef> in_, out_;  // receives from in_, sends into out_
};

namespace detail {
struct ChannelHandleAccess {
  template <class H>
  static const std::shared_ptr<LazyChannel>& ref(const H& h) {
    return h.ref_;
  }
  template <class H>
  static H make(std::shared_ptr<ChannelRef> r) {
    return H(std::make_shared<LazyChannel>(std::move(r)));
  }
  template <class T>
  static std::shared_ptr<ChannelRef>& in(Connection<T>& c) {
    return c.in_;
  }
  template <class T>
  static std::shared_ptr<ChannelRef>& out(Connection<T>& c) {
    return c.out_;
  }
  template <class T>
  static const std::shared_ptr<ChannelRef>& in(const Connection<T>& c) {
    return c.in_;
  }
  template <class T>
  static const std::shared_ptr<ChannelRef>& out(const Connection<T>& c) {
    return c.out_;
  }
};
}  // namespace detail

/// @brief Two connected ends, as multiprocessing.Pipe(duplex): what one sends the other receives.
/// With `duplex` false the first end only receives and the second only sends.
/// @code
///   auto [mine, theirs] = fibra::Pipe<double>();
///   fibra::submit(serve, theirs);         // the task recv()s and send()s on its end
///   mine.send(1.5);
///   double answer = mine.recv(std::chrono::seconds(10));
/// @endcode
template <class T>
std::pair<Connection<T>, Connection<T>> Pipe(bool duplex = true) {
  using A = detail::ChannelHandleAccess;
  Connection<T> a, b;
  auto ab = detail::open_channel(detail::ChannelKind::pipe, 0);  // the first sends, the second receives
  if (duplex) {
    A::out(a) = ab;
    A::in(b) = ab;
    auto ba = detail::open_channel(detail::ChannelKind::pipe, 0);
    A::in(a) = ba;
    A::out(b) = ba;
  } else {  // the first end receives, the second sends
    A::in(a) = ab;
    A::out(b) = ab;
  }
  return {std::move(a), std::move(b)};
}

namespace detail {

/// Queues and events travel as their id: the copy a task gets reaches the same channel, in the
/// driver.
template <class H, ChannelKind K>
struct ChannelCodec {
  static void encode(Writer& w, const H& h) { w.pod(ChannelHandleAccess::ref(h)->id()); }
  static void decode(Reader& r, H& h) { h = ChannelHandleAccess::make<H>(adopt_channel(r.pod<std::uint64_t>(), K)); }
};
template <class T>
struct codable<Queue<T>> : std::true_type {};
template <class T>
struct via_boost<Queue<T>> : std::false_type {};
template <class T>
struct Codec<Queue<T>> : ChannelCodec<Queue<T>, ChannelKind::queue> {};
template <class T>
struct codable<SimpleQueue<T>> : std::true_type {};
template <class T>
struct via_boost<SimpleQueue<T>> : std::false_type {};
template <class T>
struct Codec<SimpleQueue<T>> : ChannelCodec<SimpleQueue<T>, ChannelKind::queue> {};
template <class T>
struct codable<JoinableQueue<T>> : std::true_type {};
template <class T>
struct via_boost<JoinableQueue<T>> : std::false_type {};
template <class T>
struct Codec<JoinableQueue<T>> : ChannelCodec<JoinableQueue<T>, ChannelKind::queue> {};
template <>
struct codable<Event> : std::true_type {};
template <>
struct via_boost<Event> : std::false_type {};
template <>
struct Codec<Event> : ChannelCodec<Event, ChannelKind::event> {};

/// A pipe's end travels as its two directions (0 for the one a one-way end lacks).
template <class T>
struct codable<Connection<T>> : std::true_type {};
template <class T>
struct via_boost<Connection<T>> : std::false_type {};
template <class T>
struct Codec<Connection<T>> {
  static void encode(Writer& w, const Connection<T>& c) {
    const auto& in = ChannelHandleAccess::in(c);
    const auto& out = ChannelHandleAccess::out(c);
    if (!in && !out) throw Error("fibra: an empty Connection cannot be sent to a worker");
    w.pod<std::uint64_t>(in ? in->id() : 0);
    w.pod<std::uint64_t>(out ? out->id() : 0);
  }
  static void decode(Reader& r, Connection<T>& c) {
    const auto in = r.pod<std::uint64_t>();
    const auto out = r.pod<std::uint64_t>();
    ChannelHandleAccess::in(c) = in ? adopt_channel(in, ChannelKind::pipe) : nullptr;
    ChannelHandleAccess::out(c) = out ? adopt_channel(out, ChannelKind::pipe) : nullptr;
  }
};

}  // namespace detail

}  // namespace fibra
