// The kernels' entry points: the AVX2 versions where this build has them and the CPU runs them,
// else the generic ones. Both give the same bits (kernels.hpp), so the choice changes speed only.
#include "kernels/kernels.hpp"

#include <cmath>

namespace fibra::rl::detail {
namespace {

bool use_avx2() {
#if defined(FIBRA_RL_HAVE_AVX2) && (defined(__x86_64__) || defined(__i386__))
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
#else
  return false;
#endif
}

}  // namespace

#if !defined(FIBRA_RL_HAVE_AVX2)
bool gemm_avx2(int, int, int, const float*, const float*, const float*, float*, bool) { return false; }
bool gemm_avx2(int, int, int, const double*, const double*, const double*, double*, bool) { return false; }
bool tanh_avx2(float*, std::size_t) { return false; }
#endif

const char* simd_isa() { return use_avx2() ? "avx2" : "generic"; }

void gemm(int rows, int cols, int depth, const float* a, const float* b, const float* bias, float* c, bool trans_a) {
  if (use_avx2())
    gemm_avx2(rows, cols, depth, a, b, bias, c, trans_a);
  else
    gemm_generic(rows, cols, depth, a, b, bias, c, trans_a);
}
void gemm(int rows, int cols, int depth, const double* a, const double* b, const double* bias, double* c,
          bool trans_a) {
  if (use_avx2())
    gemm_avx2(rows, cols, depth, a, b, bias, c, trans_a);
  else
    gemm_generic(rows, cols, depth, a, b, bias, c, trans_a);
}
void tanh(float* x, std::size_t n) {
  if (use_avx2())
    tanh_avx2(x, n);
  else
    tanh_generic(x, n);
}
void tanh(double* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

}  // namespace fibra::rl::detail
