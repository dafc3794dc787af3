// rl/src/kernels/kernels.hpp: the arithmetic of fibra::rl's networks, shared by the workers'
// inference (policy.cpp) and the learner module's forward and backward (rl/torch/): a matrix
// product and tanh, each in a generic build and an AVX2 one picked at run time.
//
// Why our own: Debian's libtorch links the reference BLAS (netlib), 1.5 GFLOP/s for a 256 x 64 x 64
// product against 15 here with SSE2 and 50 with AVX2; and torch's tanh (Sleef) differs from
// glibc's, so workers and learner would disagree in the last bits. Both results are fixed functions
// of their inputs:
// - gemm: every c[r][j] is bias[j] + a[r][0] * b[0][j] + a[r][1] * b[1][j] + ..., summed in
//   ascending k, each product rounded before it is added (built with -ffp-contract=off: no fused
//   multiply-add);
// - tanh: Cephes' tanhf (a polynomial below 0.625, 1 - 2 / (exp(2x) + 1) above, with Cephes'
//   expf), the same operations in every lane, no libm.
// So a row's result depends neither on the other rows of the batch nor on the SIMD width: the
// generic and the AVX2 versions give the same bits, a fragment is the same whether its environment
// copies are sampled in one worker or in several, and the learner's float forward pass is the
// workers' to the bit.
#pragma once

#include <cstddef>

namespace fibra::rl::detail {

/// @brief c (rows x cols, row-major) = bias (one per column, broadcast over rows; none if null) +
/// A (rows x depth) * b (depth x cols), all row-major and contiguous, where A is a (rows x depth),
/// or with trans_a the transpose of a (depth x rows): the same sums either way. c may not alias a
/// or b.
void gemm(int rows, int cols, int depth, const float* a, const float* b, const float* bias, float* c,
          bool trans_a = false);
void gemm(int rows, int cols, int depth, const double* a, const double* b, const double* bias, double* c,
          bool trans_a = false);
/// @brief tanh of each of the n values, in place (float: Cephes' tanhf, about 1e-7 from the exact
/// value; double: std::tanh).
void tanh(float* x, std::size_t n);
void tanh(double* x, std::size_t n);

/// @brief The versions the functions above pick from (for the tests that they agree): "avx2" where
/// the CPU has it and the build could target it, else "generic".
const char* simd_isa();
void gemm_generic(int rows, int cols, int depth, const float* a, const float* b, const float* bias, float* c,
                  bool trans_a = false);
void gemm_generic(int rows, int cols, int depth, const double* a, const double* b, const double* bias, double* c,
                  bool trans_a = false);
void tanh_generic(float* x, std::size_t n);
/// @brief The AVX2 versions: call them only where simd_isa() says "avx2"; in a build without them,
/// they compute nothing and return false.
bool gemm_avx2(int rows, int cols, int depth, const float* a, const float* b, const float* bias, float* c,
               bool trans_a = false);
bool gemm_avx2(int rows, int cols, int depth, const double* a, const double* b, const double* bias, double* c,
               bool trans_a = false);
bool tanh_avx2(float* x, std::size_t n);

}  // namespace fibra::rl::detail
