// SPDX-License-Identifier: Apache-2.0
// What the robust-aggregation kernel files share (aggregation/*.cpp: each builds one family of kernels, or one
// slice of the unequal-weight trimmed mean's patterns, in one vector width) and the dispatch in data/aggregation.cpp
// reads: the kernel templates, their argument structs and the tables of built kernels. GCC at -O3 builds every
// kernel three times (AVX2 and baseline clones, AVX-512); in one file they were the longest compile of the project,
// and as separate files they compile in parallel (algorithms/data.cmake). Private.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "unroll.hpp"

#if defined(__SSE__)
#include <xmmintrin.h>  // _mm_stream_ps, _mm_sfence: the SSE header alone, not all of immintrin.h in every kernel file
#endif

// The register kernels' helpers take and return 32-byte vectors, which warns about the ABI of AVX arguments
// where AVX is not enabled (GCC reports it at the end of the file, so the pragma must cover the rest of every
// file that includes this one); they are always inlined into their kernel, so no call crosses that ABI.
#pragma GCC diagnostic ignored "-Wpsabi"

// The register kernel for equal weights and N <= max_register_inputs: per coordinate, the N updates are
// loaded into N locals, sorted by Batcher's network (min/max, fully unrolled for the N at hand) and
// weighed with the fixed coefficients; the compiler vectorises the loop over coordinates, so the values
// never leave the vector registers. On x86-64 the kernels also get an AVX2 clone picked at load time
// (min/max and products: the same results on either path). Not under ThreadSanitizer: the clones'
// resolvers are IFUNCs that run before the TSan runtime starts (see algorithms/src/nn/layer_kernels.hpp).
#if defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
#define PRSGD_AGGREGATION_WIDE_VECTORS
#else
#define PRSGD_AGGREGATION_WIDE_VECTORS __attribute__((target_clones("avx2", "default")))
#endif

// On x86-64 every kernel is also built for AVX-512 with sixteen coordinates per vector, and picked at run time
// when the CPU has AVX-512F (and set_aggregation_lanes() allows it). Each lane still does the scalar arithmetic
// of one coordinate, so the results are the bits of the eight-lane kernels. The choice is a plain CPU check,
// not an IFUNC, so it works under ThreadSanitizer too.
#if defined(__x86_64__)
#define PRSGD_AGGREGATION_HAS_AVX512 1
#define PRSGD_AGGREGATION_AVX512 __attribute__((target("avx512f")))
#else
#define PRSGD_AGGREGATION_HAS_AVX512 0
#endif

// The kernels' lambdas take and return vectors: they must be inlined into the kernel (and so into its AVX2
// clone), or a call would cross the ABI the -Wpsabi pragma above is about.
#define PRSGD_AGGREGATION_INLINE __attribute__((always_inline))

