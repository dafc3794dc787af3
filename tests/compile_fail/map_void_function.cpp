// expect: fibra: map, starmap and imap need a function that returns a value
#include "common.hpp"
void log_item(int) {}
void call(fibra::Pool& p) { p.map(log_item, std::vector<int>{1, 2}); }
