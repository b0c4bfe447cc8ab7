// SPDX-License-Identifier: Apache-2.0
// Winograd F(2x2, 5x5) for stride-1 "same" 5x5 convolutions with 16 or 32 input channels and a multiple
// of 16 output channels (fmnist-cnn's conv2 forward, 16 -> 32, and its input gradient, 32 -> 16), used by
// conv2d_layer (conv2d.cpp) instead of direct_conv::forward_sample() where it applies; also the weight
// gradient (even sides, cout % 32 == 0) instead of direct_conv::weight_grad_sample(). Private to
// conv2d.cpp.
//
// Each 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over the tile's 6x6 input patch d: 36 products per
// input / output channel pair instead of the direct convolution's 100, the products summed over input
// channels as 36 GEMMs (direct_conv::gemm_sample). The interpolation points are 0, 1, -1, 2, -2 and
// infinity (B^T is the one of F(4, 3) on the same points):
//   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
//   G   = [1/4 0 0 0 0; -1/6 x5; -1/6 1/6 -1/6 1/6 -1/6; 1/24 1/12 1/6 1/3 2/3; 1/24 -1/12 1/6 -1/3 2/3;
//          0 0 0 0 1]
//   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 1]
// All transforms run on 16 channels at a time (channels contiguous), so the input is first copied
// position-major and the output comes out position-major, like forward_sample()'s.
#pragma once

#include "direct_conv.hpp"

#include <algorithm>
#include <vector>

namespace prsgd::algorithms::winograd {

using index = Eigen::Index;

/// Whether conv (cin -> cout, k x k) runs here (besides direct_conv::cpu_supported()).
inline bool supported(index cin, index cout, index k) {
  return PRSGD_NN_DIRECT_CONV != 0 && k == 5 && direct_conv::gemm_supported(cin) && cout % 16 == 0;
}

#if PRSGD_NN_DIRECT_CONV

// The 1-D transforms on 16-channel vectors: in[0, NI) -> out[0, NO).
struct input_transform {  // B^T d
  static constexpr int ni = 6;
  static constexpr int no = 6;
  PRSGD_NN_DIRECT_TARGET static void apply(const __m512* d, __m512* v) {
    const __m512 two = _mm512_set1_ps(2.0F);
    const __m512 four = _mm512_set1_ps(4.0F);
    const __m512 five = _mm512_set1_ps(5.0F);
    v[0] = _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4]));
    v[1] = _mm512_fnmadd_ps(four, _mm512_add_ps(d[1], d[2]), _mm512_add_ps(d[3], d[4]));
    v[2] = _mm512_fmadd_ps(four, _mm512_sub_ps(d[1], d[2]), _mm512_sub_ps(d[4], d[3]));
    const __m512 even = _mm512_sub_ps(d[4], d[2]);
    const __m512 odd = _mm512_sub_ps(d[3], d[1]);
    v[3] = _mm512_fmadd_ps(two, odd, even);
    v[4] = _mm512_fnmadd_ps(two, odd, even);
    v[5] = _mm512_fmadd_ps(four, d[1], _mm512_fnmadd_ps(five, d[3], d[5]));
  }
};

struct weight_transform {  // G g
  static constexpr int ni = 5;
  static constexpr int no = 6;
  PRSGD_NN_DIRECT_TARGET static void apply(const __m512* g, __m512* u) {
    const __m512 even = _mm512_add_ps(_mm512_add_ps(g[0], g[2]), g[4]);
    const __m512 odd = _mm512_add_ps(g[1], g[3]);
    // g0 + 4 g2 + 16 g4 and 2 g1 + 8 g3
    const __m512 even4 =
        _mm512_fmadd_ps(_mm512_set1_ps(16.0F), g[4], _mm512_fmadd_ps(_mm512_set1_ps(4.0F), g[2], g[0]));
    const __m512 odd4 = _mm512_fmadd_ps(_mm512_set1_ps(8.0F), g[3], _mm512_mul_ps(_mm512_set1_ps(2.0F), g[1]));
    const __m512 sixth = _mm512_set1_ps(-1.0F / 6.0F);
    const __m512 twenty_fourth = _mm512_set1_ps(1.0F / 24.0F);
    u[0] = _mm512_mul_ps(_mm512_set1_ps(0.25F), g[0]);
    u[1] = _mm512_mul_ps(sixth, _mm512_add_ps(even, odd));
    u[2] = _mm512_mul_ps(sixth, _mm512_sub_ps(even, odd));
    u[3] = _mm512_mul_ps(twenty_fourth, _mm512_add_ps(even4, odd4));
    u[4] = _mm512_mul_ps(twenty_fourth, _mm512_sub_ps(even4, odd4));
    u[5] = g[4];
  }
};

