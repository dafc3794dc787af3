// The kernels for any CPU: 16-byte vectors (SSE2 on x86-64, NEON on AArch64).
#include "kernels/kernels.hpp"
#include "kernels/kernels_impl.hpp"

namespace fibra::rl::detail {

void gemm_generic(int rows, int cols, int depth, const float* a, const float* b, const float* bias, float* c,
                  bool trans_a) {
  if (trans_a)
    impl::Gemm<float, 4, true>::run(rows, cols, depth, a, b, bias, c);
  else
    impl::Gemm<float, 4, false>::run(rows, cols, depth, a, b, bias, c);
}
void gemm_generic(int rows, int cols, int depth, const double* a, const double* b, const double* bias, double* c,
                  bool trans_a) {
  if (trans_a)
    impl::Gemm<double, 2, true>::run(rows, cols, depth, a, b, bias, c);
  else
    impl::Gemm<double, 2, false>::run(rows, cols, depth, a, b, bias, c);
}
void tanh_generic(float* x, std::size_t n) { impl::Tanh<4>::run(x, n); }

}  // namespace fibra::rl::detail
