// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

int call() {
  auto f = fibra::submit([](int x) { return x; }, 3);
  return f.get();
}
