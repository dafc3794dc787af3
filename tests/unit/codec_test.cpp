#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <boost/serialization/map.hpp>
#include <boost/serialization/string.hpp>

#include "fibra/detail/codec.hpp"
#include "fibra/serialization.hpp"  // Params below has serialize()

namespace {

using fibra::detail::decode;
using fibra::detail::decode_value;
using fibra::detail::encode_value;
using fibra::detail::Reader;

struct Pod {
  double x;
  int n;
  bool operator==(const Pod&) const = default;
};

// A type that needs Boost.Serialization (it holds a map).
struct Params {
  std::string name;
  std::map<std::string, double> values;
  template <class A>
  void serialize(A& ar, unsigned) {
    ar& name& values;
  }
  bool operator==(const Params&) const = default;
};

template <class T>
T round_trip(const T& v) {
  return decode_value<T>(encode_value(v));
}

TEST(Codec, RawTypesAreCopiedByteForByte) {
  EXPECT_EQ(encode_value(42).size(), sizeof(int));
  EXPECT_EQ(round_trip(42), 42);
  EXPECT_EQ(round_trip(-1.5), -1.5);
  EXPECT_EQ(round_trip(Pod{2.5, 7}), (Pod{2.5, 7}));
  std::array<float, 3> a{1, 2, 3};
  EXPECT_EQ(round_trip(a), a);
  EXPECT_EQ(encode_value(a).size(), sizeof a);
}

TEST(Codec, VectorsOfRawTypesAreOneBlock) {
  std::vector<double> v(1000, 0.25);
  EXPECT_EQ(encode_value(v).size(), sizeof(std::uint64_t) + 1000 * sizeof(double));
  EXPECT_EQ(round_trip(v), v);
  EXPECT_EQ(round_trip(std::vector<double>{}), std::vector<double>{});
}

// A large vector (4 MiB and more) is decoded in one copy from its bytes where they are aligned for
// its elements, and by a zero-filled resize and a copy where they are not: both give it whole.
TEST(Codec, LargeVectorsDecodeFromAlignedAndUnalignedBytes) {
  std::vector<double> v(1 << 20);  // 8 MiB
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i) * 0.5 - 3;
  const std::string bytes = encode_value(v);
  for (std::size_t shift : {0, 1, 3, 8}) {
    std::string buf(shift, '\x7f');
    buf += bytes;
    const auto got = decode_value<std::vector<double>>(std::string_view(buf).substr(shift));
    EXPECT_EQ(got, v) << "the encoding starting " << shift << " bytes into its buffer";
  }
  std::vector<double> warm(v.size() + 5, 1.0);  // decoding into one that has room already
  Reader r(bytes);
  decode(r, warm);
  EXPECT_EQ(warm, v);
}

// Pod has 4 padding bytes after `n`. Two equal values whose padding differs encode to different
// bytes for a message, and to the same bytes for a digest (a checkpoint's inputs fingerprint).
TEST(Codec, ADigestWriterZeroesPadding) {
  static_assert(fibra::detail::may_have_padding_v<Pod> && sizeof(Pod) == 16);
  if (!fibra::detail::digest_clears_padding) GTEST_SKIP() << "this compiler has no __builtin_clear_padding";
  alignas(Pod) unsigned char a_bytes[sizeof(Pod)], b_bytes[sizeof(Pod)];
  std::memset(a_bytes, 0xAA, sizeof a_bytes);
  std::memset(b_bytes, 0x55, sizeof b_bytes);
  Pod* a = new (a_bytes) Pod;
  Pod* b = new (b_bytes) Pod;
  a->x = b->x = 2.5;
  a->n = b->n = 7;
  std::vector<Pod> va{*a, *a}, vb{*b, *b};
  std::memcpy(static_cast<void*>(&va[1]), a_bytes, sizeof(Pod));  // whatever a copy did, keep the padding
  std::memcpy(static_cast<void*>(&vb[1]), b_bytes, sizeof(Pod));
  auto bytes = [](auto& v, bool digest, std::size_t i) {
    std::string out;
    fibra::detail::Writer w(out, digest);
    w.pod(v[i]);
    return out;
  };
  EXPECT_NE(bytes(va, false, 1), bytes(vb, false, 1));
  EXPECT_EQ(bytes(va, true, 1), bytes(vb, true, 1));
  std::string da, db;
  fibra::detail::Writer wa(da, true), wb(db, true);
  fibra::detail::encode(wa, va);
  fibra::detail::encode(wb, vb);
  EXPECT_EQ(da, db);
  EXPECT_EQ(da.size(), sizeof(std::uint64_t) + 2 * sizeof(Pod));
}

