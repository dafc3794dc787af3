// expect: fibra: a member function cannot run on a worker
#include "common.hpp"
struct Model {
  double score(double x) { return x; }
};
void call(fibra::Pool& p, Model& m) { p.apply_async(&Model::score, m, 1.0); }
