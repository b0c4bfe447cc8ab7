// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/averaging.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace prsgd::algorithms {
namespace {

// 2048 floats = 8 KiB: the accumulator stays in L1 while all N inputs stream through it once.
constexpr std::size_t block_floats = 2048;

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

// acc[k] = a * x[k] (+ b * y[k]); the __restrict lets g++ vectorise without runtime alias checks.
void block_init1(float* __restrict acc, const float* __restrict x, float a, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    acc[k] = a * x[k];
  }
}
void block_add1(float* __restrict acc, const float* __restrict x, float a, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    acc[k] += a * x[k];
  }
}
// Delta form for step_normalised: acc (+)= a (x − p); keeps precision when x ≈ p.
void block_delta_init1(float* __restrict acc, const float* __restrict x, const float* __restrict p, float a,
                       std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    acc[k] = a * (x[k] - p[k]);
  }
}
void block_delta_add1(float* __restrict acc, const float* __restrict x, const float* __restrict p, float a,
                      std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    acc[k] += a * (x[k] - p[k]);
  }
}
void block_finish_delta(float* out, const float* __restrict acc, const float* p, std::size_t n) {
  // out may alias p: element k of p is read before element k of out is written.
  for (std::size_t k = 0; k < n; ++k) {
    out[k] = p[k] + acc[k];
  }
}

// Fused kernel over K inputs at once: every input and `out` stream through exactly once, which is what
// the hardware prefetchers like. Summation order is x_0, x_1, ... as in the blocked path, so both paths
// give bit-identical results. First: start from input 0 (else from the partial sum in out).
// Finish: add p at the end (delta form only).
template <std::size_t K, bool Delta, bool First, bool Finish>
void fused(float* __restrict out, const float* const* xs, const float* ws, const float* __restrict p,
           std::size_t n) {
  const float* x[K];
  float w[K];
  for (std::size_t i = 0; i < K; ++i) {
    x[i] = xs[i];
    w[i] = ws[i];
  }
  for (std::size_t k = 0; k < n; ++k) {
    float s = 0;
    if constexpr (Delta) {
      const float pk = p[k];
      if constexpr (First) {
        s = w[0] * (x[0][k] - pk);
      } else {
        s = out[k] + w[0] * (x[0][k] - pk);
      }
      for (std::size_t i = 1; i < K; ++i) {
        s += w[i] * (x[i][k] - pk);
      }
      if constexpr (Finish) {
        s = pk + s;
      }
    } else {
      if constexpr (First) {
        s = w[0] * x[0][k];
      } else {
        s = out[k] + w[0] * x[0][k];
      }
      for (std::size_t i = 1; i < K; ++i) {
        s += w[i] * x[i][k];
      }
    }
    out[k] = s;
  }
}

using fused_fn = void (*)(float*, const float* const*, const float*, const float*, std::size_t);

template <bool Delta, bool First, bool Finish, std::size_t... K>
constexpr std::array<fused_fn, sizeof...(K)> fused_table(std::index_sequence<K...> /*unused*/) {
  return {&fused<K + 1, Delta, First, Finish>...};
}

constexpr std::size_t max_fused = 8;
// 16384 floats = 64 KiB: with more than max_fused inputs the partial sums stay in L2 between chunks.
constexpr std::size_t fused_block_floats = 16384;

fused_fn pick_fused(std::size_t k, bool delta, bool first, bool finish) {
  static constexpr auto seq = std::make_index_sequence<max_fused>{};
  static constexpr auto plain_first = fused_table<false, true, false>(seq);
  static constexpr auto plain_more = fused_table<false, false, false>(seq);
  static constexpr auto delta_first = fused_table<true, true, false>(seq);
  static constexpr auto delta_first_finish = fused_table<true, true, true>(seq);
  static constexpr auto delta_more = fused_table<true, false, false>(seq);
  static constexpr auto delta_more_finish = fused_table<true, false, true>(seq);
  const std::size_t i = k - 1;
  if (!delta) {
    return first ? plain_first[i] : plain_more[i];
  }
  if (first) {
    return finish ? delta_first_finish[i] : delta_first[i];
  }
  return finish ? delta_more_finish[i] : delta_more[i];
}

