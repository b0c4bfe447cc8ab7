// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Lists the rules that combine N submitted models into the next global model.
enum class averaging_rule : std::uint8_t {
  /// x̄' = (1/N) Σ x_i.
  uniform,
  /// x̄' = Σ p_i x_i with p_i ∝ samples_i.
  by_samples,
  /// FedNova: x̄' = x̄ + τ_eff Σ p_i (x_i − x̄)/τ_i, p_i ∝ samples_i, τ_eff = Σ p_i τ_i.
  step_normalised,
};

/// Describes one worker's submission to a round: its flat parameters and what produced them.
struct contribution {
  /// The worker's flat parameter buffer after its local steps.
  std::span<const float> params;
  /// Training samples the worker consumed this round (weights for by_samples / step_normalised).
  double samples = 0;
  /// Local SGD steps the worker ran this round (τ_i for step_normalised).
  double steps = 0;
};

/// Combines `inputs` with `rule` into `out` (one vectorised pass over flat memory).
/// `previous` is the global model the round started from (x̄; used by step_normalised).
/// Returns invalid_argument for no inputs, mismatched sizes, or non-positive weights/steps where needed.
/// `out` may alias `previous`.
[[nodiscard]] expected<void> average(std::span<const contribution> inputs, std::span<const float> previous,
                                     averaging_rule rule, std::span<float> out);

/// Parses "uniform" | "samples" | "step-normalised"; returns invalid_argument for anything else.
[[nodiscard]] expected<averaging_rule> parse_averaging_rule(std::string_view name);

/// Returns the name parse_averaging_rule accepts for `rule` ("uniform", "samples", "step-normalised").
[[nodiscard]] std::string_view to_string(averaging_rule rule) noexcept;

/// Returns the coefficient w_i that `rule` gives input i: out = Σ w_i x_i for uniform / by_samples and
/// out = x̄ + Σ w_i (x_i − x̄) for step_normalised (w_i = τ_eff p_i / τ_i). Validates like average(),
/// except for buffer sizes, which it does not see.
[[nodiscard]] expected<std::vector<double>> averaging_weights(std::span<const contribution> inputs,
                                                              averaging_rule rule);

/// Returns true when no element of `params` is NaN or ±Inf (one vectorised pass).
[[nodiscard]] bool all_finite(std::span<const float> params) noexcept;

/// Returns the consensus distance (1/N) Σ_i ||x_i − x̄||² with x̄ the uniform mean of `models`,
/// accumulated in double. Returns invalid_argument for no models or mismatched sizes.
[[nodiscard]] expected<double> consensus_distance(std::span<const std::span<const float>> models);

}  // namespace prsgd::algorithms
