// Shared by the compile-fail cases: each case is one small program that must NOT compile, and the
// first error the compiler prints must be fibra's own sentence (its first line says which).
#pragma once
#include <fibra/fibra.hpp>

#include <string>
#include <tuple>
#include <vector>

inline int add2(int a, int b) { return a + b; }
inline int add3(int a, int b, int c) { return a + b + c; }
inline int twice(int x) { return 2 * x; }
FIBRA_REMOTE(add2);
FIBRA_REMOTE(add3);
FIBRA_REMOTE(twice);
