// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

int call() {
  fibra::Future<int> a = fibra::submit(twice, 3);
  auto f = fibra::submit([](int x) { return x; }, a);
  return f.get();
}
