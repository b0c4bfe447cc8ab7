// SPDX-License-Identifier: Apache-2.0
// The robust combining rules and their dispatch; the register kernels they run are in aggregation/ (see
// aggregation/kernels.hpp).
#include "prsgd/algorithms/aggregation.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/aggregation/kernels.hpp"

namespace prsgd::algorithms {
namespace {

using namespace aggregation_kernels;

// 512 values per input: with N = 8, the float buffers (16 KiB) or the double values and weights of the
// weighted path (64 KiB) stay in L1 / L2 while the sorting network runs over them.
constexpr std::size_t block_floats = 512;

// Batcher's odd-even merge sort for any n (comparators touching indices >= n are dropped, which is the
// same as padding with +inf). n = 8 needs 19 comparators against 28 for odd-even transposition.
std::vector<std::pair<std::size_t, std::size_t>> sorting_network(std::size_t n) {
  std::vector<std::pair<std::size_t, std::size_t>> net;
  for (std::size_t p = 1; p < n; p <<= 1U) {
    for (std::size_t k = p; k >= 1; k >>= 1U) {
      for (std::size_t j = k % p; j + k < n; j += 2 * k) {
        for (std::size_t i = 0; i < std::min(k, n - j - k); ++i) {
          if ((i + j) / (2 * p) == (i + j + k) / (2 * p)) {
            net.emplace_back(i + j, i + j + k);
          }
        }
      }
    }
  }
  return net;
}

// a[k] <= b[k] afterwards, for every k (min/max: vectorises without branches).
void compare_exchange(float* __restrict a, float* __restrict b, std::size_t m) {
  for (std::size_t k = 0; k < m; ++k) {
    const float lo = std::min(a[k], b[k]);
    const float hi = std::max(a[k], b[k]);
    a[k] = lo;
    b[k] = hi;
  }
}

// The same in double, carrying each value's weight along (the weighted path works in double: the median's
// coefficients divide by 2 * median_tie_mass, which would magnify float rounding of the cumulative weights).
void compare_exchange_weighted(double* __restrict a, double* __restrict b, double* __restrict wa, double* __restrict wb,
                               std::size_t m) {
  for (std::size_t k = 0; k < m; ++k) {
    const bool swap = b[k] < a[k];
    const double va = a[k];
    const double vb = b[k];
    const double ga = wa[k];
    const double gb = wb[k];
    a[k] = swap ? vb : va;
    b[k] = swap ? va : vb;
    wa[k] = swap ? gb : ga;
    wb[k] = swap ? ga : gb;
  }
}

// Σ (x − ref)² (ref null: Σ x²) over one block, in 8 float lanes added up in double.
template <bool Ref>
double block_sum_of_squares(const float* x, const float* ref, std::size_t m) {
  constexpr std::size_t lanes = 8;
  std::array<float, lanes> part{};
  std::size_t k = 0;
  for (; k + lanes <= m; k += lanes) {
    for (std::size_t l = 0; l < lanes; ++l) {
      float d = x[k + l];
      if constexpr (Ref) {
        d -= ref[k + l];
      }
      part[l] += d * d;
    }
  }
  for (; k < m; ++k) {
    float d = x[k];
    if constexpr (Ref) {
      d -= ref[k];
    }
    part[0] += d * d;
  }
  double total = 0;
  for (float p : part) {
    total += static_cast<double>(p);
  }
  return total;
}

// ‖x_i − ref‖² for every input, block by block so that each block of ref is read from memory once.
template <bool Ref>
std::vector<double> sums_of_squares(std::span<const contribution> inputs, const float* ref, std::size_t len) {
  std::vector<double> sums(inputs.size(), 0.0);
  for (std::size_t b = 0; b < len; b += block_floats) {
    const std::size_t m = std::min(block_floats, len - b);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      sums[i] += block_sum_of_squares<Ref>(inputs[i].params.data() + b, Ref ? ref + b : nullptr, m);
    }
  }
  return sums;
}

double median(std::vector<double> v) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

// Splits a weight as the weighted kernels sum it (see split_weight in aggregation/kernels.hpp).
split_weight split(double q) {
  const double hi = std::nearbyint(q * hi_grid) / hi_grid;
  return {static_cast<float>(hi), static_cast<std::int32_t>(std::llround((q - hi) * lo_grid))};
}

// The widest kernels set_aggregation_lanes() allows and the CPU runs.
std::atomic<std::size_t> lanes_cap{16};

bool wide_kernels() {
#if PRSGD_AGGREGATION_HAS_AVX512
  static const bool cpu = __builtin_cpu_supports("avx512f") != 0;
  return cpu && lanes_cap.load(std::memory_order_relaxed) >= 16;
#else
  return false;
#endif
}

// One family's table of kernels (aggregation/kernels.hpp) in the width wide_kernels() allows.
template <class Table>
const Table& pick(const Table& narrow, const Table& wide) {
  return wide_kernels() ? wide : narrow;
}

// The index of the window kernel for positions lo..hi of n inputs in window_shapes, if one is built.
std::optional<std::size_t> find_window(std::size_t n, std::size_t lo, std::size_t hi) {
  for (std::size_t w = 0; w < window_shapes.size(); ++w) {
    if (window_shapes[w].n == n && window_shapes[w].lo == lo && window_shapes[w].hi == hi) {
      return w;
    }
  }
  return std::nullopt;
}

// Margin (in weight mass) by which a cumulative weight must clear β or 1 − β to count as decided: far above
// the float rounding of c − β in the kernels, so a decided t is exactly 0 or 1 there too.
constexpr double decided_margin = 1e-6;

// The window [lo, hi] of the unequal-weight kernel for normalised weights q: lo is the first position j whose
// cumulative weight c_j may reach β − margin (the sum of the j+1 largest weights does), hi the first whose
// c_j surely exceeds 1 − β + margin (the sum of the j+1 smallest does), or the last position.
std::pair<std::size_t, std::size_t> undecided_positions(std::vector<double> q, double beta) {
  std::sort(q.begin(), q.end());
  const std::size_t n = q.size();
  std::size_t lo = n - 1;
  double largest = 0;
  for (std::size_t j = 0; j < n; ++j) {
    largest += q[n - 1 - j];
    if (largest >= beta - decided_margin) {
      lo = j;
      break;
    }
  }
  std::size_t hi = n - 1;
  double smallest = 0;
  for (std::size_t j = 0; j + 1 < n; ++j) {
    smallest += q[j];
    if (smallest > 1 - beta + decided_margin) {
      hi = j;
      break;
    }
  }
  return {std::min(lo, hi), hi};
}

// Whether the unequal-weight trimmed mean runs quantized_kernel: N <= 16 and 1 − 2β >= N/64, so that rounding
// the weights to units of 2^−31 moves no coefficient by more than 2^−24 (2N · 2^−31 / (1 − 2β)). The median
// (β = 1/2 − median_tie_mass) and trims close to 1/2 keep the exact split weights of weighted_kernel.
bool quantized_trim_fits(std::size_t n, double beta) {
  return n <= max_register_inputs && (1 - 2 * beta) * 64 >= static_cast<double>(n);
}

// The kernel of quantized_shapes[e] in the width wide_kernels() allows: the slices' tables in order hold them all.
kernel<quantized_args> quantized_kernel_at(std::size_t e) {
  const std::array<std::span<const kernel<quantized_args>>, 4> slices{
      pick(quantized_1_10_narrow, quantized_1_10_wide), pick(quantized_11_13_narrow, quantized_11_13_wide),
      pick(quantized_14_15_narrow, quantized_14_15_wide), pick(quantized_16_narrow, quantized_16_wide)};
  for (const auto slice : slices) {
    if (e < slice.size()) {
      return slice[e];
    }
    e -= slice.size();
  }
  return nullptr;
}

// Runs the unequal-weight trimmed mean with integer weights (see quantized_args) on the most specific kernel
// whose pattern the weights allow: c_j surely below lo for j < A, surely inside [lo, hi] in [B, C), surely above
// hi from D on, whatever the order of the values (c_j lies between the sums of the j+1 smallest and the j+1
// largest Q; integers, so no margin is needed).
void run_quantized(const std::vector<const float*>& xs, const float* ref, std::span<const double> weights, double s,
                   double beta, float* out, std::size_t len, bool stream) {
  const std::size_t n = xs.size();
  std::vector<std::int32_t> q(n);
  std::int64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    q[i] = static_cast<std::int32_t>(std::max<long long>(1, std::llround(weights[i] / s * quantized_total)));
    total += q[i];
  }
  const auto lo = static_cast<std::int32_t>(std::llround(beta * static_cast<double>(total)));
  const auto hi = static_cast<std::int32_t>(total - lo);
  std::vector<std::int32_t> sorted = q;
  std::sort(sorted.begin(), sorted.end());
  std::vector<bool> below(n);
  std::vector<bool> inside(n);
  std::vector<bool> above(n);
  std::int64_t smallest = 0;
  std::int64_t largest = 0;
  for (std::size_t j = 0; j < n; ++j) {
    smallest += sorted[j];
    largest += sorted[n - 1 - j];
    below[j] = largest <= lo;
    above[j] = smallest >= hi;
    inside[j] = smallest >= lo && largest <= hi;
  }
  const auto fits = [&](const quantized_shape& e) {
    for (std::size_t j = 0; j < n; ++j) {
      if ((j < e.a && !below[j]) || (j >= e.b && j < e.c && !inside[j]) || (j >= e.d && !above[j])) {
        return false;
      }
    }
    return true;
  };
  const quantized_args args{xs.data(), ref, q.data(),
                            lo,        hi,  static_cast<float>(s * 2147483648.0 / static_cast<double>(hi - lo)),
                            out,       len, stream};
  for (std::size_t e = 0; e < quantized_shapes.size(); ++e) {
    if (quantized_shapes[e].n == n && fits(quantized_shapes[e])) {
      quantized_kernel_at(e)(args);
      return;
    }
  }
}