// Returns true when [a, a+n) and [b, b+m) share memory.
bool overlaps(const float* a, std::size_t n, const float* b, std::size_t m) {
  if (n == 0 || m == 0) {
    return false;
  }
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + m * sizeof(float) && pb < pa + n * sizeof(float);
}

}  // namespace

std::string_view to_string(averaging_rule rule) noexcept {
  switch (rule) {
    case averaging_rule::uniform: return "uniform";
    case averaging_rule::by_samples: return "samples";
    case averaging_rule::step_normalised: return "step-normalised";
  }
  return "unknown";
}

expected<averaging_rule> parse_averaging_rule(std::string_view name) {
  if (name == "uniform") {
    return averaging_rule::uniform;
  }
  if (name == "samples") {
    return averaging_rule::by_samples;
  }
  if (name == "step-normalised") {
    return averaging_rule::step_normalised;
  }
  return fail(errc::invalid_argument,
              "unknown averaging rule '" + std::string{name} + "' (uniform | samples | step-normalised)");
}

expected<std::vector<double>> averaging_weights(std::span<const contribution> inputs, averaging_rule rule) {
  if (inputs.empty()) {
    return fail(errc::invalid_argument, "average: no inputs");
  }
  const std::size_t n = inputs.size();
  std::vector<double> w(n);
  switch (rule) {
    case averaging_rule::uniform:
      std::fill(w.begin(), w.end(), 1.0 / static_cast<double>(n));
      return w;
    case averaging_rule::by_samples:
    case averaging_rule::step_normalised: {
      double total = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!positive_finite(inputs[i].samples)) {
          return fail(errc::invalid_argument, "average: input " + std::to_string(i) + " has samples " +
                                                  std::to_string(inputs[i].samples) + " (must be > 0)");
        }
        if (rule == averaging_rule::step_normalised && !positive_finite(inputs[i].steps)) {
          return fail(errc::invalid_argument, "average: input " + std::to_string(i) + " has steps " +
                                                  std::to_string(inputs[i].steps) + " (must be > 0)");
        }
        total += inputs[i].samples;
      }
      if (!std::isfinite(total)) {
        return fail(errc::invalid_argument, "average: total samples overflow");
      }
      for (std::size_t i = 0; i < n; ++i) {
        w[i] = inputs[i].samples / total;
      }
      if (rule == averaging_rule::step_normalised) {
        double tau_eff = 0;
        for (std::size_t i = 0; i < n; ++i) {
          tau_eff += w[i] * inputs[i].steps;
        }
        for (std::size_t i = 0; i < n; ++i) {
          w[i] = tau_eff * w[i] / inputs[i].steps;
        }
      }
      return w;
    }
  }
  return fail(errc::invalid_argument, "average: unknown rule");
}

