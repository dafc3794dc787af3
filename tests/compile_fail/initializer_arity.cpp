// expect: fibra: PoolOptions::initializer got a different number of arguments than the function takes
#include "common.hpp"

void call() { fibra::Pool pool(2, {.initializer = {add2, 1}}); }
