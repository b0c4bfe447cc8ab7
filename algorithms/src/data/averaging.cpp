// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/averaging.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include <unistd.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#define PRSGD_AVERAGING_STREAM_STORES 1
#else
#define PRSGD_AVERAGING_STREAM_STORES 0
#endif

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
void fused(float* __restrict out, const float* const* xs, const float* ws, const float* __restrict p, std::size_t n) {
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

// What the fused kernel combines: K = n inputs, their weights, and x̄ (delta form only, else nullptr).
struct fused_inputs {
  const float* const* xs;
  std::size_t n;
  const float* w;
  const float* prev;
  bool delta;
};

// Runs every pass of the fused kernel over elements [begin, end) of out, with normal stores.
void fused_range(float* out, const fused_inputs& in, std::size_t begin, std::size_t end) {
  std::array<const float*, max_fused> chunk{};
  for (std::size_t b = begin; b < end; b += fused_block_floats) {
    const std::size_t m = std::min(fused_block_floats, end - b);
    const float* p = in.delta ? in.prev + b : nullptr;
    for (std::size_t i = 0; i < in.n; i += max_fused) {
      const std::size_t k = std::min(max_fused, in.n - i);
      for (std::size_t j = 0; j < k; ++j) {
        chunk[j] = in.xs[i + j] + b;
      }
      pick_fused(k, in.delta, i == 0, i + k == in.n)(out + b, chunk.data(), in.w + i, p, m);
    }
  }
}

#if PRSGD_AVERAGING_STREAM_STORES
constexpr std::size_t line_floats = 64 / sizeof(float);
// 2048 floats = 8 KiB: with more than max_fused inputs the partial sums stay in L1 between passes.
constexpr std::size_t stream_block_floats = 2048;
// 512 floats = 2 KiB = 32 lines ahead per input stream.
constexpr std::size_t prefetch_floats = 512;

// fused<> with non-temporal stores, written with SSE intrinsics: per element the same IEEE operations in
// the same order as fused<>. Nothing is contracted to FMA (prsgd_compute_options passes -ffp-contract=off,
// whatever PRSGD_X86_LEVEL allows), so results are bit-identical; the unit tests compare the two bit for bit.
// Partial sums come from `acc` instead of out (unused when First). out must be 64-byte aligned and n a
// multiple of line_floats: every line is written whole by four streaming stores, so the write-combining
// buffers flush full lines.
template <std::size_t K, bool Delta, bool First, bool Finish>
void fused_stream(float* out, const float* acc, const float* const* xs, const float* ws, const float* p,
                  std::size_t n) {
  const float* x[K];
  __m128 w[K];
  for (std::size_t i = 0; i < K; ++i) {
    x[i] = xs[i];
    w[i] = _mm_set1_ps(ws[i]);
  }
  // Software prefetch prefetch_floats ahead in every input (hardware prefetchers alone keep too few
  // lines in flight with N+1 streams); stops short of the end so no address leaves the buffers.
  const std::size_t prefetch_end = n > prefetch_floats ? n - prefetch_floats : 0;
  for (std::size_t k = 0; k < n; k += line_floats) {
    if (k < prefetch_end) {
      for (std::size_t i = 0; i < K; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(x[i] + k + prefetch_floats), _MM_HINT_T0);
      }
      if constexpr (Delta) {
        _mm_prefetch(reinterpret_cast<const char*>(p + k + prefetch_floats), _MM_HINT_T0);
      }
    }
    for (std::size_t q = k; q < k + line_floats; q += 4) {
      __m128 s;
      if constexpr (Delta) {
        const __m128 pk = _mm_loadu_ps(p + q);
        s = _mm_mul_ps(w[0], _mm_sub_ps(_mm_loadu_ps(x[0] + q), pk));
        if constexpr (!First) {
          s = _mm_add_ps(_mm_load_ps(acc + q), s);
        }
        for (std::size_t i = 1; i < K; ++i) {
          s = _mm_add_ps(s, _mm_mul_ps(w[i], _mm_sub_ps(_mm_loadu_ps(x[i] + q), pk)));
        }
        if constexpr (Finish) {
          s = _mm_add_ps(pk, s);
        }
      } else {
        s = _mm_mul_ps(w[0], _mm_loadu_ps(x[0] + q));
        if constexpr (!First) {
          s = _mm_add_ps(_mm_load_ps(acc + q), s);
        }
        for (std::size_t i = 1; i < K; ++i) {
          s = _mm_add_ps(s, _mm_mul_ps(w[i], _mm_loadu_ps(x[i] + q)));
        }
      }
      _mm_stream_ps(out + q, s);
    }
  }
}

