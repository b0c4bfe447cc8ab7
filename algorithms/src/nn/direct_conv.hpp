// SPDX-License-Identifier: Apache-2.0
// Direct AVX-512 kernels for stride-1 "same" convolutions (odd k, padding (k - 1) / 2), used by
// conv2d_layer (conv2d.cpp) instead of im2col + sgemm where they apply, and by pooling.cpp's AVX-512 rows.
// Private to those two files.
//
// Layouts, per sample:
// - xp: the input padded to cin planes of hp x wp floats, the image at row p, column p, zeros elsewhere;
//   hp and wp include the rows / columns that the register blocks overhang past the image (plan).
// - wt: the weights transposed to (cin, ki, kj, cout), cout contiguous.
// - out: the output as (ho_pad, wo_pad, cout), cout contiguous (positions past the image are junk).
// - dyt: the output gradient as (h*w, cout), cout contiguous.
// The backward data pass is the same "same" convolution of dy with the flipped kernel, cin and cout
// swapped, so it runs forward_sample() with a second plan.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "unroll.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PRSGD_NN_DIRECT_CONV 1
#define PRSGD_NN_DIRECT_TARGET __attribute__((target("avx512f")))
// The register blocks: GCC's predictive commoning carries the broadcast inputs of one kernel tap over
// to the next (they overlap shifted by one) and spills them and the accumulators to the stack, which
// halved the kernels' speed; each input is read from L1 instead.
#if defined(__clang__)
#define PRSGD_NN_DIRECT_KERNEL PRSGD_NN_DIRECT_TARGET
#else
#define PRSGD_NN_DIRECT_KERNEL __attribute__((target("avx512f"), optimize("no-predictive-commoning")))
#endif
#else
#define PRSGD_NN_DIRECT_CONV 0
#endif

