// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

std::vector<int> call(fibra::Pool& pool, const std::vector<int>& v) {
  std::vector<int> r = pool.map([](int x) { return 2 * x; }, v);
  return r;
}
