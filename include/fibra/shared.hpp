// fibra/shared.hpp: multiprocessing's shared state on any node: Value and Array (each with its
// lock), and the dict and list of a Manager (Dict, List). Each lives in the driver
// (src/driver/sync_store.cpp); a handle is a value that travels as an argument, and each call on
// it is one message to the driver, taken whole (no call sees another half done).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "fibra/detail/channel.hpp"
#include "fibra/detail/codec.hpp"
#include "fibra/error.hpp"
#include "fibra/sync.hpp"

namespace fibra {

namespace detail {
template <class H>
struct LockedValueCodec;
}  // namespace detail

/// @brief multiprocessing.Value: one value of T, with an RLock for read-modify-write.
/// @code
///   fibra::Value<long> hits(0);
///   { std::lock_guard g(hits.get_lock()); hits.set(hits.get() + 1); }   // as `with v.get_lock(): v.value += 1`
/// @endcode
template <class T>
class Value : public detail::SharedHandle {
 public:
  Value() : Value(T{}) {}
  explicit Value(const T& value) : SharedHandle(detail::ChannelKind::value, 1, detail::item_of(value)) {}
  T get() const { return detail::decode_value<T>(call(detail::ChannelOp::read, 0, std::nullopt, {}, 1).items.front()); }
  void set(const T& value) { call(detail::ChannelOp::write, 0, std::nullopt, detail::item_of(value)); }
  /// @brief The lock that goes with it (the same for every copy of this handle).
  RLock& get_lock() { return lock_; }

 private:
  friend struct detail::SharedHandleAccess;
  friend struct detail::LockedValueCodec<Value>;
  Value(std::shared_ptr<detail::LazyChannel> ref, RLock lock) : SharedHandle(std::move(ref)), lock_(std::move(lock)) {}
  RLock lock_;
};

/// @brief multiprocessing.Array: a fixed number of values of T, with an RLock.
template <class T>
class Array : public detail::SharedHandle {
 public:
  /// @brief `n` values, each `fill`.
  Array() : Array(std::vector<T>{}) {}
  explicit Array(std::uint64_t n, const T& fill = T{}) : Array(std::vector<T>(n, fill)) {}
  explicit Array(const std::vector<T>& values)
      : SharedHandle(detail::ChannelKind::value, values.size(), detail::items_of(values)) {}
  /// @brief The value at `i`. @throws LookupError if `i` >= size().
  T get(std::uint64_t i) const {
    return detail::decode_value<T>(call(detail::ChannelOp::read, i, std::nullopt, {}, 1).items.front());
  }
  /// @brief Sets the value at `i`. @throws LookupError if `i` >= size().
  void set(std::uint64_t i, const T& value) { call(detail::ChannelOp::write, i, std::nullopt, detail::item_of(value)); }
  /// @brief Values [first, first + values.size()) at once. @throws LookupError past the end.
  void set(std::uint64_t first, const std::vector<T>& values) {
    call(detail::ChannelOp::write, first, std::nullopt, detail::items_of(values));
  }
  /// @brief All of its values, in one message.
  std::vector<T> to_vector() const {
    return call(detail::ChannelOp::read, 0, std::nullopt, {}, ~std::uint64_t(0)).items.template decode_all<T>();
  }
  std::uint64_t size() const { return call(detail::ChannelOp::info, 0, 0.0).value; }
  RLock& get_lock() { return lock_; }

 private:
  friend struct detail::SharedHandleAccess;
  friend struct detail::LockedValueCodec<Array>;
  Array(std::shared_ptr<detail::LazyChannel> ref, RLock lock) : SharedHandle(std::move(ref)), lock_(std::move(lock)) {}
  RLock lock_;
};

/// @brief A Manager's dict() (Python's DictProxy): values of V by keys of K, in the order the
/// keys came. Each call is taken whole; a read-modify-write of several calls needs a Lock.
template <class K, class V>
class Dict : public detail::SharedHandle {
 public:
  Dict() : SharedHandle(detail::ChannelKind::dict, 0) {}
  void set(const K& key, const V& value) { call(detail::ChannelOp::write, 0, std::nullopt, pair_of(key, value)); }
  /// @brief The value of `key`, or nothing if it is not there.
  std::optional<V> get(const K& key) const {
    auto r = call(detail::ChannelOp::read, 0, std::nullopt, detail::item_of(key));
    if (!r.flag) return std::nullopt;
    return detail::decode_value<V>(r.items.front());
  }
  V get(const K& key, const V& otherwise) const { return get(key).value_or(otherwise); }
  /// @brief The value of `key`. @throws LookupError if it is not there.
  V at(const K& key) const {
    if (auto v = get(key)) return std::move(*v);
    throw LookupError("fibra: the key is not in dict #" + std::to_string(id()));
  }
  bool contains(const K& key) const { return get(key).has_value(); }
  /// @brief The value of `key`, set to `value` first if it was not there (in one step).
  V setdefault(const K& key, const V& value) {
    return detail::decode_value<V>(call(detail::ChannelOp::write, 1, std::nullopt, pair_of(key, value)).items.front());
  }
  /// @brief Takes `key` out: its value, or nothing if it was not there.
  std::optional<V> pop(const K& key) {
    auto r = call(detail::ChannelOp::erase, 0, std::nullopt, detail::item_of(key));
    if (!r.flag) return std::nullopt;
    return detail::decode_value<V>(r.items.front());
  }
  bool erase(const K& key) { return pop(key).has_value(); }
  /// @brief Sets every pair of `pairs`, in one message.
  void update(const std::vector<std::pair<K, V>>& pairs) {
    detail::ChannelItems items;
    for (const auto& [k, v] : pairs) {
      items.add(k);
      items.add(v);
    }
    if (!pairs.empty()) call(detail::ChannelOp::write, 0, std::nullopt, std::move(items));
  }
  /// @brief Every key and its value, in the order the keys came, in one message.
  std::vector<std::pair<K, V>> items() const {
    std::vector<std::pair<K, V>> out;
    std::optional<K> key;
    call(detail::ChannelOp::entries).items.each([&](std::string_view s) {
      if (!key) {
        key = detail::decode_value<K>(s);
        return;
      }
      out.emplace_back(std::move(*key), detail::decode_value<V>(s));
      key.reset();
    });
    return out;
  }
  std::vector<K> keys() const {
    std::vector<K> out;
    for (auto& kv : items()) out.push_back(std::move(kv.first));
    return out;
  }
  std::vector<V> values() const {
    std::vector<V> out;
    for (auto& kv : items()) out.push_back(std::move(kv.second));
    return out;
  }
  std::uint64_t size() const { return call(detail::ChannelOp::info, 0, 0.0).value; }
  bool empty() const { return size() == 0; }
  void clear() { call(detail::ChannelOp::clear); }