// Per block of coordinates: u_i = x_i − ref for every input, sorted per coordinate by a sorting network.
// Equal weights (the common case) sort floats and weigh the j-th smallest with the same coefficient in
// every coordinate; unequal weights sort (value, weight) pairs in double and compute each coordinate's
// coefficients from its cumulative weights.
void sort_block_equal(std::span<const contribution> inputs, const float* ref, std::size_t b, std::size_t m,
                      const std::vector<std::pair<std::size_t, std::size_t>>& net, float* vals) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const float* x = inputs[i].params.data() + b;
    float* v = vals + i * block_floats;
    if (ref != nullptr) {
      for (std::size_t k = 0; k < m; ++k) {
        v[k] = x[k] - ref[b + k];
      }
    } else {
      std::copy_n(x, m, v);
    }
  }
  for (const auto& [i, j] : net) {
    compare_exchange(vals + i * block_floats, vals + j * block_floats, m);
  }
}

// The trimmed mean (median: β = 1/2 − median_tie_mass) of every coordinate, written as
// out = ref + s · Σ_j r_j v_(j) over the sorted updates v_(j).
void coordinate_rule(std::span<const contribution> inputs, std::span<const double> weights, const float* ref,
                     double beta, double s, std::span<float> out) {
  const std::size_t n = inputs.size();
  const std::size_t len = out.size();
  const auto net = sorting_network(n);
  const bool equal = std::all_of(weights.begin(), weights.end(), [&](double w) { return w == weights[0]; });
  std::vector<float> vals(equal ? n * block_floats : 0);
  std::vector<double> vals_d(equal ? 0 : n * block_floats);
  std::vector<double> qs(equal ? 0 : n * block_floats);
  std::vector<double> acc(block_floats);
  std::vector<double> cum(block_floats);
  std::vector<float> acc_f(block_floats);
  // Equal weights: the coefficient of the j-th smallest value is the same in every coordinate.
  std::vector<float> fixed_r;
  if (equal) {
    const std::vector<double> q(n, 1.0 / static_cast<double>(n));
    for (double r : trimmed_coefficients(q, beta)) {
      fixed_r.push_back(static_cast<float>(r));
    }
  }
  const double inv_keep = 1 / (1 - 2 * beta);
  const auto scale = static_cast<float>(s);
  const bool stream = len * sizeof(float) > streaming_store_threshold();
  if (equal && n <= max_register_inputs) {
    std::vector<const float*> xs(n);
    for (std::size_t i = 0; i < n; ++i) {
      xs[i] = inputs[i].params.data();
    }
    std::vector<float> coef(n);
    for (std::size_t j = 0; j < n; ++j) {
      coef[j] = scale * fixed_r[j];
    }
    std::vector<float> zeros(ref == nullptr ? len : 0, 0.0F);
    const register_args args{xs.data(), ref != nullptr ? ref : zeros.data(), coef.data(), out.data(), len, stream};
    const auto nonzero = [](float r) { return r != 0; };
    const auto first =
        static_cast<std::size_t>(std::find_if(fixed_r.begin(), fixed_r.end(), nonzero) - fixed_r.begin());
    const auto last =
        n - 1 - static_cast<std::size_t>(std::find_if(fixed_r.rbegin(), fixed_r.rend(), nonzero) - fixed_r.rbegin());
    const auto window = first <= last ? find_window(n, first, last) : std::nullopt;
    if (window) {
      pick(register_windows_narrow, register_windows_wide)[*window](args);
    } else {
      pick(register_kernels_narrow, register_kernels_wide)[n - 1](args);
    }
    return;
  }
  if (!equal && quantized_trim_fits(n, beta)) {
    std::vector<const float*> xs(n);
    for (std::size_t i = 0; i < n; ++i) {
      xs[i] = inputs[i].params.data();
    }
    std::vector<float> zeros(ref == nullptr ? len : 0, 0.0F);
    run_quantized(xs, ref != nullptr ? ref : zeros.data(), weights, s, beta, out.data(), len, stream);
    return;
  }
  if (!equal && n <= max_register_inputs) {
    std::vector<const float*> xs(n);
    std::vector<float> q_hi(n);
    std::vector<std::int32_t> q_lo(n);
    for (std::size_t i = 0; i < n; ++i) {
      xs[i] = inputs[i].params.data();
      const split_weight q = split(weights[i] / s);
      q_hi[i] = q.hi;
      q_lo[i] = q.lo;
    }
    std::vector<float> zeros(ref == nullptr ? len : 0, 0.0F);
    const weighted_args args{xs.data(),   ref != nullptr ? ref : zeros.data(),
                             q_hi.data(), q_lo.data(),
                             split(beta), static_cast<float>(inv_keep),
                             scale,       out.data(),
                             len,         stream};
    std::vector<double> q(n);
    for (std::size_t i = 0; i < n; ++i) {
      q[i] = weights[i] / s;
    }
    const auto [lo, hi] = undecided_positions(std::move(q), beta);
    const auto window = find_window(n, lo, hi);
    if (window) {
      pick(weighted_windows_narrow, weighted_windows_wide)[*window](args);
    } else {
      pick(weighted_kernels_narrow, weighted_kernels_wide)[n - 1](args);
    }
    return;
  }
  for (std::size_t b = 0; b < len; b += block_floats) {
    const std::size_t m = std::min(block_floats, len - b);
    if (equal) {
      sort_block_equal(inputs, ref, b, m, net, vals.data());
      std::fill_n(acc_f.data(), m, 0.0F);
      for (std::size_t j = 0; j < n; ++j) {
        if (fixed_r[j] == 0) {
          continue;
        }
        const float r = fixed_r[j];
        const float* v = vals.data() + j * block_floats;
        for (std::size_t k = 0; k < m; ++k) {
          acc_f[k] += r * v[k];
        }
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const float* x = inputs[i].params.data() + b;
        double* v = vals_d.data() + i * block_floats;
        for (std::size_t k = 0; k < m; ++k) {
          v[k] = static_cast<double>(x[k]) - (ref != nullptr ? static_cast<double>(ref[b + k]) : 0.0);
        }
        std::fill_n(qs.data() + i * block_floats, m, weights[i] / s);
      }
      for (const auto& [i, j] : net) {
        compare_exchange_weighted(vals_d.data() + i * block_floats, vals_d.data() + j * block_floats,
                                  qs.data() + i * block_floats, qs.data() + j * block_floats, m);
      }
      std::fill_n(cum.data(), m, 0.0);
      std::fill_n(acc.data(), m, 0.0);
      for (std::size_t j = 0; j < n; ++j) {
        const double* v = vals_d.data() + j * block_floats;
        const double* q = qs.data() + j * block_floats;
        const bool last = j + 1 == n;
        for (std::size_t k = 0; k < m; ++k) {
          const double lo = cum[k];
          const double hi = last ? 1.0 : lo + q[k];  // the last value closes the mass exactly
          cum[k] = hi;
          const double kept = std::max(0.0, std::min(hi, 1 - beta) - std::max(lo, beta));
          acc[k] += kept * inv_keep * v[k];
        }
      }
      for (std::size_t k = 0; k < m; ++k) {
        acc_f[k] = static_cast<float>(acc[k]);
      }
    }
    float* o = out.data() + b;
    if (ref != nullptr) {
      const float* p = ref + b;  // o may alias p: element k of p is read before o[k] is written
      for (std::size_t k = 0; k < m; ++k) {
        o[k] = p[k] + scale * acc_f[k];
      }
    } else {
      for (std::size_t k = 0; k < m; ++k) {
        o[k] = scale * acc_f[k];
      }
    }
  }
}

