// fibra/detail/boost_codec.hpp: the Boost.Serialization path of the codec (detail/codec.hpp): a
// type with serialize() travels as a binary archive (no header, no object tracking), length-
// prefixed. Included through fibra/serialization.hpp only, so that files which send no such type
// do not compile Boost's archive headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ios>
#include <istream>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>

#include "fibra/detail/codec.hpp"

namespace fibra::detail {

/// A read-only streambuf over bytes that already exist (no copy).
class ViewBuf : public std::streambuf {
 public:
  explicit ViewBuf(std::string_view s) {
    char* b = const_cast<char*>(s.data());
    setg(b, b, b + s.size());
  }
};

/// A streambuf that appends to a string: an archive writes into it in the sizes it chose, with no
/// stream of its own growing by copies.
class AppendBuf : public std::streambuf {
 public:
  explicit AppendBuf(std::string& s) : s_(s) {}

 protected:
  std::streamsize xsputn(const char* p, std::streamsize n) override {
    s_.append(p, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) s_.push_back(traits_type::to_char_type(c));
    return traits_type::not_eof(c);
  }

 private:
  std::string& s_;
};

/// The buffer a thread's archives are written into before they go into a message: reused, so that
/// encoding a large value does not fault fresh pages in as an ostringstream growing by copies did
/// (a 1.2 MB rollout fragment: 2-4 ms before). One above 64 MiB is let go after its use.
inline std::string& archive_scratch() {
  thread_local std::string s;
  return s;
}

template <class T>
struct BoostCodec {
  static void encode(Writer& w, const T& v) {
    std::string& bytes = archive_scratch();
    bytes.clear();
    {
      AppendBuf buf(bytes);
      std::ostream os(&buf);
      boost::archive::binary_oarchive oa(os, boost::archive::no_header | boost::archive::no_tracking);
      oa << v;
    }
    Codec<std::string>::encode(w, bytes);  // (a large one may go straight into shared memory: Writer::raw)
    if (bytes.capacity() > (std::size_t(64) << 20)) std::string().swap(bytes);
  }
  static void decode(Reader& r, T& v) {
    auto n = r.pod<std::uint64_t>();
    ViewBuf buf(r.take(n));
    std::istream is(&buf);
    boost::archive::binary_iarchive ia(is, boost::archive::no_header | boost::archive::no_tracking);
    ia >> v;
  }
};

}  // namespace fibra::detail
