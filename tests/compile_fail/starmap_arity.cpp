// expect: fibra: starmap: each item has a different number of elements than the function has parameters
#include "common.hpp"
void call(fibra::Pool& p) { p.starmap(add3, std::vector<std::tuple<int, int>>{{1, 2}}); }