// out = ref + Σ_i c_i u_i (the mean with c_i = w_i, norm_clip with c_i = w_i · min(1, C/‖u_i‖)).
void linear_rule(std::span<const contribution> inputs, std::span<const double> coefs, const float* ref,
                 std::span<float> out) {
  const std::size_t len = out.size();
  std::vector<float> acc(block_floats);
  for (std::size_t b = 0; b < len; b += block_floats) {
    const std::size_t m = std::min(block_floats, len - b);
    std::fill_n(acc.data(), m, 0.0F);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float c = static_cast<float>(coefs[i]);
      const float* x = inputs[i].params.data() + b;
      if (ref != nullptr) {
        const float* p = ref + b;
        for (std::size_t k = 0; k < m; ++k) {
          acc[k] += c * (x[k] - p[k]);
        }
      } else {
        for (std::size_t k = 0; k < m; ++k) {
          acc[k] += c * x[k];
        }
      }
    }
    float* o = out.data() + b;
    for (std::size_t k = 0; k < m; ++k) {
      o[k] = (ref != nullptr ? ref[b + k] : 0.0F) + acc[k];
    }
  }
}

}  // namespace

std::size_t set_aggregation_lanes(std::size_t lanes) noexcept {
  return lanes_cap.exchange(lanes, std::memory_order_relaxed);
}

