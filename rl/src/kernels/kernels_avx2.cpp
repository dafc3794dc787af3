// The kernels with 32-byte vectors; this file alone is built with -mavx2 (CMake adds it on x86-64
// only, with FIBRA_RL_HAVE_AVX2), and kernels.cpp calls it only where the CPU has AVX2.
#include "kernels/kernels.hpp"
#include "kernels/kernels_impl.hpp"

namespace fibra::rl::detail {

bool gemm_avx2(int rows, int cols, int depth, const float* a, const float* b, const float* bias, float* c,
               bool trans_a) {
  if (trans_a)
    impl::Gemm<float, 8, true>::run(rows, cols, depth, a, b, bias, c);
  else
    impl::Gemm<float, 8, false>::run(rows, cols, depth, a, b, bias, c);
  return true;
}
bool gemm_avx2(int rows, int cols, int depth, const double* a, const double* b, const double* bias, double* c,
               bool trans_a) {
  if (trans_a)
    impl::Gemm<double, 4, true>::run(rows, cols, depth, a, b, bias, c);
  else
    impl::Gemm<double, 4, false>::run(rows, cols, depth, a, b, bias, c);
  return true;
}
bool tanh_avx2(float* x, std::size_t n) {
  impl::Tanh<8>::run(x, n);
  return true;
}

}  // namespace fibra::rl::detail