namespace prsgd::algorithms::direct_conv {

using index = Eigen::Index;

/// Positions per register block along a row at most (x V vectors of 16 output channels).
inline constexpr int max_npw = 14;

/// Block sizes and padded extents of one "same" convolution (channels_in -> channels_out, k x k).
struct plan {
  index cin = 0;
  index cout = 0;
  index k = 0;
  index h = 0;
  index w = 0;
  int v = 1;    // zmm vectors of output channels per block (16 channels each)
  int r = 1;    // output rows per block
  int npw = 1;  // output positions per block along a row
  index ho_pad = 0;
  index wo_pad = 0;
  index hp = 0;  // padded input rows (ho_pad + k - 1)
  index wp = 0;  // padded input columns (wo_pad + k - 1)
  [[nodiscard]] index pad() const { return (k - 1) / 2; }
  [[nodiscard]] index plane_p() const { return hp * wp; }
};

/// Whether the CPU runs these kernels (AVX-512F); also picks pooling.cpp's AVX-512 rows.
inline bool cpu_supported() {
#if PRSGD_NN_DIRECT_CONV
  static const bool yes = __builtin_cpu_supports("avx512f") != 0;
  return yes;
#else
  return false;
#endif
}

/// Kernel sizes with instantiated weight-gradient kernels.
inline bool kernel_supported(index k) { return k == 3 || k == 5 || k == 7; }

/// Whether forward_sample() runs a convolution with cout output channels (and cin inputs, any count).
inline bool forward_supported(index cout, index k) { return cout % 16 == 0 && kernel_supported(k); }

/// Position-major inputs with a stride of cin floats for which gemm_sample() is instantiated.
inline bool gemm_supported(index cin) { return cin == 16 || cin == 32; }

inline plan make_plan(index cin, index cout, index k, index h, index w) {
  plan p;
  p.cin = cin;
  p.cout = cout;
  p.k = k;
  p.h = h;
  p.w = w;
  // V = 2 (28 accumulators for 14 positions) when cout is a multiple of 32; otherwise V = 1 over two
  // rows (again 28 accumulators).
  p.v = cout % 32 == 0 ? 2 : 1;
  p.r = p.v == 2 ? 1 : 2;
  const index blocks = (w + max_npw - 1) / max_npw;
  p.npw = static_cast<int>((w + blocks - 1) / blocks);
  p.wo_pad = blocks * p.npw;
  p.ho_pad = (h + p.r - 1) / p.r * p.r;
  p.hp = p.ho_pad + k - 1;
  p.wp = p.wo_pad + k - 1;
  return p;
}

#if PRSGD_NN_DIRECT_CONV

// One register block: R rows x NPW positions x V*16 channels of `out` (row stride out_ld floats,
// position stride cout) from xp (at the block's top-left input) and wt (at the block's first channel).
// Input position stride XS: 1 for planar inputs; cin (with plane_p = 1) for position-major ones, where
// a block with k = 1 is a GEMM out (positions x cout) = xp (positions x cin) * wt (cin x cout).
template <int V, int R, int NPW, int XS>
PRSGD_NN_DIRECT_KERNEL void forward_block(const float* xp, index plane_p, index wp, const float* wt, index cin, index k,
                                          index cout, float* out, index out_ld) {
  __m512 acc[R][NPW][V];
  PRSGD_UNROLL(32)
  for (int r = 0; r < R; ++r) {
    PRSGD_UNROLL(32)
    for (int j = 0; j < NPW; ++j) {
      PRSGD_UNROLL(4)
      for (int v = 0; v < V; ++v) {
        acc[r][j][v] = _mm512_setzero_ps();
      }
    }
  }
  const index taps = XS == 1 ? k : 1;  // a compile-time 1 for the GEMM: no tap loops
  for (index ci = 0; ci < cin; ++ci) {
    for (index ki = 0; ki < taps; ++ki) {
      const float* xr = xp + ci * plane_p + ki * wp * XS;
      const float* wr = wt + (ci * taps + ki) * taps * cout;
      for (index kj = 0; kj < taps; ++kj) {
        __m512 wv[V];
        PRSGD_UNROLL(4)
        for (int v = 0; v < V; ++v) {
          wv[v] = _mm512_loadu_ps(wr + kj * cout + 16 * v);
        }
        PRSGD_UNROLL(32)
        for (int r = 0; r < R; ++r) {
          PRSGD_UNROLL(32)
          for (int j = 0; j < NPW; ++j) {
            const __m512 b = _mm512_set1_ps(xr[(r * wp + j + kj) * XS]);
            PRSGD_UNROLL(4)
            for (int v = 0; v < V; ++v) {
              acc[r][j][v] = _mm512_fmadd_ps(b, wv[v], acc[r][j][v]);
            }
          }
        }
      }
    }
  }
  PRSGD_UNROLL(32)
  for (int r = 0; r < R; ++r) {
    PRSGD_UNROLL(32)
    for (int j = 0; j < NPW; ++j) {
      PRSGD_UNROLL(4)
      for (int v = 0; v < V; ++v) {
        _mm512_storeu_ps(out + r * out_ld + j * cout + 16 * v, acc[r][j][v]);
      }
    }
  }
}

template <int V, int R, int NPW, int XS>
PRSGD_NN_DIRECT_TARGET void forward_sample_t(const plan& p, const float* xp, const float* wt, float* out) {
  const index out_ld = p.wo_pad * p.cout;
  const index plane_p = XS == 1 ? p.plane_p() : 1;
  for (index hb = 0; hb < p.ho_pad; hb += R) {
    for (index wb = 0; wb < p.wo_pad; wb += NPW) {
      for (index g = 0; g < p.cout; g += 16 * V) {
        forward_block<V, R, NPW, XS>(xp + (hb * p.wp + wb) * XS, plane_p, p.wp, wt + g, p.cin, p.k, p.cout,
                                     out + hb * out_ld + wb * p.cout + g, out_ld);
      }
    }
  }
}

using forward_fn = void (*)(const plan&, const float*, const float*, float*);

template <int V, int R, int XS, std::size_t... N>
constexpr std::array<forward_fn, sizeof...(N)> forward_table(std::index_sequence<N...> /*unused*/) {
  return {&forward_sample_t<V, R, static_cast<int>(N) + 1, XS>...};
}

template <int XS>
void forward_sample_xs(const plan& p, const float* xp, const float* wt, float* out) {
  static constexpr auto v2 = forward_table<2, 1, XS>(std::make_index_sequence<max_npw>{});
  static constexpr auto v1 = forward_table<1, 2, XS>(std::make_index_sequence<max_npw>{});
  const auto i = static_cast<std::size_t>(p.npw - 1);
  (p.v == 2 ? v2[i] : v1[i])(p, xp, wt, out);
}

/// out (ho_pad x wo_pad x cout) = the "same" convolution of one padded sample xp with wt.
/// @pre cpu_supported(), forward_supported(p.cout, p.k), p from make_plan().
inline void forward_sample(const plan& p, const float* xp, const float* wt, float* out) {
  forward_sample_xs<1>(p, xp, wt, out);
}

/// out (ho_pad x wo_pad x cout) = xp (positions x cin, one position per cin floats) * wt (cin x cout),
/// the positions laid out as for forward_sample() with k = 1. @pre cpu_supported(), cout % 16 == 0,
/// gemm_supported(p.cin), p from make_plan(cin, cout, 1, h, w).
inline void gemm_sample(const plan& p, const float* xp, const float* wt, float* out) {
  (p.cin == 16 ? forward_sample_xs<16> : forward_sample_xs<32>)(p, xp, wt, out);
}

// gwt taps [T0, T0 + NT) of one input channel (tap t = ki * K + kj; consecutive rows of gwt) x V*16
// channels (gw at tap T0 and the group's first channel) += the products of dyt's positions with the
// matching inputs of xp's channel plane `xc`.
template <int V, int K, int T0, int NT>
PRSGD_NN_DIRECT_KERNEL void weight_grad_taps(const plan& p, const float* xc, const float* dyt, float* gw) {
  __m512 acc[NT][V];
  const index cout = p.cout;
  const index wp = p.wp;
  PRSGD_UNROLL(32)
  for (int t = 0; t < NT; ++t) {
    PRSGD_UNROLL(4)
    for (int v = 0; v < V; ++v) {
      acc[t][v] = _mm512_loadu_ps(gw + t * cout + 16 * v);
    }
  }
  for (index h = 0; h < p.h; ++h) {
    const float* xrow = xc + h * wp;
    const float* drow = dyt + h * p.w * cout;
    for (index w = 0; w < p.w; ++w) {
      __m512 d[V];
      PRSGD_UNROLL(4)
      for (int v = 0; v < V; ++v) {
        d[v] = _mm512_loadu_ps(drow + w * cout + 16 * v);
      }
      PRSGD_UNROLL(32)
      for (int t = 0; t < NT; ++t) {
        constexpr int ki0 = T0 / K;
        const int ki = (T0 + t) / K - ki0;
        const int kj = (T0 + t) % K;
        const __m512 b = _mm512_set1_ps(xrow[(ki0 + ki) * wp + w + kj]);
        PRSGD_UNROLL(4)
        for (int v = 0; v < V; ++v) {
          acc[t][v] = _mm512_fmadd_ps(b, d[v], acc[t][v]);
        }
      }
    }
  }
  PRSGD_UNROLL(32)
  for (int t = 0; t < NT; ++t) {
    PRSGD_UNROLL(4)
    for (int v = 0; v < V; ++v) {
      _mm512_storeu_ps(gw + t * cout + 16 * v, acc[t][v]);
    }
  }
}

// Taps [T0, K*K) in blocks of up to 26 accumulators (k = 5, V = 2: 13 + 12 taps; V = 1: all 25).
template <int V, int K, int T0>
PRSGD_NN_DIRECT_TARGET void weight_grad_taps_from(const plan& p, const float* xc, const float* dyt, float* gw) {
  constexpr int total = K * K;
  constexpr int most = 26 / V;
  constexpr int blocks = (total + most - 1) / most;
  constexpr int per_block = (total + blocks - 1) / blocks;
  if constexpr (T0 < total) {
    constexpr int n = std::min(per_block, total - T0);
    weight_grad_taps<V, K, T0, n>(p, xc, dyt, gw + T0 * p.cout);
    weight_grad_taps_from<V, K, T0 + n>(p, xc, dyt, gw);
  }
}

template <int V, int K>
PRSGD_NN_DIRECT_TARGET void weight_grad_sample_t(const plan& p, const float* xp, const float* dyt, float* gwt) {
  const index cout = p.cout;
  for (index ci = 0; ci < p.cin; ++ci) {
    const float* xc = xp + ci * p.plane_p();
    for (index g = 0; g < cout; g += 16 * V) {
      weight_grad_taps_from<V, K, 0>(p, xc, dyt + g, gwt + ci * K * K * cout + g);
    }
  }
}

// GCC 12 warns about the undefined pass-through operand inside its own unpack / shuffle intrinsics: as
// -Wmaybe-uninitialized at -O3, as -Wuninitialized at -O1 (the ci preset).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
// r[i] = column i of the 16 x 16 block whose rows are r[0..15].
PRSGD_NN_DIRECT_TARGET inline void transpose16(__m512* r) {
  __m512 t[16];
  __m512 u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(u[8 * i + j], u[8 * i + 4 + j], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
  }
}

/// Lanes [0, n) of a 16-lane mask (none for n <= 0, all for n >= 16); also used by pooling.cpp.
inline __mmask16 first_lanes(index n) {
  if (n <= 0) {
    return 0;
  }
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1U << static_cast<unsigned>(n)) - 1U);
}

