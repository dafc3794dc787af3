// fibra/serialization.hpp: sending types that have a Boost.Serialization serialize().
//
// Include it in each file that sends or receives such a type (where the function is registered with
// FIBRA_REMOTE, and where a Pool call passes or returns it), next to Boost's headers for the
// standard containers the type holds:
//
//   #include <fibra/fibra.hpp>
//   #include <fibra/serialization.hpp>
//   #include <boost/serialization/map.hpp>
//
//   struct Params {
//     std::map<std::string, double> values;
//     template <class A>
//     void serialize(A& ar, unsigned) { ar & values; }
//   };
//
// fibra.hpp leaves it out: Boost's archive headers are large, and raw types, std::string and the
// std containers fibra encodes itself (vector, array, pair, tuple, optional) do not need them. A file that sends a type
// with serialize() without this header is refused at compile time with a sentence that names it. See
// docs/remote-functions.md.
#pragma once

#include "fibra/detail/boost_codec.hpp"
