// expect: fibra: FIBRA_REMOTE takes a free function
#include "common.hpp"
struct Model {
  double score(double x) { return x; }
};
FIBRA_REMOTE(Model::score);