/// dst[c * ld + i] = src[i * cols + c] (+ bias[c] if not null) for i < n, c < cols (a multiple of 16).
PRSGD_NN_DIRECT_TARGET inline void rows_to_columns(const float* src, index n, index cols, const float* bias, float* dst,
                                                   index ld) {
  for (index c0 = 0; c0 < cols; c0 += 16) {
    for (index i0 = 0; i0 < n; i0 += 16) {
      const index m = std::min<index>(16, n - i0);
      __m512 r[16];
      for (index i = 0; i < 16; ++i) {
        r[i] = i < m ? _mm512_loadu_ps(src + (i0 + i) * cols + c0) : _mm512_setzero_ps();
      }
      transpose16(r);
      const __mmask16 mask = first_lanes(m);
      for (index c = 0; c < 16; ++c) {
        const __m512 v = bias != nullptr ? _mm512_add_ps(r[c], _mm512_set1_ps(bias[c0 + c])) : r[c];
        _mm512_mask_storeu_ps(dst + (c0 + c) * ld + i0, mask, v);
      }
    }
  }
}

/// dst[i * rows + c] = src[c * ld + i] for i < n, c < rows (a multiple of 16).
PRSGD_NN_DIRECT_TARGET inline void columns_to_rows(const float* src, index n, index rows, index ld, float* dst) {
  for (index c0 = 0; c0 < rows; c0 += 16) {
    for (index i0 = 0; i0 < n; i0 += 16) {
      const index m = std::min<index>(16, n - i0);
      const __mmask16 mask = first_lanes(m);
      __m512 r[16];
      for (index c = 0; c < 16; ++c) {
        r[c] = _mm512_maskz_loadu_ps(mask, src + (c0 + c) * ld + i0);
      }
      transpose16(r);
      for (index i = 0; i < m; ++i) {
        _mm512_storeu_ps(dst + (i0 + i) * rows + c0, r[i]);
      }
    }
  }
}

