// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

// ---------------------------------------------------------------------------------------------
// Step size. All schedules are plain values of the (per-worker) step count t, so the only state to
// checkpoint is t itself.

/// Lists the step-size schedules.
enum class lr_kind : std::uint8_t {
  /// γ(t) = base_lr.
  constant,
  /// γ(t) = base_lr · decay_factor^⌊t' / decay_every⌋.
  step_decay,
  /// γ(t) = min_lr + (base_lr − min_lr)·(1 + cos(π·min(t', T')/T'))/2 with T' = total_steps − warmup_steps.
  cosine,
  /// The paper's constant γ = c·sqrt(N/T) (Yu, Yang & Zhu 2019), N = num_workers, T = total_steps.
  paper,
};

/// Parses "constant" | "step" | "cosine" | "paper"; returns invalid_argument for anything else.
[[nodiscard]] expected<lr_kind> parse_lr_kind(std::string_view name);
/// Returns the name parse_lr_kind accepts for `kind`.
[[nodiscard]] std::string_view to_string(lr_kind kind) noexcept;

/// Describes a step-size schedule with optional linear warm-up in front of any kind.
/// During warm-up (t < warmup_steps) γ(t) = γ_0 · (s + (1 − s)·t/warmup_steps), s = warmup_start_factor,
/// γ_0 the schedule's value at its start; afterwards the schedule runs on t' = t − warmup_steps.
struct lr_schedule {
  /// The schedule's shape.
  lr_kind kind = lr_kind::constant;
  /// Peak step size (unused by paper, which derives it from c, N, T).
  double base_lr = 0.05;
  /// Multiplier per decay for step_decay, in (0, 1].
  double decay_factor = 0.1;
  /// Steps between decays for step_decay (> 0).
  std::int64_t decay_every = 1000;
  /// Total steps per worker T (cosine, paper; > 0 there).
  std::int64_t total_steps = 0;
  /// Floor of the cosine schedule.
  double min_lr = 0;
  /// The paper's constant c (> 0).
  double c = 1.0;
  /// Number of workers N for paper (>= 1).
  int num_workers = 1;
  /// Length of the linear warm-up (0: none).
  std::int64_t warmup_steps = 0;
  /// Fraction of γ_0 the warm-up starts from, in [0, 1].
  double warmup_start_factor = 0.0;
};

/// Returns invalid_argument with the offending field when `schedule` is not usable.
[[nodiscard]] expected<void> validate(const lr_schedule& schedule);
/// Returns γ at step `step` (>= 0; negative steps count as 0). @pre validate(schedule) succeeded
[[nodiscard]] double learning_rate(const lr_schedule& schedule, std::int64_t step) noexcept;
/// Returns the paper's γ = c·sqrt(N/T); invalid_argument unless c > 0, N >= 1, T >= 1.
[[nodiscard]] expected<double> paper_step_size(double c, int num_workers, std::int64_t total_steps);

// ---------------------------------------------------------------------------------------------
// Averaging interval.

/// Returns the paper's interval I = ⌈T^{1/4} / N^{3/4}⌉ (at least 1); invalid_argument unless
/// T >= 1 and N >= 1.
[[nodiscard]] expected<int> paper_interval(std::int64_t total_steps, int num_workers);

/// Returns per-worker intervals I_i = round(steps_per_s[i] · target_round_s) clamped to [min, max],
/// so all workers reach the barrier after about target_round_s seconds. A worker with no usable
/// estimate (<= 0 or not finite) gets the interval of the median known speed; if no speed is known,
/// every worker gets `min`. Returns invalid_argument unless 1 <= min <= max and target_round_s > 0.
[[nodiscard]] expected<std::vector<int>> time_balanced_intervals(std::span<const double> steps_per_s,
                                                                 double target_round_s, int min, int max);

/// Returns the round time τ at which the workers, each running speed_i · τ steps, run `interval` steps on
/// average (N · interval / Σ speed_i, an unknown speed counted as the median of the known ones), so a
/// time-balanced round covers as many samples as a fixed one; invalid_argument when interval < 1 or no
/// speed is known.
[[nodiscard]] expected<double> balanced_round_time(std::span<const double> steps_per_s, int interval);

/// Returns the exponentially weighted moving average after one more measurement:
/// alpha·measured + (1 − alpha)·previous, or `measured` itself when `previous` is not a usable rate (<= 0 or
/// not finite: nothing measured yet). The one definition of the speed average (speed_ewma and the averager).
[[nodiscard]] double smoothed_rate(double previous, double measured, double alpha) noexcept;

/// Smooths each worker's measured speed with an exponentially weighted moving average:
/// rate ← alpha·measured + (1 − alpha)·rate (the first measurement is taken as is).
/// Plain values: checkpoint `alpha` and `rates`. Not thread-safe (owned by the averager).
struct speed_ewma {
  /// Weight of the newest measurement, in (0, 1].
  double alpha = 0.3;
  /// Smoothed steps/s per worker index; 0 means no measurement yet.
  std::vector<double> rates{};

  /// Records that `worker` ran `steps` steps in `seconds` seconds (grows `rates` as needed).
  /// Returns invalid_argument for steps <= 0, seconds <= 0, non-finite values or alpha outside (0, 1].
  [[nodiscard]] expected<void> observe(std::size_t worker, double steps, double seconds);
  /// Forgets `worker`'s estimate (e.g. when it leaves; a rejoining worker may run on other hardware).
  void forget(std::size_t worker) noexcept;
};

/// Lists the ways the averager picks I_i for the next round.
enum class interval_kind : std::uint8_t {
  /// Every worker uses fixed_interval.
  fixed,
  /// Worker i uses per_worker[i] (fixed_interval for indices beyond the list).
  per_worker,
  /// Every worker uses paper_interval(total_steps, N).
  paper,
  /// time_balanced_intervals() from measured speeds; target_round_s, or when it is 0
  /// balanced_round_time(speeds, fixed_interval), which keeps the mean interval at fixed_interval.
  time_balanced,
};

/// Parses "fixed" | "per-worker" | "paper" | "time-balanced"; returns invalid_argument otherwise.
[[nodiscard]] expected<interval_kind> parse_interval_kind(std::string_view name);
/// Returns the name parse_interval_kind accepts for `kind`.
[[nodiscard]] std::string_view to_string(interval_kind kind) noexcept;

/// Describes how intervals are chosen; plain values for checkpoints.
struct interval_schedule {
  /// The rule.
  interval_kind kind = interval_kind::fixed;
  /// The interval for fixed, the default for per_worker, the reference for time_balanced.
  int fixed_interval = 1;
  /// Per-worker intervals for per_worker.
  std::vector<int> per_worker{};
  /// Total steps per worker T for paper.
  std::int64_t total_steps = 0;
  /// Target round time in seconds for time_balanced (0: derive from fixed_interval).
  double target_round_s = 0;
  /// Smallest interval time_balanced may assign.
  int min_interval = 1;
  /// Largest interval time_balanced may assign.
  int max_interval = 1000;
};

/// Returns I_i for workers 0..num_workers-1. `steps_per_s` (time_balanced only) holds one speed per
/// worker, <= 0 when unknown; with no known speed yet every worker gets fixed_interval clamped to
/// [min_interval, max_interval]. Returns invalid_argument for bad fields or num_workers < 1.
[[nodiscard]] expected<std::vector<int>> intervals_for_round(const interval_schedule& schedule, int num_workers,
                                                             std::span<const double> steps_per_s = {});

}  // namespace prsgd::algorithms
