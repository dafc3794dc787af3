// fibra/detail/channel.hpp: what Queue, Pipe and Event (fibra/queue.hpp) call. Every channel lives
// in the driver (src/driver/channels.cpp); in the driver these calls reach it directly, in a task
// they travel to it as requests through the agent (src/executor/channel_calls.cpp). Items travel
// encoded, back to back in one buffer (ChannelItems); the templates of queue.hpp encode and decode them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fibra/detail/codec.hpp"

namespace fibra::detail {

/// The items of a channel in one buffer, back to back: a put_many's batch travels to the driver,
/// waits there and goes to a get_many as one block of bytes, not as an object per item
/// (docs/architecture.md, "A batch is one block"). Two layouts: items of one size (`stride` bytes
/// each: the values of a raw type, as they are in memory), or each item as its size (8 bytes) and
/// its encoding (stride 0), into which a mix of both turns.
class ChannelItems {
 public:
  ChannelItems() = default;
  /// Items already laid out so (`count` of them in `bytes`); offsets() says whether they are.
  ChannelItems(std::string bytes, std::uint64_t count, std::uint64_t stride = 0)
      : bytes_(std::move(bytes)), count_(count), stride_(stride) {}

  std::uint64_t size() const noexcept { return count_; }
  bool empty() const noexcept { return count_ == 0; }
  const std::string& bytes() const noexcept { return bytes_; }
  /// Each item's size in bytes when they all have the same (0: each says its own).
  std::uint64_t stride() const noexcept { return stride_; }

  /// Appends `v`.
  template <class T>
  void add(const T& v) {
    if constexpr (is_raw_v<T>) {
      if (count_ == 0 || stride_ == sizeof(T)) {
        stride_ = sizeof(T);
        bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
        ++count_;
        return;
      }
    }
    if (stride_ != 0) unfix();
    const std::size_t at = bytes_.size();
    bytes_.append(sizeof(std::uint64_t), '\0');
    Writer w(bytes_);
    encode(w, v);
    const std::uint64_t n = bytes_.size() - at - sizeof n;
    std::memcpy(bytes_.data() + at, &n, sizeof n);
    ++count_;
  }
  /// Appends an item already encoded.
  void add_encoded(std::string_view item) {
    if (stride_ != 0 && item.size() == stride_) {
      bytes_.append(item);
      ++count_;
      return;
    }
    if (stride_ != 0) unfix();
    const std::uint64_t n = item.size();
    bytes_.append(reinterpret_cast<const char*>(&n), sizeof n);
    bytes_.append(item);
    ++count_;
  }
  /// Appends `count` items laid out with `stride` (as above) in `bytes`.
  void add_laid_out(std::string_view bytes, std::uint64_t count, std::uint64_t stride) {
    if (count == 0) return;
    if (count_ == 0) stride_ = stride;
    if (stride == stride_) {
      bytes_.append(bytes);
      count_ += count;
      return;
    }
    ChannelItems(std::string(bytes), count, stride).each([&](std::string_view item) { add_encoded(item); });
  }
  void reserve(std::size_t bytes) { bytes_.reserve(bytes); }

  /// Calls `f(std::string_view)` with each item's encoding, in order. @throws Error if the bytes
  /// do not hold `size()` items.
  template <class F>
  void each(F&& f) const {
    if (stride_ != 0) {
      check_fixed();
      for (std::uint64_t i = 0; i < count_; ++i) f(std::string_view(bytes_).substr(i * stride_, stride_));
      return;
    }
    Reader r(bytes_);
    for (std::uint64_t i = 0; i < count_; ++i) f(r.take(r.pod<std::uint64_t>()));
  }
  /// The first item's encoding. @throws Error if there is none.
  std::string_view front() const {
    if (count_ == 0) throw Error("fibra: a queue's reply held no item");
    if (stride_ != 0) {
      check_fixed();
      return std::string_view(bytes_).substr(0, stride_);
    }
    Reader r(bytes_);
    return r.take(r.pod<std::uint64_t>());
  }
  /// The items decoded as T, in order (values of a raw type: one copy).
  template <class T>
  std::vector<T> decode_all() const {
    std::vector<T> out;
    if constexpr (is_raw_v<T>) {
      if (stride_ == sizeof(T)) {
        check_fixed();
        out.resize(count_);
        if (count_ != 0) std::memcpy(static_cast<void*>(out.data()), bytes_.data(), bytes_.size());
        return out;
      }
    }
    out.reserve(std::min<std::uint64_t>(
        count_, bytes_.size() / sizeof(std::uint64_t)));  // (a count the bytes do not hold fails in each)
    each([&](std::string_view s) { out.push_back(decode_value<T>(s)); });
    return out;
  }
  /// Where each item starts in bytes(), and bytes().size() last; throws Error (naming what is
  /// wrong) if the bytes do not hold exactly size() items.
  std::vector<std::uint64_t> offsets() const;
  /// Throws Error unless the bytes are exactly size() items of stride() bytes (with stride 0:
  /// nothing to check here; offsets() checks those).
  void check_fixed() const;
  /// Moves the bytes out (no items are left).
  std::string release() noexcept {
    count_ = 0;
    stride_ = 0;
    return std::move(bytes_);
  }