#pragma GCC diagnostic pop

/// Copies sample b's planes (channel c at src + c * ld + b * h * w) into xp's image (plan's padding).
PRSGD_NN_DIRECT_TARGET inline void pad_sample(const plan& p, const float* src, index ld, index b, float* xp) {
  const index plane = p.h * p.w;
  const index pad = p.pad();
  const float* end = xp + p.cin * p.plane_p();
  for (index c = 0; c < p.cin; ++c) {
    const float* s = src + c * ld + b * plane;
    float* d = xp + c * p.plane_p() + pad * p.wp + pad;
    for (index h = 0; h < p.h; ++h) {
      for (index w0 = 0; w0 < p.w; w0 += 16) {
        const __mmask16 mask = first_lanes(std::min<index>(16, p.w - w0));
        const __m512 v = _mm512_maskz_loadu_ps(mask, s + h * p.w + w0);
        float* at = d + h * p.wp + w0;
        // A full store writes zeros past the row: into its right padding, the next row's left padding
        // and image (written after this one) or the bottom padding, all zero or rewritten; it stays masked
        // only where it would leave the buffer.
        if (end - at >= 16) {
          _mm512_storeu_ps(at, v);
        } else {
          _mm512_mask_storeu_ps(at, mask, v);
        }
      }
    }
  }
}