namespace prsgd::algorithms::aggregation_kernels {

constexpr std::size_t max_register_inputs = 16;

struct register_args {
  const float* const* xs;
  const float* ref;   // never null here: zeros when the inputs are the updates
  const float* coef;  // N fixed coefficients, already multiplied by s
  float* out;
  std::size_t len;
  bool stream;  // non-temporal stores to out (see run_coordinates)
};

// The weighted kernel's cumulative weights, exact: each weight q_i = hi_i + lo_i · 2⁻⁵¹ with hi_i a multiple of
// 2⁻²⁴ (a float: any sum of them up to 1 is a float too) and lo_i an integer (|lo_i| ≤ 2²⁶: sums of 16 fit
// an int32), so summing them in sorted order loses nothing, whatever the order; only the distance of the sum
// from β is rounded, once, to float. That keeps the median's tie band (10⁻⁹ around 1/2) resolved: a
// cumulative weight exactly at 1/2 is seen exactly at 1/2.
constexpr double hi_grid = 16777216.0;          // 2^24
constexpr double lo_grid = 2251799813685248.0;  // 2^51
constexpr float lo_unit = 0x1p-51F;

// A weight split so (split() in data/aggregation.cpp).
struct split_weight {
  float hi = 0;
  std::int32_t lo = 0;
};

struct weighted_args {
  const float* const* xs;
  const float* ref;   // never null here: zeros when the inputs are the updates
  const float* q_hi;  // N weights (w_i / s), split
  const std::int32_t* q_lo;
  split_weight beta;  // the mass trimmed at each end, split
  float inv_keep;     // 1 / (1 − 2β)
  float scale;        // s
  float* out;
  std::size_t len;
  bool stream;  // non-temporal stores to out (see run_coordinates)
};

// The unequal-weight trimmed mean's kernel (the median keeps weighted_kernel and the windows: see quantized_trim_fits
// in data/aggregation.cpp). The weights are rounded to integers Q_i = round(q_i · (2^31 − 64)) (at least 1), whose sums
// are exact in int32 in any order; the trim is lo = round(β ΣQ) units at the bottom and as many at the top (hi = ΣQ −
// lo). Per coordinate the N updates are sorted by Batcher's network carrying their Q (compare, then select both), and
// the j-th smallest value v_(j) gets the kept mass m_j = T_j − T_{j−1} with T_j = clamp(c_j, lo, hi), c_j the Q of the
// j+1 smallest and T_{−1} = lo: the definition's max(0, min(c_j, 1 − β) − max(c_{j−1}, β)), in these units and exact.
// The result is s · 2^31 / (hi − lo) · Σ_j (m_j · 2^−31) v_(j) (computed on −u: see quantized_kernel). Rounding the
// weights moves every coefficient by at most about 2N · 2^−31 / (1 − 2β), which quantized_trim_fits keeps at or below
// 2^−24 (one float rounding of a coefficient of 1).
//
// The weights alone decide some c_j for every order of the values (run_quantized in data/aggregation.cpp works them
// out): c_j <= lo ("below": T_j = lo), lo <= c_j <= hi ("inside": T_j = c_j, and m_j = Q_(j) when c_{j−1} is inside
// too), c_j >= hi ("above": T_j = hi); the rest are clamped per coordinate ("undecided"). A kernel is built per
// pattern: c_j below for j < A, undecided in [A, B), inside in [B, C), undecided in [C, D), above from D on. (N, 0,
// N−1, N−1, N−1) fits any weights; near-equal weights leave at most two undecided. Every position is still summed (a
// surely trimmed one as 0 · v_(j)), so a NaN or infinite update makes the result NaN or infinite wherever it sorts, as
// in weighted_coordinate.
struct quantized_args {
  const float* const* xs;
  const float* ref;       // never null here: zeros when the inputs are the updates
  const std::int32_t* q;  // N weights in units: Σ q < 2^31
  std::int32_t lo;        // the mass trimmed at each end, in units
  std::int32_t hi;        // Σ q − lo
  float scale;            // s · 2^31 / (hi − lo)
  float* out;
  std::size_t len;
  bool stream;  // non-temporal stores to out (see run_coordinates)
};

constexpr double quantized_total = 2147483648.0 - 64.0;  // 2^31 − 64: Σ Q_i stays below 2^31
constexpr float kept_unit = 0x1p-31F;
// This kernel prefetches twice as far ahead as the others: at N = 8 and 2M floats that took about a quarter off
// its time (2.9 → 2.2 ms, medians of four alternating runs, bench/algorithms/data/HISTORY.md).
constexpr std::size_t quantized_prefetch_floats = 1024;
// The equal-weight window kernels (the median) prefetch only 64 floats ahead. Their time goes to the comparators'
// min/max (28 per vector at N = 8, one per cycle at sixteen lanes), and with far prefetches it did not overlap
// the memory traffic: at N = 8 and 2M floats the median took 1.49 ms with 64, 1.76 ms with 512 and 1.57 ms with
// none (medians of six alternating runs, bench/algorithms/data/HISTORY.md). Measured at N = 8 only.
constexpr std::size_t window_prefetch_floats = 64;

// The kernel templates and their helpers are in an unnamed namespace, so that each kernel file compiles its own
// copy with internal linkage: with them in a named namespace (vague linkage) GCC 12 builds most kernels with other
// stack layouts and operand orders, the same arithmetic but not the code the pinned bits and the benchmarks were
// taken with.
namespace {

struct comparator_list {
  std::array<std::pair<std::uint8_t, std::uint8_t>, 80> pairs{};  // Batcher's network for 16 has 63
  std::size_t size = 0;
};

constexpr comparator_list batcher(std::size_t n) {
  comparator_list net;
  for (std::size_t p = 1; p < n; p <<= 1U) {
    for (std::size_t k = p; k >= 1; k >>= 1U) {
      for (std::size_t j = k % p; j + k < n; j += 2 * k) {
        for (std::size_t i = 0; i < std::min(k, n - j - k); ++i) {
          if ((i + j) / (2 * p) == (i + j + k) / (2 * p)) {
            net.pairs[net.size++] = {static_cast<std::uint8_t>(i + j), static_cast<std::uint8_t>(i + j + k)};
          }
        }
      }
    }
  }
  return net;
}

// Batcher's network cut down to the sorted positions lo..hi (a selection network): working backwards from
// those outputs, a comparator none of whose outputs is read later is dropped, and one whose min (or max) alone
// is read later computes only that. The values at lo..hi are the same as after the full sort.
enum class comparator_kind : std::uint8_t { both, min_only, max_only };

struct selection_op {
  std::uint8_t lo = 0;
  std::uint8_t hi = 0;
  comparator_kind kind = comparator_kind::both;
};

struct selection_network {
  std::array<selection_op, 80> ops{};
  std::size_t size = 0;
};

constexpr selection_network selection(std::size_t n, std::size_t lo, std::size_t hi) {
  const comparator_list net = batcher(n);
  std::array<bool, 16> live{};
  for (std::size_t p = lo; p <= hi; ++p) {
    live[p] = true;
  }
  std::array<selection_op, 80> backwards{};
  std::size_t kept = 0;
  for (std::size_t q = net.size; q-- > 0;) {
    const auto [i, j] = net.pairs[q];
    if (!live[i] && !live[j]) {
      continue;
    }
    const comparator_kind kind = live[i] && live[j] ? comparator_kind::both
                                 : live[i]          ? comparator_kind::min_only
                                                    : comparator_kind::max_only;
    backwards[kept++] = {i, j, kind};
    live[i] = true;
    live[j] = true;
  }
  selection_network out;
  for (std::size_t q = kept; q-- > 0;) {
    out.ops[out.size++] = backwards[q];
  }
  return out;
}

// Runs selection(N, Lo, Hi) over v (a vector of coordinates, or one).
template <std::size_t N, std::size_t Lo, std::size_t Hi, class T>
[[gnu::always_inline]] inline void select_positions(T (&v)[N]) {
  static constexpr selection_network net = selection(N, Lo, Hi);
  PRSGD_UNROLL(80)
  for (std::size_t q = 0; q < net.size; ++q) {
    const std::size_t i = net.ops[q].lo;
    const std::size_t j = net.ops[q].hi;
    const T a = v[i];
    const T b = v[j];
    if (net.ops[q].kind != comparator_kind::max_only) {
      v[i] = b < a ? b : a;
    }
    if (net.ops[q].kind != comparator_kind::min_only) {
      v[j] = a < b ? b : a;
    }
  }
}

// The register kernels work on explicit vectors (GCC/Clang vector extensions) of lanes coordinates: left
// to the loop vectorizer, the kernels for N >= 10 came out scalar. Each lane does exactly the scalar
// arithmetic of one coordinate (the same comparisons, selections and operation order), so the results
// are the same bits as the scalar loop that finishes the last len % lanes coordinates.
using float8 = float __attribute__((vector_size(32)));
using int8v = std::int32_t __attribute__((vector_size(32)));
using float16 = float __attribute__((vector_size(64)));
using int16v = std::int32_t __attribute__((vector_size(64)));

// The number of coordinates in a vector V, and the int32 vector of the same width (input indices, weights).
template <class V>
inline constexpr std::size_t lanes_of = sizeof(V) / sizeof(float);

template <class V>
struct int_lanes;
template <>
struct int_lanes<float8> {
  using type = int8v;
};
template <>
struct int_lanes<float16> {
  using type = int16v;
};
template <class V>
using int_vector = typename int_lanes<V>::type;

template <class V>
[[gnu::always_inline]] inline V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <class V>
[[gnu::always_inline]] inline void store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// std::min and std::max, lane by lane: min(a, b) = b < a ? b : a, max(a, b) = a < b ? b : a.
template <class V>
[[gnu::always_inline]] inline V vmin(const V& a, const V& b) {
  return b < a ? b : a;
}
template <class V>
[[gnu::always_inline]] inline V vmax(const V& a, const V& b) {
  return a < b ? b : a;
}

// Asks for the cache line prefetch_floats ahead in every input and in ref, once per line (16 floats): with
// N + 1 streams the hardware prefetchers alone keep too few lines in flight, and the sort's arithmetic then
// waits for memory instead of overlapping it (the mean's streaming kernel does the same).
constexpr std::size_t prefetch_floats = 512;

template <std::size_t N, std::size_t Ahead = prefetch_floats>
[[gnu::always_inline]] inline void prefetch_ahead(const float* const (&x)[N], const float* ref, std::size_t k,
                                                  std::size_t first, std::size_t len) {
  if ((k - first) % 16 == 0 && k + Ahead < len) {
    PRSGD_UNROLL(16)
    for (std::size_t i = 0; i < N; ++i) {
      __builtin_prefetch(x[i] + k + Ahead);
    }
    __builtin_prefetch(ref + k + Ahead);
  }
}

// Runs a kernel over all coordinates: `lanes(k)` returns out[k .. k+8) as a vector, `one(k)` out[k] alone (the
// same arithmetic, lane for lane). With `stream`, the vectors are written with non-temporal stores, as the
// mean's kernel does above streaming_store_threshold(): out then costs no read-for-ownership and does not
// evict the inputs. Those stores need out on 16 bytes (any std::vector's buffer is); another out is written
// normally. One loop with the store chosen per vector, so that each body is expanded once.
template <std::size_t N, class V, std::size_t Ahead = prefetch_floats, class Lanes, class One>
[[gnu::always_inline]] inline void run_coordinates(const float* const (&x)[N], const float* ref, float* out,
                                                   std::size_t len, bool stream, const Lanes& lanes, const One& one) {
  constexpr std::size_t width = lanes_of<V>;
#if defined(__SSE__)
  stream = stream && reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
#else
  stream = false;
#endif
  std::size_t k = 0;
#if PRSGD_AGGREGATION_HAS_AVX512
  if constexpr (width == 16) {
    // Sixteen lanes stream with one 64-byte store, which needs out + k on 64 bytes: the first coordinates up to
    // there take the scalar loop (the same bits).
    if (stream) {
      for (; k < len && reinterpret_cast<std::uintptr_t>(out + k) % 64 != 0; ++k) {
        out[k] = one(k);
      }
    }
  }
#endif
  const std::size_t first = k;
  for (; k + width <= len; k += width) {
    prefetch_ahead<N, Ahead>(x, ref, k, first, len);
    const V v = lanes(k);
#if PRSGD_AGGREGATION_HAS_AVX512
    if constexpr (width == 16) {
      if (stream) {
#if defined(__clang__)
        __builtin_nontemporal_store(v, reinterpret_cast<V*>(out + k));
#else
        // vmovntps by hand: GCC would have to inline the intrinsic into this template, which is not built for
        // AVX-512 (only the kernels it is inlined into are).
        asm volatile("vmovntps %1, %0" : "=m"(*reinterpret_cast<V*>(out + k)) : "v"(v));
#endif
        continue;
      }
    }
#endif
#if defined(__SSE__)
    if (stream) {
      PRSGD_UNROLL(4)
      for (std::size_t q = 0; q < width; q += 4) {
        _mm_stream_ps(out + k + q, __m128{v[q], v[q + 1], v[q + 2], v[q + 3]});
      }
      continue;
    }
#endif
    store(out + k, v);
  }
#if defined(__SSE__)
  if (stream) {
    _mm_sfence();
  }
#endif
  for (; k < len; ++k) {
    out[k] = one(k);
  }
}

// Runs a kernel: for a vector V of coordinates at a time (then one), loads the N updates u_i = x_i − ref and
// writes ref + combine(u). out may alias ref: a coordinate's ref is read before its out is written.
template <std::size_t N, class V, std::size_t Ahead = prefetch_floats, class Combine>
[[gnu::always_inline]] inline void run_kernel(const float* const* xs, const float* ref, float* out, std::size_t len,
                                              bool stream, const Combine& combine) {
  const float* x[N];
  for (std::size_t i = 0; i < N; ++i) {
    x[i] = xs[i];
  }
  const auto lanes = [&](std::size_t k) PRSGD_AGGREGATION_INLINE {
    const auto r = load<V>(ref + k);
    V u[N];
    PRSGD_UNROLL(16)
    for (std::size_t i = 0; i < N; ++i) {
      u[i] = load<V>(x[i] + k) - r;
    }
    return r + combine(u);
  };
  const auto one = [&](std::size_t k) PRSGD_AGGREGATION_INLINE {
    float u[N];
    for (std::size_t i = 0; i < N; ++i) {
      u[i] = x[i][k] - ref[k];
    }
    return ref[k] + combine(u);
  };
  run_coordinates<N, V, Ahead>(x, ref, out, len, stream, lanes, one);
}

// One coordinate of the equal-weight kernel (T = float) or a vector of them (T = float8, float16).
template <std::size_t N, class T>
[[gnu::always_inline]] inline T register_coordinate(T (&v)[N], const float (&c)[N]) {
  static constexpr comparator_list net = batcher(N);
  PRSGD_UNROLL(80)
  for (std::size_t q = 0; q < net.size; ++q) {
    const T lo = vmin(v[net.pairs[q].first], v[net.pairs[q].second]);
    const T hi = vmax(v[net.pairs[q].first], v[net.pairs[q].second]);
    v[net.pairs[q].first] = lo;
    v[net.pairs[q].second] = hi;
  }
  T acc = T{} + 0.0F;
  PRSGD_UNROLL(16)
  for (std::size_t j = 0; j < N; ++j) {
    acc = acc + c[j] * v[j];
  }
  return acc;
}

template <std::size_t N, class V>
[[gnu::always_inline]] inline void register_kernel(const register_args& a) {
  float c[N];
  for (std::size_t i = 0; i < N; ++i) {
    c[i] = a.coef[i];
  }
  run_kernel<N, V>(a.xs, a.ref, a.out, a.len, a.stream,
                   [&](auto(&v)[N]) PRSGD_AGGREGATION_INLINE { return register_coordinate<N>(v, c); });
}

// The equal-weight kernel when only the sorted positions Lo..Hi have a nonzero coefficient (the median: the
// middle one or two): the network is cut down to those positions (selection()), which for the median drops
// about a third of the comparators' operations. Same arithmetic order as register_kernel otherwise.
template <std::size_t N, std::size_t Lo, std::size_t Hi, class V>
[[gnu::always_inline]] inline void register_window_kernel(const register_args& a) {
  float c[N];
  for (std::size_t i = 0; i < N; ++i) {
    c[i] = a.coef[i];
  }
  run_kernel<N, V, window_prefetch_floats>(a.xs, a.ref, a.out, a.len, a.stream,
                                           [&](auto(&v)[N]) PRSGD_AGGREGATION_INLINE {
                                             select_positions<N, Lo, Hi>(v);
                                             auto acc = std::remove_reference_t<decltype(v[0])>{} + 0.0F;
                                             PRSGD_UNROLL(16)
                                             for (std::size_t j = Lo; j <= Hi; ++j) {
                                               acc = acc + c[j] * v[j];
                                             }
                                             return acc;
                                           });
}

[[gnu::always_inline]] inline float to_float(std::int32_t v) { return static_cast<float>(v); }
[[gnu::always_inline]] inline float8 to_float(const int8v& v) { return __builtin_convertvector(v, float8); }
[[gnu::always_inline]] inline float16 to_float(const int16v& v) { return __builtin_convertvector(v, float16); }

// Sorts v[0..N) by Batcher's network, moving payload[i] (an input's index or its integer weight) with v[i]:
// compare, then select both pairs. Shared by the unequal-weight kernels.
template <std::size_t N, class T, class P>
[[gnu::always_inline]] inline void sort_carrying(T (&v)[N], P (&payload)[N]) {
  static constexpr comparator_list net = batcher(N);
  PRSGD_UNROLL(80)
  for (std::size_t c = 0; c < net.size; ++c) {
    const std::size_t i = net.pairs[c].first;
    const std::size_t j = net.pairs[c].second;
    const auto swap = v[j] < v[i];
    const T va = v[i];
    const T vb = v[j];
    const P pa = payload[i];
    const P pb = payload[j];
    v[i] = swap ? vb : va;
    v[j] = swap ? va : vb;
    payload[i] = swap ? pb : pa;
    payload[j] = swap ? pa : pb;
  }
}

// The register kernel for unequal weights and N <= max_register_inputs: per coordinate, the N updates (in
// float, as the equal-weight kernel has them) are sorted by Batcher's network carrying each one's input
// index (compare, then select both). The j-th smallest value is weighed by t_j − t_{j−1}, where t_j =
// clamp((c_j − β) / (1 − 2β), 0, 1) and c_j is the weight of the j smallest values (split, as above):
// t_j − t_{j−1} = max(0, min(c_j, 1 − β) − max(c_{j−1}, β)) / (1 − 2β), the definition. `weight(id)` returns
// the split weights of the inputs `id` names. A vector of coordinates at a time, every lane the scalar arithmetic.
template <std::size_t N, class T, class I, class Weight>
[[gnu::always_inline]] inline T weighted_coordinate(T (&v)[N], I (&id)[N], const weighted_args& a,
                                                    const Weight& weight) {
  sort_carrying<N>(v, id);
  const T zero = T{} + 0.0F;
  const T one = zero + 1.0F;
  T cum_hi = zero - a.beta.hi;
  I cum_lo = I{} - a.beta.lo;
  T below = zero;
  T acc = zero;
  PRSGD_UNROLL(16)
  for (std::size_t j = 0; j + 1 < N; ++j) {
    const auto [hi, lo] = weight(id[j]);
    cum_hi = cum_hi + hi;
    cum_lo = cum_lo + lo;
    const T from_beta = cum_hi + to_float(cum_lo) * lo_unit;
    const T upto = vmin(one, vmax(zero, from_beta * a.inv_keep));
    acc = acc + (upto - below) * v[j];
    below = upto;
  }
  acc = acc + (one - below) * v[N - 1];  // the last value closes the mass exactly
  // One NaN for every NaN result: which of two NaNs an addition returns (an input's, or the one 0 · ∞ makes)
  // depends on the operand order the compiler picked, which may differ between the lanes and the scalar loop.
  return acc == acc ? acc : zero + std::numeric_limits<float>::quiet_NaN();
}

// Returns table[id] lane by lane, for the entries of one or two vectors (T = 1 or 2).
template <std::size_t T, class V, class I>
[[gnu::always_inline]] inline V lookup(const V (&table)[T], const I& id) {
  constexpr std::size_t width = sizeof(V) / sizeof(table[0][0]);
#if defined(__clang__)
  V r;
  for (std::size_t l = 0; l < width; ++l) {
    const auto i = static_cast<std::size_t>(id[l]);
    r[l] = table[i / width][i % width];
  }
  return r;
#else
  if constexpr (T == 1) {
    return __builtin_shuffle(table[0], id);  // one permute
  } else {
    static_assert(width > 0 && T == 2);
    return __builtin_shuffle(table[0], table[1], id);  // two permutes and a blend (AVX2)
  }
#endif
}

template <std::size_t N, class V>
[[gnu::always_inline]] inline void weighted_kernel(const weighted_args& a) {
  using I = int_vector<V>;
  constexpr std::size_t width = lanes_of<V>;
  constexpr std::size_t tables = (N + width - 1) / width;
  V hi_table[tables]{};
  I lo_table[tables]{};
  for (std::size_t i = 0; i < N; ++i) {
    hi_table[i / width][i % width] = a.q_hi[i];
    lo_table[i / width][i % width] = a.q_lo[i];
  }
  const float scale = a.scale;
  const auto lanes_weight = [&](const I& id) PRSGD_AGGREGATION_INLINE {
    return std::pair{lookup(hi_table, id), lookup(lo_table, id)};
  };
  const auto scalar_weight = [&](std::int32_t id) PRSGD_AGGREGATION_INLINE {
    return std::pair{a.q_hi[id], a.q_lo[id]};
  };
  run_kernel<N, V>(a.xs, a.ref, a.out, a.len, a.stream, [&](auto(&v)[N]) PRSGD_AGGREGATION_INLINE {
    if constexpr (std::is_same_v<std::remove_reference_t<decltype(v[0])>, V>) {
      I id[N];
      PRSGD_UNROLL(16)
      for (std::size_t i = 0; i < N; ++i) {
        id[i] = I{} + static_cast<std::int32_t>(i);
      }
      return scale * weighted_coordinate<N>(v, id, a, lanes_weight);
    } else {
      std::int32_t id[N];
      for (std::size_t i = 0; i < N; ++i) {
        id[i] = static_cast<std::int32_t>(i);
      }
      return scale * weighted_coordinate<N>(v, id, a, scalar_weight);
    }
  });
}

// The unequal-weight kernel when the weights leave only the cumulative weights c_Lo .. c_{Hi-1} undecided
// (c_j: the weight of the j+1 smallest values): every c_j below Lo is surely under β, every one from Hi on
// surely above 1 − β, whatever order the values come in (coordinate_rule checks this from the weights). The
// result then is Σ_{j=Lo..Hi} (t_j − t_{j−1}) v_(j) with t_{Lo−1} = 0 and t_Hi = 1, as in weighted_coordinate.
// For the median with near-equal weights that is one or two positions. The values v_(Lo) .. v_(Hi) come from
// the cut-down network (no indices carried), and c_j is the weight of the inputs whose value is <= v_(j),
// summed exactly (split weights, as above). When v_(j) = v_(j+1) that count takes in more than j+1 values, but
// then t_j only splits the coefficient between two equal values, which leaves the sum as it is; at the last of
// a run of equal values the count is exact. Any NaN or infinite update makes the coordinate NaN (the sorted
// window alone could hide it), so the averager's finiteness check refuses the round.
template <std::size_t N, std::size_t Lo, std::size_t Hi, class T, class I, class Weight>
[[gnu::always_inline]] inline T window_weighted_coordinate(const T (&u)[N], const weighted_args& a,
                                                           const Weight& weight) {
  T v[N];
  PRSGD_UNROLL(16)
  for (std::size_t i = 0; i < N; ++i) {
    v[i] = u[i];
  }
  select_positions<N, Lo, Hi>(v);
  const T zero = T{} + 0.0F;
  const T one = zero + 1.0F;
  T below = zero;
  T acc = zero;
  PRSGD_UNROLL(16)
  for (std::size_t j = Lo; j < Hi; ++j) {
    T cum_hi = zero - a.beta.hi;
    I cum_lo = I{} - a.beta.lo;
    PRSGD_UNROLL(16)
    for (std::size_t i = 0; i < N; ++i) {
      const auto [hi, lo] = weight(i);
      const auto in = u[i] <= v[j];
      cum_hi = cum_hi + (in ? hi : zero);
      cum_lo = cum_lo + (in ? lo : I{});
    }
    const T from_beta = cum_hi + to_float(cum_lo) * lo_unit;
    const T upto = vmin(one, vmax(zero, from_beta * a.inv_keep));
    acc = acc + (upto - below) * v[j];
    below = upto;
  }
  acc = acc + (one - below) * v[Hi];
  T total = u[0];
  PRSGD_UNROLL(16)
  for (std::size_t i = 1; i < N; ++i) {
    total = total + u[i];
  }
  return total - total == zero ? acc : zero + std::numeric_limits<float>::quiet_NaN();
}

template <std::size_t N, std::size_t Lo, std::size_t Hi, class V>
[[gnu::always_inline]] inline void weighted_window_kernel(const weighted_args& a) {
  using I = int_vector<V>;
  V hi_lanes[N];
  I lo_lanes[N];
  for (std::size_t i = 0; i < N; ++i) {
    hi_lanes[i] = V{} + a.q_hi[i];
    lo_lanes[i] = I{} + a.q_lo[i];
  }
  const float scale = a.scale;
  const auto lanes_weight = [&](std::size_t i) PRSGD_AGGREGATION_INLINE { return std::pair{hi_lanes[i], lo_lanes[i]}; };
  const auto scalar_weight = [&](std::size_t i) PRSGD_AGGREGATION_INLINE { return std::pair{a.q_hi[i], a.q_lo[i]}; };
  run_kernel<N, V>(a.xs, a.ref, a.out, a.len, a.stream, [&](auto(&u)[N]) PRSGD_AGGREGATION_INLINE {
    if constexpr (std::is_same_v<std::remove_reference_t<decltype(u[0])>, V>) {
      return scale * window_weighted_coordinate<N, Lo, Hi, V, I>(u, a, lanes_weight);
    } else {
      return scale * window_weighted_coordinate<N, Lo, Hi, float, std::int32_t>(u, a, scalar_weight);
    }
  });
}

// What the weights alone decide for position j of a kernel's pattern (A, B, C, D): see quantized_args.
enum class mass_status : std::uint8_t { below, undecided, inside, above };

template <std::size_t A, std::size_t B, std::size_t C, std::size_t D>
constexpr mass_status status_at(std::size_t j) {
  if (j < A) {
    return mass_status::below;
  }
  if (j < B) {
    return mass_status::undecided;
  }
  if (j < C) {
    return mass_status::inside;
  }
  return j < D ? mass_status::undecided : mass_status::above;
}

// One coordinate (T = float, I = int32) or a vector of them of the unequal-weight trimmed mean before its scale:
// Σ_j (m_j · 2^−31) v_(j) with the integer weights w (see quantized_args); the positions the pattern decides
// skip the clamp.
template <std::size_t N, std::size_t A, std::size_t B, std::size_t C, std::size_t D, class T, class I>
[[gnu::always_inline]] inline T quantized_coordinate(T (&v)[N], I (&w)[N], std::int32_t lo_units,
                                                     std::int32_t hi_units) {
  sort_carrying<N>(v, w);
  const T zero = T{} + 0.0F;
  const I lo = I{} + lo_units;
  const I hi = I{} + hi_units;
  I cum = I{};
  I below = lo;  // T_{j−1}
  T acc = zero;
  PRSGD_UNROLL(16)
  for (std::size_t j = 0; j < N; ++j) {
    const mass_status now = status_at<A, B, C, D>(j);
    const mass_status before = j == 0 ? mass_status::below : status_at<A, B, C, D>(j - 1);
    if (now != mass_status::above) {
      cum = cum + w[j];
    }
    I upto = hi;
    if (now == mass_status::below) {
      upto = lo;
    } else if (now == mass_status::inside) {
      upto = cum;
    } else if (now == mass_status::undecided) {
      upto = vmin(hi, vmax(lo, cum));
    }
    if (now == mass_status::below || (now == mass_status::above && before == mass_status::above)) {
      acc = acc + zero * v[j];  // m_j = 0, but a NaN or infinity still shows
    } else {
      const I kept = now == mass_status::inside && before == mass_status::inside ? w[j] : upto - below;
      acc = acc + to_float(kept) * kept_unit * v[j];
    }
    below = upto;
  }
  // One NaN for every NaN result, as in weighted_coordinate.
  return acc == acc ? acc : zero + std::numeric_limits<float>::quiet_NaN();
}

// Runs quantized_coordinate over the negated updates ref − x_i: the subtraction then reads x_i straight from memory
// (one instruction per input, not a load and a subtraction). The trimmed mean is odd, A(−u) = −A(u), for the trim
// is the same at both ends, so out = ref − s · A(ref − x).
template <std::size_t N, std::size_t A, std::size_t B, std::size_t C, std::size_t D, class V>
[[gnu::always_inline]] inline void quantized_kernel(const quantized_args& a) {
  using I = int_vector<V>;
  const float* x[N];
  I q_lanes[N];
  for (std::size_t i = 0; i < N; ++i) {
    x[i] = a.xs[i];
    q_lanes[i] = I{} + a.q[i];
  }
  const float* ref = a.ref;
  const float scale = a.scale;
  const std::int32_t lo = a.lo;  // locals: the stores to out could alias a
  const std::int32_t hi = a.hi;
  const auto lanes = [&](std::size_t k) PRSGD_AGGREGATION_INLINE {
    const auto r = load<V>(ref + k);
    V u[N];
    I w[N];
    PRSGD_UNROLL(16)
    for (std::size_t i = 0; i < N; ++i) {
      u[i] = r - load<V>(x[i] + k);
      w[i] = q_lanes[i];
    }
    return r - scale * quantized_coordinate<N, A, B, C, D>(u, w, lo, hi);
  };
  const auto one = [&](std::size_t k) PRSGD_AGGREGATION_INLINE {
    float u[N];
    std::int32_t w[N];
    for (std::size_t i = 0; i < N; ++i) {
      u[i] = ref[k] - x[i][k];
      w[i] = a.q[i];
    }
    return ref[k] - scale * quantized_coordinate<N, A, B, C, D>(u, w, lo, hi);
  };
  run_coordinates<N, V, quantized_prefetch_floats>(x, ref, a.out, a.len, a.stream, lanes, one);
}

}  // namespace

// The kernels built, in tables of function pointers: one table per family and vector width, defined with its
// kernels in the file of the family's name under aggregation/. `_narrow`: eight coordinates per vector (the AVX2
// and baseline clones); `_wide`: sixteen (AVX-512), the tables data/aggregation.cpp picks when the CPU has
// AVX-512F and set_aggregation_lanes() allows it. They hold addresses only, so they are constant-initialised and
// may be read at any time.
template <class Args>
using kernel = void (*)(const Args&);

// X(N) for N = 1 .. max_register_inputs.
#define PRSGD_AGGREGATION_SIZES(X) \
  X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)