 private:
  // Turns items of one size into items that each say their size.
  void unfix();
  std::string bytes_;
  std::uint64_t count_ = 0;
  std::uint64_t stride_ = 0;
};

/// Items travel as their count, their stride and their bytes (one copy, whatever their number).
template <>
struct Codec<ChannelItems> {
  static void encode(Writer& w, const ChannelItems& v) {
    w.pod<std::uint64_t>(v.size());
    w.pod<std::uint64_t>(v.stride());
    detail::encode(w, v.bytes());
  }
  static void decode(Reader& r, ChannelItems& v) {
    const auto count = r.pod<std::uint64_t>();
    const auto stride = r.pod<std::uint64_t>();
    std::string bytes;
    detail::decode(r, bytes);
    v = ChannelItems(std::move(bytes), count, stride);
  }
};
template <>
struct codable<ChannelItems> : std::true_type {};
template <>
struct via_boost<ChannelItems> : std::false_type {};

/// What a channel is: its errors and its operations differ.
enum class ChannelKind : std::uint8_t {
  queue = 0,  ///< Queue, SimpleQueue, JoinableQueue: QueueClosed at the end
  pipe = 1,   ///< one direction of a Pipe: PipeClosed at the end, closed when its sender's process dies
  event = 2,  ///< Event: a flag and its waiters
  // The synchronisation and shared state of fibra/sync.hpp and fibra/shared.hpp
  // (src/driver/sync_store.cpp keeps them):
  lock = 3,               ///< Lock: one unit, released by any thread
  rlock = 4,              ///< RLock: one unit, taken again by the thread that holds it, released by it
  semaphore = 5,          ///< Semaphore (n: its first value)
  bounded_semaphore = 6,  ///< BoundedSemaphore (n: its first value, which a release may not pass)
  condition = 7,          ///< Condition (its calls name its lock: ChannelCall::ahead)
  barrier = 8,            ///< Barrier (n: its parties)
  value = 9,              ///< Value and Array: a row of items (open's items: the first ones)
  dict = 10,              ///< Dict: items by key, in the order their keys came
  list = 11,              ///< List: a row of items that grows and shrinks
};

/// One operation on a channel (wire::ChannelCall carries it to the driver).
enum class ChannelOp : std::uint8_t {
  open = 0,        ///< makes a channel (kind, n: maxsize); the reply's value is its id
  put = 1,         ///< all of `items`, or none (QueueFull when the time runs out)
  get = 2,         ///< 1 to n items, waiting for the first (QueueEmpty when the time runs out)
  info = 3,        ///< size, maxsize, closed, set
  close = 4,       ///< no more puts; gets end with QueueClosed (PipeClosed) once it is empty
  task_done = 5,   ///< JoinableQueue: n items handled
  join = 6,        ///< JoinableQueue: waits until every item put was handled (flag: in time)
  set = 7,         ///< Event: n = 1 sets, 0 clears
  wait = 8,        ///< Event: waits until set (flag: in time)
  ack = 9,         ///< a task received the items of delivery `token` (no reply)
  hold = 10,       ///< a handle reached the driver: one more that keeps the channel (flag: it did)
  release = 11,    ///< a driver's handle was dropped
  give_back = 12,  ///< a task took the first n items of delivery `token` (read ahead); the rest go back (no reply)
  recall = 13,     ///< driver -> task: give back what is left of delivery `token`, another get waits for it
  ring = 14,  ///< a task's process on the driver's host: its calls come through its lane from now on (flag: they may)
  // Locks, conditions and barriers (token: the calling thread; flag: in time). `wait` is also a
  // Condition's wait (flag: notified in time) and an arrival at a Barrier (value: its index); a
  // Condition's calls name its lock (ChannelCall::ahead).
  acquire = 15,  ///< a lock's unit
  unlock = 16,   ///< gives a lock's unit back
  notify = 17,   ///< Condition: wakes n of its waiters
  abort = 18,    ///< Barrier: broken, its waiters told
  reset = 19,    ///< Barrier: its waiters told, then whole again
  // Shared state (n: an index; count: how many; items: keys and values):
  read = 20,     ///< Value, Array, List: `count` items from index n; Dict: the value of the key (flag: there)
  write = 21,    ///< Value, Array, List: items from index n; Dict: key, value (n = 1: only if the key is new)
  erase = 22,    ///< Dict: the key (flag: it was there); List: the item at n (its value; n = ~0: the last)
  append = 23,   ///< List: the items at its end
  entries = 24,  ///< Dict: every key and value, in turn; List: every item
  clear = 25,    ///< Dict, List: nothing left
};

/// Whether `kind` is one of fibra/sync.hpp's or fibra/shared.hpp's (kept apart from the queues).
constexpr bool is_sync_kind(ChannelKind kind) noexcept { return kind >= ChannelKind::lock; }

/// What a channel operation returns.
struct ChannelResult {
  ChannelItems items;         ///< get: the items
  std::uint64_t value = 0;    ///< open: the id; info: the size
  std::uint64_t maxsize = 0;  ///< info
  bool flag = false;          ///< join, wait: in time; info: set (an Event); hold: kept
  bool closed = false;        ///< info
};

/// Runs `op` on channel `id` where this process reaches it; `timeout_s` bounds a wait (none:
/// waits as long as it takes; 0: does not wait). Throws QueueFull, QueueEmpty, QueueClosed,
/// PipeClosed or ConfigError, as the operation says.
/// `count`: how many items a read takes.
ChannelResult channel_call(ChannelOp op, std::uint64_t id, ChannelKind kind, std::uint64_t n,
                           std::optional<double> timeout_s, ChannelItems items = {}, std::uint64_t count = 0);

/// A handle to a channel in the driver: the last one dropped there frees it (its items are
/// discarded and its waiters told QueueClosed). Copies of it in tasks do not keep it.
class ChannelRef {
 public:
  ChannelRef(std::uint64_t id, ChannelKind kind, bool owner) : id_(id), kind_(kind), owner_(owner) {}
  ChannelRef(const ChannelRef&) = delete;
  ChannelRef& operator=(const ChannelRef&) = delete;
  ~ChannelRef();
  std::uint64_t id() const noexcept { return id_; }
  ChannelKind kind() const noexcept { return kind_; }