struct output_transform {  // A^T m
  static constexpr int ni = 6;
  static constexpr int no = 2;
  PRSGD_NN_DIRECT_TARGET static void apply(const __m512* m, __m512* y) {
    const __m512 plus = _mm512_add_ps(m[1], m[2]);
    const __m512 minus = _mm512_sub_ps(m[1], m[2]);
    y[0] = _mm512_add_ps(_mm512_add_ps(m[0], plus), _mm512_add_ps(m[3], m[4]));
    y[1] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(2.0F), _mm512_sub_ps(m[3], m[4]), minus), m[5]);
  }
};

// The transposes for the weight gradient: with Y = A^T [U . V] A and U = G g G^T, dL/dU = (A dY A^T) . V
// per tile, summed over tiles and channels as 36 GEMMs, and dL/dg = G^T (dL/dU) G.
struct output_grad_transform {  // A dy
  static constexpr int ni = 2;
  static constexpr int no = 6;
  PRSGD_NN_DIRECT_TARGET static void apply(const __m512* y, __m512* m) {
    const __m512 twice = _mm512_add_ps(y[1], y[1]);
    m[0] = y[0];
    m[1] = _mm512_add_ps(y[0], y[1]);
    m[2] = _mm512_sub_ps(y[0], y[1]);
    m[3] = _mm512_add_ps(y[0], twice);
    m[4] = _mm512_sub_ps(y[0], twice);
    m[5] = y[1];
  }
};

struct weight_grad_transform {  // G^T u
  static constexpr int ni = 6;
  static constexpr int no = 5;
  PRSGD_NN_DIRECT_TARGET static void apply(const __m512* u, __m512* g) {
    const __m512 sixth = _mm512_set1_ps(-1.0F / 6.0F);
    const __m512 plus12 = _mm512_mul_ps(sixth, _mm512_add_ps(u[1], u[2]));   // -(u1 + u2) / 6
    const __m512 minus12 = _mm512_mul_ps(sixth, _mm512_sub_ps(u[1], u[2]));  // -(u1 - u2) / 6
    const __m512 plus34 = _mm512_add_ps(u[3], u[4]);
    const __m512 minus34 = _mm512_sub_ps(u[3], u[4]);
    g[0] = _mm512_fmadd_ps(_mm512_set1_ps(0.25F), u[0], _mm512_fmadd_ps(_mm512_set1_ps(1.0F / 24.0F), plus34, plus12));
    g[1] = _mm512_fmadd_ps(_mm512_set1_ps(1.0F / 12.0F), minus34, minus12);
    g[2] = _mm512_fmadd_ps(_mm512_set1_ps(1.0F / 6.0F), plus34, plus12);
    g[3] = _mm512_fmadd_ps(_mm512_set1_ps(1.0F / 3.0F), minus34, minus12);
    g[4] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(2.0F / 3.0F), plus34, plus12), u[5]);
  }
};

// The 2-D transform T x T^T of one NI x NI block of 16-channel vectors: element (i, j) at
// src + i * src_row + j * src_col, result (a, b) to dst + a * dst_row + b * dst_col.
template <typename T>
PRSGD_NN_DIRECT_TARGET inline void transform_2d(const float* src, index src_row, index src_col, float* dst,
                                                index dst_row, index dst_col) {
  __m512 rows[T::ni][T::no];
  for (int i = 0; i < T::ni; ++i) {
    __m512 in[T::ni];
    for (int j = 0; j < T::ni; ++j) {
      in[j] = _mm512_loadu_ps(src + i * src_row + j * src_col);
    }
    T::apply(in, rows[i]);
  }
  for (int b = 0; b < T::no; ++b) {
    __m512 in[T::ni];
    for (int i = 0; i < T::ni; ++i) {
      in[i] = rows[i][b];
    }
    __m512 out[T::no];
    T::apply(in, out);
    for (int a = 0; a < T::no; ++a) {
      _mm512_storeu_ps(dst + a * dst_row + b * dst_col, out[a]);
    }
  }
}

/// One convolution (cin -> cout, 5 x 5, "same", h x w) and its buffers.
class conv {
 public:
  static constexpr index alpha = 6;  // input tile side
  static constexpr index taps = alpha * alpha;

