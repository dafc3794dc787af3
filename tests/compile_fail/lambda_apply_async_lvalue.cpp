// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

int call(fibra::Pool& pool, int x) {
  auto f = pool.apply_async([](int y) { return y; }, x);
  return f.get();
}
