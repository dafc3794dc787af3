// expect: fibra: a lambda or function object cannot run on a worker
#include "common.hpp"

void call() {
  fibra::Pool pool(2, {.initializer = {[](int) {}, 3}});
}