// The full-sort kernels (register_kernel, weighted_kernel) for N inputs, at index N − 1.
template <class Args>
using sort_kernels = std::array<kernel<Args>, max_register_inputs>;

// The window kernels (register_window_kernel, weighted_window_kernel) built: for even N the two middle
// positions, for odd N the middle one and the pairs around it (the median of equal or near-equal weights).
// Other windows take the full-sort kernels.
// clang-format off
// X(N, LO, HI) for every window built.
#define PRSGD_AGGREGATION_WINDOWS(X) \
  X(1, 0, 0) X(2, 0, 1) X(3, 1, 1) X(3, 0, 1) X(3, 1, 2) X(4, 1, 2) X(5, 2, 2) X(5, 1, 2) X(5, 2, 3) \
  X(6, 2, 3) X(7, 3, 3) X(7, 2, 3) X(7, 3, 4) X(8, 3, 4) X(9, 4, 4) X(9, 3, 4) X(9, 4, 5) X(10, 4, 5) \
  X(11, 5, 5) X(11, 4, 5) X(11, 5, 6) X(12, 5, 6) X(13, 6, 6) X(13, 5, 6) X(13, 6, 7) X(14, 6, 7) X(15, 7, 7) \
  X(15, 6, 7) X(15, 7, 8) X(16, 7, 8)
