// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sgd.hpp"

#include <cstddef>

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

namespace {

// One pass over the flat buffers: every element's gradient, momentum and parameter are read once and
// written once (the Eigen version made two passes and always read p for the weight decay). The
// special cases skip only operations that are exact no-ops (adding 0·p, multiplying by 1 − 0), so a
// step gives the same bits as the general formula. __restrict lets the compiler vectorise the loops.
template <bool WeightDecay, bool Dampening, bool Nesterov>
void momentum_step(float* __restrict p, const float* __restrict g, float* __restrict b, std::size_t n, float lr,
                   float wd, float mu, float damp) {
  for (std::size_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (WeightDecay) {
      d = d + wd * p[i];
    }
    float bi = mu * b[i];
    if constexpr (Dampening) {
      bi = bi + (1.0F - damp) * d;
    } else {
      bi = bi + d;
    }
    b[i] = bi;
    if constexpr (Nesterov) {
      p[i] -= lr * (d + mu * bi);
    } else {
      p[i] -= lr * bi;
    }
  }
}

template <bool WeightDecay, bool Nesterov>
void first_momentum_step(float* __restrict p, const float* __restrict g, float* __restrict b, std::size_t n, float lr,
                         float wd, float mu) {
  for (std::size_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (WeightDecay) {
      d = d + wd * p[i];
    }
    b[i] = d;
    if constexpr (Nesterov) {
      p[i] -= lr * (d + mu * d);
    } else {
      p[i] -= lr * d;
    }
  }
}

template <bool WeightDecay>
void plain_step(float* __restrict p, const float* __restrict g, std::size_t n, float lr, float wd) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (WeightDecay) {
      p[i] -= lr * (g[i] + wd * p[i]);
    } else {
      p[i] -= lr * g[i];
    }
  }
}

}  // namespace

void sgd::step(std::span<float> params, std::span<const float> grads) {
  PRSGD_CHECK(params.size() == grads.size()) << "params and grads differ in size";
  const std::size_t n = params.size();
  float* p = params.data();
  const float* g = grads.data();
  const float lr = options_.learning_rate;
  const float wd = options_.weight_decay;
  const float mu = options_.momentum;
  const float damp = options_.dampening;
  const bool decay = wd != 0.0F;
  if (mu == 0.0F) {
    decay ? plain_step<true>(p, g, n, lr, wd) : plain_step<false>(p, g, n, lr, wd);
    return;
  }
  if (!started_) {
    buffer_.resize(n);
  }
  PRSGD_CHECK(buffer_.size() == n) << "parameter count changed without reset_momentum()";
  float* b = buffer_.data();
  const bool nesterov = options_.nesterov;
  if (!started_) {
    // PyTorch: the first step's buffer is the (decayed) gradient itself, without dampening.
    if (decay) {
      nesterov ? first_momentum_step<true, true>(p, g, b, n, lr, wd, mu)
               : first_momentum_step<true, false>(p, g, b, n, lr, wd, mu);
    } else {
      nesterov ? first_momentum_step<false, true>(p, g, b, n, lr, wd, mu)
               : first_momentum_step<false, false>(p, g, b, n, lr, wd, mu);
    }
    started_ = true;
    return;
  }
  const bool damped = damp != 0.0F;
  if (decay) {
    if (damped) {
      nesterov ? momentum_step<true, true, true>(p, g, b, n, lr, wd, mu, damp)
               : momentum_step<true, true, false>(p, g, b, n, lr, wd, mu, damp);
    } else {
      nesterov ? momentum_step<true, false, true>(p, g, b, n, lr, wd, mu, damp)
               : momentum_step<true, false, false>(p, g, b, n, lr, wd, mu, damp);
    }
  } else if (damped) {
    nesterov ? momentum_step<false, true, true>(p, g, b, n, lr, wd, mu, damp)
             : momentum_step<false, true, false>(p, g, b, n, lr, wd, mu, damp);
  } else {
    nesterov ? momentum_step<false, false, true>(p, g, b, n, lr, wd, mu, damp)
             : momentum_step<false, false, false>(p, g, b, n, lr, wd, mu, damp);
  }
}

}  // namespace prsgd::algorithms
