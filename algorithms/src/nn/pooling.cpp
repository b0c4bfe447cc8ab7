// SPDX-License-Identifier: Apache-2.0
// Pooling: max_pool2d (optionally with the ReLU folded in; 2x2 rows without branches, and AVX-512 rows
// picked at run time) and global average pooling.
#include "prsgd/algorithms/layers.hpp"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "direct_conv.hpp"
#include "layer_kernels.hpp"
#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {
namespace {

using namespace layer_kernels;

// One output row of the 2x2 max pool: out[j], arg[j] for j < ow from the input rows at plane + r0 and
// plane + r1; arg holds base + the winner's index in plane. Selects instead of branches (the winner is
// data-dependent, so branches mispredicted); the first maximum in scan order wins. With `relu`, a window
// whose maximum is not positive gives 0 and passes no gradient (argmax -1).
PRSGD_NN_WIDE_VECTORS void pool2_forward_row(const float* plane, index r0, index r1, index base, index ow, bool relu,
                                             float* __restrict out, std::int32_t* __restrict arg) {
  for (index j = 0; j < ow; ++j) {
    index best = r0 + 2 * j;
    float v = plane[best];
    const float v1 = plane[r0 + 2 * j + 1];
    const float v2 = plane[r1 + 2 * j];
    const float v3 = plane[r1 + 2 * j + 1];
    best = v1 > v ? r0 + 2 * j + 1 : best;
    v = v1 > v ? v1 : v;
    best = v2 > v ? r1 + 2 * j : best;
    v = v2 > v ? v2 : v;
    best = v3 > v ? r1 + 2 * j + 1 : best;
    v = v3 > v ? v3 : v;
    const bool dead = relu && !(v > 0.0F);
    out[j] = dead ? 0.0F : v;
    arg[j] = dead ? -1 : static_cast<std::int32_t>(base + best);
  }
}

// The backward of one output row when the windows tile the input: d0[0, 2*ow) and d1[0, 2*ow) (input rows
// r0 and r0 + wd) get the gradient g[j] at the position arg[j] names, 0 elsewhere.
PRSGD_NN_WIDE_VECTORS void pool2_backward_row(const float* __restrict g, const std::int32_t* __restrict arg,
                                              float* __restrict d0, float* __restrict d1, index ow, index r0,
                                              index wd) {
  for (index j = 0; j < ow; ++j) {
    const float gv = g[j];
    const index local = arg[j] - (r0 + 2 * j);  // 0, 1, wd or wd + 1; negative: no gradient
    d0[2 * j] = local == 0 ? gv : 0.0F;
    d0[2 * j + 1] = local == 1 ? gv : 0.0F;
    d1[2 * j] = local == wd ? gv : 0.0F;
    d1[2 * j + 1] = local == wd + 1 ? gv : 0.0F;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PRSGD_NN_AVX512_POOL 1
// The 2x2 max pool's rows are short (14 and 7 outputs in fmnist-cnn) and read pairs, which GCC does not
// vectorise; these AVX-512 versions do one output row per masked 16-lane block. Picked at run time
// (the library's baseline is plain x86-64); the scalar loops in max_pool_layer are the fallback and define
// the semantics: the first maximum in scan order (a, b / c, d) wins, which is the same as
// top = b > a ? b : a, bottom = d > c ? d : c, then bottom > top ? bottom : top.
using direct_conv::first_lanes;

// One output row: out[j], arg[j] for j < ow from input rows r0 and r1 (2*ow floats each); `at0` is the
// index that arg uses for r0[0], `wd` the distance from r0 to r1 in those indices. With `relu`, outputs
// whose maximum is not positive become 0 with arg -1 (as in max_pool_layer::forward).
__attribute__((target("avx512f"))) void pool2_forward_row_avx512(const float* r0, const float* r1, float* out,
                                                                 std::int32_t* arg, index ow, std::int32_t at0,
                                                                 std::int32_t wd, bool relu) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i even = _mm512_add_epi32(lane, lane);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i down = _mm512_set1_epi32(wd);
  for (index j = 0; j < ow; j += 16) {
    const index n = std::min<index>(16, ow - j);
    const __mmask16 lo = first_lanes(2 * n);
    const __mmask16 hi = first_lanes(2 * n - 16);
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * j);
    const __m512 a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * j + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * j);
    const __m512 b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * j + 16);
    const __m512 e0 = _mm512_permutex2var_ps(a0, even, a1);  // r0[2j], r0[2j + 2], ...
    const __m512 o0 = _mm512_permutex2var_ps(a0, odd, a1);
    const __m512 e1 = _mm512_permutex2var_ps(b0, even, b1);
    const __m512 o1 = _mm512_permutex2var_ps(b0, odd, b1);
    const direct_conv::pool2_max best = direct_conv::max_of_window(e0, o0, e1, o1);
    __m512 v = best.v;
    const __m512i top_off = _mm512_maskz_mov_epi32(best.top_right, one);
    const __m512i bottom_off = _mm512_mask_add_epi32(down, best.bottom_right, down, one);
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(at0 + 2 * static_cast<std::int32_t>(j)), even);
    idx = _mm512_add_epi32(idx, _mm512_mask_blend_epi32(best.use_bottom, top_off, bottom_off));
    if (relu) {
      const __mmask16 live = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
      v = _mm512_maskz_mov_ps(live, v);
      idx = _mm512_mask_blend_epi32(live, _mm512_set1_epi32(-1), idx);
    }
    const __mmask16 m = first_lanes(n);
    _mm512_mask_storeu_ps(out + j, m, v);
    _mm512_mask_storeu_epi32(arg + j, m, idx);
  }
}