std::string_view to_string(aggregate_rule rule) noexcept {
  switch (rule) {
    case aggregate_rule::mean: return "mean";
    case aggregate_rule::trimmed_mean: return "trimmed-mean";
    case aggregate_rule::median: return "median";
    case aggregate_rule::norm_clip: return "norm-clip";
  }
  return "unknown";
}

expected<aggregate_rule> parse_aggregate_rule(std::string_view name) {
  for (auto rule :
       {aggregate_rule::mean, aggregate_rule::trimmed_mean, aggregate_rule::median, aggregate_rule::norm_clip}) {
    if (name == to_string(rule)) {
      return rule;
    }
  }
  return fail(errc::invalid_argument,
              "unknown aggregation rule '" + std::string{name} + "' (mean | trimmed-mean | median | norm-clip)");
}

expected<void> validate(const aggregate_options& options) {
  if (!(options.trim >= 0 && options.trim < 0.5)) {
    return fail(errc::invalid_argument, "trim must be in [0, 0.5) (got " + std::to_string(options.trim) + ")");
  }
  if (!(std::isfinite(options.clip) && options.clip >= 0)) {
    return fail(errc::invalid_argument, "clip must be >= 0 (got " + std::to_string(options.clip) + ")");
  }
  return {};
}

expected<std::vector<double>> update_norms(std::span<const contribution> inputs, std::span<const float> reference) {
  if (inputs.empty()) {
    return std::vector<double>{};
  }
  const std::size_t len = inputs[0].params.size();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::size_t want = reference.empty() ? len : reference.size();
    if (inputs[i].params.size() != want) {
      return fail(errc::invalid_argument,
                  "update_norms: input " + std::to_string(i) + " has " + std::to_string(inputs[i].params.size()) +
                      " floats, " + (reference.empty() ? "input 0" : "the reference") + " has " + std::to_string(want));
    }
  }
  auto norms = reference.empty() ? sums_of_squares<false>(inputs, nullptr, len)
                                 : sums_of_squares<true>(inputs, reference.data(), len);
  for (auto& v : norms) {
    v = std::sqrt(v);
  }
  return norms;
}

