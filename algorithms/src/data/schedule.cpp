// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace prsgd::algorithms {
namespace {

bool finite_positive(double v) { return std::isfinite(v) && v > 0; }

expected<void> invalid(const std::string& what) { return fail(errc::invalid_argument, what); }

// Returns the median of the usable (finite, > 0) speeds, or 0 when there is none.
double median_known(std::span<const double> speeds) {
  std::vector<double> known;
  for (double s : speeds) {
    if (finite_positive(s)) {
      known.push_back(s);
    }
  }
  if (known.empty()) {
    return 0;
  }
  const std::size_t mid = known.size() / 2;
  std::nth_element(known.begin(), known.begin() + static_cast<std::ptrdiff_t>(mid), known.end());
  if (known.size() % 2 == 1) {
    return known[mid];
  }
  const double upper = known[mid];
  const double lower = *std::max_element(known.begin(), known.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

int clamp_interval(double v, int lo, int hi) {
  if (!(v >= lo)) {  // also catches NaN
    return lo;
  }
  if (v >= hi) {
    return hi;
  }
  return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
}

}  // namespace

expected<lr_kind> parse_lr_kind(std::string_view name) {
  if (name == "constant") {
    return lr_kind::constant;
  }
  if (name == "step") {
    return lr_kind::step_decay;
  }
  if (name == "cosine") {
    return lr_kind::cosine;
  }
  if (name == "paper") {
    return lr_kind::paper;
  }
  return fail(errc::invalid_argument,
              "unknown step-size schedule '" + std::string{name} + "' (constant | step | cosine | paper)");
}

std::string_view to_string(lr_kind kind) noexcept {
  switch (kind) {
    case lr_kind::constant: return "constant";
    case lr_kind::step_decay: return "step";
    case lr_kind::cosine: return "cosine";
    case lr_kind::paper: return "paper";
  }
  return "unknown";
}

expected<double> paper_step_size(double c, int num_workers, std::int64_t total_steps) {
  if (!finite_positive(c) || num_workers < 1 || total_steps < 1) {
    return fail(errc::invalid_argument, "paper step size needs c > 0, N >= 1, T >= 1");
  }
  return c * std::sqrt(static_cast<double>(num_workers) / static_cast<double>(total_steps));
}

expected<void> validate(const lr_schedule& s) {
  if (s.warmup_steps < 0) {
    return invalid("lr_schedule: warmup_steps must be >= 0");
  }
  if (!std::isfinite(s.warmup_start_factor) || s.warmup_start_factor < 0 || s.warmup_start_factor > 1) {
    return invalid("lr_schedule: warmup_start_factor must be in [0, 1]");
  }
  if (s.kind != lr_kind::paper && !finite_positive(s.base_lr)) {
    return invalid("lr_schedule: base_lr must be > 0");
  }
  switch (s.kind) {
    case lr_kind::constant: return {};
    case lr_kind::step_decay:
      if (s.decay_every < 1) {
        return invalid("lr_schedule: decay_every must be >= 1");
      }
      if (!finite_positive(s.decay_factor) || s.decay_factor > 1) {
        return invalid("lr_schedule: decay_factor must be in (0, 1]");
      }
      return {};
    case lr_kind::cosine:
      if (s.total_steps <= s.warmup_steps) {
        return invalid("lr_schedule: cosine needs total_steps > warmup_steps");
      }
      if (!std::isfinite(s.min_lr) || s.min_lr < 0 || s.min_lr > s.base_lr) {
        return invalid("lr_schedule: min_lr must be in [0, base_lr]");
      }
      return {};
    case lr_kind::paper: {
      auto g = paper_step_size(s.c, s.num_workers, s.total_steps);
      PRSGD_TRY(g);
      return {};
    }
  }
  return invalid("lr_schedule: unknown kind");
}

double learning_rate(const lr_schedule& s, std::int64_t step) noexcept {
  const std::int64_t t = std::max<std::int64_t>(step, 0);
  const std::int64_t after = std::max<std::int64_t>(t - s.warmup_steps, 0);
  double value = s.base_lr;
  switch (s.kind) {
    case lr_kind::constant: break;
    case lr_kind::step_decay:
      value =
          s.base_lr * std::pow(s.decay_factor, static_cast<double>(after / std::max<std::int64_t>(s.decay_every, 1)));
      break;
    case lr_kind::cosine: {
      const auto span = static_cast<double>(std::max<std::int64_t>(s.total_steps - s.warmup_steps, 1));
      const double progress = std::min(static_cast<double>(after) / span, 1.0);
      value = s.min_lr + (s.base_lr - s.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
      break;
    }
    case lr_kind::paper:
      value = s.c * std::sqrt(static_cast<double>(std::max(s.num_workers, 1)) /
                              static_cast<double>(std::max<std::int64_t>(s.total_steps, 1)));
      break;
  }
  if (t < s.warmup_steps) {
    // Every kind's value at t' = 0 is its start value, so `value` is γ_0 here.
    const double frac = static_cast<double>(t) / static_cast<double>(s.warmup_steps);
    value *= s.warmup_start_factor + (1 - s.warmup_start_factor) * frac;
  }
  return value;
}

expected<int> paper_interval(std::int64_t total_steps, int num_workers) {
  if (total_steps < 1 || num_workers < 1) {
    return fail(errc::invalid_argument, "paper interval needs T >= 1 and N >= 1");
  }
  const double v = std::pow(static_cast<double>(total_steps), 0.25) / std::pow(static_cast<double>(num_workers), 0.75);
  // A hair of slack so exact integers (e.g. T = 16·N³) do not round up through pow's last-bit error.
  const double i = std::ceil(v * (1 - 1e-12));
  return static_cast<int>(std::clamp(i, 1.0, 1e9));
}

expected<std::vector<int>> time_balanced_intervals(std::span<const double> steps_per_s, double target_round_s, int min,
                                                   int max) {
  if (min < 1 || max < min) {
    return fail(errc::invalid_argument, "time_balanced_intervals: need 1 <= min <= max");
  }
  if (!finite_positive(target_round_s)) {
    return fail(errc::invalid_argument, "time_balanced_intervals: target_round_s must be > 0");
  }
  const double fallback = median_known(steps_per_s);
  std::vector<int> out;
  out.reserve(steps_per_s.size());
  for (double s : steps_per_s) {
    const double speed = finite_positive(s) ? s : fallback;
    out.push_back(speed > 0 ? clamp_interval(speed * target_round_s, min, max) : min);
  }
  return out;
}

expected<double> balanced_round_time(std::span<const double> steps_per_s, int interval) {
  if (interval < 1) {
    return fail(errc::invalid_argument, "balanced_round_time: interval must be >= 1");
  }
  const double median = median_known(steps_per_s);
  if (median <= 0) {
    return fail(errc::invalid_argument, "balanced_round_time: no speed known");
  }
  // Σ speed_i · τ = N · interval: the round covers as many steps (and samples) as fixed intervals would.
  double total = 0;
  for (double s : steps_per_s) {
    total += finite_positive(s) ? s : median;
  }
  return static_cast<double>(interval) * static_cast<double>(steps_per_s.size()) / total;
}

expected<void> speed_ewma::observe(std::size_t worker, double steps, double seconds) {
  if (!std::isfinite(alpha) || alpha <= 0 || alpha > 1) {
    return invalid("speed_ewma: alpha must be in (0, 1]");
  }
  if (!finite_positive(steps) || !finite_positive(seconds)) {
    return invalid("speed_ewma: steps and seconds must be > 0");
  }
  const double measured = steps / seconds;
  if (!finite_positive(measured)) {
    return invalid("speed_ewma: speed overflow");
  }
  if (rates.size() <= worker) {
    rates.resize(worker + 1, 0.0);
  }
  rates[worker] = smoothed_rate(rates[worker], measured, alpha);
  return {};
}

double smoothed_rate(double previous, double measured, double alpha) noexcept {
  return finite_positive(previous) ? alpha * measured + (1 - alpha) * previous : measured;
}

void speed_ewma::forget(std::size_t worker) noexcept {
  if (worker < rates.size()) {
    rates[worker] = 0;
  }
}

expected<interval_kind> parse_interval_kind(std::string_view name) {
  if (name == "fixed") {
    return interval_kind::fixed;
  }
  if (name == "per-worker") {
    return interval_kind::per_worker;
  }
  if (name == "paper") {
    return interval_kind::paper;
  }
  if (name == "time-balanced") {
    return interval_kind::time_balanced;
  }
  return fail(errc::invalid_argument,
              "unknown interval schedule '" + std::string{name} + "' (fixed | per-worker | paper | time-balanced)");
}

std::string_view to_string(interval_kind kind) noexcept {
  switch (kind) {
    case interval_kind::fixed: return "fixed";
    case interval_kind::per_worker: return "per-worker";
    case interval_kind::paper: return "paper";
    case interval_kind::time_balanced: return "time-balanced";
  }
  return "unknown";
}

expected<std::vector<int>> intervals_for_round(const interval_schedule& s, int num_workers,
                                               std::span<const double> steps_per_s) {
  if (num_workers < 1) {
    return fail(errc::invalid_argument, "intervals_for_round: num_workers must be >= 1");
  }
  if (s.fixed_interval < 1) {
    return fail(errc::invalid_argument, "intervals_for_round: fixed_interval must be >= 1");
  }
  const auto n = static_cast<std::size_t>(num_workers);
  switch (s.kind) {
    case interval_kind::fixed: return std::vector<int>(n, s.fixed_interval);
    case interval_kind::per_worker: {
      std::vector<int> out(n, s.fixed_interval);
      for (std::size_t i = 0; i < n && i < s.per_worker.size(); ++i) {
        if (s.per_worker[i] < 1) {
          return fail(errc::invalid_argument, "intervals_for_round: per_worker[" + std::to_string(i) + "] < 1");
        }
        out[i] = s.per_worker[i];
      }
      return out;
    }
    case interval_kind::paper: {
      auto i = paper_interval(s.total_steps, num_workers);
      PRSGD_TRY(i);
      return std::vector<int>(n, *i);
    }
    case interval_kind::time_balanced: {
      if (s.min_interval < 1 || s.max_interval < s.min_interval) {
        return fail(errc::invalid_argument, "intervals_for_round: need 1 <= min_interval <= max_interval");
      }
      std::vector<double> speeds(n, 0.0);
      std::copy_n(steps_per_s.begin(), std::min(n, steps_per_s.size()), speeds.begin());
      double target = s.target_round_s;
      if (target == 0) {
        auto derived = balanced_round_time(speeds, s.fixed_interval);
        if (!derived) {  // nothing measured yet
          return std::vector<int>(n, std::clamp(s.fixed_interval, s.min_interval, s.max_interval));
        }
        target = *derived;
      }
      return time_balanced_intervals(speeds, target, s.min_interval, s.max_interval);
    }
  }
  return fail(errc::invalid_argument, "intervals_for_round: unknown kind");
}

}  // namespace prsgd::algorithms
