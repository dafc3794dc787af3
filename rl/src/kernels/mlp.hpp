// rl/src/kernels/mlp.hpp: a multilayer perceptron's forward and backward pass over the kernels,
// for Policy (forward) and the learner module's autograd function (both). One code path for both
// sides, so the learner's float forward pass is the workers' to the bit.
#pragma once

#include <span>

namespace fibra::rl::detail {

/// @brief A linear layer y = x W^T + b, borrowed from its owner's arrays.
template <class T>
struct Dense {
  int in = 0, out = 0;
  const T* weight = nullptr;    ///< out x in, row-major (the flat layout's); needed by backward only
  const T* weight_t = nullptr;  ///< in x out, its transpose; needed by forward
  const T* bias = nullptr;      ///< out
};

/// @brief The forward pass of n rows: outputs[l] (n x layers[l].out, the caller's) gets layer l's
/// output, after the activation (tanh, or relu if `relu`) for every layer but the last.
template <class T>
void mlp_forward(std::span<const Dense<T>> layers, bool relu, int n, const T* x, std::span<T* const> outputs);

/// @brief The backward pass: from the forward's input x and outputs and the gradient of the loss
/// with respect to the last output (n x out), the gradients of every layer's weight (out x in) and
/// bias into grad_weight[l] and grad_bias[l] (written, not added).
template <class T>
void mlp_backward(std::span<const Dense<T>> layers, bool relu, int n, const T* x, std::span<const T* const> outputs,
                  const T* d_last, std::span<T* const> grad_weight, std::span<T* const> grad_bias);

}  // namespace fibra::rl::detail
