// expect: fibra: this type cannot be sent to a worker: it has no default constructor
#include "common.hpp"
struct Point {  // trivially copyable, but a value that arrives needs a default-constructed one
  Point(double x_, double y_) : x(x_), y(y_) {}
  double x, y;
};
double norm1(const Point& p) { return p.x + p.y; }
FIBRA_REMOTE(norm1);