screen_result screen_updates(std::span<const double> norms, double k) {
  screen_result r;
  if (!norms.empty()) {
    std::vector<double> sorted(norms.begin(), norms.end());
    // NaN sorts above every number: with plain < it compared false with everything, stayed wherever it
    // stood (so could become the median and switch the screen off) and broke std::sort's ordering contract.
    std::sort(sorted.begin(), sorted.end(),
              [](double a, double b) { return a < b || (!std::isnan(a) && std::isnan(b)); });
    r.median_norm = sorted[sorted.size() / 2];  // the upper median: see the header
  }
  const bool active = norms.size() >= 3 && r.median_norm > 0;
  for (std::size_t i = 0; i < norms.size(); ++i) {
    // !(norm <= limit) also rejects a NaN norm.
    if (active && !(norms[i] <= k * r.median_norm)) {
      r.rejected.push_back(i);
    } else {
      r.kept.push_back(i);
    }
  }
  return r;
}

std::vector<double> trimmed_coefficients(std::span<const double> q, double beta) {
  std::vector<double> r(q.size());
  double lo = 0;
  for (std::size_t j = 0; j < q.size(); ++j) {
    const double hi = j + 1 == q.size() ? 1.0 : lo + q[j];
    r[j] = std::max(0.0, std::min(hi, 1 - beta) - std::max(lo, beta)) / (1 - 2 * beta);
    lo = hi;
  }
  return r;
}

