// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

void call(fibra::Pool& pool, std::vector<int>& v) {
  pool.map([](int x) { return 2 * x; }, v);
}
