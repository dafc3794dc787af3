// expect: fibra: a remote function cannot take a pointer
#include "common.hpp"
double first(const double* v) { return v[0]; }
FIBRA_REMOTE(first);
