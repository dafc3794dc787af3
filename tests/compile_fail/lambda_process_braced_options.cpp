// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

void call(fibra::Pool& pool) {
  fibra::Process p(
      {.pool = &pool}, [](int x) { return x; }, 3);
  p.start();
}