 private:
  friend struct detail::SharedHandleAccess;
  explicit Dict(std::shared_ptr<detail::LazyChannel> ref) : SharedHandle(std::move(ref)) {}
  static detail::ChannelItems pair_of(const K& key, const V& value) {
    detail::ChannelItems items;
    items.add(key);
    items.add(value);
    return items;
  }
};

/// @brief A Manager's list() (Python's ListProxy): values of T in a row that grows and shrinks.
template <class T>
class List : public detail::SharedHandle {
 public:
  List() : SharedHandle(detail::ChannelKind::list, 0) {}
  void append(const T& value) { call(detail::ChannelOp::append, 0, std::nullopt, detail::item_of(value)); }
  /// @brief Appends all of `values`, in one message (no other append comes between them).
  void extend(const std::vector<T>& values) {
    if (!values.empty()) call(detail::ChannelOp::append, 0, std::nullopt, detail::items_of(values));
  }
  /// @brief The value at `i`. @throws LookupError if `i` >= size().
  T get(std::uint64_t i) const {
    return detail::decode_value<T>(call(detail::ChannelOp::read, i, std::nullopt, {}, 1).items.front());
  }
  void set(std::uint64_t i, const T& value) { call(detail::ChannelOp::write, i, std::nullopt, detail::item_of(value)); }
  /// @brief Takes out the last value. @throws LookupError if it is empty.
  T pop() { return pop_at(~std::uint64_t(0)); }
  /// @brief Takes out the value at `i`. @throws LookupError if `i` >= size().
  T pop(std::uint64_t i) { return pop_at(i); }
  std::vector<T> to_vector() const { return call(detail::ChannelOp::entries).items.template decode_all<T>(); }
  std::uint64_t size() const { return call(detail::ChannelOp::info, 0, 0.0).value; }
  bool empty() const { return size() == 0; }
  void clear() { call(detail::ChannelOp::clear); }

 private:
  friend struct detail::SharedHandleAccess;
  explicit List(std::shared_ptr<detail::LazyChannel> ref) : SharedHandle(std::move(ref)) {}
  T pop_at(std::uint64_t i) { return detail::decode_value<T>(call(detail::ChannelOp::erase, i).items.front()); }
};

namespace detail {

/// A Value or Array travels as its id and its lock's.
template <class H>
struct LockedValueCodec {
  static void encode(Writer& w, const H& h) {
    w.pod(SharedHandleAccess::ref(h)->id());
    w.pod(SharedHandleAccess::ref(h.lock_)->id());
  }
  static void decode(Reader& r, H& h) {
    const auto id = r.pod<std::uint64_t>();
    const auto lock = r.pod<std::uint64_t>();
    h = H(std::make_shared<LazyChannel>(adopt_channel(id, ChannelKind::value)),
          SharedHandleAccess::make<RLock>(adopt_channel(lock, ChannelKind::rlock)));
  }
};
template <class T>
struct codable<Value<T>> : std::true_type {};
template <class T>
struct via_boost<Value<T>> : std::false_type {};
template <class T>
struct Codec<Value<T>> : LockedValueCodec<Value<T>> {};
template <class T>
struct codable<Array<T>> : std::true_type {};
template <class T>
struct via_boost<Array<T>> : std::false_type {};
template <class T>
struct Codec<Array<T>> : LockedValueCodec<Array<T>> {};
template <class K, class V>
struct codable<Dict<K, V>> : std::true_type {};
template <class K, class V>
struct via_boost<Dict<K, V>> : std::false_type {};
template <class K, class V>
struct Codec<Dict<K, V>> : SharedHandleCodec<Dict<K, V>, ChannelKind::dict> {};
template <class T>
struct codable<List<T>> : std::true_type {};
template <class T>
struct via_boost<List<T>> : std::false_type {};
template <class T>
struct Codec<List<T>> : SharedHandleCodec<List<T>, ChannelKind::list> {};

}  // namespace detail

}  // namespace fibra
