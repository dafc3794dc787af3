// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"
void call(fibra::Pool& p) {
  p.apply_async([](int x) { return x + 1; }, 1);
}
