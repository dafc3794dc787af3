// expect: fibra: apply_async got a different number of arguments than the function takes
#include "common.hpp"
void call(fibra::Pool& p) { p.apply_async(add3, 1, 2); }