// clang-format on

struct window_shape {
  std::size_t n;
  std::size_t lo;
  std::size_t hi;
};

#define PRSGD_AGGREGATION_WINDOW_SHAPE(N, LO, HI) window_shape{N, LO, HI},
inline constexpr std::array window_shapes{PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_WINDOW_SHAPE)};
#undef PRSGD_AGGREGATION_WINDOW_SHAPE

// The window kernels, in the order of window_shapes.
template <class Args>
using window_kernels = std::array<kernel<Args>, window_shapes.size()>;

// The unequal-weight trimmed mean's patterns built (quantized_kernel), in four slices by N: the eight-lane kernels
// of all of them took about as long to compile as all other kernels together, so each slice has its own files.
// Within an N the more specific patterns come first (run_quantized takes the first that fits): those of near-equal
// weights (sample counts that differ by a few per cent) at β = 0.25 for every N, at β = 0.1 and 0.2 for N = 8,
// then the one that fits any weights.
// clang-format off
// X(N, A, B, C, D) for every pattern of a slice.
#define PRSGD_AGGREGATION_QUANTIZED_1_10(X) \
  X(2, 0, 0, 1, 1) X(3, 0, 0, 2, 2) X(4, 0, 1, 2, 3) X(5, 1, 1, 3, 3) X(6, 1, 1, 4, 4) X(7, 1, 1, 5, 5) \
  X(8, 1, 2, 5, 6) X(8, 1, 1, 6, 6) X(8, 0, 0, 7, 7) X(9, 2, 2, 6, 6) X(10, 2, 2, 7, 7) \
  X(1, 0, 0, 0, 0) X(2, 0, 1, 1, 1) X(3, 0, 2, 2, 2) X(4, 0, 3, 3, 3) X(5, 0, 4, 4, 4) X(6, 0, 5, 5, 5) \
  X(7, 0, 6, 6, 6) X(8, 0, 7, 7, 7) X(9, 0, 8, 8, 8) X(10, 0, 9, 9, 9)
