// expect: fibra: a member function cannot run on a worker
#include "common.hpp"
struct Model {
  int score(int x) { return x; }
};
int call(Model& m) {
  auto f = fibra::submit(&Model::score, m, 1);
  return f.get();
}
