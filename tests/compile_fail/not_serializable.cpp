// expect: fibra: this type cannot be sent to a worker
#include "common.hpp"
struct Params {
  std::string name;  // not trivially copyable, and no serialize()
};
double weigh(const Params& p) { return double(p.name.size()); }
FIBRA_REMOTE(weigh);
