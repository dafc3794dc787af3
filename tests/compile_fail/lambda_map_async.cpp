// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

void call(fibra::Pool& p) {
  auto r = p.map_async([](int x) { return x + 1; }, std::vector<int>{1, 2}, {}, [](const std::vector<int>&) {});
}
