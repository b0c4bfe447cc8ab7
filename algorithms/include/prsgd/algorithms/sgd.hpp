// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <span>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Configures `sgd`; the defaults are the reference workloads' (lr 0.05, momentum 0.9).
struct sgd_options {
  /// Step size γ.
  float learning_rate = 0.05F;
  /// Momentum μ (0 disables the momentum buffer).
  float momentum = 0.9F;
  /// Dampening of the gradient added to the momentum buffer (PyTorch's `dampening`).
  float dampening = 0.0F;
  /// L2 penalty added to the gradient as `weight_decay * param`.
  float weight_decay = 0.0F;
  /// Uses Nesterov momentum (requires momentum > 0 and dampening == 0).
  bool nesterov = false;
};

/// Updates a flat parameter buffer from a flat gradient buffer with PyTorch's torch.optim.SGD rule:
/// d = g + wd·p; b = d on the first step, else μ·b + (1 − dampening)·d; p −= lr·(nesterov ? d + μ·b : b).
/// Not thread-safe; owned by one worker next to its model.
class sgd {
 public:
  /// Checks `options` and returns an optimiser, or invalid_argument.
  [[nodiscard]] static expected<sgd> make(const sgd_options& options);

  /// Applies one step to `params` using `grads`; the momentum buffer is sized on the first call.
  /// @pre params.size() == grads.size(), and equal to the size of earlier calls since the last reset.
  void step(std::span<float> params, std::span<const float> grads);
  /// Drops the momentum buffer, so the next step starts it afresh (a restart's "reset" choice).
  void reset_momentum() noexcept;
  /// Returns the momentum buffer (empty before the first step or after a reset).
  [[nodiscard]] std::span<const float> momentum_buffer() const noexcept { return buffer_; }
  /// Returns the current step size.
  [[nodiscard]] float learning_rate() const noexcept { return options_.learning_rate; }
  /// Sets the step size, e.g. from a schedule at a restart.
  void set_learning_rate(float lr) noexcept { options_.learning_rate = lr; }
  /// Returns the options in use.
  [[nodiscard]] const sgd_options& options() const noexcept { return options_; }

 private:
  explicit sgd(const sgd_options& options) : options_(options) {}
  sgd_options options_;
  std::vector<float> buffer_;
  bool started_ = false;
};

}  // namespace prsgd::algorithms
