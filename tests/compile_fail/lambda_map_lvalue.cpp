// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

std::vector<int> call(fibra::Pool& pool, std::vector<int>& v) {
  auto r = pool.map([](int x) { return 2 * x; }, v);
  return r;
}
