// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "prsgd/algorithms/params.hpp"

namespace prsgd::algorithms {

/// Says where a named tensor's values live.
enum class tensor_role : std::uint8_t {
  /// Trainable: in the trainable prefix of the flat buffer (it has a gradient).
  parameter,
  /// Averaged but not trained (batch-norm running statistics): in the buffer suffix.
  buffer,
  /// A 64-bit integer scalar PyTorch keeps but prsgd does not (batch norm's `num_batches_tracked`):
  /// no storage in the flat buffer; written as I64 on export, checked and ignored on import.
  counter,
};

/// Describes one named tensor of a layer or a model, in PyTorch's layout (Linear weight [out, in],
/// Conv2d weight [out, in, kh, kw]); its values are `size()` consecutive floats of the flat buffer.
struct tensor_info {
  /// The PyTorch `state_dict()` name: local to the layer ("weight", "bn1.bias") in `layer::tensors()`,
  /// the full name ("layer1.0.bn1.bias") in `model::tensors()`.
  std::string name;
  /// The tensor's shape (empty for a scalar).
  std::vector<std::int64_t> shape;
  /// Where the values live.
  tensor_role role = tensor_role::parameter;
  /// Index of the first value: within the layer's parameters or buffers in `layer::tensors()`, within
  /// the whole flat buffer (`model::params()`) in `model::tensors()`. Unused for a counter.
  std::size_t offset = 0;
  /// Returns the number of values, the product of `shape` (1 for a scalar).
  [[nodiscard]] std::size_t size() const noexcept {
    std::size_t n = 1;
    for (const auto d : shape) {
      n *= static_cast<std::size_t>(d);
    }
    return n;
  }
};

/// Computes one stage of a network on a batch: forward, backward, and its slice of the flat buffers.
/// A layer is built for a fixed per-sample input shape; the batch size may change between calls.
/// Parameters are not owned: `bind()` points the layer at its slice of a model's flat buffers.
/// Not thread-safe; a layer belongs to one model.
class layer {
 public:
  layer() = default;
  layer(const layer&) = default;
  layer& operator=(const layer&) = delete;
  virtual ~layer() = default;

  /// Returns a short description such as "conv2d(1->16, k5, s1, p2)".
  [[nodiscard]] virtual std::string describe() const = 0;
  /// Returns the per-sample input shape the layer was built for.
  [[nodiscard]] virtual shape3 input_shape() const = 0;
  /// Returns the per-sample output shape.
  [[nodiscard]] virtual shape3 output_shape() const = 0;
  /// Returns the number of trainable parameters (each has a gradient).
  [[nodiscard]] virtual std::size_t num_params() const { return 0; }
  /// Returns the number of averaged but untrained values (e.g. running statistics).
  [[nodiscard]] virtual std::size_t num_buffers() const { return 0; }
  /// Points the layer at its `num_params()` parameters and gradients and `num_buffers()` buffers.
  /// @pre each pointer has room for the counts above and outlives the layer's use.
  virtual void bind(float* params, float* grads, float* buffers) {
    (void)params;
    (void)grads;
    (void)buffers;
  }
  /// Initialises the parameters and buffers like PyTorch's defaults, drawing from `rng`.
  virtual void reset_parameters(std::mt19937_64& rng) { (void)rng; }
  /// Computes `y` from the batch `x` (see `tensor` for the layout). `training` selects batch statistics.
  virtual void forward(const tensor& x, tensor& y, bool training) = 0;
  /// Adds this batch's parameter gradients to the bound gradients and, if `dx` is not null, writes
  /// the gradient with respect to `x`. @pre `x`, `y` are the last forward's input and output.
  virtual void backward(const tensor& x, const tensor& y, const tensor& dy, tensor* dx) = 0;
  /// Like `backward`, but overwrites the bound gradients with this batch's instead of adding to them,
  /// which spares the caller zeroing them first (the model's training step uses it). Returns false,
  /// having done nothing, if the layer does not implement it; the caller then zeroes and calls `backward`.
  virtual bool backward_overwrite(const tensor& x, const tensor& y, const tensor& dy, tensor* dx) {
    (void)x;
    (void)y;
    (void)dy;
    (void)dx;
    return false;
  }
  /// Returns a deep copy, not yet bound to any buffer. Callers that keep names copy `name()` themselves.
  [[nodiscard]] virtual std::unique_ptr<layer> clone() const = 0;
  /// Describes the layer's tensors with local names, in PyTorch `state_dict()` order: its parameters,
  /// then its buffers. The default, for layers that do not override it, is one flat "params" tensor and
  /// one flat "buffers" tensor (each only when non-empty).
  [[nodiscard]] virtual std::vector<tensor_info> tensors() const;

