// expect: fibra: map, imap and imap_unordered call the function with one item, so it must take one parameter
#include "common.hpp"
void call(fibra::Pool& p) { p.map(add2, std::vector<int>{1, 2}); }
