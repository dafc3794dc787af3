// expect: fibra: a remote function cannot take a non-const reference
#include "common.hpp"
int bump(int& x) { return ++x; }
FIBRA_REMOTE(bump);
