// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

int call(fibra::Pool& pool, std::vector<int>& v) {
  int sum = 0;
  for (auto&& [i, x] : pool.imap_unordered([](int x) { return 2 * x; }, v)) sum += x;
  return sum;
}
