// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"
#include <functional>

int call() {
  std::function<int(int)> f = twice;
  auto r = fibra::submit(f, 3);
  return r.get();
}
