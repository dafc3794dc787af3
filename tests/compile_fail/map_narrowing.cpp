// expect: fibra: an input would be narrowed into the function's parameter
#include "common.hpp"
void call(fibra::Pool& p) { p.map(twice, std::vector<double>{1.5, 2.5}); }