/// The maximum of a 2x2 window per lane (inputs top-left, top-right, bottom-left, bottom-right) with the
/// first maximum in scan order winning, which is top = b > a ? b : a, bottom = d > c ? d : c, then
/// bottom > top ? bottom : top; the masks say which comparisons picked the later input.
struct pool2_max {
  __m512 v;
  __mmask16 top_right;
  __mmask16 bottom_right;
  __mmask16 use_bottom;
};

PRSGD_NN_DIRECT_TARGET inline pool2_max max_of_window(__m512 a0, __m512 a1, __m512 b0, __m512 b1) {
  pool2_max m{};
  m.top_right = _mm512_cmp_ps_mask(a1, a0, _CMP_GT_OQ);
  m.bottom_right = _mm512_cmp_ps_mask(b1, b0, _CMP_GT_OQ);
  const __m512 top = _mm512_mask_blend_ps(m.top_right, a0, a1);
  const __m512 bottom = _mm512_mask_blend_ps(m.bottom_right, b0, b1);
  m.use_bottom = _mm512_cmp_ps_mask(bottom, top, _CMP_GT_OQ);
  m.v = _mm512_mask_blend_ps(m.use_bottom, top, bottom);
  return m;
}

/// The ReLU and 2x2 max pool of one position-major sample `out` (h x w positions in rows of out_w, cout
/// floats each; h and w even) plus bias[c] (if not null) as pooled (h/2 x w/2 positions, cout floats
/// each), and for each pooled position and 16-channel group the four masks of the channels whose
/// gradient goes to the window's top-left, top-right, bottom-left and bottom-right input (none where the
/// maximum is not positive). Ties and NaNs as in pooling.cpp's max pool: the first maximum in scan order.
PRSGD_NN_DIRECT_TARGET inline void relu_max_pool2_sample(const float* out, index out_w, index h, index w, index cout,
                                                         const float* bias, float* pooled, std::uint16_t* masks) {
  const index below = out_w * cout;
  for (index i = 0; i < h / 2; ++i) {
    for (index j = 0; j < w / 2; ++j) {
      const float* at = out + (2 * i * out_w + 2 * j) * cout;
      for (index g = 0; g < cout; g += 16) {
        const __m512 b = bias != nullptr ? _mm512_loadu_ps(bias + g) : _mm512_setzero_ps();
        const __m512 a0 = _mm512_add_ps(_mm512_loadu_ps(at + g), b);
        const __m512 a1 = _mm512_add_ps(_mm512_loadu_ps(at + cout + g), b);
        const __m512 b0 = _mm512_add_ps(_mm512_loadu_ps(at + below + g), b);
        const __m512 b1 = _mm512_add_ps(_mm512_loadu_ps(at + below + cout + g), b);
        const pool2_max m = max_of_window(a0, a1, b0, b1);
        const __mmask16 live = _mm512_cmp_ps_mask(m.v, _mm512_setzero_ps(), _CMP_GT_OQ);
        _mm512_storeu_ps(pooled + (i * (w / 2) + j) * cout + g, _mm512_maskz_mov_ps(live, m.v));
        const auto top_live = static_cast<__mmask16>(live & ~m.use_bottom);
        const auto bottom_live = static_cast<__mmask16>(live & m.use_bottom);
        masks[0] = static_cast<std::uint16_t>(top_live & ~m.top_right);
        masks[1] = static_cast<std::uint16_t>(top_live & m.top_right);
        masks[2] = static_cast<std::uint16_t>(bottom_live & ~m.bottom_right);
        masks[3] = static_cast<std::uint16_t>(bottom_live & m.bottom_right);
        masks += 4;
      }
    }
  }
}

