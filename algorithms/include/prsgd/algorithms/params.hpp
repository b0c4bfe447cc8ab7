// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <Eigen/Core>

namespace prsgd::algorithms {

/// Describes the shape of one sample between layers: channels, height, width (a vector is {n, 1, 1}).
struct shape3 {
  /// Channels (or features for a vector).
  int channels = 1;
  /// Height in pixels (1 for a vector).
  int height = 1;
  /// Width in pixels (1 for a vector).
  int width = 1;

  /// Returns channels * height * width.
  [[nodiscard]] std::size_t size() const noexcept {
    return static_cast<std::size_t>(channels) * static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  }
  /// Returns height * width (the number of positions per channel).
  [[nodiscard]] std::size_t plane() const noexcept {
    return static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  }
  /// Compares all three extents.
  friend bool operator==(const shape3&, const shape3&) = default;
};

/// Holds a batch of activations: one row per channel, columns (sample, y, x) in that order.
/// A batch of B samples of shape {C, H, W} is C x (B*H*W); a batch of vectors of n features is n x B.
/// Row-major, so each channel of the whole batch is contiguous (batch norm and pooling run along rows).
using tensor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Owns a model's parameters in one contiguous float buffer, and their gradients in another.
/// Layout: the trainable parameters first, then the buffers that are averaged but not trained
/// (batch-norm running statistics). `grads()` covers the trainable part only.
/// Not thread-safe; owned by one model.
class flat_parameters {
 public:
  /// Creates empty buffers.
  flat_parameters() = default;
  /// Allocates `trainable` + `buffers` zeroed values and `trainable` zeroed gradients.
  flat_parameters(std::size_t trainable, std::size_t buffers)
      : values_(trainable + buffers, 0.0F), grads_(trainable, 0.0F), trainable_(trainable) {}

  /// Returns every value: trainable parameters, then buffers.
  [[nodiscard]] std::span<float> values() noexcept { return values_; }
  /// Returns every value: trainable parameters, then buffers.
  [[nodiscard]] std::span<const float> values() const noexcept { return values_; }
  /// Returns the trainable prefix of `values()` (what an optimiser updates).
  [[nodiscard]] std::span<float> trainable() noexcept { return values().first(trainable_); }
  /// Returns the non-trainable suffix of `values()` (running statistics).
  [[nodiscard]] std::span<float> buffers() noexcept { return values().subspan(trainable_); }
  /// Returns the gradients, one per trainable parameter.
  [[nodiscard]] std::span<float> grads() noexcept { return grads_; }
  /// Returns the gradients, one per trainable parameter.
  [[nodiscard]] std::span<const float> grads() const noexcept { return grads_; }
  /// Returns the number of values (trainable + buffers).
  [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }
  /// Returns the number of trainable parameters.
  [[nodiscard]] std::size_t num_trainable() const noexcept { return trainable_; }
  /// Sets every gradient to zero.
  void zero_grads() noexcept { std::fill(grads_.begin(), grads_.end(), 0.0F); }

 private:
  std::vector<float> values_;
  std::vector<float> grads_;
  std::size_t trainable_ = 0;
};

}  // namespace prsgd::algorithms