  /// @pre direct_conv::cpu_supported(), supported(cin, cout, 5).
  conv(index cin, index cout, index h, index w) : cin_(cin), cout_(cout), h_(h), w_(w) {
    th_ = (h + 1) / 2;
    tw_ = (w + 1) / 2;
    hp_ = 2 * th_ + 4;
    wp_ = 2 * tw_ + 4;
    // One GEMM row of all tiles when cout is a multiple of 32; two rows for direct_conv's V = 1 blocks.
    const index tiles = th_ * tw_;
    const index rows = cout % 32 == 0 ? 1 : 2;
    gemm_ = direct_conv::make_plan(cin, cout, 1, rows, (tiles + rows - 1) / rows);
    tiles_pad_ = gemm_.ho_pad * gemm_.wo_pad;
    if (weight_grad_supported()) {
      // dU (cin x cout) = V^T (cin x tiles) . M (tiles x cout): positions are input channels, one row of
      // cin in blocks that divide it (so that consecutive tiles' channels are cin floats apart).
      dw_gemm_ = direct_conv::make_plan(tiles, cout, 1, 1, cin);
      index blocks = (cin + direct_conv::max_npw - 1) / direct_conv::max_npw;
      while (cin % blocks != 0) {
        ++blocks;
      }
      dw_gemm_.npw = static_cast<int>(cin / blocks);
      dw_gemm_.wo_pad = cin;
      dw_gemm_.wp = cin;
      du_.assign(static_cast<std::size_t>(taps * cin * cout), 0.0F);
      du_sample_.assign(static_cast<std::size_t>(cin * cout), 0.0F);
    }
    u_.assign(static_cast<std::size_t>(taps * cin * cout), 0.0F);
    xt_.assign(static_cast<std::size_t>(hp_ * wp_ * cin), 0.0F);
    vt_.assign(static_cast<std::size_t>(taps * tiles_pad_ * cin), 0.0F);
    m_.assign(static_cast<std::size_t>(taps * tiles_pad_ * cout), 0.0F);
    out_.assign(static_cast<std::size_t>(4 * th_ * tw_ * cout), 0.0F);
  }

  /// Output positions per row of run()'s result (the rows past h and columns past w are junk).
  [[nodiscard]] index out_width() const { return 2 * tw_; }

  /// Whether weight_grad_sample() runs here: whole tiles (even sides) and one GEMM row (cout % 32 == 0).
  [[nodiscard]] bool weight_grad_supported() const { return h_ % 2 == 0 && w_ % 2 == 0 && cout_ % 32 == 0; }

  /// Adds the weight gradient (in the transformed domain) of sample b of the input (as for run()) with
  /// the output gradient dyt (h x w positions, cout floats each). @pre weight_grad_supported().
  PRSGD_NN_DIRECT_TARGET void weight_grad_sample(const float* src, index ld, index b, const float* dyt) {
    load(src, ld, b);
    transform_input();
    const index m_tap = tiles_pad_ * cout_;
    transform_tiles<output_grad_transform>(cout_, dyt, {2 * w_ * cout_, 2 * cout_, w_ * cout_, cout_}, m_.data(),
                                           transformed(cout_));
    const index n = cin_ * cout_;
    for (index t = 0; t < taps; ++t) {
      direct_conv::forward_sample(dw_gemm_, vt_.data() + t * tiles_pad_ * cin_, m_.data() + t * m_tap,
                                  du_sample_.data());
      float* du = du_.data() + t * n;
      for (index i = 0; i < n; i += 16) {
        _mm512_storeu_ps(du + i, _mm512_add_ps(_mm512_loadu_ps(du + i), _mm512_loadu_ps(du_sample_.data() + i)));
      }
    }
  }

  /// gwt (cin, 5, 5, cout) = the weight gradient summed since the last call, which starts the next sum.
  PRSGD_NN_DIRECT_TARGET void take_weight_grad(float* gwt) {
    for (index ci = 0; ci < cin_; ++ci) {
      for (index g = 0; g < cout_; g += 16) {
        transform_2d<weight_grad_transform>(du_.data() + ci * cout_ + g, alpha * cin_ * cout_, cin_ * cout_,
                                            gwt + ci * 25 * cout_ + g, 5 * cout_, cout_);
      }
    }
    std::fill(du_.begin(), du_.end(), 0.0F);
  }

  /// Transforms the weights wt (cin, 5, 5, cout), cout contiguous.
  PRSGD_NN_DIRECT_TARGET void set_weights(const float* wt) {
    for (index ci = 0; ci < cin_; ++ci) {
      for (index g = 0; g < cout_; g += 16) {
        transform_2d<weight_transform>(wt + ci * 25 * cout_ + g, 5 * cout_, cout_, u_.data() + ci * cout_ + g,
                                       alpha * cin_ * cout_, cin_ * cout_);
      }
    }
  }