#define PRSGD_AGGREGATION_QUANTIZED_11_13(X) \
  X(11, 2, 2, 8, 8) X(12, 2, 3, 8, 9) X(13, 3, 3, 9, 9) \
  X(11, 0, 10, 10, 10) X(12, 0, 11, 11, 11) X(13, 0, 12, 12, 12)
#define PRSGD_AGGREGATION_QUANTIZED_14_15(X) \
  X(14, 3, 3, 10, 10) X(15, 3, 3, 11, 11) X(14, 0, 13, 13, 13) X(15, 0, 14, 14, 14)
#define PRSGD_AGGREGATION_QUANTIZED_16(X) \
  X(16, 3, 4, 11, 12) X(16, 0, 15, 15, 15)
// clang-format on
// X(N, A, B, C, D) for every pattern, the slices in order.
#define PRSGD_AGGREGATION_QUANTIZED(X) \
  PRSGD_AGGREGATION_QUANTIZED_1_10(X)  \
  PRSGD_AGGREGATION_QUANTIZED_11_13(X) PRSGD_AGGREGATION_QUANTIZED_14_15(X) PRSGD_AGGREGATION_QUANTIZED_16(X)

struct quantized_shape {
  std::size_t n;
  std::size_t a;
  std::size_t b;
  std::size_t c;
  std::size_t d;
};

