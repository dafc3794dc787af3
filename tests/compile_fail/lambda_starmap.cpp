// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

std::vector<int> call(fibra::Pool& pool, std::vector<std::tuple<int, int>>& v) {
  auto r = pool.starmap([](int a, int b) { return a + b; }, v);
  return r;
}