TEST(Codec, StringsTuplesPairsOptionals) {
  EXPECT_EQ(round_trip(std::string("héllo\0x", 7)), std::string("héllo\0x", 7));
  auto t = std::make_tuple(1, std::string("two"), std::vector<int>{3, 4});
  EXPECT_EQ(round_trip(t), t);
  auto p = std::make_pair(std::string("k"), 9.5);
  EXPECT_EQ(round_trip(p), p);
  EXPECT_EQ(round_trip(std::optional<std::string>("x")), std::optional<std::string>("x"));
  EXPECT_EQ(round_trip(std::optional<std::string>()), std::optional<std::string>());
  std::vector<std::string> vs{"a", "", "ccc"};
  EXPECT_EQ(round_trip(vs), vs);
}

TEST(Codec, OtherTypesGoThroughBoostSerialization) {
  Params p{"run", {{"lr", 0.01}, {"gamma", 0.99}}};
  EXPECT_EQ(round_trip(p), p);
  std::vector<Params> ps{p, Params{"b", {}}};
  EXPECT_EQ(round_trip(ps), ps);
}

// Which types have serialize(), told without Boost's archives (codec.hpp does not include them).
class PrivateMember {
  friend class boost::serialization::access;
  template <class A>
  void serialize(A& ar, unsigned) {
    ar& s;
  }
  std::string s;
};
struct FreeSerialize {
  std::string s;
};
template <class A>
void serialize(A& ar, FreeSerialize& f, unsigned) {
  ar& f.s;
}
struct NoSerialize {
  std::string s;
};

TEST(Codec, SerializeIsFoundWithoutTheArchives) {
  using fibra::detail::boost_serializable;
  static_assert(boost_serializable<Params> && boost_serializable<PrivateMember> && boost_serializable<FreeSerialize>);
  static_assert(boost_serializable<std::map<std::string, double>>);  // Boost's own, from its map.hpp
  static_assert(!boost_serializable<NoSerialize> && !fibra::detail::codable_v<NoSerialize>);
  // What goes through Boost (and so needs fibra/serialization.hpp), in whole or in part.
  using fibra::detail::via_boost_v;
  static_assert(via_boost_v<Params> && via_boost_v<std::vector<Params>> && via_boost_v<std::pair<int, Params>> &&
                via_boost_v<std::optional<std::map<std::string, double>>>);
  static_assert(!via_boost_v<int> && !via_boost_v<Pod> && !via_boost_v<std::string> &&
                !via_boost_v<std::vector<std::string>> && !via_boost_v<std::tuple<int, std::string>>);
  PrivateMember m;
  EXPECT_NO_THROW(round_trip(m));
  FreeSerialize f{"x"};
  EXPECT_EQ(round_trip(f).s, "x");
}

TEST(Codec, ItemsOfAChunkRoundTrip) {
  std::vector<int> in{1, 2, 3, 4, 5};
  std::string bytes;
  fibra::detail::encode_items(bytes, in.begin() + 1, 3);
  EXPECT_EQ(bytes.size(), 3 * sizeof(int));
  std::vector<int> out(3);
  fibra::detail::decode_items(bytes, out.data(), 3);
  EXPECT_EQ(out, (std::vector<int>{2, 3, 4}));
}

TEST(Codec, TruncatedInputIsAnErrorNotGarbage) {
  std::string bytes = encode_value(std::string("hello world"));
  bytes.resize(bytes.size() - 3);
  try {
    decode_value<std::string>(bytes);
    FAIL() << "no error";
  } catch (const fibra::Error& e) {
    EXPECT_STREQ(e.what(),
                 "fibra: a message ended early while decoding (11 bytes wanted, 8 left); the driver and "
                 "workers may run different binaries");
  }
  std::vector<double> out(2);
  EXPECT_THROW(fibra::detail::decode_items(std::string(12, 'x'), out.data(), 2), fibra::Error);
}

