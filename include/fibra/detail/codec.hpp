// fibra/detail/codec.hpp: how arguments and results become bytes.
//
// Three paths, chosen at compile time:
//  - "raw" types (trivially copyable, not pointers): copied byte for byte. Every process runs the
//    same binary, so layouts agree.
//  - std::string, std::vector/std::array/std::pair/std::tuple/std::optional: a size and their parts;
//    a vector of a raw type is one memcpy.
//  - anything else: Boost.Serialization's binary archive, length-prefixed. Boost's archive headers
//    are large, so they are included only by
//    fibra/serialization.hpp (detail/boost_codec.hpp), in the files that send such types.
// A type with none of these fails at compile time with a message that says what to add, and a type
// with serialize() in a file without fibra/serialization.hpp with one that says to include it.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// Light (a few thousand lines): enough to tell whether a type has serialize(), not to call it.
#include <boost/serialization/level.hpp>
#include <boost/serialization/serialization.hpp>

#include "fibra/error.hpp"

namespace fibra::detail {

/// True for a trivially copyable class that may hold padding bytes, whose values are unspecified.
template <class T>
inline constexpr bool may_have_padding_v = std::is_class_v<T> && !std::has_unique_object_representations_v<T>;

/// Whether a digest Writer can zero padding: it needs __builtin_clear_padding (GCC 11 or later, as
/// Debian 12's GCC 12). Without it, padding bytes are hashed as they are.
#if defined(__has_builtin) && __has_builtin(__builtin_clear_padding)
inline constexpr bool digest_clears_padding = true;
#else
inline constexpr bool digest_clears_padding = false;
#endif

/// Buffers of this many bytes or more ask for huge pages (MADV_HUGEPAGE) before they are first
/// touched: faulting in 64 MiB page by page costs 25-45 ms on a 2-core machine here, in 2 MiB pages
/// about 7 ms, which is more than copying it (docs/architecture.md, "Large payloads").
inline constexpr std::size_t large_buffer = std::size_t(4) << 20;
/// Asks for huge pages under the 2 MiB-aligned part of [p, p + n); nothing when n < large_buffer.
void advise_large(const void* p, std::size_t n) noexcept;
/// s.reserve(n), asking for huge pages before the new memory is touched; when n is large, the
/// memory of a buffer given back (give_back_large) of room for n to 2n bytes serves instead.
void reserve_large(std::string& s, std::size_t n);
/// Makes `s` hold n bytes to be overwritten (what it held is dropped): a large buffer too small for
/// them is replaced by a fresh one with huge pages, rather than grown by copying what it held, and
/// is not zero-filled first.
void resize_large(std::string& s, std::size_t n);
/// memcpy, split across the cores this process may use when n is large (8 MiB or more each): one
/// core copies 64 MiB in about 10 ms here, two in about 5.5.
void copy_large(void* dst, const void* src, std::size_t n) noexcept;
/// s.append(p, n) for a large n: grows `s` with huge pages, without zero-filling, and copies with
/// copy_large.
void append_large(std::string& s, const void* p, std::size_t n);
/// Keeps the memory of a large buffer no longer needed (a payload whose chunk is done) for the next
/// large buffer (reserve_large), up to two of them and 256 MiB in all; `s` is left empty if kept.
void give_back_large(std::string& s) noexcept;
/// A payload shared by the pieces that send it; a large one's memory is given back when it goes.
std::shared_ptr<const std::string> share_payload(std::string payload);
/// Grows `s` to n bytes, keeping what it holds, without writing the new ones (their pages are not
/// touched); for bytes whose copy lies elsewhere (spill_large). When `s` needs a new buffer,
/// `copy(to, from, size)` moves its bytes there (skipping those that were never written).
void extend_unwritten(std::string& s, std::size_t n,
                      const std::function<void(char* to, const char* from, std::size_t size)>& copy);
/// Where an executor writes a large block of a result frame (`out`) straight into the shared memory
/// the frame is bound for, at the offset it has in the frame, rather than into `out` and again from
/// there (src/executor/results.hpp, FrameSpill). True: done, and `out` grew by n unwritten bytes. False
/// (`out` is not such a frame, its slot is not free or cannot be mapped that far, or the frame
/// would pass 2 GiB): the caller appends as usual.
bool spill_large(std::string& out, const void* p, std::size_t n);

/// Appends bytes to a buffer. A writer for a digest (`for_digest`) writes padding bytes as zeros,
/// so that equal values always give equal bytes; a writer for messages copies objects as they are.
class Writer {
 public:
  explicit Writer(std::string& out, bool for_digest = false) : out_(out), for_digest_(for_digest) {}
  void raw(const void* p, std::size_t n) {
    if (n >= large_buffer) {
      if (!for_digest_ && spill_large(out_, p, n)) return;
      append_large(out_, p, n);
      return;
    }
    out_.append(static_cast<const char*>(p), n);
  }
  template <class T>
  void pod(const T& v) {
    pods(&v, 1);
  }
  /// n trivially copyable objects, in one copy unless padding has to be cleared.
  template <class T>
  void pods(const T* p, std::size_t n) {
#if defined(__has_builtin) && __has_builtin(__builtin_clear_padding)
    if constexpr (may_have_padding_v<T>) {
      if (for_digest_) {
        for (std::size_t i = 0; i < n; ++i) {
          T copy = p[i];
          __builtin_clear_padding(&copy);
          raw(&copy, sizeof copy);
        }
        return;
      }
    }
#endif
    raw(p, n * sizeof(T));
  }
  std::string& buffer() { return out_; }

