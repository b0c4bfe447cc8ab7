// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/outer_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace prsgd::algorithms {

expected<outer_kind> parse_outer_kind(std::string_view name) {
  if (name == "sgd") {
    return outer_kind::sgd;
  }
  if (name == "momentum") {
    return outer_kind::momentum;
  }
  if (name == "nesterov") {
    return outer_kind::nesterov;
  }
  return fail(errc::invalid_argument,
              "unknown outer optimiser '" + std::string{name} + "' (sgd | momentum | nesterov)");
}

std::string_view to_string(outer_kind kind) noexcept {
  switch (kind) {
    case outer_kind::sgd: return "sgd";
    case outer_kind::momentum: return "momentum";
    case outer_kind::nesterov: return "nesterov";
  }
  return "unknown";
}

expected<outer_optimizer> outer_optimizer::make(const outer_config& config, std::size_t num_params) {
  if (!std::isfinite(config.lr) || config.lr <= 0) {
    return fail(errc::invalid_argument, "outer_optimizer: lr must be > 0");
  }
  if (!std::isfinite(config.momentum) || config.momentum < 0 || config.momentum >= 1) {
    return fail(errc::invalid_argument, "outer_optimizer: momentum must be in [0, 1)");
  }
  return outer_optimizer{config, num_params};
}

expected<void> outer_optimizer::apply(std::span<const float> previous, std::span<const float> averaged,
                                      std::span<float> out) {
  const std::size_t n = momentum_.size();
  if (previous.size() != n || averaged.size() != n || out.size() != n) {
    return fail(errc::invalid_argument, "outer_optimizer: sizes " + std::to_string(previous.size()) + "/" +
                                            std::to_string(averaged.size()) + "/" + std::to_string(out.size()) +
                                            ", expected " + std::to_string(n));
  }
  const float lr = config_.lr;
  const float mu = config_.momentum;
  float* __restrict m = momentum_.data();
  // Element k of both inputs is read before element k of out is written, so aliasing is safe;
  // the momentum buffer never aliases anything.
  const float* p = previous.data();
  const float* a = averaged.data();
  float* o = out.data();
  switch (config_.kind) {
    case outer_kind::sgd:
      for (std::size_t k = 0; k < n; ++k) {
        const float delta = p[k] - a[k];
        o[k] = p[k] - lr * delta;
      }
      break;
    case outer_kind::momentum:
      for (std::size_t k = 0; k < n; ++k) {
        const float delta = p[k] - a[k];
        const float mk = mu * m[k] + delta;
        m[k] = mk;
        o[k] = p[k] - lr * mk;
      }
      break;
    case outer_kind::nesterov:
      for (std::size_t k = 0; k < n; ++k) {
        const float delta = p[k] - a[k];
        const float mk = mu * m[k] + delta;
        m[k] = mk;
        o[k] = p[k] - lr * (delta + mu * mk);
      }
      break;
  }
  return {};
}

expected<void> outer_optimizer::restore(std::span<const float> state) {
  if (state.size() != momentum_.size()) {
    return fail(errc::invalid_argument, "outer_optimizer: state has " + std::to_string(state.size()) +
                                            " floats, expected " + std::to_string(momentum_.size()));
  }
  std::copy(state.begin(), state.end(), momentum_.begin());
  return {};
}

void outer_optimizer::reset() noexcept { std::fill(momentum_.begin(), momentum_.end(), 0.0F); }

}  // namespace prsgd::algorithms
