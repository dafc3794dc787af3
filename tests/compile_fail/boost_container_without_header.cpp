// expect: fibra: this type is sent with its serialize() (Boost.Serialization): add #include <fibra/serialization.hpp>
// to this file
#include "common.hpp"

#include <map>

#include <boost/serialization/map.hpp>
#include <boost/serialization/string.hpp>
// A std::map goes through Boost's own serialize (its header is included), inside a std::vector.
std::vector<std::map<std::string, int>> histogram(int n) { return std::vector<std::map<std::string, int>>(n); }
FIBRA_REMOTE(histogram);
