// expect: fibra: a member function cannot run on a worker
#include "common.hpp"
struct Model {
  double score(double x) { return x; }
};
void call(fibra::Pool& p) { p.map(&Model::score, std::vector<double>{1.0}); }