using stream_fn = void (*)(float*, const float*, const float* const*, const float*, const float*, std::size_t);

template <bool Delta, bool First, std::size_t... K>
constexpr std::array<stream_fn, sizeof...(K)> stream_table(std::index_sequence<K...> /*unused*/) {
  return {&fused_stream<K + 1, Delta, First, true>...};
}

// The streaming pass always finishes the sum: it is the last pass over its inputs.
stream_fn pick_stream(std::size_t k, bool delta, bool first) {
  static constexpr auto seq = std::make_index_sequence<max_fused>{};
  static constexpr auto plain_first = stream_table<false, true>(seq);
  static constexpr auto plain_more = stream_table<false, false>(seq);
  static constexpr auto delta_first = stream_table<true, true>(seq);
  static constexpr auto delta_more = stream_table<true, false>(seq);
  const std::size_t i = k - 1;
  if (!delta) {
    return first ? plain_first[i] : plain_more[i];
  }
  return first ? delta_first[i] : delta_more[i];
}

// The fused kernel with non-temporal stores for out. The head before out's first 64-byte boundary and
// the tail after its last whole line use fused_range (normal stores), so no line gets both kinds.
// Up to max_fused inputs: one streaming pass. More: per 8 KiB block, all passes but the last
// accumulate into an L1 buffer with fused<>, and the last pass streams the finished sums to out.
void fused_streaming(float* out, const fused_inputs& in, std::size_t len) {
  const auto misalign = reinterpret_cast<std::uintptr_t>(out) % 64;
  const std::size_t head = std::min(len, misalign == 0 ? 0 : (64 - misalign) / sizeof(float));
  const std::size_t body_end = head + (len - head) / line_floats * line_floats;
  fused_range(out, in, 0, head);
  std::array<const float*, max_fused> chunk{};
  const std::size_t last = (in.n - 1) / max_fused * max_fused;  // first input of the last pass
  const std::size_t k_last = in.n - last;
  if (last == 0) {
    for (std::size_t j = 0; j < k_last; ++j) {
      chunk[j] = in.xs[j] + head;
    }
    pick_stream(k_last, in.delta, true)(out + head, nullptr, chunk.data(), in.w, in.delta ? in.prev + head : nullptr,
                                        body_end - head);
  } else {
    alignas(64) std::array<float, stream_block_floats> acc;  // NOLINT(cppcoreguidelines-pro-type-member-init)
    for (std::size_t b = head; b < body_end; b += stream_block_floats) {
      const std::size_t m = std::min(stream_block_floats, body_end - b);
      const float* p = in.delta ? in.prev + b : nullptr;
      for (std::size_t i = 0; i < last; i += max_fused) {
        for (std::size_t j = 0; j < max_fused; ++j) {
          chunk[j] = in.xs[i + j] + b;
        }
        pick_fused(max_fused, in.delta, i == 0, false)(acc.data(), chunk.data(), in.w + i, p, m);
      }
      for (std::size_t j = 0; j < k_last; ++j) {
        chunk[j] = in.xs[last + j] + b;
      }
      pick_stream(k_last, in.delta, false)(out + b, acc.data(), chunk.data(), in.w + last, p, m);
    }
  }
  fused_range(out, in, body_end, len);
  // Non-temporal stores are weakly ordered: fence them before whatever publishes out to another thread.
  _mm_sfence();
}
#endif

