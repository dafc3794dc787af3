// mlp_forward and mlp_backward over gemm() and tanh().
#include "kernels/mlp.hpp"

#include "kernels/kernels.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fibra::rl::detail {

template <class T>
void mlp_forward(std::span<const Dense<T>> layers, bool relu, int n, const T* x, std::span<T* const> outputs) {
  const T* in = x;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Dense<T>& layer = layers[l];
    T* y = outputs[l];
    gemm(n, layer.out, layer.in, in, layer.weight_t, layer.bias, y);
    const std::size_t size = static_cast<std::size_t>(n) * static_cast<std::size_t>(layer.out);
    if (l + 1 < layers.size()) {
      if (relu)
        std::transform(y, y + size, y, [](T v) { return std::max(v, T(0)); });
      else
        detail::tanh(y, size);
    }
    in = y;
  }
}

template <class T>
void mlp_backward(std::span<const Dense<T>> layers, bool relu, int n, const T* x, std::span<const T* const> outputs,
                  const T* d_last, std::span<T* const> grad_weight, std::span<T* const> grad_bias) {
  const auto rows = static_cast<std::size_t>(n);
  std::vector<T> dz(d_last, d_last + rows * static_cast<std::size_t>(layers.back().out)), da, dw_t;
  const std::vector<T> ones(rows, T(1));
  for (std::size_t l = layers.size(); l-- > 0;) {
    const Dense<T>& layer = layers[l];
    const T* input = l == 0 ? x : outputs[l - 1];
    // dW = dZ^T (out x n) * input (n x in), with dZ read transposed in place; or, where the layer
    // has fewer inputs than outputs, dW^T = input^T dZ, transposed after (gemm's slow path is for
    // narrow results); db = 1^T dZ, the column sums. All sum over the batch's rows in order, so the
    // orientation changes no bit.
    if (layer.in < layer.out) {
      dw_t.resize(static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out));
      gemm(layer.in, layer.out, n, input, dz.data(), static_cast<const T*>(nullptr), dw_t.data(), /*trans_a=*/true);
      for (int i = 0; i < layer.in; ++i)
        for (int o = 0; o < layer.out; ++o)
          grad_weight[l][static_cast<std::size_t>(o) * layer.in + i] =
              dw_t[static_cast<std::size_t>(i) * layer.out + o];
    } else {
      gemm(layer.out, layer.in, n, dz.data(), input, static_cast<const T*>(nullptr), grad_weight[l], /*trans_a=*/true);
    }
    gemm(1, layer.out, n, ones.data(), dz.data(), static_cast<const T*>(nullptr), grad_bias[l]);
    if (l == 0) break;  // the input's gradient is not wanted
    // dA = dZ (n x out) * W (out x in), then through the activation of layer l - 1's output.
    const std::size_t size = rows * static_cast<std::size_t>(layer.in);
    da.resize(size);
    gemm(n, layer.in, layer.out, dz.data(), layer.weight, static_cast<const T*>(nullptr), da.data());
    const T* y = outputs[l - 1];
    if (relu)
      for (std::size_t k = 0; k < size; ++k) da[k] = y[k] > 0 ? da[k] : T(0);
    else
      for (std::size_t k = 0; k < size; ++k) da[k] *= T(1) - y[k] * y[k];
    dz.swap(da);
  }
}

template void mlp_forward<float>(std::span<const Dense<float>>, bool, int, const float*, std::span<float* const>);
template void mlp_forward<double>(std::span<const Dense<double>>, bool, int, const double*, std::span<double* const>);
template void mlp_backward<float>(std::span<const Dense<float>>, bool, int, const float*, std::span<const float* const>,
                                  const float*, std::span<float* const>, std::span<float* const>);
template void mlp_backward<double>(std::span<const Dense<double>>, bool, int, const double*,
                                   std::span<const double* const>, const double*, std::span<double* const>,
                                   std::span<double* const>);

}  // namespace fibra::rl::detail
