// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

void call() {
  fibra::Process p(
      fibra::ProcessOptions{.name = "p"}, [](int x) { return x; }, 3);
  p.start();
}
