// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"
#include <functional>

int call(fibra::Pool& pool) {
  std::function<int(int)> f = twice;
  auto r = pool.submit(f, 3);
  return r.get();
}