#define PRSGD_AGGREGATION_QUANTIZED_SHAPE(N, A, B, C, D) quantized_shape{N, A, B, C, D},
inline constexpr std::array quantized_shapes{PRSGD_AGGREGATION_QUANTIZED(PRSGD_AGGREGATION_QUANTIZED_SHAPE)};
#undef PRSGD_AGGREGATION_QUANTIZED_SHAPE

// The quantized kernels of one slice, in the order of its patterns (so the slices in order follow quantized_shapes).
#define PRSGD_AGGREGATION_QUANTIZED_COUNT(N, A, B, C, D) +1
using quantized_kernels_1_10 =
    std::array<kernel<quantized_args>, 0 PRSGD_AGGREGATION_QUANTIZED_1_10(PRSGD_AGGREGATION_QUANTIZED_COUNT)>;
using quantized_kernels_11_13 =
    std::array<kernel<quantized_args>, 0 PRSGD_AGGREGATION_QUANTIZED_11_13(PRSGD_AGGREGATION_QUANTIZED_COUNT)>;
using quantized_kernels_14_15 =
    std::array<kernel<quantized_args>, 0 PRSGD_AGGREGATION_QUANTIZED_14_15(PRSGD_AGGREGATION_QUANTIZED_COUNT)>;
using quantized_kernels_16 =
    std::array<kernel<quantized_args>, 0 PRSGD_AGGREGATION_QUANTIZED_16(PRSGD_AGGREGATION_QUANTIZED_COUNT)>;