/// The backward of relu_max_pool2_sample(): dyt (h x w positions, cout floats each) = the pooled
/// gradient gp (h/2 x w/2 positions, cout floats each) routed by `masks`, 0 elsewhere; bias_grad[c] +=
/// the sum of channel c of dyt.
PRSGD_NN_DIRECT_TARGET inline void max_pool2_grad_sample(const float* gp, const std::uint16_t* masks, index h, index w,
                                                         index cout, float* dyt, float* bias_grad) {
  const index below = w * cout;
  for (index g = 0; g < cout; g += 16) {
    __m512 sum = _mm512_setzero_ps();
    for (index i = 0; i < h / 2; ++i) {
      for (index j = 0; j < w / 2; ++j) {
        const index q = i * (w / 2) + j;
        const std::uint16_t* m = masks + (q * (cout / 16) + g / 16) * 4;
        const __m512 v = _mm512_loadu_ps(gp + q * cout + g);
        float* at = dyt + (2 * i * w + 2 * j) * cout + g;
        _mm512_storeu_ps(at, _mm512_maskz_mov_ps(m[0], v));
        _mm512_storeu_ps(at + cout, _mm512_maskz_mov_ps(m[1], v));
        _mm512_storeu_ps(at + below, _mm512_maskz_mov_ps(m[2], v));
        _mm512_storeu_ps(at + below + cout, _mm512_maskz_mov_ps(m[3], v));
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(static_cast<__mmask16>(m[0] | m[1] | m[2] | m[3]), v));
      }
    }
    _mm512_storeu_ps(bias_grad + g, _mm512_add_ps(_mm512_loadu_ps(bias_grad + g), sum));
  }
}

/// gwt (cin*k*k x cout) += the weight gradient of one sample (xp padded as for forward_sample(), dyt
/// its output gradient as (h*w, cout)). @pre as for forward_sample().
inline void weight_grad_sample(const plan& p, const float* xp, const float* dyt, float* gwt) {
  switch (p.k * 2 + (p.v == 2 ? 1 : 0)) {
    case 6: weight_grad_sample_t<1, 3>(p, xp, dyt, gwt); break;
    case 7: weight_grad_sample_t<2, 3>(p, xp, dyt, gwt); break;
    case 10: weight_grad_sample_t<1, 5>(p, xp, dyt, gwt); break;
    case 11: weight_grad_sample_t<2, 5>(p, xp, dyt, gwt); break;
    case 14: weight_grad_sample_t<1, 7>(p, xp, dyt, gwt); break;
    case 15: weight_grad_sample_t<2, 7>(p, xp, dyt, gwt); break;
    default: break;
  }
}

#endif  // PRSGD_NN_DIRECT_CONV

}  // namespace prsgd::algorithms::direct_conv
