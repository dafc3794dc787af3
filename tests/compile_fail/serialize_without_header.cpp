// expect: fibra: this type is sent with its serialize() (Boost.Serialization): add #include <fibra/serialization.hpp>
// to this file
#include "common.hpp"
#include <boost/serialization/string.hpp>
struct Params {
  std::string name;
  template <class A>
  void serialize(A& ar, unsigned) {
    ar& name;
  }
};
double weigh(const Params& p) { return double(p.name.size()); }
FIBRA_REMOTE(weigh);  // no #include <fibra/serialization.hpp> above