expected<void> aggregate(std::span<const contribution> inputs, std::span<const double> weights,
                         std::span<const float> reference, const aggregate_options& options, std::span<float> out) {
  PRSGD_TRY(validate(options));
  if (inputs.empty()) {
    return fail(errc::invalid_argument, "aggregate: no inputs");
  }
  if (weights.size() != inputs.size()) {
    return fail(errc::invalid_argument, "aggregate: " + std::to_string(weights.size()) + " weights for " +
                                            std::to_string(inputs.size()) + " inputs");
  }
  const std::size_t len = out.size();
  if (!reference.empty() && reference.size() != len) {
    return fail(errc::invalid_argument, "aggregate: reference has " + std::to_string(reference.size()) +
                                            " floats, out has " + std::to_string(len));
  }
  double s = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].params.size() != len) {
      return fail(errc::invalid_argument, "aggregate: input " + std::to_string(i) + " has " +
                                              std::to_string(inputs[i].params.size()) + " floats, out has " +
                                              std::to_string(len));
    }
    if (!positive_finite(weights[i])) {
      return fail(errc::invalid_argument,
                  "aggregate: weight " + std::to_string(i) + " is " + std::to_string(weights[i]) + " (must be > 0)");
    }
    s += weights[i];
  }
  const float* ref = reference.empty() ? nullptr : reference.data();
  switch (options.rule) {
    case aggregate_rule::mean: linear_rule(inputs, weights, ref, out); return {};
    case aggregate_rule::trimmed_mean: coordinate_rule(inputs, weights, ref, options.trim, s, out); return {};
    case aggregate_rule::median: coordinate_rule(inputs, weights, ref, 0.5 - median_tie_mass, s, out); return {};
    case aggregate_rule::norm_clip: {
      auto norms = update_norms(inputs, reference);
      PRSGD_TRY(norms);
      const double c = options.clip > 0 ? options.clip : median(*norms);
      std::vector<double> coefs(inputs.size());
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        const double nrm = (*norms)[i];
        coefs[i] = weights[i] * (nrm > c ? c / nrm : 1.0);
      }
      linear_rule(inputs, coefs, ref, out);
      return {};
    }
  }
  return fail(errc::invalid_argument, "aggregate: unknown rule");
}

}  // namespace prsgd::algorithms