// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"
int call(fibra::Pool& p) {
  auto r = p.apply([](int x) { return x + 1; }, 2);
  return r;
}
