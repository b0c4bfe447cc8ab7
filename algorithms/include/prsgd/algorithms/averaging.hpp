// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
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
  /// FedNova: x̄' = x̄ + τ_eff Σ p_i (x_i − x̄)/τ_i, τ_eff = Σ p_i τ_i, p_i ∝ samples_i / τ_i (its batch: a
  /// weight that does not grow with the steps it was assigned; equal batches give FedNova's p_i = 1/N for
  /// equal shards, and τ_eff = the mean interval).
  step_normalised,
};

/// Describes one worker's submission to a round: its flat parameters and what produced them.
struct contribution {
  /// The worker's flat parameter buffer after its local steps.
  std::span<const float> params;
  /// Training samples the worker consumed this round (by_samples weighs by them, step_normalised by
  /// samples / steps).
  double samples = 0;
  /// Local SGD steps the worker ran this round (τ_i for step_normalised).
  double steps = 0;
};

/// Chooses how average() stores `out`. Every policy gives bit-identical results.
enum class store_policy : std::uint8_t {
  /// streaming when `out` is larger than streaming_store_threshold() bytes, else normal.
  automatic,
  /// Ordinary (write-back, cached) stores.
  normal,
  /// Non-temporal stores (SSE movntps, then sfence): `out` bypasses the caches, which saves the
  /// read-for-ownership of every destination line but leaves `out` uncached for whoever reads it next.
  /// Used only when `out` aliases neither an input nor `previous` (else normal stores); normal stores
  /// on targets without SSE.
  streaming,
};

/// Combines `inputs` with `rule` into `out` (one vectorised pass over flat memory).
/// `previous` is the global model the round started from (x̄; used by step_normalised).
/// Returns invalid_argument for no inputs, mismatched sizes, or non-positive weights/steps where needed.
/// `out` may alias `previous`. Stores with store_policy::automatic.
[[nodiscard]] expected<void> average(std::span<const contribution> inputs, std::span<const float> previous,
                                     averaging_rule rule, std::span<float> out);

/// average() with an explicit store policy (benchmarks and tests; the results do not depend on it).
[[nodiscard]] expected<void> average(std::span<const contribution> inputs, std::span<const float> previous,
                                     averaging_rule rule, std::span<float> out, store_policy policy);

/// Returns the size of `out` in bytes above which store_policy::automatic uses streaming stores: by
/// default the core's L2 cache, clamped to [256 KiB, 16 MiB] (1 MiB when the system does not report it).
[[nodiscard]] std::size_t streaming_store_threshold() noexcept;

/// Sets the threshold streaming_store_threshold() returns (0 restores the default) and returns the old
/// one. For tuning and tests; the value is read once per average() or aggregate() call.
std::size_t set_streaming_store_threshold(std::size_t bytes) noexcept;

/// Returns how many average() calls in this process wrote `out` with streaming stores (tests, diagnostics).
[[nodiscard]] std::uint64_t streaming_store_calls() noexcept;

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