 private:
  std::string& out_;
  bool for_digest_;
};

/// Reads bytes from a buffer; running past its end throws instead of reading garbage.
class Reader {
 public:
  explicit Reader(std::string_view in) : p_(in.data()), end_(in.data() + in.size()) {}
  void raw(void* dst, std::size_t n) {
    need(n);
    if (n == 0) return;  // (an empty destination may be null, which memcpy must not be given)
    if (n >= large_buffer)
      copy_large(dst, p_, n);
    else
      std::memcpy(dst, p_, n);
    p_ += n;
  }
  template <class T>
  T pod() {
    T v;
    raw(&v, sizeof v);
    return v;
  }
  std::string_view take(std::size_t n) {
    need(n);
    std::string_view s(p_, n);
    p_ += n;
    return s;
  }
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
  /// Where the next byte would be read from.
  const char* here() const { return p_; }

 private:
  void need(std::size_t n) const {
    if (static_cast<std::size_t>(end_ - p_) < n)
      throw Error("fibra: a message ended early while decoding (" + std::to_string(n) + " bytes wanted, " +
                  std::to_string(end_ - p_) + " left); the driver and workers may run different binaries");
  }
  const char* p_;
  const char* end_;
};

/// What a call that returns nothing (an actor's void method) sends back: one byte.
struct Unit {};

template <class T>
struct Codec;  // primary template: chosen below

template <class T>
inline constexpr bool is_raw_v = std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> &&
                                 !std::is_member_pointer_v<T> && std::is_default_constructible_v<T>;

template <class T>
void encode(Writer& w, const T& v) {
  Codec<T>::encode(w, v);
}
template <class T>
void decode(Reader& r, T& v) {
  Codec<T>::decode(r, v);
}

// --- raw types -------------------------------------------------------------------------------
template <class T>
requires is_raw_v<T>
struct Codec<T> {
  static void encode(Writer& w, const T& v) { w.pod(v); }
  static void decode(Reader& r, T& v) { r.raw(&v, sizeof v); }
};

// --- strings and containers ------------------------------------------------------------------
template <>
struct Codec<std::string> {
  static void encode(Writer& w, const std::string& s) {
    w.pod<std::uint64_t>(s.size());
    w.raw(s.data(), s.size());
  }
  static void decode(Reader& r, std::string& s) {
    auto n = r.pod<std::uint64_t>();
    const std::string_view bytes = r.take(n);
    if (n < large_buffer) return void(s.assign(bytes));
    resize_large(s, n);  // huge pages, not zero-filled first: a 100 MB item is not faulted in page by page
    copy_large(s.data(), bytes.data(), n);
  }
};

template <class T, class A>
struct Codec<std::vector<T, A>> {
  static void encode(Writer& w, const std::vector<T, A>& v) {
    w.pod<std::uint64_t>(v.size());
    if constexpr (is_raw_v<T>) {
      w.pods(v.data(), v.size());
    } else {
      for (const auto& x : v) detail::encode(w, x);
    }
  }
  static void decode(Reader& r, std::vector<T, A>& v) {
    auto n = r.pod<std::uint64_t>();
    if constexpr (is_raw_v<T>) {
      if (n > r.left() / (sizeof(T) ? sizeof(T) : 1))
        throw Error("fibra: a vector's length (" + std::to_string(n) + ") is longer than its message");
      if (n * sizeof(T) >= large_buffer) {
        if (v.capacity() < n) {
          std::vector<T, A>().swap(v);
          v.reserve(n);
          advise_large(v.data(), n * sizeof(T));
        }
        if constexpr (std::is_copy_constructible_v<T> && std::is_copy_assignable_v<T>) {
          if (reinterpret_cast<std::uintptr_t>(r.here()) % alignof(T) == 0) {
            // One copy into the new memory (a memmove), without the zero fill resize() would do first.
            const T* p = reinterpret_cast<const T*>(r.take(n * sizeof(T)).data());
            v.assign(p, p + n);
            return;
          }
        }
      }
      v.resize(n);
      r.raw(v.data(), n * sizeof(T));
    } else {
      v.clear();
      v.reserve(std::min<std::uint64_t>(n, r.left()));
      for (std::uint64_t i = 0; i < n; ++i) {
        T x{};
        detail::decode(r, x);
        v.push_back(std::move(x));
      }
    }
  }
};

template <class T, std::size_t N>
requires(!is_raw_v<std::array<T, N>>) struct Codec<std::array<T, N>> {
  static void encode(Writer& w, const std::array<T, N>& a) {
    for (const auto& x : a) detail::encode(w, x);
  }
  static void decode(Reader& r, std::array<T, N>& a) {
    for (auto& x : a) detail::decode(r, x);
  }
};

template <class A, class B>
requires(!is_raw_v<std::pair<A, B>>) struct Codec<std::pair<A, B>> {
  static void encode(Writer& w, const std::pair<A, B>& p) {
    detail::encode(w, p.first);
    detail::encode(w, p.second);
  }
  static void decode(Reader& r, std::pair<A, B>& p) {
    detail::decode(r, p.first);
    detail::decode(r, p.second);
  }
};

template <class... Ts>
requires(!is_raw_v<std::tuple<Ts...>>) struct Codec<std::tuple<Ts...>> {
  static void encode(Writer& w, const std::tuple<Ts...>& t) {
    std::apply([&](const auto&... x) { (detail::encode(w, x), ...); }, t);
  }
  static void decode(Reader& r, std::tuple<Ts...>& t) {
    std::apply([&](auto&... x) { (detail::decode(r, x), ...); }, t);
  }
};

template <class T>
requires(!is_raw_v<std::optional<T>>) struct Codec<std::optional<T>> {
  static void encode(Writer& w, const std::optional<T>& o) {
    w.pod<std::uint8_t>(o.has_value());
    if (o) detail::encode(w, *o);
  }
  static void decode(Reader& r, std::optional<T>& o) {
    if (r.pod<std::uint8_t>()) {
      T x{};
      detail::decode(r, x);
      o = std::move(x);
    } else {
      o.reset();
    }
  }
};

// --- everything else: Boost.Serialization ----------------------------------------------------
// Whether Boost.Serialization can write a T. `oa << v` compiles for every type (Boost fails later,
// deep inside, when T has no serialize), so the test looks for what Boost would call: a member named
// serialize (of any access: Boost's pattern makes it private with a friend), a free serialize found
// for T (a user's, or Boost's own for std::map and the like once its header is included), or a type
// Boost writes as a primitive. It needs no archive: a stand-in takes the archive's place.
namespace serialize_probe {

struct Archive {};
struct NotFound {};
// More specialized than Boost's fallback serialize(Archive&, T&, unsigned), which calls the member:
// a call that picks this one found no serialize written for T; one that is ambiguous found one.
// (The version_type argument brings Boost's own, in boost::serialization, into the lookup.)
template <class T>
NotFound serialize(Archive&, T&, unsigned int);

template <class T>
concept no_free_serialize = requires(Archive& ar, T& t, const boost::serialization::version_type v) {
  { serialize(ar, t, v) } -> std::same_as<NotFound>;
};

struct Named {
  void serialize();
};
template <class T>
struct Both : T, Named {};
// A member named serialize in T makes the name ambiguous in Both<T> (found even if it is private).
template <class T>
concept has_member_serialize = std::is_class_v<T> &&(std::is_final_v<T> || !requires { &Both<T>::serialize; });

}  // namespace serialize_probe

template <class T>
concept boost_serializable =
    serialize_probe::has_member_serialize<T> || !serialize_probe::no_free_serialize<T> ||
    boost::serialization::implementation_level<T>::value == boost::serialization::primitive_type;

/// True when fibra can send a T between processes: raw, a string, a container fibra knows of
/// codable parts, or a type Boost.Serialization can write.
template <class T>
struct codable : std::bool_constant<is_raw_v<T> || boost_serializable<T>> {};
template <>
struct codable<std::string> : std::true_type {};
template <class T, class A>
struct codable<std::vector<T, A>> : codable<T> {};
template <class T, std::size_t N>
struct codable<std::array<T, N>> : std::bool_constant<is_raw_v<std::array<T, N>> || codable<T>::value> {};
template <class A, class B>
struct codable<std::pair<A, B>>
    : std::bool_constant<is_raw_v<std::pair<A, B>> || (codable<A>::value && codable<B>::value)> {};
template <class... Ts>
struct codable<std::tuple<Ts...>> : std::bool_constant<is_raw_v<std::tuple<Ts...>> || (codable<Ts>::value && ...)> {};
template <class T>
struct codable<std::optional<T>> : std::bool_constant<is_raw_v<std::optional<T>> || codable<T>::value> {};
template <class T>
inline constexpr bool codable_v = codable<std::remove_cvref_t<T>>::value;

/// True when a codable T is sent, in whole or in part, through Boost.Serialization.
template <class T>
struct via_boost : std::bool_constant<!is_raw_v<T>> {};
template <>
struct via_boost<std::string> : std::false_type {};
template <class T, class A>
struct via_boost<std::vector<T, A>> : via_boost<T> {};
template <class T, std::size_t N>
struct via_boost<std::array<T, N>> : std::bool_constant<!is_raw_v<std::array<T, N>> && via_boost<T>::value> {};
template <class A, class B>
struct via_boost<std::pair<A, B>>
    : std::bool_constant<!is_raw_v<std::pair<A, B>> && (via_boost<A>::value || via_boost<B>::value)> {};
template <class... Ts>
struct via_boost<std::tuple<Ts...>>
    : std::bool_constant<!is_raw_v<std::tuple<Ts...>> && (via_boost<Ts>::value || ...)> {};
template <class T>
struct via_boost<std::optional<T>> : std::bool_constant<!is_raw_v<std::optional<T>> && via_boost<T>::value> {};
template <class T>
inline constexpr bool via_boost_v = via_boost<std::remove_cvref_t<T>>::value;

/// The Boost.Serialization path of the codec: declared here, defined by fibra/serialization.hpp
/// (detail/boost_codec.hpp), which brings Boost's archives.
template <class T>
struct BoostCodec;
/// True once fibra/serialization.hpp is included (T only makes the test wait for a use).
template <class T>
concept boost_codec_included = requires(Writer& w, const T& v) {
  BoostCodec<T>::encode(w, v);
};

/// The sentence a type that cannot be sent gets (here and where a call is checked, call_checks.hpp).
#define FIBRA_DETAIL_NOT_CODABLE                                                                 \
  "fibra: this type cannot be sent to a worker: it is not trivially copyable and has no "        \
  "Boost.Serialization serialize(); give it a member `template <class A> void serialize(A& ar, " \
  "unsigned) { ar & field1 & field2; }` (and include Boost's header for each std container it "  \
  "holds, such as <boost/serialization/map.hpp>), or make it trivially copyable"
/// The sentence a type without a default constructor gets (before any other: every way of
/// sending a value decodes it into a default-constructed one).
#define FIBRA_DETAIL_NO_DEFAULT_CONSTRUCTOR                                                       \
  "fibra: this type cannot be sent to a worker: it has no default constructor, and a value that " \
  "arrives is decoded into a default-constructed one; give it one (`Point() = default;` beside "  \
  "its other constructors)"
/// The sentence a type with serialize() gets in a file that did not include fibra/serialization.hpp.
#define FIBRA_DETAIL_INCLUDE_SERIALIZATION                                                      \
  "fibra: this type is sent with its serialize() (Boost.Serialization): add #include "          \
  "<fibra/serialization.hpp> to this file (fibra.hpp leaves out Boost's archives, which files " \
  "that send only raw types, strings and std containers do not need)"

template <class T>
struct Codec {
  static_assert(std::is_default_constructible_v<T>,
                "fibra: arguments and results must be default-constructible (decoding fills a "
                "default-constructed value)");
  static_assert(boost_serializable<T>, FIBRA_DETAIL_NOT_CODABLE);
  static_assert(!boost_serializable<T> || boost_codec_included<T>, FIBRA_DETAIL_INCLUDE_SERIALIZATION);
  static void encode(Writer& w, const T& v) { BoostCodec<T>::encode(w, v); }
  static void decode(Reader& r, T& v) { BoostCodec<T>::decode(r, v); }
};

/// Encodes items [first, first+n) of a range one after another; one memcpy for contiguous raw data.
template <class It>
void encode_items(std::string& out, It first, std::size_t n) {
  using T = std::remove_cvref_t<decltype(*first)>;
  if constexpr (is_raw_v<T> && std::contiguous_iterator<It>) {
    Writer(out).raw(std::to_address(first), n * sizeof(T));  // one copy (split when large)
  } else {
    Writer w(out);
    for (std::size_t i = 0; i < n; ++i, ++first) encode(w, *first);
  }
}

/// Decodes n items into dst[0..n); throws if the bytes do not hold exactly n items.
template <class T>
void decode_items(std::string_view in, T* dst, std::size_t n) {
  if constexpr (is_raw_v<T>) {
    if (in.size() != n * sizeof(T))
      throw Error("fibra: a result chunk holds " + std::to_string(in.size()) + " bytes, expected " +
                  std::to_string(n * sizeof(T)) + "; the driver and workers may run different binaries");
    Reader(in).raw(static_cast<void*>(dst), in.size());  // one copy (split when large)
  } else {
    Reader r(in);
    for (std::size_t i = 0; i < n; ++i) decode(r, dst[i]);
    if (r.left() != 0) throw Error("fibra: a result chunk has trailing bytes; binaries may differ");
  }
}

template <class T>
std::string encode_value(const T& v) {
  std::string s;
  Writer w(s);
  encode(w, v);
  return s;
}

template <class T>
T decode_value(std::string_view s) {
  T v{};
  Reader r(s);
  decode(r, v);
  return v;
}

}  // namespace fibra::detail
