// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/aggregation.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "unroll.hpp"

#if defined(__SSE__)
#include <immintrin.h>
#endif

// The register kernels' helpers take and return 32-byte vectors, which warns about the ABI of AVX
// arguments where AVX is not enabled (GCC reports it at the end of the file, so the pragma covers the
// file); they are always inlined into their kernel, so no call crosses that ABI.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace prsgd::algorithms {
namespace {

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

constexpr std::size_t max_register_inputs = 16;

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

struct register_args {
  const float* const* xs;
  const float* ref;   // never null here: zeros when the inputs are the updates
  const float* coef;  // N fixed coefficients, already multiplied by s
  float* out;
  std::size_t len;
  bool stream;  // non-temporal stores to out (see run_coordinates)
};

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

template <std::size_t N>
[[gnu::always_inline]] inline void prefetch_ahead(const float* const (&x)[N], const float* ref, std::size_t k,
                                                  std::size_t len) {
  if (k % 16 == 0 && k + prefetch_floats < len) {
    PRSGD_UNROLL(16)
    for (std::size_t i = 0; i < N; ++i) {
      __builtin_prefetch(x[i] + k + prefetch_floats);
    }
    __builtin_prefetch(ref + k + prefetch_floats);
  }
}

// Runs a kernel over all coordinates: `lanes(k)` returns out[k .. k+8) as a vector, `one(k)` out[k] alone (the
// same arithmetic, lane for lane). With `stream`, the vectors are written with non-temporal stores, as the
// mean's kernel does above streaming_store_threshold(): out then costs no read-for-ownership and does not
// evict the inputs. Those stores need out on 16 bytes (any std::vector's buffer is); another out is written
// normally. One loop with the store chosen per vector, so that each body is expanded once.
template <std::size_t N, class V, class Lanes, class One>
[[gnu::always_inline]] inline void run_coordinates(const float* const (&x)[N], const float* ref, float* out,
                                                   std::size_t len, bool stream, const Lanes& lanes, const One& one) {
  constexpr std::size_t width = lanes_of<V>;
#if defined(__SSE__)
  stream = stream && reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
#else
  stream = false;
#endif
  std::size_t k = 0;
  for (; k + width <= len; k += width) {
    prefetch_ahead<N>(x, ref, k, len);
    const V v = lanes(k);
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
template <std::size_t N, class V, class Combine>
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
  run_coordinates<N, V>(x, ref, out, len, stream, lanes, one);
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

// Each kernel in two widths: eight coordinates per vector (the AVX2 and baseline clones) and sixteen (AVX-512).
template <class Args>
struct kernel_pair {
  void (*narrow)(const Args&);
  void (*wide)(const Args&);
};
using register_kernel_pair = kernel_pair<register_args>;

#if PRSGD_AGGREGATION_HAS_AVX512
#define PRSGD_AGGREGATION_REGISTER_KERNEL(N)                                                                         \
  PRSGD_AGGREGATION_WIDE_VECTORS void register_kernel_##N(const register_args& a) { register_kernel<N, float8>(a); } \
  PRSGD_AGGREGATION_AVX512 void register_kernel_##N##_wide(const register_args& a) { register_kernel<N, float16>(a); }
#define PRSGD_AGGREGATION_REGISTER_PAIR(N) \
  register_kernel_pair { &register_kernel_##N, &register_kernel_##N##_wide }
#else
#define PRSGD_AGGREGATION_REGISTER_KERNEL(N) \
  PRSGD_AGGREGATION_WIDE_VECTORS void register_kernel_##N(const register_args& a) { register_kernel<N, float8>(a); }
#define PRSGD_AGGREGATION_REGISTER_PAIR(N) \
  register_kernel_pair { &register_kernel_##N, &register_kernel_##N }
#endif
PRSGD_AGGREGATION_REGISTER_KERNEL(1)
PRSGD_AGGREGATION_REGISTER_KERNEL(2)
PRSGD_AGGREGATION_REGISTER_KERNEL(3)
PRSGD_AGGREGATION_REGISTER_KERNEL(4)
PRSGD_AGGREGATION_REGISTER_KERNEL(5)
PRSGD_AGGREGATION_REGISTER_KERNEL(6)
PRSGD_AGGREGATION_REGISTER_KERNEL(7)
PRSGD_AGGREGATION_REGISTER_KERNEL(8)
PRSGD_AGGREGATION_REGISTER_KERNEL(9)
PRSGD_AGGREGATION_REGISTER_KERNEL(10)
PRSGD_AGGREGATION_REGISTER_KERNEL(11)
PRSGD_AGGREGATION_REGISTER_KERNEL(12)
PRSGD_AGGREGATION_REGISTER_KERNEL(13)
PRSGD_AGGREGATION_REGISTER_KERNEL(14)
PRSGD_AGGREGATION_REGISTER_KERNEL(15)
PRSGD_AGGREGATION_REGISTER_KERNEL(16)
#undef PRSGD_AGGREGATION_REGISTER_KERNEL

constexpr std::array<register_kernel_pair, max_register_inputs> register_kernels{
    PRSGD_AGGREGATION_REGISTER_PAIR(1),  PRSGD_AGGREGATION_REGISTER_PAIR(2),  PRSGD_AGGREGATION_REGISTER_PAIR(3),
    PRSGD_AGGREGATION_REGISTER_PAIR(4),  PRSGD_AGGREGATION_REGISTER_PAIR(5),  PRSGD_AGGREGATION_REGISTER_PAIR(6),
    PRSGD_AGGREGATION_REGISTER_PAIR(7),  PRSGD_AGGREGATION_REGISTER_PAIR(8),  PRSGD_AGGREGATION_REGISTER_PAIR(9),
    PRSGD_AGGREGATION_REGISTER_PAIR(10), PRSGD_AGGREGATION_REGISTER_PAIR(11), PRSGD_AGGREGATION_REGISTER_PAIR(12),
    PRSGD_AGGREGATION_REGISTER_PAIR(13), PRSGD_AGGREGATION_REGISTER_PAIR(14), PRSGD_AGGREGATION_REGISTER_PAIR(15),
    PRSGD_AGGREGATION_REGISTER_PAIR(16)};
#undef PRSGD_AGGREGATION_REGISTER_PAIR

// The equal-weight kernel when only the sorted positions Lo..Hi have a nonzero coefficient (the median: the
// middle one or two): the network is cut down to those positions (selection()), which for the median drops
// about a third of the comparators' operations. Same arithmetic order as register_kernel otherwise.
template <std::size_t N, std::size_t Lo, std::size_t Hi, class V>
[[gnu::always_inline]] inline void register_window_kernel(const register_args& a) {
  float c[N];
  for (std::size_t i = 0; i < N; ++i) {
    c[i] = a.coef[i];
  }
  run_kernel<N, V>(a.xs, a.ref, a.out, a.len, a.stream, [&](auto(&v)[N]) PRSGD_AGGREGATION_INLINE {
    select_positions<N, Lo, Hi>(v);
    auto acc = std::remove_reference_t<decltype(v[0])>{} + 0.0F;
    PRSGD_UNROLL(16)
    for (std::size_t j = Lo; j <= Hi; ++j) {
      acc = acc + c[j] * v[j];
    }
    return acc;
  });
}

// The weighted kernel's cumulative weights, exact: each weight q_i = hi_i + lo_i · 2⁻⁵¹ with hi_i a multiple of
// 2⁻²⁴ (a float: any sum of them up to 1 is a float too) and lo_i an integer (|lo_i| ≤ 2²⁶: sums of 16 fit
// an int32), so summing them in sorted order loses nothing, whatever the order; only the distance of the sum
// from β is rounded, once, to float. That keeps the median's tie band (10⁻⁹ around 1/2) resolved: a
// cumulative weight exactly at 1/2 is seen exactly at 1/2.
constexpr double hi_grid = 16777216.0;          // 2^24
constexpr double lo_grid = 2251799813685248.0;  // 2^51
constexpr float lo_unit = 0x1p-51F;

struct split_weight {
  float hi = 0;
  std::int32_t lo = 0;
};

split_weight split(double q) {
  const double hi = std::nearbyint(q * hi_grid) / hi_grid;
  return {static_cast<float>(hi), static_cast<std::int32_t>(std::llround((q - hi) * lo_grid))};
}

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

[[gnu::always_inline]] inline float to_float(std::int32_t v) { return static_cast<float>(v); }
[[gnu::always_inline]] inline float8 to_float(const int8v& v) { return __builtin_convertvector(v, float8); }
[[gnu::always_inline]] inline float16 to_float(const int16v& v) { return __builtin_convertvector(v, float16); }

// The register kernel for unequal weights and N <= max_register_inputs: per coordinate, the N updates (in
// float, as the equal-weight kernel has them) are sorted by Batcher's network carrying each one's input
// index (compare, then select both). The j-th smallest value is weighed by t_j − t_{j−1}, where t_j =
// clamp((c_j − β) / (1 − 2β), 0, 1) and c_j is the weight of the j smallest values (split, as above):
// t_j − t_{j−1} = max(0, min(c_j, 1 − β) − max(c_{j−1}, β)) / (1 − 2β), the definition. `weight(id)` returns
// the split weights of the inputs `id` names. A vector of coordinates at a time, every lane the scalar arithmetic.
template <std::size_t N, class T, class I, class Weight>
[[gnu::always_inline]] inline T weighted_coordinate(T (&v)[N], I (&id)[N], const weighted_args& a,
                                                    const Weight& weight) {
  static constexpr comparator_list net = batcher(N);
  PRSGD_UNROLL(80)
  for (std::size_t c = 0; c < net.size; ++c) {
    const std::size_t i = net.pairs[c].first;
    const std::size_t j = net.pairs[c].second;
    const auto swap = v[j] < v[i];
    const T va = v[i];
    const T vb = v[j];
    const I ia = id[i];
    const I ib = id[j];
    v[i] = swap ? vb : va;
    v[j] = swap ? va : vb;
    id[i] = swap ? ib : ia;
    id[j] = swap ? ia : ib;
  }
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

using weighted_kernel_pair = kernel_pair<weighted_args>;

#if PRSGD_AGGREGATION_HAS_AVX512
#define PRSGD_AGGREGATION_WEIGHTED_KERNEL(N)                                                                         \
  PRSGD_AGGREGATION_WIDE_VECTORS void weighted_kernel_##N(const weighted_args& a) { weighted_kernel<N, float8>(a); } \
  PRSGD_AGGREGATION_AVX512 void weighted_kernel_##N##_wide(const weighted_args& a) { weighted_kernel<N, float16>(a); }
#define PRSGD_AGGREGATION_WEIGHTED_PAIR(N) \
  weighted_kernel_pair { &weighted_kernel_##N, &weighted_kernel_##N##_wide }
#else
#define PRSGD_AGGREGATION_WEIGHTED_KERNEL(N) \
  PRSGD_AGGREGATION_WIDE_VECTORS void weighted_kernel_##N(const weighted_args& a) { weighted_kernel<N, float8>(a); }
#define PRSGD_AGGREGATION_WEIGHTED_PAIR(N) \
  weighted_kernel_pair { &weighted_kernel_##N, &weighted_kernel_##N }
#endif
PRSGD_AGGREGATION_WEIGHTED_KERNEL(1)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(2)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(3)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(4)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(5)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(6)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(7)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(8)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(9)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(10)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(11)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(12)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(13)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(14)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(15)
PRSGD_AGGREGATION_WEIGHTED_KERNEL(16)
#undef PRSGD_AGGREGATION_WEIGHTED_KERNEL

constexpr std::array<weighted_kernel_pair, max_register_inputs> weighted_kernels{
    PRSGD_AGGREGATION_WEIGHTED_PAIR(1),  PRSGD_AGGREGATION_WEIGHTED_PAIR(2),  PRSGD_AGGREGATION_WEIGHTED_PAIR(3),
    PRSGD_AGGREGATION_WEIGHTED_PAIR(4),  PRSGD_AGGREGATION_WEIGHTED_PAIR(5),  PRSGD_AGGREGATION_WEIGHTED_PAIR(6),
    PRSGD_AGGREGATION_WEIGHTED_PAIR(7),  PRSGD_AGGREGATION_WEIGHTED_PAIR(8),  PRSGD_AGGREGATION_WEIGHTED_PAIR(9),
    PRSGD_AGGREGATION_WEIGHTED_PAIR(10), PRSGD_AGGREGATION_WEIGHTED_PAIR(11), PRSGD_AGGREGATION_WEIGHTED_PAIR(12),
    PRSGD_AGGREGATION_WEIGHTED_PAIR(13), PRSGD_AGGREGATION_WEIGHTED_PAIR(14), PRSGD_AGGREGATION_WEIGHTED_PAIR(15),
    PRSGD_AGGREGATION_WEIGHTED_PAIR(16)};
#undef PRSGD_AGGREGATION_WEIGHTED_PAIR

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

// The window kernels built: for even N the two middle positions, for odd N the middle one and the pairs around
// it (the median of equal or near-equal weights). Other windows take the full-sort kernels.
struct window_kernel {
  std::size_t n;
  std::size_t lo;
  std::size_t hi;
  register_kernel_pair equal;
  weighted_kernel_pair weighted;
};

// clang-format off
// X(N, LO, HI) for every window built.
#define PRSGD_AGGREGATION_WINDOWS(X) \
  X(1, 0, 0) X(2, 0, 1) X(3, 1, 1) X(3, 0, 1) X(3, 1, 2) X(4, 1, 2) X(5, 2, 2) X(5, 1, 2) X(5, 2, 3) \
  X(6, 2, 3) X(7, 3, 3) X(7, 2, 3) X(7, 3, 4) X(8, 3, 4) X(9, 4, 4) X(9, 3, 4) X(9, 4, 5) X(10, 4, 5) \
  X(11, 5, 5) X(11, 4, 5) X(11, 5, 6) X(12, 5, 6) X(13, 6, 6) X(13, 5, 6) X(13, 6, 7) X(14, 6, 7) X(15, 7, 7) \
  X(15, 6, 7) X(15, 7, 8) X(16, 7, 8)
// clang-format on

#define PRSGD_AGGREGATION_WINDOW_KERNEL(N, LO, HI)                                                \
  PRSGD_AGGREGATION_WIDE_VECTORS void register_window_##N##_##LO##_##HI(const register_args& a) { \
    register_window_kernel<N, LO, HI, float8>(a);                                                 \
  }                                                                                               \
  PRSGD_AGGREGATION_WIDE_VECTORS void weighted_window_##N##_##LO##_##HI(const weighted_args& a) { \
    weighted_window_kernel<N, LO, HI, float8>(a);                                                 \
  }
PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_WINDOW_KERNEL)
#undef PRSGD_AGGREGATION_WINDOW_KERNEL

#if PRSGD_AGGREGATION_HAS_AVX512
#define PRSGD_AGGREGATION_WINDOW_KERNEL(N, LO, HI)                                                 \
  PRSGD_AGGREGATION_AVX512 void register_window_##N##_##LO##_##HI##_wide(const register_args& a) { \
    register_window_kernel<N, LO, HI, float16>(a);                                                 \
  }                                                                                                \
  PRSGD_AGGREGATION_AVX512 void weighted_window_##N##_##LO##_##HI##_wide(const weighted_args& a) { \
    weighted_window_kernel<N, LO, HI, float16>(a);                                                 \
  }
PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_WINDOW_KERNEL)
#undef PRSGD_AGGREGATION_WINDOW_KERNEL
#define PRSGD_AGGREGATION_WIDE_WINDOW(NAME) &NAME##_wide
#else
#define PRSGD_AGGREGATION_WIDE_WINDOW(NAME) &NAME
#endif

#define PRSGD_AGGREGATION_WINDOW_ENTRY(N, LO, HI)                                                       \
  window_kernel{N, LO, HI,                                                                              \
                register_kernel_pair{&register_window_##N##_##LO##_##HI,                                \
                                     PRSGD_AGGREGATION_WIDE_WINDOW(register_window_##N##_##LO##_##HI)}, \
                weighted_kernel_pair{&weighted_window_##N##_##LO##_##HI,                                \
                                     PRSGD_AGGREGATION_WIDE_WINDOW(weighted_window_##N##_##LO##_##HI)}},
constexpr std::array window_kernels{PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_WINDOW_ENTRY)};
#undef PRSGD_AGGREGATION_WINDOW_ENTRY
#undef PRSGD_AGGREGATION_WIDE_WINDOW
#undef PRSGD_AGGREGATION_WINDOWS

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

template <class Pair>
auto pick(const Pair& kernels) {
  return wide_kernels() ? kernels.wide : kernels.narrow;
}

const window_kernel* find_window(std::size_t n, std::size_t lo, std::size_t hi) {
  for (const auto& w : window_kernels) {
    if (w.n == n && w.lo == lo && w.hi == hi) {
      return &w;
    }
  }
  return nullptr;
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
    const window_kernel* window = first <= last ? find_window(n, first, last) : nullptr;
    pick(window != nullptr ? window->equal : register_kernels[n - 1])(args);
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
    const window_kernel* window = find_window(n, lo, hi);
    pick(window != nullptr ? window->weighted : weighted_kernels[n - 1])(args);
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
