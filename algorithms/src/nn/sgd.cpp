// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sgd.hpp"

#include <Eigen/Core>

#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {

expected<sgd> sgd::make(const sgd_options& options) {
  if (!(options.learning_rate >= 0.0F) || !(options.momentum >= 0.0F) || !(options.weight_decay >= 0.0F) ||
      !(options.dampening >= 0.0F && options.dampening <= 1.0F)) {
    return fail(errc::invalid_argument, "sgd needs lr, momentum, weight_decay >= 0 and dampening in [0, 1]");
  }
  if (options.nesterov && (options.momentum <= 0.0F || options.dampening != 0.0F)) {
    return fail(errc::invalid_argument, "Nesterov momentum requires momentum > 0 and zero dampening");
  }
  return sgd(options);
}

void sgd::reset_momentum() noexcept {
  buffer_.clear();
  started_ = false;
}

void sgd::step(std::span<float> params, std::span<const float> grads) {
  PRSGD_CHECK(params.size() == grads.size()) << "params and grads differ in size";
  const auto n = static_cast<Eigen::Index>(params.size());
  Eigen::Map<Eigen::ArrayXf> p(params.data(), n);
  const Eigen::Map<const Eigen::ArrayXf> g(grads.data(), n);
  const float lr = options_.learning_rate;
  const float wd = options_.weight_decay;
  const float mu = options_.momentum;
  if (mu == 0.0F) {
    if (wd == 0.0F) {
      p -= lr * g;
    } else {
      p -= lr * (g + wd * p);
    }
    return;
  }
  if (!started_) {
    buffer_.resize(params.size());
  }
  PRSGD_CHECK(buffer_.size() == params.size()) << "parameter count changed without reset_momentum()";
  Eigen::Map<Eigen::ArrayXf> b(buffer_.data(), n);
  if (!started_) {
    // PyTorch: the first step's buffer is the (decayed) gradient itself, without dampening.
    b = g + wd * p;
    started_ = true;
  } else {
    b = mu * b + (1.0F - options_.dampening) * (g + wd * p);
  }
  if (options_.nesterov) {
    p -= lr * (g + wd * p + mu * b);
  } else {
    p -= lr * b;
  }
}

}  // namespace prsgd::algorithms
