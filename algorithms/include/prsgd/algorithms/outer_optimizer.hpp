// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Lists the outer update applied to a round's averaged delta (DiLoCo, Douillard et al. 2023).
enum class outer_kind : std::uint8_t {
  /// x̄' = x̄ − lr·Δ with Δ = x̄ − avg (lr = 1 reproduces plain averaging).
  sgd,
  /// Heavy ball: m = μ·m + Δ; x̄' = x̄ − lr·m.
  momentum,
  /// Nesterov: m = μ·m + Δ; x̄' = x̄ − lr·(Δ + μ·m) (DiLoCo's default with lr 0.7, μ 0.9).
  nesterov,
};

/// Parses "sgd" | "momentum" | "nesterov"; returns invalid_argument for anything else.
[[nodiscard]] expected<outer_kind> parse_outer_kind(std::string_view name);
/// Returns the name parse_outer_kind accepts for `kind`.
[[nodiscard]] std::string_view to_string(outer_kind kind) noexcept;

/// Configures an outer optimiser.
struct outer_config {
  /// The update rule.
  outer_kind kind = outer_kind::nesterov;
  /// Outer learning rate (> 0).
  float lr = 0.7F;
  /// Momentum μ in [0, 1).
  float momentum = 0.9F;
};

/// Applies an outer optimiser to the pseudo-gradient Δ = previous − averaged of each round.
/// Its only state is one momentum float per parameter, exposed for checkpoints.
/// Value type; not thread-safe (owned by the averager).
class outer_optimizer {
 public:
  /// Returns an optimiser for `num_params` parameters with zero momentum.
  /// Returns invalid_argument for lr <= 0, momentum outside [0, 1) or non-finite values.
  [[nodiscard]] static expected<outer_optimizer> make(const outer_config& config, std::size_t num_params);

  /// Writes the next global model to `out` from the round's start `previous` and the `averaged`
  /// model, updating the momentum. `out` may alias either input. One pass over flat memory.
  /// Returns invalid_argument when a size differs from num_params().
  [[nodiscard]] expected<void> apply(std::span<const float> previous, std::span<const float> averaged,
                                     std::span<float> out);

  /// Returns the momentum buffer (num_params() floats) for checkpoints.
  [[nodiscard]] std::span<const float> state() const noexcept { return momentum_; }
  /// Replaces the momentum buffer with `state`. Returns invalid_argument on a size mismatch.
  [[nodiscard]] expected<void> restore(std::span<const float> state);
  /// Zeroes the momentum buffer (e.g. when the model is re-initialised).
  void reset() noexcept;
  /// Returns the number of parameters.
  [[nodiscard]] std::size_t num_params() const noexcept { return momentum_.size(); }
  /// Returns the configuration.
  [[nodiscard]] const outer_config& config() const noexcept { return config_; }

 private:
  outer_optimizer(const outer_config& config, std::size_t num_params) : config_(config), momentum_(num_params, 0.0F) {}

  outer_config config_;
  std::vector<float> momentum_;
};

}  // namespace prsgd::algorithms
