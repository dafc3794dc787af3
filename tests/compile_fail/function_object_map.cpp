// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

struct Doubler {
  int operator()(int x) const { return 2 * x; }
};
std::vector<int> call(fibra::Pool& pool, std::vector<int>& v) {
  auto r = pool.map(Doubler{}, v);
  return r;
}
