// fibra/detail/boost_codec.hpp: the Boost.Serialization path of the codec (detail/codec.hpp): a
// type with serialize() travels as a binary archive (no header, no object tracking), length-
// prefixed. Included through fibra/serialization.hpp only, so that files which send no such type
// do not compile Boost's archive headers.
#pragma once

#include <cstdint>
#include <ios>
#include <istream>
#include <sstream>
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

template <class T>
struct BoostCodec {
  static void encode(Writer& w, const T& v) {
    std::ostringstream os(std::ios::binary);
    {
      boost::archive::binary_oarchive oa(os, boost::archive::no_header | boost::archive::no_tracking);
      oa << v;
    }
    Codec<std::string>::encode(w, std::move(os).str());
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
