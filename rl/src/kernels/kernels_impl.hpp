// rl/src/kernels/kernels_impl.hpp: the bodies of gemm() and tanh() (kernels.hpp says the
// contracts), included by kernels_generic.cpp and kernels_avx2.cpp, which build them for two SIMD
// widths. GCC/Clang vector extensions keep it one portable source: a vector of `Lanes` values,
// lowered to SSE2 or AVX2 by the flags.
#pragma once

#include <cstddef>
#include <cstring>

namespace fibra::rl::detail::impl {
// Unnamed: each including file keeps its own copy, so no AVX2-built instance can stand in for the
// generic one at link time.
namespace {

// c = bias + A b, where A is a (rows x depth, row-major) or, if TransA, the transpose of a (depth x
// rows, row-major): the same sums in the same order, only a's values are read from other places.
template <class T, int Lanes, bool TransA>
struct Gemm {
  typedef T V __attribute__((vector_size(Lanes * sizeof(T))));
  static constexpr int tile_cols = 2 * Lanes, tile_rows = 4;

  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, V v) { std::memcpy(p, &v, sizeof v); }
  static V start(const T* bias, int j) { return bias ? load(bias + j) : V{}; }
  // A[r][k]
  static T at(const T* a, int rows, int depth, int r, int k) {
    return TransA ? a[static_cast<long>(k) * rows + r] : a[static_cast<long>(r) * depth + k];
  }

  // c[r0 .. r0+4)[j .. j+2*Lanes): four rows share each load of b.
  static void tile4(int rows, int cols, int depth, const T* a, const T* b, const T* bias, T* c, int r0, int j) {
    V c00 = start(bias, j), c01 = start(bias, j + Lanes);
    V c10 = c00, c11 = c01, c20 = c00, c21 = c01, c30 = c00, c31 = c01;
    for (int k = 0; k < depth; ++k) {
      const V b0 = load(b + static_cast<long>(k) * cols + j), b1 = load(b + static_cast<long>(k) * cols + j + Lanes);
      const T a0 = at(a, rows, depth, r0, k), a1 = at(a, rows, depth, r0 + 1, k);
      const T a2 = at(a, rows, depth, r0 + 2, k), a3 = at(a, rows, depth, r0 + 3, k);
      c00 += a0 * b0, c01 += a0 * b1;
      c10 += a1 * b0, c11 += a1 * b1;
      c20 += a2 * b0, c21 += a2 * b1;
      c30 += a3 * b0, c31 += a3 * b1;
    }
    T* row = c + static_cast<long>(r0) * cols + j;
    store(row, c00), store(row + Lanes, c01), row += cols;
    store(row, c10), store(row + Lanes, c11), row += cols;
    store(row, c20), store(row + Lanes, c21), row += cols;
    store(row, c30), store(row + Lanes, c31);
  }

  static void tile1(int rows, int cols, int depth, const T* a, const T* b, const T* bias, T* c, int r, int j) {
    V c0 = start(bias, j), c1 = start(bias, j + Lanes);
    for (int k = 0; k < depth; ++k) {
      const T ar = at(a, rows, depth, r, k);
      c0 += ar * load(b + static_cast<long>(k) * cols + j);
      c1 += ar * load(b + static_cast<long>(k) * cols + j + Lanes);
    }
    store(c + static_cast<long>(r) * cols + j, c0), store(c + static_cast<long>(r) * cols + j + Lanes, c1);
  }

  static void run(int rows, int cols, int depth, const T* a, const T* b, const T* bias, T* c) {
    int j = 0;
    for (; j + tile_cols <= cols; j += tile_cols) {
      int r = 0;
      for (; r + tile_rows <= rows; r += tile_rows) tile4(rows, cols, depth, a, b, bias, c, r, j);
      for (; r < rows; ++r) tile1(rows, cols, depth, a, b, bias, c, r, j);
    }
    for (; j + Lanes <= cols; j += Lanes)
      for (int r = 0; r < rows; ++r) {
        V acc = start(bias, j);
        for (int k = 0; k < depth; ++k) acc += at(a, rows, depth, r, k) * load(b + static_cast<long>(k) * cols + j);
        store(c + static_cast<long>(r) * cols + j, acc);
      }
    // The columns left over: the same sums, a value at a time, four rows at once for their latency.
    for (; j < cols; ++j) {
      int r = 0;
      for (; r + 4 <= rows; r += 4) {
        T s0 = bias ? bias[j] : T(0), s1 = s0, s2 = s0, s3 = s0;
        for (int k = 0; k < depth; ++k) {
          const T bk = b[static_cast<long>(k) * cols + j];
          s0 += at(a, rows, depth, r, k) * bk, s1 += at(a, rows, depth, r + 1, k) * bk;
          s2 += at(a, rows, depth, r + 2, k) * bk, s3 += at(a, rows, depth, r + 3, k) * bk;
        }
        c[static_cast<long>(r) * cols + j] = s0, c[static_cast<long>(r + 1) * cols + j] = s1;
        c[static_cast<long>(r + 2) * cols + j] = s2, c[static_cast<long>(r + 3) * cols + j] = s3;
      }
      for (; r < rows; ++r) {
        T acc = bias ? bias[j] : T(0);
        for (int k = 0; k < depth; ++k) acc += at(a, rows, depth, r, k) * b[static_cast<long>(k) * cols + j];
        c[static_cast<long>(r) * cols + j] = acc;
      }
    }
  }
};

// Cephes' tanhf and expf (Moshier), lane by lane; the last partial vector is padded, so every value
// goes through the same operations.
template <int Lanes>
struct Tanh {
  typedef float V __attribute__((vector_size(Lanes * sizeof(float))));
  typedef int I __attribute__((vector_size(Lanes * sizeof(int))));

  static V splat(float c) { return V{} + c; }
  template <class To, class From>
  static To convert(From v) {
    return __builtin_convertvector(v, To);
  }

  // exp(v) for v in [0, 88]: v = n ln 2 + r, |r| <= ln 2 / 2, exp(r) by a polynomial, times 2^n.
  static V exp_positive(V v) {
    const V t = v * 1.44269504088896341f + 0.5f;
    const I n = convert<I>(t);  // floor: t is not negative
    const V fn = convert<V>(n);
    V r = v - fn * 0.693359375f;
    r = r - fn * -2.12194440e-4f;
    const V z = r * r;
    const V y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
                  1.6666665459e-1f) *
                     r +
                 5.0000001201e-1f) *
                    z +
                r + 1.0f;
    return y * reinterpret_cast<V>((n + 127) << 23);
  }

  static V tanh(V x) {
    const V a = x < 0.0f ? -x : x;
    const V z = x * x;
    const V small =
        ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
         3.33332819422e-1f) *
            z * x +
        x;
    const V capped = a < 9.5f ? a : splat(9.5f);  // tanh is 1 in float from 9.01 on
    const V e = exp_positive(capped + capped);
    const V large = 1.0f - 2.0f / (e + 1.0f);
    return a > 0.625f ? (x < 0.0f ? -large : large) : small;
  }

  static void run(float* x, std::size_t n) {
    std::size_t i = 0;
    for (; i + Lanes <= n; i += Lanes) {
      V v;
      std::memcpy(&v, x + i, sizeof v);
      v = tanh(v);
      std::memcpy(x + i, &v, sizeof v);
    }
    if (i < n) {
      V v = V{};
      std::memcpy(&v, x + i, (n - i) * sizeof(float));
      v = tanh(v);
      std::memcpy(x + i, &v, (n - i) * sizeof(float));
    }
  }
};

}  // namespace
}  // namespace fibra::rl::detail::impl