expected<void> average(std::span<const contribution> inputs, std::span<const float> previous, averaging_rule rule,
                       std::span<float> out) {
  auto weights = averaging_weights(inputs, rule);
  PRSGD_TRY(weights);
  const std::size_t len = out.size();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].params.size() != len) {
      return fail(errc::invalid_argument, "average: input " + std::to_string(i) + " has " +
                                              std::to_string(inputs[i].params.size()) + " floats, out has " +
                                              std::to_string(len));
    }
  }
  const bool delta = rule == averaging_rule::step_normalised;
  if (delta && previous.size() != len) {
    return fail(errc::invalid_argument, "average: previous has " + std::to_string(previous.size()) +
                                            " floats, out has " + std::to_string(len));
  }
  if (!delta && !previous.empty() && previous.size() != len) {
    return fail(errc::invalid_argument, "average: previous has " + std::to_string(previous.size()) +
                                            " floats, out has " + std::to_string(len));
  }
  std::vector<float> w(weights->begin(), weights->end());
  const std::size_t n = inputs.size();
  bool aliased = delta && overlaps(out.data(), len, previous.data(), previous.size());
  for (std::size_t i = 0; i < n && !aliased; ++i) {
    aliased = overlaps(out.data(), len, inputs[i].params.data(), len);
  }
  if (!aliased) {
    std::vector<const float*> xs(n);
    for (std::size_t i = 0; i < n; ++i) {
      xs[i] = inputs[i].params.data();
    }
    std::vector<const float*> chunk(max_fused);
    for (std::size_t b = 0; b < len; b += fused_block_floats) {
      const std::size_t m = std::min(fused_block_floats, len - b);
      const float* p = delta ? previous.data() + b : nullptr;
      for (std::size_t i = 0; i < n; i += max_fused) {
        const std::size_t k = std::min(max_fused, n - i);
        for (std::size_t j = 0; j < k; ++j) {
          chunk[j] = xs[i + j] + b;
        }
        pick_fused(k, delta, i == 0, i + k == n)(out.data() + b, chunk.data(), w.data() + i, p, m);
      }
    }
    return {};
  }
  // out aliases an input or previous: the L1 block accumulator decouples reads from writes.
  // Same summation order as the fused path, so results are bit-identical.
  alignas(64) std::array<float, block_floats> acc;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  for (std::size_t b = 0; b < len; b += block_floats) {
    const std::size_t m = std::min(block_floats, len - b);
    if (!delta) {
      block_init1(acc.data(), inputs[0].params.data() + b, w[0], m);
      for (std::size_t i = 1; i < n; ++i) {
        block_add1(acc.data(), inputs[i].params.data() + b, w[i], m);
      }
      std::memcpy(out.data() + b, acc.data(), m * sizeof(float));
    } else {
      const float* p = previous.data() + b;
      block_delta_init1(acc.data(), inputs[0].params.data() + b, p, w[0], m);
      for (std::size_t i = 1; i < n; ++i) {
        block_delta_add1(acc.data(), inputs[i].params.data() + b, p, w[i], m);
      }
      block_finish_delta(out.data() + b, acc.data(), p, m);
    }
  }
  return {};
}

bool all_finite(std::span<const float> params) noexcept {
  constexpr std::uint32_t exp_mask = 0x7f800000U;
  const float* data = params.data();
  const std::size_t len = params.size();
  for (std::size_t b = 0; b < len; b += block_floats) {
    const std::size_t m = std::min(block_floats, len - b);
    std::uint32_t bad = 0;
    for (std::size_t k = 0; k < m; ++k) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, data + b + k, sizeof bits);
      bad |= static_cast<std::uint32_t>((bits & exp_mask) == exp_mask);
    }
    if (bad != 0) {
      return false;
    }
  }
  return true;
}

expected<double> consensus_distance(std::span<const std::span<const float>> models) {
  if (models.empty()) {
    return fail(errc::invalid_argument, "consensus_distance: no models");
  }
  const std::size_t len = models[0].size();
  for (std::size_t i = 1; i < models.size(); ++i) {
    if (models[i].size() != len) {
      return fail(errc::invalid_argument, "consensus_distance: model " + std::to_string(i) + " has " +
                                              std::to_string(models[i].size()) + " floats, model 0 has " +
                                              std::to_string(len));
    }
  }
  const std::size_t n = models.size();
  const float inv_n = 1.0F / static_cast<float>(n);
  alignas(64) std::array<float, block_floats> mean;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  double total = 0;
  for (std::size_t b = 0; b < len; b += block_floats) {
    const std::size_t m = std::min(block_floats, len - b);
    block_init1(mean.data(), models[0].data() + b, inv_n, m);
    for (std::size_t i = 1; i < n; ++i) {
      block_add1(mean.data(), models[i].data() + b, inv_n, m);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const float* x = models[i].data() + b;
      double part = 0;
      for (std::size_t k = 0; k < m; ++k) {
        const double d = static_cast<double>(x[k]) - static_cast<double>(mean[k]);
        part += d * d;
      }
      total += part;
    }
  }
  return total / static_cast<double>(n);
}

}  // namespace prsgd::algorithms
