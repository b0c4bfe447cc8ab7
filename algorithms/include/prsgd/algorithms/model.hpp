// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/layers.hpp"
#include "prsgd/algorithms/params.hpp"
#include "prsgd/algorithms/sgd.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Builds a list of layers, tracking the shape between them: `b.conv2d(16, 5, 1, 2).relu().max_pool(2)`.
/// Not thread-safe.
class network_builder {
 public:
  /// Starts from samples of shape `input`.
  explicit network_builder(shape3 input) : shape_(input) {}
  /// Appends a convolution (see make_conv2d).
  network_builder& conv2d(int out_channels, int kernel, int stride = 1, int padding = 0, bool bias = true);
  /// Appends a fully connected layer, flattening first if the current shape is not a vector.
  network_builder& linear(int out_features);
  /// Appends a ReLU.
  network_builder& relu();
  /// Appends a k x k max pool with stride k. Right after `relu()` the two become one layer
  /// (make_relu_max_pool2d: same values and gradients, fewer passes over memory).
  network_builder& max_pool(int kernel);
  /// Appends a global average pool.
  network_builder& global_avg_pool();
  /// Appends a batch norm over the current channels.
  network_builder& batch_norm();
  /// Appends a flatten to a vector.
  network_builder& flatten();
  /// Appends y = main(x) + shortcut(x); each callable appends its path to the builder it is given.
  /// A null `shortcut` is the identity.
  network_builder& residual(const std::function<void(network_builder&)>& main,
                            const std::function<void(network_builder&)>& shortcut = {});
  /// Appends any layer. @pre layer->input_shape() equals `shape()`.
  network_builder& add(std::unique_ptr<layer> l);
  /// Names the last layer appended, e.g. `b.conv2d(16, 5, 1, 2).named("conv1")`: its tensors are exported
  /// as "conv1.weight", "conv1.bias" (see model::tensors). A layer that relu().max_pool() fuses into
  /// keeps its name. @pre a layer was appended.
  network_builder& named(std::string name);
  /// Returns the current per-sample shape.
  [[nodiscard]] shape3 shape() const noexcept { return shape_; }
  /// Moves the layers out; the builder is empty afterwards.
  [[nodiscard]] std::vector<std::unique_ptr<layer>> take() { return std::move(layers_); }

 private:
  shape3 shape_;
  std::vector<std::unique_ptr<layer>> layers_;
  bool last_is_relu_ = false;  // the last layer came from relu()
};

/// Reports a model's quality on a data set.
struct evaluation {
  /// Mean softmax cross-entropy.
  double loss = 0.0;
  /// Fraction of samples whose arg-max equals the label, in [0, 1].
  double accuracy = 0.0;
  /// Number of samples evaluated.
  std::size_t samples = 0;
};

/// Holds a feed-forward classifier: layers whose parameters (and averaged buffers such as batch-norm
/// running statistics) live in one contiguous float buffer, and whose gradients live in another.
/// Not thread-safe: one model is used by one thread at a time (the worker's compute job).
/// Eigen runs single-threaded here, so a fixed seed gives bit-identical results.
class model {
 public:
  /// Builds a model from `layers` (the first takes samples of `input`, the last yields
  /// `num_classes` logits), allocates the flat buffers and initialises them from `seed`.
  /// Returns invalid_argument when the shapes do not chain, when two tensors get the same name, or
  /// when a layer's `tensors()` do not cover exactly its parameters and buffers.
  [[nodiscard]] static expected<std::unique_ptr<model>> make(std::string name, shape3 input, int num_classes,
                                                             std::vector<std::unique_ptr<layer>> layers,
                                                             std::uint64_t seed);
  model(const model&) = delete;
  model& operator=(const model&) = delete;
  ~model();

  /// Returns an independent copy with the same layers and the same parameter values.
  [[nodiscard]] std::unique_ptr<model> clone() const;