// The backward of one output row when the windows tile the input: writes d0[0, 2*ow) and d1[0, 2*ow),
// the gradient g[j] at the position arg[j] names (indices as in pool2_forward_row_avx512), 0 elsewhere.
__attribute__((target("avx512f"))) void pool2_backward_row_avx512(const float* g, const std::int32_t* arg, float* d0,
                                                                  float* d1, index ow, std::int32_t at0,
                                                                  std::int32_t wd) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i even = _mm512_add_epi32(lane, lane);
  // Interleaving x (even positions) and y (odd): x0 y0 x1 y1 ... from lanes 0-7, then lanes 8-15.
  const __m512i first_half = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second_half = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (index j = 0; j < ow; j += 16) {
    const index n = std::min<index>(16, ow - j);
    const __mmask16 m = first_lanes(n);
    const __mmask16 lo = first_lanes(2 * n);
    const __mmask16 hi = first_lanes(2 * n - 16);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + j);
    const __m512i local =
        _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, arg + j),
                         _mm512_add_epi32(_mm512_set1_epi32(at0 + 2 * static_cast<std::int32_t>(j)), even));
    const __m512 v00 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(local, _mm512_setzero_si512()), gv);
    const __m512 v01 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(local, _mm512_set1_epi32(1)), gv);
    const __m512 v10 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(local, _mm512_set1_epi32(wd)), gv);
    const __m512 v11 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(local, _mm512_set1_epi32(wd + 1)), gv);
    _mm512_mask_storeu_ps(d0 + 2 * j, lo, _mm512_permutex2var_ps(v00, first_half, v01));
    _mm512_mask_storeu_ps(d0 + 2 * j + 16, hi, _mm512_permutex2var_ps(v00, second_half, v01));
    _mm512_mask_storeu_ps(d1 + 2 * j, lo, _mm512_permutex2var_ps(v10, first_half, v11));
    _mm512_mask_storeu_ps(d1 + 2 * j + 16, hi, _mm512_permutex2var_ps(v10, second_half, v11));
  }
}
#endif