  /// Returns the name the model builder gave the layer ("" when unnamed), e.g. "conv1" or "layer1.0".
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Sets the layer's name: the prefix of its tensors' names in the model.
  void set_name(std::string name) { name_ = std::move(name); }

 private:
  std::string name_;
};

/// Describes the tensors of `layers` run one after another (their parameters and buffers consecutive, as a
/// model or a residual path binds them), offsets relative to the first layer's parameters and buffers.
/// A named layer's tensors are "<prefix><name>.<tensor>"; the j-th unnamed layer that has tensors (counting
/// from 0, layers without tensors skipped) gets "<prefix><unnamed>.<j>.<tensor>".
[[nodiscard]] std::vector<tensor_info> describe_tensors(const std::vector<std::unique_ptr<layer>>& layers,
                                                        const std::string& prefix, const std::string& unnamed);

/// Returns a fully connected layer in -> out (PyTorch nn.Linear layout: weight out x in, row-major, then bias).
/// @pre `in` is a vector shape {n, 1, 1}.
[[nodiscard]] std::unique_ptr<layer> make_linear(shape3 in, int out_features);
/// Returns an element-wise max(x, 0).
[[nodiscard]] std::unique_ptr<layer> make_relu(shape3 in);
/// Returns a 2-D convolution via im2col + GEMM (weight out x in x k x k as PyTorch, then bias if `bias`).
[[nodiscard]] std::unique_ptr<layer> make_conv2d(shape3 in, int out_channels, int kernel, int stride, int padding,
                                                 bool bias = true);
/// Returns a k x k max pooling with stride k (floors odd sizes like PyTorch).
[[nodiscard]] std::unique_ptr<layer> make_max_pool2d(shape3 in, int kernel);
/// Returns max(max_pool2d(x), 0), i.e. a ReLU followed by a k x k max pool in one layer (identical values
/// and gradients, two passes over the full-resolution activation fewer). `network_builder` uses it for
/// `relu().max_pool(k)`.
[[nodiscard]] std::unique_ptr<layer> make_relu_max_pool2d(shape3 in, int kernel);
/// Returns a global average pool {C, H, W} -> {C, 1, 1}.
[[nodiscard]] std::unique_ptr<layer> make_global_avg_pool(shape3 in);
/// Returns a batch norm over channels (eps 1e-5, momentum 0.1; running mean and variance are buffers).
[[nodiscard]] std::unique_ptr<layer> make_batch_norm(shape3 in);
/// Returns a reshape {C, H, W} -> {C*H*W, 1, 1} in PyTorch's flatten order.
[[nodiscard]] std::unique_ptr<layer> make_flatten(shape3 in);
/// Returns y = main(x) + shortcut(x); an empty `shortcut` is the identity.
/// @pre both paths map the same input shape to the same output shape.
[[nodiscard]] std::unique_ptr<layer> make_residual(std::vector<std::unique_ptr<layer>> main,
                                                   std::vector<std::unique_ptr<layer>> shortcut);

/// Computes the mean softmax cross-entropy of `logits` (classes x batch) against `labels`,
/// and, if `dlogits` is not null, its gradient with respect to the logits.
/// @pre labels.size() == logits.cols() and every label is in [0, logits.rows()).
[[nodiscard]] float softmax_cross_entropy(const tensor& logits, std::span<const std::int32_t> labels, tensor* dlogits);
/// Returns how many columns of `logits` have their arg-max at the label.
[[nodiscard]] std::size_t count_correct(const tensor& logits, std::span<const std::int32_t> labels);

}  // namespace prsgd::algorithms