// The core's private L2 (glibc's sysconf), clamped to [256 KiB, 16 MiB]; 1 MiB when the system does not
// say. An `out` larger than L2 leaves the core's fast cache anyway, so the read-for-ownership that
// streaming stores save is the bigger cost. Measured (bench/algorithms/data/HISTORY.md): on the AMD EPYC VM (1 MiB L2)
// 1M floats (4 MB) with two inputs run at 84 GB/s streaming against 51 GB/s with normal stores; on the
// Intel Xeon VM (2 MiB L2) the two policies tie at 1M floats and streaming wins at 10M. The earlier rule,
// half the last-level cache, kept 4 MB outputs on normal stores and missed 0.8x memcpy on the EPYC VM.
std::size_t default_streaming_threshold() noexcept {
  constexpr std::size_t floor = std::size_t{256} << 10U;
  constexpr std::size_t cap = std::size_t{16} << 20U;
  constexpr std::size_t fallback = std::size_t{1} << 20U;
  long l2 = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  return l2 > 0 ? std::clamp(static_cast<std::size_t>(l2), floor, cap) : fallback;
}

std::atomic<std::size_t> streaming_threshold_bytes{0};  // 0: default_streaming_threshold()
std::atomic<std::uint64_t> streaming_calls{0};

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
    case averaging_rule::uniform: std::fill(w.begin(), w.end(), 1.0 / static_cast<double>(n)); return w;
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
      if (rule == averaging_rule::by_samples) {
        for (std::size_t i = 0; i < n; ++i) {
          w[i] = inputs[i].samples / total;
        }
        return w;
      }
      // step_normalised. FedNova's p_i is worker i's share of the data, not of this round's samples: with
      // time-balanced intervals a round's samples grow with the steps a worker was *assigned*, and weighting by
      // them would let the fast workers' shards steer x̄ (objective inconsistency) and push τ_eff above the mean
      // interval. p_i ∝ samples_i / τ_i (its batch) does not depend on the assignment: equal batches give
      // p_i = 1/N (FedNova's share for equal shards), unequal ones weigh workers as synchronous mini-batch SGD
      // would, and with equal intervals it is by_samples again.
      double per_step_total = 0;
      for (std::size_t i = 0; i < n; ++i) {
        per_step_total += inputs[i].samples / inputs[i].steps;
      }
      double tau_eff = 0;
      for (std::size_t i = 0; i < n; ++i) {
        w[i] = inputs[i].samples / inputs[i].steps / per_step_total;
        tau_eff += w[i] * inputs[i].steps;
      }
      for (std::size_t i = 0; i < n; ++i) {
        w[i] = tau_eff * w[i] / inputs[i].steps;
      }
      return w;
    }
  }
  return fail(errc::invalid_argument, "average: unknown rule");
}

expected<void> average(std::span<const contribution> inputs, std::span<const float> previous, averaging_rule rule,
                       std::span<float> out) {
  return average(inputs, previous, rule, out, store_policy::automatic);
}

std::size_t streaming_store_threshold() noexcept {
  const std::size_t set = streaming_threshold_bytes.load(std::memory_order_relaxed);
  if (set != 0) {
    return set;
  }
  static const std::size_t fallback = default_streaming_threshold();
  return fallback;
}

std::size_t set_streaming_store_threshold(std::size_t bytes) noexcept {
  const std::size_t old = streaming_store_threshold();
  streaming_threshold_bytes.store(bytes, std::memory_order_relaxed);
  return old;
}

std::uint64_t streaming_store_calls() noexcept { return streaming_calls.load(std::memory_order_relaxed); }

expected<void> average(std::span<const contribution> inputs, std::span<const float> previous, averaging_rule rule,
                       std::span<float> out, store_policy policy) {
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
    return fail(errc::invalid_argument,
                "average: previous has " + std::to_string(previous.size()) + " floats, out has " + std::to_string(len));
  }
  if (!delta && !previous.empty() && previous.size() != len) {
    return fail(errc::invalid_argument,
                "average: previous has " + std::to_string(previous.size()) + " floats, out has " + std::to_string(len));
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
    const fused_inputs in{xs.data(), n, w.data(), delta ? previous.data() : nullptr, delta};
    const bool streaming = policy == store_policy::streaming ||
                           (policy == store_policy::automatic && len * sizeof(float) > streaming_store_threshold());
#if PRSGD_AVERAGING_STREAM_STORES
    if (streaming) {
      streaming_calls.fetch_add(1, std::memory_order_relaxed);
      fused_streaming(out.data(), in, len);
      return {};
    }
#else
    (void)streaming;
#endif
    fused_range(out.data(), in, 0, len);
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