TEST(Codec, HugeLengthPrefixIsRejected) {
  std::string bytes = encode_value(std::uint64_t(1) << 60);  // a length with no data behind it
  EXPECT_THROW(decode_value<std::vector<double>>(bytes), fibra::Error);
}

}  // namespace

// The memory of a large payload given back (its chunk done) serves the next large buffer once,
// warm; what it held is not carried over, and the driver keeps at most two such buffers, none over
// 256 MiB.
TEST(LargeBuffer, AGivenBackBufferServesTheNextLargeBufferOnce) {
  using namespace fibra::detail;
  const std::size_t n = 6 << 20;
  std::string done(n, 'p');
  const char* memory = done.data();
  give_back_large(done);
  EXPECT_TRUE(done.empty());
  std::string next = "head:";
  reserve_large(next, n);
  EXPECT_EQ(next.data(), memory) << "the buffer given back was not used";
  EXPECT_EQ(next, "head:") << "the new buffer must keep what it held, and only that";
  std::string other = "x";
  reserve_large(other, n);
  EXPECT_NE(other.data(), memory) << "one buffer served two";

  std::string huge;
  huge.reserve(std::size_t(300) << 20);  // over 256 MiB: not kept
  give_back_large(huge);
  EXPECT_GE(huge.capacity(), std::size_t(300) << 20) << "a buffer over 256 MiB was kept";

  // A payload's memory comes back when the last holder of the payload lets it go.
  std::string encoded;
  encoded.reserve(n + (1 << 20));  // a capacity a fresh buffer of n would not have
  encoded.assign(n, 's');
  const std::size_t payload_capacity = encoded.capacity();
  auto payload = share_payload(std::move(encoded));
  const char* payload_memory = payload->data();
  auto sender = payload;  // the pieces of a send still hold it
  payload.reset();
  std::string early;
  reserve_large(early, n);
  EXPECT_NE(early.data(), payload_memory) << "a payload's memory served while it was still being sent";
  sender.reset();
  std::string late;
  reserve_large(late, n);
  EXPECT_EQ(late.data(), payload_memory);
  EXPECT_EQ(late.capacity(), payload_capacity) << "not the payload's memory given back";

  // Not a spare far larger than asked for (it would be held as long as what it serves).
  std::string large(std::size_t(40) << 20, 'l');
  const char* large_memory = large.data();
  give_back_large(large);
  std::string small;
  reserve_large(small, n);
  EXPECT_NE(small.data(), large_memory) << "a 40 MiB spare served 6 MiB";
  std::string fitting;
  reserve_large(fitting, std::size_t(30) << 20);
  EXPECT_EQ(fitting.data(), large_memory);

  // At most 256 MiB in all: of two of 200 MiB, the newer is kept.
  std::string a, b;
  a.reserve(std::size_t(200) << 20);
  b.reserve(std::size_t(200) << 20);
  const char* b_memory = b.data();
  give_back_large(a);
  give_back_large(b);
  std::string c, d;
  reserve_large(c, std::size_t(150) << 20);
  reserve_large(d, std::size_t(150) << 20);
  EXPECT_EQ(c.data(), b_memory);
  EXPECT_NE(d.data(), b_memory);

  std::vector<std::string> three(3, std::string(n, 'q'));
  std::vector<const char*> given;
  for (auto& s : three) {
    given.push_back(s.data());
    give_back_large(s);
  }
  std::vector<const char*> served;
  for (auto& s : three) {  // each kept alive: its memory is not given back meanwhile
    reserve_large(s, n);
    served.push_back(s.data());
  }
  EXPECT_EQ(served[0], given[1]) << "the two newest serve, the oldest of three was let go";
  EXPECT_EQ(served[1], given[2]);
  EXPECT_NE(served[2], given[1]);
  EXPECT_NE(served[2], given[2]);
}