  /// Returns every averaged value: trainable parameters, then buffers (running statistics).
  [[nodiscard]] std::span<float> params() noexcept { return flat_.values(); }
  /// Returns every averaged value: trainable parameters, then buffers (running statistics).
  [[nodiscard]] std::span<const float> params() const noexcept { return flat_.values(); }
  /// Returns the trainable prefix of `params()` (what the optimiser updates).
  [[nodiscard]] std::span<float> trainable_params() noexcept { return flat_.trainable(); }
  /// Returns the gradients of the last `forward_backward`, one per trainable parameter.
  [[nodiscard]] std::span<float> grads() noexcept { return flat_.grads(); }
  /// Returns the gradients of the last `forward_backward`, one per trainable parameter.
  [[nodiscard]] std::span<const float> grads() const noexcept { return flat_.grads(); }
  /// Returns the size of `params()`.
  [[nodiscard]] std::size_t num_params() const noexcept { return flat_.size(); }
  /// Returns the size of `trainable_params()` and `grads()`.
  [[nodiscard]] std::size_t num_trainable() const noexcept { return flat_.num_trainable(); }
  /// Copies `values` into `params()` (a restart from the average). Returns invalid_argument on a size mismatch.
  [[nodiscard]] expected<void> set_params(std::span<const float> values);

  /// Computes the mean loss of a batch in training mode and overwrites `grads()` with its gradient.
  /// `inputs` holds labels.size() samples of `input_shape()` one after another (dataset layout).
  /// @pre labels.size() > 0, labels in range.
  float forward_backward(std::span<const float> inputs, std::span<const std::int32_t> labels);
  /// Gathers the samples `batch` of `data` and runs `forward_backward` on them.
  /// @pre data's sample shape equals `input_shape()`; indices < data.size().
  float forward_backward(const dataset& data, std::span<const std::size_t> batch);
  /// Runs `forward_backward` on the batch and then one optimiser step; returns the batch's mean loss.
  float train_step(const dataset& data, std::span<const std::size_t> batch, sgd& optimiser);
  /// Returns the logits (classes x batch) of `count` samples in eval mode; valid until the next call.
  const tensor& predict(std::span<const float> inputs, std::size_t count);
  /// Evaluates the whole data set in eval mode, `batch_size` samples at a time.
  [[nodiscard]] evaluation evaluate(const dataset& data, std::size_t batch_size = 256);

  /// Returns the registry name or the name given to `make`.
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Returns the per-sample input shape.
  [[nodiscard]] shape3 input_shape() const noexcept { return input_; }
  /// Returns the number of output classes.
  [[nodiscard]] int num_classes() const noexcept { return classes_; }
  /// Returns the layers, in order.
  [[nodiscard]] const std::vector<std::unique_ptr<layer>>& layers() const noexcept { return layers_; }
  /// Describes `params()` as named tensors in PyTorch `state_dict()` order and layout, offsets into
  /// `params()`: per layer its parameters, then its buffers (and batch norm's `num_batches_tracked`
  /// counter, which has no storage). A named layer's tensors are "<name>.<tensor>", the i-th unnamed
  /// layer that has tensors (from 0, parameter-free layers skipped) gets "layers.<i>.<tensor>"; a
  /// residual block names its main-path layers directly under it and its shortcut's under "shortcut.".
  /// Computed once when the model is built.
  [[nodiscard]] const std::vector<tensor_info>& tensors() const noexcept { return tensors_; }
  /// Returns a multi-line summary: one line per layer with its parameter count.
  [[nodiscard]] std::string summary() const;

 private:
  model(std::string name, shape3 input, int num_classes, std::vector<std::unique_ptr<layer>> layers);
  void bind();
  void load_batch(const float* const* samples, std::size_t count);
  // Lays out samples index(0), ..., index(count - 1) of `data` (floats or bytes) as the input batch.
  void load_batch(const dataset& data, std::size_t count, const std::function<std::size_t(std::size_t)>& index);
  const tensor& run_forward(bool training);
  void backward();

  std::string name_;
  shape3 input_;
  int classes_;
  std::vector<std::unique_ptr<layer>> layers_;
  std::vector<tensor_info> tensors_;
  flat_parameters flat_;
  std::vector<tensor> acts_;              // acts_[0] is the input batch, acts_[i + 1] the output of layer i
  std::vector<tensor> dacts_;             // dacts_[i] is the loss gradient with respect to acts_[i]
  std::vector<std::size_t> grad_offset_;  // grad_offset_[i]: where layer i's gradients start in grads()
  std::size_t first_trainable_ = 0;       // layers below it have no parameters, so need no backward pass
  std::vector<const float*> gather_;
  std::vector<std::int32_t> labels_;
};

}  // namespace prsgd::algorithms