 private:
  std::uint64_t id_;
  ChannelKind kind_;
  bool owner_;
};

/// Opens a channel of `kind` (maxsize `n`; 0: unbounded), wherever this process is; `init`: the
/// first items of a Value, Array or List.
std::shared_ptr<ChannelRef> open_channel(ChannelKind kind, std::uint64_t n, ChannelItems init = {});
/// The handle of a channel whose id arrived in a message: in the driver one more that keeps it
/// (if it is still there), in a task one that does not.
std::shared_ptr<ChannelRef> adopt_channel(std::uint64_t id, ChannelKind kind);

/// What copies of one Queue or Event share: the channel, opened at its first use (so that a
/// handle made only to be decoded into opens none).
class LazyChannel {
 public:
  LazyChannel(ChannelKind kind, std::uint64_t maxsize, ChannelItems init = {})
      : kind_(kind), maxsize_(maxsize), init_(std::move(init)) {}
  explicit LazyChannel(std::shared_ptr<ChannelRef> ref) : kind_(ref->kind()), ref_(std::move(ref)) {
    std::call_once(opened_, [] {});
  }
  const ChannelRef& get() {
    std::call_once(opened_, [this] { ref_ = open_channel(kind_, maxsize_, std::move(init_)); });
    return *ref_;
  }
  std::uint64_t id() { return get().id(); }
  ChannelKind kind() const noexcept { return kind_; }

 private:
  ChannelKind kind_;
  std::uint64_t maxsize_ = 0;
  ChannelItems init_;
  std::once_flag opened_;
  std::shared_ptr<ChannelRef> ref_;
};

}  // namespace fibra::detail