class max_pool_layer final : public layer {
 public:
  // With `relu`, y = max(max_pool(x), 0): the same as pooling after a ReLU (max(relu(x)) = relu(max(x))),
  // without the ReLU's two passes over the full-resolution activation and its gradient.
  max_pool_layer(shape3 in, int kernel, bool relu)
      : in_(in), k_(kernel), out_{in.channels, in.height / kernel, in.width / kernel}, relu_(relu) {
    PRSGD_CHECK(kernel > 0 && out_.height > 0 && out_.width > 0) << "bad max-pool geometry";
  }
  std::string describe() const override {
    return (relu_ ? "relu+max_pool2d(" : "max_pool2d(") + std::to_string(k_) + ")";
  }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override { return out_; }
  void forward(const tensor& x, tensor& y, bool /*training*/) override {
    const index batch = batch_of(x, in_);
    const index oh = out_.height;
    const index ow = out_.width;
    const index wd = in_.width;
    const index iplane = static_cast<index>(in_.plane());
    y.resize(in_.channels, batch * oh * ow);
    argmax_.resize(static_cast<std::size_t>(y.size()));
    std::int32_t* arg = argmax_.data();
    float* out = y.data();
    for (index c = 0; c < in_.channels; ++c) {
      for (index b = 0; b < batch; ++b) {
        const index base = b * iplane;
        const float* plane = x.data() + c * x.cols() + base;
        if (k_ == 2) {
#if PRSGD_NN_AVX512_POOL
          if (direct_conv::cpu_supported()) {
            for (index i = 0; i < oh; ++i) {
              const index r0 = 2 * i * wd;
              pool2_forward_row_avx512(plane + r0, plane + r0 + wd, out, arg, ow, static_cast<std::int32_t>(base + r0),
                                       static_cast<std::int32_t>(wd), relu_);
              out += ow;
              arg += ow;
            }
            continue;
          }
#endif
          // The common 2x2 case without the inner loops (same rule: the first maximum in scan order wins).
          for (index i = 0; i < oh; ++i) {
            const index r0 = 2 * i * wd;
            pool2_forward_row(plane, r0, r0 + wd, base, ow, relu_, out, arg);
            out += ow;
            arg += ow;
          }
          continue;
        }
        for (index i = 0; i < oh; ++i) {
          for (index j = 0; j < ow; ++j) {
            index best = i * k_ * wd + j * k_;
            float v = plane[best];
            for (index di = 0; di < k_; ++di) {
              for (index dj = 0; dj < k_; ++dj) {
                const index at = (i * k_ + di) * wd + j * k_ + dj;
                if (plane[at] > v) {
                  v = plane[at];
                  best = at;
                }
              }
            }
            const bool dead = relu_ && !(v > 0.0F);
            *out++ = dead ? 0.0F : v;
            *arg++ = dead ? -1 : static_cast<std::int32_t>(base + best);
          }
        }
      }
    }
  }
  void backward(const tensor& x, const tensor& y, const tensor& dy, tensor* dx) override {
    if (dx == nullptr) {
      return;
    }
    const index per_row = y.cols();
    if (in_.height % k_ != 0 || in_.width % k_ != 0) {
      // Some inputs are in no window: zero everything, then route each gradient to its maximum.
      dx->setZero(x.rows(), x.cols());
      for (index c = 0; c < y.rows(); ++c) {
        float* d = dx->data() + c * dx->cols();
        const float* g = dy.data() + c * per_row;
        const std::int32_t* arg = argmax_.data() + c * per_row;
        for (index i = 0; i < per_row; ++i) {
          if (arg[i] >= 0) {
            d[arg[i]] += g[i];
          }
        }
      }
      return;
    }
    // The windows tile the input: write every input once (the gradient at the maximum, 0 elsewhere)
    // instead of zeroing dx and scattering into it.
    dx->resize(x.rows(), x.cols());
    const index batch = dy.cols() / static_cast<index>(out_.plane());
    const index oh = out_.height;
    const index ow = out_.width;
    const index wd = in_.width;
    const index iplane = static_cast<index>(in_.plane());
    for (index c = 0; c < y.rows(); ++c) {
      const float* g = dy.data() + c * per_row;
      const std::int32_t* arg = argmax_.data() + c * per_row;
      float* d = dx->data() + c * dx->cols();
      for (index b = 0; b < batch; ++b) {
        const index base = b * iplane;
        if (k_ == 2) {
#if PRSGD_NN_AVX512_POOL
          if (direct_conv::cpu_supported()) {
            for (index i = 0; i < oh; ++i) {
              const index r0 = base + 2 * i * wd;
              pool2_backward_row_avx512(g, arg, d + r0, d + r0 + wd, ow, static_cast<std::int32_t>(r0),
                                        static_cast<std::int32_t>(wd));
              g += ow;
              arg += ow;
            }
            continue;
          }
#endif
          for (index i = 0; i < oh; ++i) {
            const index r0 = base + 2 * i * wd;
            pool2_backward_row(g, arg, d + r0, d + r0 + wd, ow, r0, wd);
            g += ow;
            arg += ow;
          }
          continue;
        }
        for (index i = 0; i < oh; ++i) {
          for (index j = 0; j < ow; ++j) {
            const float gv = *g++;
            const index at = *arg++;
            for (index di = 0; di < k_; ++di) {
              const index row = base + (i * k_ + di) * wd + j * k_;
              for (index dj = 0; dj < k_; ++dj) {
                d[row + dj] = row + dj == at ? gv : 0.0F;
              }
            }
          }
        }
      }
    }
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<max_pool_layer>(in_, k_, relu_); }

 private:
  shape3 in_;
  int k_;
  shape3 out_;
  bool relu_;
  std::vector<std::int32_t> argmax_;
};

class global_avg_pool_layer final : public layer {
 public:
  explicit global_avg_pool_layer(shape3 in) : in_(in) {}
  std::string describe() const override { return "global_avg_pool"; }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override { return {in_.channels, 1, 1}; }
  void forward(const tensor& x, tensor& y, bool /*training*/) override {
    const index batch = batch_of(x, in_);
    const index plane = static_cast<index>(in_.plane());
    y.resize(in_.channels, batch);
    for (index c = 0; c < in_.channels; ++c) {
      for (index b = 0; b < batch; ++b) {
        y(c, b) = x.row(c).segment(b * plane, plane).mean();
      }
    }
  }
  void backward(const tensor& x, const tensor& /*y*/, const tensor& dy, tensor* dx) override {
    if (dx == nullptr) {
      return;
    }
    const index plane = static_cast<index>(in_.plane());
    dx->resize(x.rows(), x.cols());
    const float scale = 1.0F / static_cast<float>(plane);
    for (index c = 0; c < dy.rows(); ++c) {
      for (index b = 0; b < dy.cols(); ++b) {
        dx->row(c).segment(b * plane, plane).setConstant(dy(c, b) * scale);
      }
    }
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<global_avg_pool_layer>(in_); }

 private:
  shape3 in_;
};

}  // namespace

std::unique_ptr<layer> make_max_pool2d(shape3 in, int kernel) {
  return std::make_unique<max_pool_layer>(in, kernel, false);
}
std::unique_ptr<layer> make_relu_max_pool2d(shape3 in, int kernel) {
  return std::make_unique<max_pool_layer>(in, kernel, true);
}
std::unique_ptr<layer> make_global_avg_pool(shape3 in) { return std::make_unique<global_avg_pool_layer>(in); }

}  // namespace prsgd::algorithms
