// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

int call(fibra::Future<int> a) {
  auto f = fibra::submit([](auto x) { return x + 1; }, a);
  return f.get();
}