#undef PRSGD_AGGREGATION_QUANTIZED_COUNT

// What each quantized_<slice>_<width>.cpp builds, applied to its slice's pattern list: one kernel per pattern
// (in an unnamed namespace there) and the entries of the slice's table, in the same order.
#define PRSGD_AGGREGATION_QUANTIZED_NARROW(N, A, B, C, D)                                                 \
  PRSGD_AGGREGATION_WIDE_VECTORS void quantized_##N##_##A##_##B##_##C##_##D(const quantized_args& args) { \
    quantized_kernel<N, A, B, C, D, float8>(args);                                                        \
  }
#define PRSGD_AGGREGATION_QUANTIZED_NARROW_ENTRY(N, A, B, C, D) &quantized_##N##_##A##_##B##_##C##_##D,
#if PRSGD_AGGREGATION_HAS_AVX512
#define PRSGD_AGGREGATION_QUANTIZED_WIDE(N, A, B, C, D)                                                    \
  PRSGD_AGGREGATION_AVX512 void quantized_##N##_##A##_##B##_##C##_##D##_wide(const quantized_args& args) { \
    quantized_kernel<N, A, B, C, D, float16>(args);                                                        \
  }
#define PRSGD_AGGREGATION_QUANTIZED_WIDE_ENTRY(N, A, B, C, D) &quantized_##N##_##A##_##B##_##C##_##D##_wide,
#endif

