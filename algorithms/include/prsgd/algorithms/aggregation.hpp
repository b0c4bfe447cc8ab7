// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Lists the rules that combine a round's weighted updates u_i = x_i − x̄ into x̄' = x̄ + s·A(u; q).
/// The weights w_i come from averaging_weights() (the averaging rule); s = Σ w_i and q_i = w_i / s.
/// docs/decisions/0018-weighted-robust-aggregation.md defines the weighted rules.
enum class aggregate_rule : std::uint8_t {
  /// A = Σ q_i u_i: the plain weighted average.
  mean,
  /// Per coordinate, the weighted mean of the values left after removing weight mass `trim` from each end.
  trimmed_mean,
  /// Per coordinate, the weighted median (the trimmed mean with the trim tending to 1/2).
  median,
  /// A = Σ q_i min(1, C / ‖u_i‖) u_i: each update scaled down to norm at most C.
  norm_clip,
};

/// Parses "mean" | "trimmed-mean" | "median" | "norm-clip"; returns invalid_argument for anything else.
[[nodiscard]] expected<aggregate_rule> parse_aggregate_rule(std::string_view name);

/// Returns the name parse_aggregate_rule accepts for `rule`.
[[nodiscard]] std::string_view to_string(aggregate_rule rule) noexcept;

/// Configures aggregate().
struct aggregate_options {
  aggregate_rule rule = aggregate_rule::mean;
  /// β in [0, 1/2): weight mass removed from each end of every coordinate (trimmed_mean).
  double trim = 0.25;
  /// C ≥ 0: the clipping radius (norm_clip); 0 = the median of the round's update norms.
  double clip = 0;
};

/// Returns invalid_argument when `options` holds a trim outside [0, 1/2) or a negative or non-finite clip.
[[nodiscard]] expected<void> validate(const aggregate_options& options);

/// The weight mass within 1/2 that the median treats as a tie: the median is the trimmed mean with
/// β = 1/2 − median_tie_mass (so with equal weights and even N it averages the two middle values).
inline constexpr double median_tie_mass = 1e-9;

/// Returns ‖x_i − reference‖₂ for every input (accumulated in double); an empty `reference` means zero.
/// Returns invalid_argument for mismatched sizes.
[[nodiscard]] expected<std::vector<double>> update_norms(std::span<const contribution> inputs,
                                                         std::span<const float> reference);

/// Says which updates an outlier screen keeps.
struct screen_result {
  /// Indices kept / rejected, ascending.
  std::vector<std::size_t> kept;
  std::vector<std::size_t> rejected;
  /// The median norm the limit is k times: the ⌊N/2⌋-th smallest (0-based; the upper median for even N;
  /// NaN counts as larger than any number), so that more than half of the updates are never rejected.
  /// 0 for no norms.
  double median_norm = 0;
};

/// Rejects every update whose norm exceeds k × the (upper) median norm, or is NaN. With fewer than 3
/// updates, or a zero median, nothing is rejected: of two updates neither can be told to be the outlier
/// (the upper median of two is the larger norm). For k ≥ 1 at most ⌊(N−1)/2⌋ updates are rejected, so a
/// strict majority always stays.
/// @pre k ≥ 1.
[[nodiscard]] screen_result screen_updates(std::span<const double> norms, double k);

/// Returns the coefficient the trimmed mean gives each of N sorted values whose normalised weights (in
/// sorted order) are `q`: r_j = max(0, min(c_j, 1−β) − max(c_{j−1}, β)) / (1 − 2β) with c_j = q_1 + ... + q_j.
/// @pre 0 ≤ β < 1/2, q positive and summing to 1.
[[nodiscard]] std::vector<double> trimmed_coefficients(std::span<const double> q, double beta);

/// Combines `inputs` with `weights` (averaging_weights() of the same inputs) and `options` into
/// out = reference + s·A(u; q), u_i = x_i − reference (an empty `reference` means zero: the inputs are
/// the updates themselves, e.g. gradients). `out` may alias `reference` but no input. Returns invalid_argument for
/// no inputs, mismatched sizes, non-positive or non-finite weights, or bad options.
[[nodiscard]] expected<void> aggregate(std::span<const contribution> inputs, std::span<const double> weights,
                                       std::span<const float> reference, const aggregate_options& options,
                                       std::span<float> out);

/// Caps the vector width of the trimmed mean's and the median's kernels at `lanes` coordinates and returns
/// the old cap. 16, the default, lets them use AVX-512 where the CPU has AVX-512F; below 16 they use eight
/// lanes (AVX2 or the baseline). Every width gives the same bits; tests and benchmarks compare them with it.
std::size_t set_aggregation_lanes(std::size_t lanes) noexcept;

}  // namespace prsgd::algorithms