  /// The convolution of sample b (channel c at src + c * ld + b * h * w) as (2 th, 2 tw, cout).
  PRSGD_NN_DIRECT_TARGET const float* run(const float* src, index ld, index b) {
    load(src, ld, b);
    return convolve();
  }

  /// The convolution of one position-major sample (h x w positions, cin floats each), as run().
  const float* run_rows(const float* rows) {
    for (index y = 0; y < h_; ++y) {
      std::copy_n(rows + y * w_ * cin_, w_ * cin_, image_row(y));
    }
    return convolve();
  }

 private:
  float* image_row(index y) { return xt_.data() + ((y + 2) * wp_ + 2) * cin_; }

  // xt_ = sample b of src (as for run()).
  PRSGD_NN_DIRECT_TARGET void load(const float* src, index ld, index b) {
    for (index y = 0; y < h_; ++y) {
      direct_conv::columns_to_rows(src + b * h_ * w_ + y * w_, w_, cin_, ld, image_row(y));
    }
  }

  // Where a tile's block of 16-channel vectors is: floats per tile row and tile column, and between the
  // block's rows and columns.
  struct tile_layout {
    index ty;
    index tx;
    index row;
    index col;
  };

  // The layout of vt_ and m_ (tiles_pad_ positions of `channels` floats per tap, taps in rows of 6).
  [[nodiscard]] tile_layout transformed(index channels) const {
    const index tap = tiles_pad_ * channels;
    return {tw_ * channels, channels, alpha * tap, tap};
  }

  // transform_2d<T> of every tile, 16 of `channels` at a time.
  template <typename T>
  PRSGD_NN_DIRECT_TARGET void transform_tiles(index channels, const float* src, tile_layout s, float* dst,
                                              tile_layout d) {
    for (index ty = 0; ty < th_; ++ty) {
      for (index tx = 0; tx < tw_; ++tx) {
        for (index g = 0; g < channels; g += 16) {
          transform_2d<T>(src + ty * s.ty + tx * s.tx + g, s.row, s.col, dst + ty * d.ty + tx * d.tx + g, d.row, d.col);
        }
      }
    }
  }

  // vt_ = the transformed tiles of xt_.
  PRSGD_NN_DIRECT_TARGET void transform_input() {
    transform_tiles<input_transform>(cin_, xt_.data(), {2 * wp_ * cin_, 2 * cin_, wp_ * cin_, cin_}, vt_.data(),
                                     transformed(cin_));
  }

  // out_ = the convolution of the image in xt_.
  PRSGD_NN_DIRECT_TARGET const float* convolve() {
    transform_input();
    const index vt_tap = tiles_pad_ * cin_;
    const index m_tap = tiles_pad_ * cout_;
    for (index t = 0; t < taps; ++t) {
      direct_conv::gemm_sample(gemm_, vt_.data() + t * vt_tap, u_.data() + t * cin_ * cout_, m_.data() + t * m_tap);
    }
    const index ow = out_width();
    transform_tiles<output_transform>(cout_, m_.data(), transformed(cout_), out_.data(),
                                      {2 * ow * cout_, 2 * cout_, ow * cout_, cout_});
    return out_.data();
  }

  index cin_;
  index cout_;
  index h_;
  index w_;
  index th_ = 0;  // tile rows and columns
  index tw_ = 0;
  index hp_ = 0;  // the position-major padded input's rows and columns (2 th + 4, 2 tw + 4)
  index wp_ = 0;
  direct_conv::plan gemm_;        // one tap's GEMM, tiles as positions
  index tiles_pad_ = 0;           // positions per tap in vt_ and m_ (tiles and the GEMM blocks' overhang)
  std::vector<float> u_;          // transformed weights (36, cin, cout)
  std::vector<float> xt_;         // the padded input, position-major (hp, wp, cin); the borders stay zero
  std::vector<float> vt_;         // transformed input tiles (36, tiles_pad, cin)
  std::vector<float> m_;          // the GEMMs' products (36, tiles_pad, cout)
  std::vector<float> out_;        // the output (2 th, 2 tw, cout)
  direct_conv::plan dw_gemm_;     // one tap's weight-gradient GEMM (if weight_grad_supported())
  std::vector<float> du_;         // the weight gradient's sum, transformed (36, cin, cout)
  std::vector<float> du_sample_;  // one tap's GEMM result (cin, cout)
};

#endif  // PRSGD_NN_DIRECT_CONV

}  // namespace prsgd::algorithms::winograd