extern const sort_kernels<register_args> register_kernels_narrow;    // register_narrow.cpp
extern const window_kernels<register_args> register_windows_narrow;  // register_window_narrow.cpp
extern const sort_kernels<weighted_args> weighted_kernels_narrow;    // weighted_narrow.cpp
extern const window_kernels<weighted_args> weighted_windows_narrow;  // weighted_window_narrow.cpp
extern const quantized_kernels_1_10 quantized_1_10_narrow;           // quantized_1_10_narrow.cpp
extern const quantized_kernels_11_13 quantized_11_13_narrow;         // quantized_11_13_narrow.cpp
extern const quantized_kernels_14_15 quantized_14_15_narrow;         // quantized_14_15_narrow.cpp
extern const quantized_kernels_16 quantized_16_narrow;               // quantized_16_narrow.cpp
#if PRSGD_AGGREGATION_HAS_AVX512
extern const sort_kernels<register_args> register_kernels_wide;    // register_wide.cpp
extern const window_kernels<register_args> register_windows_wide;  // register_window_wide.cpp
extern const sort_kernels<weighted_args> weighted_kernels_wide;    // weighted_wide.cpp
extern const window_kernels<weighted_args> weighted_windows_wide;  // weighted_window_wide.cpp
extern const quantized_kernels_1_10 quantized_1_10_wide;           // quantized_1_10_wide.cpp
extern const quantized_kernels_11_13 quantized_11_13_wide;         // quantized_11_13_wide.cpp
extern const quantized_kernels_14_15 quantized_14_15_wide;         // quantized_14_15_wide.cpp
extern const quantized_kernels_16 quantized_16_wide;               // quantized_16_wide.cpp
#else
// One width only: the "wide" tables are the narrow ones (the *_wide.cpp files build nothing).
inline constexpr const auto& register_kernels_wide = register_kernels_narrow;
inline constexpr const auto& register_windows_wide = register_windows_narrow;
inline constexpr const auto& weighted_kernels_wide = weighted_kernels_narrow;
inline constexpr const auto& weighted_windows_wide = weighted_windows_narrow;
inline constexpr const auto& quantized_1_10_wide = quantized_1_10_narrow;
inline constexpr const auto& quantized_11_13_wide = quantized_11_13_narrow;
inline constexpr const auto& quantized_14_15_wide = quantized_14_15_narrow;
inline constexpr const auto& quantized_16_wide = quantized_16_narrow;
#endif

}  // namespace prsgd::algorithms::aggregation_kernels
