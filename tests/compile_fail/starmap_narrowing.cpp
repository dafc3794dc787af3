// expect: fibra: an input would be narrowed into the function's parameter
#include "common.hpp"
void call(fibra::Pool& p) { p.starmap(add2, std::vector<std::pair<int, double>>{{1, 2.5}}); }
