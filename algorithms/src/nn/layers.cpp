// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "prsgd/common/check.hpp"
#include "direct_conv.hpp"
#include "layer_fusion.hpp"
#include "winograd.hpp"

#if PRSGD_NN_BLAS
// OpenBLAS's thread control, if the BLAS loaded at run time is OpenBLAS (weak: absent otherwise).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
// sgemm_, the Fortran BLAS entry point, is declared by Eigen/Core under EIGEN_USE_BLAS (which nn.cmake
// sets together with PRSGD_NN_BLAS).
#endif

namespace prsgd::algorithms {
namespace {

// Training runs one model per compute-pool thread, so a multi-threaded BLAS would oversubscribe the
// cores. Unless OPENBLAS_NUM_THREADS says otherwise, OpenBLAS is limited to the calling thread.
void limit_blas_threads() {
#if PRSGD_NN_BLAS
  static const bool once = [] {
    if (openblas_set_num_threads != nullptr && std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
      openblas_set_num_threads(1);
    }
    return true;
  }();
  (void)once;
#endif
}

using index = Eigen::Index;
using vec_map = Eigen::Map<Eigen::VectorXf>;
using const_vec_map = Eigen::Map<const Eigen::VectorXf>;
using mat_map = Eigen::Map<tensor>;
using const_mat_map = Eigen::Map<const tensor>;

// Row-major operands for `gemm`: `rows` x `cols` as used (after the transpose), `ld` floats between
// consecutive stored rows, `trans` if the stored matrix is the transpose of the one used.
struct gemm_operand {
  const float* data;
  index rows;
  index cols;
  index ld;
  bool trans;
};

// Computes C = A·B (accumulate: C += A·B) for row-major C (`c_ld` floats between rows). Calls sgemm
// directly: Eigen's `dst.noalias() = A*B` first zeroes dst and then calls sgemm with beta = 1, which
// costs a memset and a read of dst per product; beta = 0 writes dst once.
void gemm(const gemm_operand& a, const gemm_operand& b, float* c, index c_ld, bool accumulate) {
  PRSGD_CHECK(a.cols == b.rows) << "gemm: inner dimensions " << a.cols << " and " << b.rows << " differ";
  const index m = a.rows;
  const index n = b.cols;
  const index k = a.cols;
  if (m == 0 || n == 0) {
    return;
  }
  if (k == 0) {
    if (!accumulate) {
      for (index r = 0; r < m; ++r) {
        std::fill(c + r * c_ld, c + r * c_ld + n, 0.0F);
      }
    }
    return;
  }
#if PRSGD_NN_BLAS
  // Row-major C = A·B is column-major C^T = B^T·A^T: swap the operands; each stored row-major matrix
  // read column-major is its transpose, so the transpose flags carry over unchanged.
  const char ta = b.trans ? 'T' : 'N';
  const char tb = a.trans ? 'T' : 'N';
  const int mm = static_cast<int>(n);
  const int nn = static_cast<int>(m);
  const int kk = static_cast<int>(k);
  const int lda = static_cast<int>(b.ld);
  const int ldb = static_cast<int>(a.ld);
  const int ldc = static_cast<int>(c_ld);
  const float one = 1.0F;
  const float beta = accumulate ? 1.0F : 0.0F;
  sgemm_(&ta, &tb, &mm, &nn, &kk, &one, b.data, &lda, a.data, &ldb, &beta, c, &ldc);
#else
  using strided = Eigen::Map<const tensor, 0, Eigen::OuterStride<>>;
  using col_strided = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<>>;  // a transposed row-major view
  Eigen::Map<tensor, 0, Eigen::OuterStride<>> cm(c, m, n, Eigen::OuterStride<>(c_ld));
  auto run = [&](const auto& am, const auto& bm) {
    if (accumulate) {
      cm.noalias() += am * bm;
    } else {
      cm.noalias() = am * bm;
    }
  };
  auto with_b = [&](const auto& am) {
    if (b.trans) {
      run(am, col_strided(b.data, b.rows, b.cols, Eigen::OuterStride<>(b.ld)));
    } else {
      run(am, strided(b.data, b.rows, b.cols, Eigen::OuterStride<>(b.ld)));
    }
  };
  if (a.trans) {
    with_b(col_strided(a.data, a.rows, a.cols, Eigen::OuterStride<>(a.ld)));
  } else {
    with_b(strided(a.data, a.rows, a.cols, Eigen::OuterStride<>(a.ld)));
  }
#endif
}

// Adds bias[r] to row r of the `rows` x `cols` block at `y` (`ld` floats between rows).
void add_row_bias(float* y, index rows, index cols, index ld, const float* bias) {
  for (index r = 0; r < rows; ++r) {
    float* row = y + r * ld;
    const float v = bias[r];
    for (index i = 0; i < cols; ++i) {
      row[i] += v;
    }
  }
}

// Writes (accumulate: adds) the row sums of the `rows` x `cols` block at `x` to `out`.
void row_sums(const float* x, index rows, index cols, index ld, float* out, bool accumulate) {
  for (index r = 0; r < rows; ++r) {
    const float sum = const_vec_map(x + r * ld, cols).sum();
    out[r] = accumulate ? out[r] + sum : sum;
  }
}

// PyTorch's default init (kaiming_uniform with a = sqrt(5)) reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// for weights and biases alike.
void fill_uniform(float* p, std::size_t n, float bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = dist(rng);
  }
}

// max(x, 0) with NaN -> 0 (the `x > 0` test); compiles to maxps.
void relu_forward(const float* __restrict in, float* __restrict out, index n) {
  for (index i = 0; i < n; ++i) {
    const float v = in[i];
    out[i] = v > 0.0F ? v : 0.0F;
  }
}

// dx = y > 0 ? dy : 0. Both loads are unconditional and the pointers restrict-qualified, so this
// vectorises to compare + and; with `y > 0 ? dy[i] : 0` GCC kept a scalar loop with a branch that
// mispredicted on every other element (12 % of a CNN step).
void relu_backward(const float* __restrict y, const float* __restrict dy, float* __restrict dx, index n) {
  for (index i = 0; i < n; ++i) {
    const float g = dy[i];
    dx[i] = y[i] > 0.0F ? g : 0.0F;
  }
}

// The library is built for the x86-64 baseline (SSE2) unless PRSGD_X86_LEVEL raises it. The im2col / col2im
// copies are bound by stores, and the 2x2 max pool's row loops only vectorise with SSE4 blends and 64-bit
// compares, so on x86-64 these also get AVX2 and AVX-512 clones picked at load time (same results: selects
// and copies, no FMA). Other architectures compile the plain loops.
// Not under ThreadSanitizer: target_clones resolvers are IFUNCs that the loader runs during relocation,
// before the TSan runtime is initialised, and crash there (every TSan binary linking this library did).
#if defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
#define PRSGD_NN_WIDE_VECTORS
#else
#define PRSGD_NN_WIDE_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// dst[i] = mask[i] ? src[i] : 0 with all-ones / all-zero masks: a vectorised and, no branch.
PRSGD_NN_WIDE_VECTORS void masked_copy(float* __restrict dst, const float* __restrict src, const std::uint32_t* __restrict mask, index n) {
  for (index i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, src + i, sizeof bits);
    bits &= mask[i];
    std::memcpy(dst + i, &bits, sizeof bits);
  }
}

// dst[i] += mask[i] ? src[i] : 0 (masks as in masked_copy).
PRSGD_NN_WIDE_VECTORS void masked_add(float* __restrict dst, const float* __restrict src, const std::uint32_t* __restrict mask, index n) {
  for (index i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, src + i, sizeof bits);
    bits &= mask[i];
    float v = 0.0F;
    std::memcpy(&v, &bits, sizeof v);
    dst[i] += v;
  }
}

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
    const __m512i local = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, arg + j),
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

index batch_of(const tensor& x, shape3 in) {
  PRSGD_CHECK(x.rows() == in.channels && x.cols() % static_cast<index>(in.plane()) == 0)
      << "input " << x.rows() << "x" << x.cols() << " does not fit shape " << in.channels << "x" << in.height
      << "x" << in.width;
  return x.cols() / static_cast<index>(in.plane());
}

class linear_layer final : public layer {
 public:
  linear_layer(shape3 in, int out) : in_(in), out_(out) {
    limit_blas_threads();
    PRSGD_CHECK(in.height == 1 && in.width == 1 && out > 0) << "linear needs a vector input";
  }
  std::string describe() const override {
    return "linear(" + std::to_string(in_.channels) + "->" + std::to_string(out_) + ")";
  }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override { return {out_, 1, 1}; }
  std::size_t num_params() const override { return weights() + static_cast<std::size_t>(out_); }
  void bind(float* params, float* grads, float* /*buffers*/) override {
    w_ = params;
    gw_ = grads;
  }
  void reset_parameters(std::mt19937_64& rng) override {
    const float bound = 1.0F / std::sqrt(static_cast<float>(in_.channels));
    fill_uniform(w_, num_params(), bound, rng);
  }
  void forward(const tensor& x, tensor& y, bool /*training*/) override {
    const index batch = batch_of(x, in_);
    y.resize(out_, batch);
    gemm(weight_operand(false), {x.data(), in_.channels, batch, batch, false}, y.data(), batch, false);
    add_row_bias(y.data(), out_, batch, batch, w_ + weights());
  }
  void backward(const tensor& x, const tensor& y, const tensor& dy, tensor* dx) override {
    run_backward(x, y, dy, dx, true);
  }
  bool backward_overwrite(const tensor& x, const tensor& y, const tensor& dy, tensor* dx) override {
    run_backward(x, y, dy, dx, false);
    return true;
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<linear_layer>(in_, out_); }
  std::vector<tensor_info> tensors() const override {
    return {{"weight", {out_, in_.channels}, tensor_role::parameter, 0},
            {"bias", {out_}, tensor_role::parameter, weights()}};
  }

 private:
  std::size_t weights() const { return in_.size() * static_cast<std::size_t>(out_); }
  // The weight (out x in, row-major) or, with `trans`, its transpose (in x out).
  gemm_operand weight_operand(bool trans) const {
    return trans ? gemm_operand{w_, in_.channels, out_, in_.channels, true}
                 : gemm_operand{w_, out_, in_.channels, in_.channels, false};
  }
  void run_backward(const tensor& x, const tensor& /*y*/, const tensor& dy, tensor* dx, bool accumulate) {
    const index batch = dy.cols();
    // gw (out x in) = dy (out x B) · x^T (B x in); the bias gradient is the row sums of dy.
    gemm({dy.data(), out_, batch, batch, false}, {x.data(), batch, in_.channels, batch, true}, gw_, in_.channels,
         accumulate);
    row_sums(dy.data(), out_, batch, batch, gw_ + weights(), accumulate);
    if (dx != nullptr) {
      dx->resize(in_.channels, batch);
      gemm(weight_operand(true), {dy.data(), out_, batch, batch, false}, dx->data(), batch, false);
    }
  }

  shape3 in_;
  int out_;
  float* w_ = nullptr;
  float* gw_ = nullptr;
};

class relu_layer final : public layer {
 public:
  explicit relu_layer(shape3 in) : in_(in) {}
  std::string describe() const override { return "relu"; }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override { return in_; }
  void forward(const tensor& x, tensor& y, bool /*training*/) override {
    y.resize(x.rows(), x.cols());
    relu_forward(x.data(), y.data(), x.size());
  }
  void backward(const tensor& /*x*/, const tensor& y, const tensor& dy, tensor* dx) override {
    if (dx != nullptr) {
      dx->resize(y.rows(), y.cols());
      relu_backward(y.data(), dy.data(), dx->data(), y.size());
    }
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<relu_layer>(in_); }

 private:
  shape3 in_;
};

class conv2d_layer final : public layer {
 public:
  // With pool = 2 the layer is this convolution followed by relu + max_pool2d(2) (see pools()).
  conv2d_layer(shape3 in, int out_channels, int kernel, int stride, int padding, bool bias, int pool = 0)
      : in_(in), k_(kernel), s_(stride), p_(padding), bias_(bias), pool_(pool) {
    limit_blas_threads();
    PRSGD_CHECK(kernel > 0 && stride > 0 && padding >= 0 && out_channels > 0) << "bad conv2d geometry";
    out_ = {out_channels, (in.height + 2 * padding - kernel) / stride + 1,
            (in.width + 2 * padding - kernel) / stride + 1};
    PRSGD_CHECK(out_.height > 0 && out_.width > 0) << "conv2d output would be empty";
    // Direct AVX-512 kernels (direct_conv.hpp) for "same" stride-1 convolutions with cout a multiple of
    // 16 (forward, weight gradient) and cin a multiple of 16 (input gradient); im2col + GEMM otherwise,
    // on CPUs without AVX-512F, and always with PRSGD_NN_CONV=gemm. The forward and input-gradient
    // convolutions (and weight gradients) that winograd.hpp covers run there, unless PRSGD_NN_CONV=direct.
    const char* mode = std::getenv("PRSGD_NN_CONV");
    const bool gemm_forced = mode != nullptr && std::string_view(mode) == "gemm";
    direct_ = !gemm_forced && direct_conv::cpu_supported() && same_geometry() &&
              direct_conv::forward_supported(out_.channels, k_);
    direct_dx_ = direct_ && direct_conv::forward_supported(in_.channels, k_);
    if (direct_) {
      fplan_ = direct_conv::make_plan(in_.channels, out_.channels, k_, in_.height, in_.width);
      bplan_ = direct_conv::make_plan(out_.channels, in_.channels, k_, in_.height, in_.width);
    }
#if PRSGD_NN_DIRECT_CONV
    const bool winograd_off = mode != nullptr && std::string_view(mode) == "direct";
    if (direct_ && !winograd_off && winograd::supported(in_.channels, out_.channels, k_)) {
      wino_fwd_ = std::make_unique<winograd::conv>(in_.channels, out_.channels, in_.height, in_.width);
    }
    if (direct_dx_ && !winograd_off && winograd::supported(out_.channels, in_.channels, k_)) {
      wino_dx_ = std::make_unique<winograd::conv>(out_.channels, in_.channels, in_.height, in_.width);
    }
#endif
    PRSGD_CHECK(pool_ == 0 || pools(pool_)) << "conv2d cannot fuse a max pool of " << pool_;
  }
  std::string describe() const override {
    std::ostringstream s;
    s << "conv2d(" << in_.channels << "->" << out_.channels << ", k" << k_ << ", s" << s_ << ", p" << p_ << ")";
    if (pool_ != 0) {
      s << "+relu+max_pool2d(" << pool_ << ")";
    }
    return s.str();
  }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override {
    return pool_ != 0 ? shape3{out_.channels, out_.height / pool_, out_.width / pool_} : out_;
  }
  // Whether this convolution can run with relu + max_pool2d(kernel) fused into its direct kernels'
  // position-major output (and their gradient into its input): the direct path, kernel 2, even sides.
  bool pools(int kernel) const {
    return PRSGD_NN_DIRECT_CONV != 0 && direct_ && kernel == 2 && out_.height % 2 == 0 && out_.width % 2 == 0;
  }
  // This layer followed by relu + max_pool2d(kernel). @pre pools(kernel), not bound yet.
  std::unique_ptr<layer> with_relu_max_pool(int kernel) const {
    return std::make_unique<conv2d_layer>(in_, out_.channels, k_, s_, p_, bias_, kernel);
  }
  std::size_t num_params() const override {
    return weights() + (bias_ ? static_cast<std::size_t>(out_.channels) : 0U);
  }
  void bind(float* params, float* grads, float* /*buffers*/) override {
    w_ = params;
    gw_ = grads;
  }
  void reset_parameters(std::mt19937_64& rng) override {
    const float bound = 1.0F / std::sqrt(static_cast<float>(patch()));
    fill_uniform(w_, num_params(), bound, rng);
  }

  void forward(const tensor& x, tensor& y, bool /*training*/) override {
    const index batch = batch_of(x, in_);
    const index oplane = static_cast<index>(out_.plane());
    const index ncols = batch * oplane;
    const index cout = out_.channels;
    y.resize(cout, batch * static_cast<index>(output_shape().plane()));
#if PRSGD_NN_DIRECT_CONV
    if (direct_) {
      forward_direct(x, batch, y);
      return;
    }
#endif
    const index chunk = samples_per_chunk();
    float* cols = cols_buffer(chunk);
    for (index b0 = 0; b0 < batch; b0 += chunk) {
      const index nb = std::min(chunk, batch - b0);
      const index nc = nb * oplane;
      const index ld = cols_ld(nc);
      im2col(x, b0, nb, cols, ld);
      // y[:, chunk] (cout x nc, rows ncols apart) = w (cout x patch) · cols (patch x nc); the bias is
      // added while the chunk is still in cache.
      float* yc = y.data() + b0 * oplane;
      gemm({w_, cout, patch(), patch(), false}, {cols, patch(), nc, ld, false}, yc, ncols, false);
      if (bias_) {
        add_row_bias(yc, cout, nc, ncols, w_ + weights());
      }
    }
  }

  void backward(const tensor& x, const tensor& y, const tensor& dy, tensor* dx) override {
    run_backward(x, y, dy, dx, true);
  }
  bool backward_overwrite(const tensor& x, const tensor& y, const tensor& dy, tensor* dx) override {
    run_backward(x, y, dy, dx, false);
    return true;
  }
  std::unique_ptr<layer> clone() const override {
    return std::make_unique<conv2d_layer>(in_, out_.channels, k_, s_, p_, bias_, pool_);
  }
  std::vector<tensor_info> tensors() const override {
    std::vector<tensor_info> out{{"weight", {out_.channels, in_.channels, k_, k_}, tensor_role::parameter, 0}};
    if (bias_) {
      out.push_back({"bias", {out_.channels}, tensor_role::parameter, weights()});
    }
    return out;
  }

 private:
  void run_backward(const tensor& x, const tensor& /*y*/, const tensor& dy_in, tensor* dx, bool accumulate) {
    const index batch = batch_of(x, in_);
    const index oplane = static_cast<index>(out_.plane());
    const index cout = out_.channels;
    if (dx != nullptr) {
      dx->resize(in_.channels, x.cols());
    }
    gwt_.resize(weights());
    bool gemm_dw = true;
    bool gemm_dx = dx != nullptr;
    // The convolution's output gradient: dy_in, or with a fused pool the one backward_pooled() leaves.
    const tensor& dy = pool_ != 0 ? dy_full_ : dy_in;
#if PRSGD_NN_DIRECT_CONV
    if (pool_ != 0) {
      gemm_dx = !backward_pooled(x, dy_in, batch, dx, accumulate) && dx != nullptr;
      gemm_dw = false;
    }
#endif
    const index ncols = dy.cols();
    if (bias_ && pool_ == 0) {
      row_sums(dy.data(), cout, ncols, ncols, gw_ + weights(), accumulate);
    }
#if PRSGD_NN_DIRECT_CONV
    if (direct_ && pool_ == 0) {
      weight_grad_direct(x, dy, batch);
      gemm_dw = false;
      if (dx != nullptr && direct_dx_) {
        input_grad_direct(dy, batch, *dx);
        gemm_dx = false;
      }
    } else if (gemm_dx && direct_dx_) {
      input_grad_direct(dy, batch, *dx);
      gemm_dx = false;
    }
#endif
    if (gemm_dw || gemm_dx) {
      const index chunk = samples_per_chunk();
      float* cols = cols_buffer(chunk);
      for (index b0 = 0; b0 < batch; b0 += chunk) {
        const index nb = std::min(chunk, batch - b0);
        const index nc = nb * oplane;
        const index ld = cols_ld(nc);
        const float* dyc = dy.data() + b0 * oplane;
        if (gemm_dw) {
          im2col(x, b0, nb, cols, ld);
          // gw^T (patch x cout) += cols (patch x nc) · dy[:, chunk]^T (nc x cout), transposed into gw at
          // the end: OpenBLAS runs this orientation ~25 % faster than gw = dy · cols^T (conv2 of fmnist-cnn).
          gemm({cols, patch(), nc, ld, false}, {dyc, nc, cout, ncols, true}, gwt_.data(), cout, b0 > 0);
        }
        if (gemm_dx) {
          // cols (patch x nc) = w^T (patch x cout) · dy[:, chunk], then scattered back onto the input.
          gemm({w_, patch(), cout, patch(), true}, {dyc, cout, nc, ncols, false}, cols, ld, false);
          col2im(cols, ld, b0, nb, *dx);
        }
      }
    }
    const index np = patch();
    for (index o = 0; o < cout; ++o) {
      float* g = gw_ + o * np;
      const float* t = gwt_.data() + o;
      if (accumulate) {
        for (index j = 0; j < np; ++j) {
          g[j] += t[j * cout];
        }
      } else {
        for (index j = 0; j < np; ++j) {
          g[j] = t[j * cout];
        }
      }
    }
  }

#if PRSGD_NN_DIRECT_CONV
  // Resizes a padded per-sample buffer of `plan` (zeroed when allocated; only the image is written
  // afterwards, so the borders stay zero).
  static float* padded_buffer(std::vector<float>& buf, const direct_conv::plan& p) {
    const auto n = static_cast<std::size_t>(p.cin * p.plane_p());
    if (buf.size() != n) {
      buf.assign(n, 0.0F);
    }
    return buf.data();
  }
  // Writes the valid positions (rows < h, columns < w) of a kernel's output (rows of `out_w` positions,
  // `cout` floats each) into sample b of dst (cout channel rows), adding bias[c] if not null.
  static void unpack_sample(index h, index w, index out_w, index cout, const float* out, const float* bias, index b,
                            tensor& dst) {
    float* d = dst.data() + b * h * w;
    if (out_w == w) {  // no junk columns (fmnist-cnn's 28 and 14): the plane is one run of positions
      direct_conv::rows_to_columns(out, h * w, cout, bias, d, dst.cols());
      return;
    }
    for (index y = 0; y < h; ++y) {
      direct_conv::rows_to_columns(out + y * out_w * cout, w, cout, bias, d + y * w, dst.cols());
    }
  }

  void forward_direct(const tensor& x, index batch, tensor& y) {
    const direct_conv::plan& p = fplan_;
    const index np = patch();
    const index cout = out_.channels;
    wt_.resize(weights());
    for (index o = 0; o < cout; ++o) {
      for (index j = 0; j < np; ++j) {
        wt_[static_cast<std::size_t>(j * cout + o)] = w_[o * np + j];
      }
    }
    const float* bias = bias_ ? w_ + weights() : nullptr;
    if (wino_fwd_) {
      wino_fwd_->set_weights(wt_.data());
      for (index b = 0; b < batch; ++b) {
        emit_sample(wino_fwd_->run(x.data(), x.cols(), b), wino_fwd_->out_width(), bias, b, y);
      }
      return;
    }
    float* xp = padded_buffer(xpad_, p);
    out_buf_.resize(static_cast<std::size_t>(p.ho_pad * p.wo_pad * cout));
    for (index b = 0; b < batch; ++b) {
      direct_conv::pad_sample(p, x.data(), x.cols(), b, xp);
      direct_conv::forward_sample(p, xp, wt_.data(), out_buf_.data());
      emit_sample(out_buf_.data(), p.wo_pad, bias, b, y);
    }
  }

  // Writes sample b's forward output from its position-major convolution `out` (rows of out_w
  // positions) into y: plus the bias, and with a fused pool the ReLU and the pool (keeping its masks).
  void emit_sample(const float* out, index out_w, const float* bias, index b, tensor& y) {
    const index cout = out_.channels;
    if (pool_ == 0) {
      unpack_sample(out_.height, out_.width, out_w, cout, out, bias, b, y);
      return;
    }
    const index pplane = static_cast<index>(output_shape().plane());
    const auto per_sample = static_cast<std::size_t>(pplane * cout / 4);  // 4 masks of 16 channels
    const auto batch = static_cast<std::size_t>(y.cols() / pplane);
    pool_masks_.resize(batch * per_sample);
    pooled_.resize(static_cast<std::size_t>(pplane * cout));
    direct_conv::relu_max_pool2_sample(out, out_w, out_.height, out_.width, cout, bias, pooled_.data(),
                                       pool_masks_.data() + static_cast<std::size_t>(b) * per_sample);
    unpack_sample(out_.height / 2, out_.width / 2, out_.width / 2, cout, pooled_.data(), nullptr, b, y);
  }

  // The backward through a fused relu + max pool: the bias gradient, gwt_ (as weight_grad_direct()),
  // and dx through Winograd if it applies (returns whether dx is done); otherwise dy_full_ = the
  // convolution's output gradient (cout x batch * h * w) for the other dx paths.
  bool backward_pooled(const tensor& x, const tensor& dy, index batch, tensor* dx, bool accumulate) {
    const index cout = out_.channels;
    const index oplane = static_cast<index>(out_.plane());
    const index pplane = oplane / 4;
    const auto per_sample = static_cast<std::size_t>(pplane * cout / 4);
    std::fill(gwt_.begin(), gwt_.end(), 0.0F);
    bias_grad_.assign(static_cast<std::size_t>(cout), 0.0F);
    dyt_.resize(static_cast<std::size_t>(oplane * cout));
    pooled_.resize(static_cast<std::size_t>(pplane * cout));
    const bool winograd_dx = dx != nullptr && wino_dx_ != nullptr;
    if (winograd_dx) {
      flip_weights();
      wino_dx_->set_weights(wt_.data());
    } else if (dx != nullptr) {
      dy_full_.resize(cout, batch * oplane);
    }
    for (index b = 0; b < batch; ++b) {
      direct_conv::columns_to_rows(dy.data() + b * pplane, pplane, cout, dy.cols(), pooled_.data());
      direct_conv::max_pool2_grad_sample(pooled_.data(), pool_masks_.data() + static_cast<std::size_t>(b) * per_sample,
                                         out_.height, out_.width, cout, dyt_.data(), bias_grad_.data());
      weight_grad_add(x, b);
      if (winograd_dx) {
        const float* out = wino_dx_->run_rows(dyt_.data());
        unpack_sample(in_.height, in_.width, wino_dx_->out_width(), in_.channels, out, nullptr, b, *dx);
      } else if (dx != nullptr) {
        direct_conv::rows_to_columns(dyt_.data(), oplane, cout, nullptr, dy_full_.data() + b * oplane, dy_full_.cols());
      }
    }
    weight_grad_done();
    if (bias_) {
      float* gb = gw_ + weights();
      for (index c = 0; c < cout; ++c) {
        gb[c] = accumulate ? gb[c] + bias_grad_[static_cast<std::size_t>(c)] : bias_grad_[static_cast<std::size_t>(c)];
      }
    }
    return winograd_dx;
  }

  // gwt_ (patch x cout) = this batch's weight gradient.
  void weight_grad_direct(const tensor& x, const tensor& dy, index batch) {
    const index cout = out_.channels;
    const index oplane = static_cast<index>(out_.plane());
    std::fill(gwt_.begin(), gwt_.end(), 0.0F);
    dyt_.resize(static_cast<std::size_t>(oplane * cout));
    for (index b = 0; b < batch; ++b) {
      direct_conv::columns_to_rows(dy.data() + b * oplane, oplane, cout, dy.cols(), dyt_.data());
      weight_grad_add(x, b);
    }
    weight_grad_done();
  }

  // Whether the weight gradient goes through Winograd (with the forward convolution's buffers).
  bool winograd_dw() const { return wino_fwd_ != nullptr && wino_fwd_->weight_grad_supported(); }

  // gwt_ += sample b's weight gradient from x and dyt_; through Winograd, weight_grad_done() writes it.
  void weight_grad_add(const tensor& x, index b) {
    if (winograd_dw()) {
      wino_fwd_->weight_grad_sample(x.data(), x.cols(), b, dyt_.data());
      return;
    }
    float* xp = padded_buffer(xpad_, fplan_);
    direct_conv::pad_sample(fplan_, x.data(), x.cols(), b, xp);
    direct_conv::weight_grad_sample(fplan_, xp, dyt_.data(), gwt_.data());
  }

  void weight_grad_done() {
    if (winograd_dw()) {
      wino_fwd_->take_weight_grad(gwt_.data());
    }
  }

  // wt_ = the weights flipped for the input gradient's convolution (cout, k, k, cin).
  void flip_weights() {
    const index cin = in_.channels;
    const index cout = out_.channels;
    const index kk = static_cast<index>(k_) * k_;
    wt_.resize(weights());
    for (index o = 0; o < cout; ++o) {
      for (index c = 0; c < cin; ++c) {
        for (index t = 0; t < kk; ++t) {
          // (o, ki', kj', c) <- w[o][c][k-1-ki'][k-1-kj'], i.e. tap t' = kk - 1 - t.
          wt_[static_cast<std::size_t>((o * kk + (kk - 1 - t)) * cin + c)] = w_[(o * cin + c) * kk + t];
        }
      }
    }
  }

  // dx = the "same" convolution of dy with the flipped kernel, cin and cout swapped.
  void input_grad_direct(const tensor& dy, index batch, tensor& dx) {
    const direct_conv::plan& p = bplan_;
    const index cin = in_.channels;
    flip_weights();
    if (wino_dx_) {
      wino_dx_->set_weights(wt_.data());
      for (index b = 0; b < batch; ++b) {
        unpack_sample(p.h, p.w, wino_dx_->out_width(), cin, wino_dx_->run(dy.data(), dy.cols(), b), nullptr, b, dx);
      }
      return;
    }
    float* yp = padded_buffer(dypad_, p);
    out_buf_.resize(std::max(out_buf_.size(), static_cast<std::size_t>(p.ho_pad * p.wo_pad * cin)));
    for (index b = 0; b < batch; ++b) {
      direct_conv::pad_sample(p, dy.data(), dy.cols(), b, yp);
      direct_conv::forward_sample(p, yp, wt_.data(), out_buf_.data());
      unpack_sample(p.h, p.w, p.wo_pad, cin, out_buf_.data(), nullptr, b, dx);
    }
  }
#endif

  index patch() const { return static_cast<index>(in_.channels) * k_ * k_; }
  std::size_t weights() const { return static_cast<std::size_t>(patch()) * static_cast<std::size_t>(out_.channels); }
  // Keeps one chunk's im2col matrix within ~192 KiB (at least one sample), so that it, OpenBLAS's packed
  // copy of it and the GEMM's output stay in L2 together: fmnist-cnn's conv1 takes 2 samples per chunk,
  // conv2 one (313 KiB); that ran ~5 % faster per step than 1 MiB chunks (13 and 3 samples).
  index samples_per_chunk() const {
    const index per_sample = patch() * static_cast<index>(out_.plane()) * static_cast<index>(sizeof(float));
    return std::max<index>(1, (index{192} << 10) / per_sample);
  }

  // The output positions whose input lies inside the image for kernel offset (ki, kj): rows
  // [ho_lo, ho_hi) and columns [lo, hi) (input row ho*s + ki - p, input column wo*s + kj - p).
  struct valid_range {
    index ho_lo, ho_hi, lo, hi;
  };
  valid_range valid(index ki, index kj) const {
    auto span = [this](index k, index in_extent, index out_extent, index& first, index& end) {
      first = std::min(out_extent, std::max<index>(0, (p_ - k + s_ - 1) / s_));
      const index last = in_extent - 1 + p_ - k;  // o * s must not exceed this
      end = last < 0 ? first : std::max(first, std::min(out_extent, last / s_ + 1));
    };
    valid_range v{};
    span(ki, in_.height, out_.height, v.ho_lo, v.ho_hi);
    span(kj, in_.width, out_.width, v.lo, v.hi);
    return v;
  }

  // Writes the im2col matrix of samples [b0, b0 + nb) to `cols` (patch rows of `ncols` floats):
  // row (c, ki, kj), column (b, ho, wo) holds x[c, b0 + b, ho*s + ki - p, wo*s + kj - p] or 0 outside.
  void im2col(const tensor& x, index b0, index nb, float* cols, index ncols) {
    const index wd = in_.width;
    const index ow = out_.width;
    const index iplane = static_cast<index>(in_.plane());
    const index oplane = static_cast<index>(out_.plane());
    if (same_geometry()) {
      // Each sample's channel plane is copied once between zero guard rows (padded()); every row of the
      // im2col matrix is then one masked copy of oplane floats from that buffer (see padded_offset()).
      float* pad = padded();
      const std::uint32_t* masks = wrap_masks();
      for (index c = 0; c < in_.channels; ++c) {
        for (index b = 0; b < nb; ++b) {
          std::memcpy(pad + guard(), x.data() + c * x.cols() + (b0 + b) * iplane,
                      static_cast<std::size_t>(iplane) * sizeof(float));
          for (index ki = 0; ki < k_; ++ki) {
            for (index kj = 0; kj < k_; ++kj) {
              float* dst = cols + ((c * k_ + ki) * k_ + kj) * ncols + b * oplane;
              masked_copy(dst, pad + padded_offset(ki, kj), masks + kj * oplane, oplane);
            }
          }
        }
      }
      return;
    }
    // Stride 1 and output width == input width ("same" padding): output position t = ho*ow + wo reads
    // input t + shift, so each sample's valid block is one contiguous copy; the few positions that
    // wrapped around a row edge are zeroed afterwards. This replaces ~50 tiny memcpy calls per sample.
    const bool same = s_ == 1 && ow == wd;
    for (index c = 0; c < in_.channels; ++c) {
      for (index ki = 0; ki < k_; ++ki) {
        for (index kj = 0; kj < k_; ++kj) {
          const index r = (c * k_ + ki) * k_ + kj;
          const valid_range v = valid(ki, kj);
          const bool empty = v.ho_lo >= v.ho_hi || v.lo >= v.hi;
          for (index b = 0; b < nb; ++b) {
            float* dst = cols + r * ncols + b * oplane;
            const float* src = x.data() + c * x.cols() + (b0 + b) * iplane;
            if (empty) {
              std::fill(dst, dst + oplane, 0.0F);
            } else if (same) {
              const index first = v.ho_lo * ow + v.lo;
              const index last = (v.ho_hi - 1) * ow + v.hi;
              const index shift = (ki - p_) * wd + (kj - p_);
              std::fill(dst, dst + first, 0.0F);
              std::memcpy(dst + first, src + first + shift, static_cast<std::size_t>(last - first) * sizeof(float));
              std::fill(dst + last, dst + oplane, 0.0F);
              for (index ho = v.ho_lo; ho + 1 < v.ho_hi; ++ho) {
                for (index t = ho * ow + v.hi; t < (ho + 1) * ow + v.lo; ++t) {
                  dst[t] = 0.0F;
                }
              }
            } else {
              std::fill(dst, dst + v.ho_lo * ow, 0.0F);
              for (index ho = v.ho_lo; ho < v.ho_hi; ++ho) {
                float* d = dst + ho * ow;
                const index row = (ho * s_ + ki - p_) * wd + kj - p_;  // + wo * s: inside the row for valid wo
                for (index wo = 0; wo < v.lo; ++wo) {
                  d[wo] = 0.0F;
                }
                for (index wo = v.lo; wo < v.hi; ++wo) {
                  d[wo] = src[row + wo * s_];
                }
                for (index wo = v.hi; wo < ow; ++wo) {
                  d[wo] = 0.0F;
                }
              }
              std::fill(dst + v.ho_hi * ow, dst + oplane, 0.0F);
            }
          }
        }
      }
    }
  }

  // Writes the input gradient of samples [b0, b0 + nb) from their im2col-shaped gradient `cols` (the
  // adjoint of im2col); overwrites those samples' columns of `dx`.
  void col2im(const float* cols, index ncols, index b0, index nb, tensor& dx) {
    const index wd = in_.width;
    const index ow = out_.width;
    const index iplane = static_cast<index>(in_.plane());
    const index oplane = static_cast<index>(out_.plane());
    if (same_geometry()) {
      // The adjoint of im2col's fast path: each sample's channel plane is accumulated in the padded
      // buffer (one masked add per kernel offset; the guards collect what fell outside the image and are
      // dropped), then copied out, so dx needs no zeroing.
      float* acc = padded();
      const std::uint32_t* masks = wrap_masks();
      const index total = padded_size();
      for (index c = 0; c < in_.channels; ++c) {
        for (index b = 0; b < nb; ++b) {
          std::fill(acc, acc + total, 0.0F);
          for (index ki = 0; ki < k_; ++ki) {
            for (index kj = 0; kj < k_; ++kj) {
              const float* src = cols + ((c * k_ + ki) * k_ + kj) * ncols + b * oplane;
              masked_add(acc + padded_offset(ki, kj), src, masks + kj * oplane, oplane);
            }
          }
          std::memcpy(dx.data() + c * dx.cols() + (b0 + b) * iplane, acc + guard(),
                      static_cast<std::size_t>(iplane) * sizeof(float));
        }
      }
      return;
    }
    for (index c = 0; c < in_.channels; ++c) {
      for (index b = 0; b < nb; ++b) {
        float* dst = dx.data() + c * dx.cols() + (b0 + b) * iplane;
        std::fill(dst, dst + iplane, 0.0F);
      }
    }
    for (index c = 0; c < in_.channels; ++c) {
      for (index ki = 0; ki < k_; ++ki) {
        for (index kj = 0; kj < k_; ++kj) {
          const index r = (c * k_ + ki) * k_ + kj;
          const valid_range v = valid(ki, kj);
          for (index b = 0; b < nb; ++b) {
            const float* src = cols + r * ncols + b * oplane;
            float* dst = dx.data() + c * dx.cols() + (b0 + b) * iplane;
            for (index ho = v.ho_lo; ho < v.ho_hi; ++ho) {
              const index row = (ho * s_ + ki - p_) * wd + kj - p_;  // + wo * s: inside the row for valid wo
              const float* g = src + ho * ow;
              if (s_ == 1) {
                add_into(dst + row + v.lo, g + v.lo, v.hi - v.lo);
              } else {
                for (index wo = v.lo; wo < v.hi; ++wo) {
                  dst[row + wo * s_] += g[wo];
                }
              }
            }
          }
        }
      }
    }
  }

  // Rows of the im2col matrix start 64-byte aligned (16 floats): its copies are bound by stores, and
  // rows of 196 floats (conv2 of fmnist-cnn) would otherwise split most vector stores across lines.
  static index cols_ld(index nc) { return (nc + 15) / 16 * 16; }
  float* cols_buffer(index chunk) {
    const auto n = static_cast<std::size_t>(patch() * cols_ld(chunk * static_cast<index>(out_.plane())) + 16);
    if (cols_.size() < n) {
      cols_.resize(n);
    }
    const auto addr = reinterpret_cast<std::uintptr_t>(cols_.data());
    return cols_.data() + ((64 - addr % 64) % 64) / sizeof(float);
  }

  // Stride 1 with "same" padding (k = 2p + 1, output size = input size): the case with fast paths.
  bool same_geometry() const { return s_ == 1 && out_.width == in_.width && out_.height == in_.height; }
  // Zeros before and after the image in the padded buffer: p rows plus p floats.
  index guard() const { return static_cast<index>(p_) * in_.width + p_; }
  index padded_size() const { return static_cast<index>(in_.plane()) + 2 * guard(); }
  // In "same" geometry output position t = ho*w + wo reads input t + (ki - p)*w + (kj - p), i.e. padded
  // buffer t + padded_offset(ki, kj): rows above or below the image land in the guards, and the
  // positions whose column wo + kj - p left the row (they wrapped into a neighbouring row) are masked.
  index padded_offset(index ki, index kj) const { return ki * in_.width + kj; }
  // A scratch plane of padded_size() floats.
  float* padded() {
    pad_.assign(static_cast<std::size_t>(padded_size()), 0.0F);
    return pad_.data();
  }
  // k masks of out_.plane() words: all ones where 0 <= wo + kj - p < width, else 0.
  const std::uint32_t* wrap_masks() {
    const index oplane = static_cast<index>(out_.plane());
    if (masks_.empty()) {
      masks_.resize(static_cast<std::size_t>(k_ * oplane));
      for (index kj = 0; kj < k_; ++kj) {
        for (index t = 0; t < oplane; ++t) {
          const index col = t % out_.width + kj - p_;
          masks_[static_cast<std::size_t>(kj * oplane + t)] = col >= 0 && col < in_.width ? ~std::uint32_t{0} : 0U;
        }
      }
    }
    return masks_.data();
  }

  static void add_into(float* __restrict d, const float* __restrict g, index n) {
    for (index i = 0; i < n; ++i) {
      d[i] += g[i];
    }
  }

  shape3 in_;
  shape3 out_;
  int k_;
  int s_;
  int p_;
  bool bias_;
  int pool_;  // 0, or 2: relu + max_pool2d(2) fused (see pools())
  float* w_ = nullptr;
  float* gw_ = nullptr;
  std::vector<float> cols_;
  std::vector<float> gwt_;  // the weight gradient transposed (patch x cout), see run_backward
  std::vector<float> pad_;  // one padded input plane, see guard()
  std::vector<std::uint32_t> masks_;  // see wrap_masks()
  bool direct_ = false;     // forward and weight gradient through direct_conv
  bool direct_dx_ = false;  // and the input gradient
  direct_conv::plan fplan_;  // the forward convolution
  direct_conv::plan bplan_;  // the input gradient's convolution (cout -> cin)
  std::vector<float> wt_;       // the weights transposed (or flipped) for the direct kernels
  std::vector<float> xpad_;     // one padded input sample (fplan_)
  std::vector<float> dypad_;    // one padded output-gradient sample (bplan_)
  std::vector<float> out_buf_;  // one sample's direct output, positions x channels
  std::vector<float> dyt_;      // one sample's output gradient, positions x channels
#if PRSGD_NN_DIRECT_CONV
  std::unique_ptr<winograd::conv> wino_fwd_;  // the forward convolution through winograd.hpp, if it applies
  std::unique_ptr<winograd::conv> wino_dx_;   // the input gradient's convolution, likewise
#endif
  std::vector<std::uint16_t> pool_masks_;  // the fused pool's masks (direct_conv::relu_max_pool2_sample)
  std::vector<float> pooled_;     // one sample's pooled output or its gradient, positions x channels
  std::vector<float> bias_grad_;  // the fused pool's bias gradient sums
  tensor dy_full_;                // the convolution's output gradient with a fused pool (not via Winograd)
};

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

class batch_norm_layer final : public layer {
 public:
  explicit batch_norm_layer(shape3 in) : in_(in) {}
  std::string describe() const override { return "batch_norm(" + std::to_string(in_.channels) + ")"; }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override { return in_; }
  std::size_t num_params() const override { return 2 * static_cast<std::size_t>(in_.channels); }
  std::size_t num_buffers() const override { return 2 * static_cast<std::size_t>(in_.channels); }
  void bind(float* params, float* grads, float* buffers) override {
    p_ = params;
    g_ = grads;
    b_ = buffers;
  }
  void reset_parameters(std::mt19937_64& /*rng*/) override {
    const index c = in_.channels;
    vec_map(p_, c).setOnes();
    vec_map(p_ + c, c).setZero();
    vec_map(b_, c).setZero();
    vec_map(b_ + c, c).setOnes();
  }
  void forward(const tensor& x, tensor& y, bool training) override {
    const index c = in_.channels;
    const index n = x.cols();
    batch_of(x, in_);
    const const_vec_map gamma(p_, c);
    const const_vec_map beta(p_ + c, c);
    vec_map running_mean(b_, c);
    vec_map running_var(b_ + c, c);
    training_ = training;
    y.resize(x.rows(), x.cols());
    inv_std_.resize(c);
    if (training) {
      PRSGD_CHECK(n > 1) << "batch norm needs more than one value per channel in training";
      xhat_.resize(x.rows(), x.cols());
      for (index i = 0; i < c; ++i) {
        const float mean = x.row(i).mean();
        xhat_.row(i) = x.row(i).array() - mean;
        const float var = xhat_.row(i).squaredNorm() / static_cast<float>(n);
        inv_std_(i) = 1.0F / std::sqrt(var + eps);
        xhat_.row(i) *= inv_std_(i);
        y.row(i) = xhat_.row(i).array() * gamma(i) + beta(i);
        running_mean(i) = (1.0F - momentum) * running_mean(i) + momentum * mean;
        running_var(i) = (1.0F - momentum) * running_var(i) +
                         momentum * var * static_cast<float>(n) / static_cast<float>(n - 1);
      }
    } else {
      for (index i = 0; i < c; ++i) {
        inv_std_(i) = 1.0F / std::sqrt(running_var(i) + eps);
        const float scale = gamma(i) * inv_std_(i);
        y.row(i) = (x.row(i).array() - running_mean(i)) * scale + beta(i);
      }
    }
  }
  void backward(const tensor& x, const tensor& /*y*/, const tensor& dy, tensor* dx) override {
    const index c = in_.channels;
    const index n = x.cols();
    const const_vec_map gamma(p_, c);
    vec_map ggamma(g_, c);
    vec_map gbeta(g_ + c, c);
    const const_vec_map running_mean(b_, c);
    if (dx != nullptr) {
      dx->resize(x.rows(), x.cols());
    }
    for (index i = 0; i < c; ++i) {
      const float sum_dy = dy.row(i).sum();
      if (training_) {
        const float sum_dy_xhat = dy.row(i).dot(xhat_.row(i));
        ggamma(i) += sum_dy_xhat;
        gbeta(i) += sum_dy;
        if (dx != nullptr) {
          const float k = gamma(i) * inv_std_(i) / static_cast<float>(n);
          dx->row(i) = (dy.row(i).array() * static_cast<float>(n) - sum_dy - xhat_.row(i).array() * sum_dy_xhat) * k;
        }
      } else {
        ggamma(i) += ((x.row(i).array() - running_mean(i)) * dy.row(i).array()).sum() * inv_std_(i);
        gbeta(i) += sum_dy;
        if (dx != nullptr) {
          dx->row(i) = dy.row(i) * (gamma(i) * inv_std_(i));
        }
      }
    }
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<batch_norm_layer>(in_); }
  std::vector<tensor_info> tensors() const override {
    const auto c = static_cast<std::size_t>(in_.channels);
    return {{"weight", {in_.channels}, tensor_role::parameter, 0},
            {"bias", {in_.channels}, tensor_role::parameter, c},
            {"running_mean", {in_.channels}, tensor_role::buffer, 0},
            {"running_var", {in_.channels}, tensor_role::buffer, c},
            {"num_batches_tracked", {}, tensor_role::counter, 0}};
  }

 private:
  static constexpr float eps = 1e-5F;
  static constexpr float momentum = 0.1F;
  shape3 in_;
  float* p_ = nullptr;
  float* g_ = nullptr;
  float* b_ = nullptr;
  bool training_ = true;
  tensor xhat_;
  Eigen::VectorXf inv_std_;
};

class flatten_layer final : public layer {
 public:
  explicit flatten_layer(shape3 in) : in_(in) {}
  std::string describe() const override { return "flatten"; }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override { return {static_cast<int>(in_.size()), 1, 1}; }
  void forward(const tensor& x, tensor& y, bool /*training*/) override {
    const index batch = batch_of(x, in_);
    const index plane = static_cast<index>(in_.plane());
    y.resize(static_cast<index>(in_.size()), batch);
    // y(c*plane + p, b) = x(c, b*plane + p): a transpose of each channel's (batch x plane) block.
    for (index c = 0; c < in_.channels; ++c) {
      const const_mat_map block(x.data() + c * x.cols(), batch, plane);
      y.middleRows(c * plane, plane) = block.transpose();
    }
  }
  void backward(const tensor& x, const tensor& /*y*/, const tensor& dy, tensor* dx) override {
    if (dx == nullptr) {
      return;
    }
    const index batch = dy.cols();
    const index plane = static_cast<index>(in_.plane());
    dx->resize(x.rows(), x.cols());
    for (index c = 0; c < in_.channels; ++c) {
      mat_map block(dx->data() + c * dx->cols(), batch, plane);
      block = dy.middleRows(c * plane, plane).transpose();
    }
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<flatten_layer>(in_); }

 private:
  shape3 in_;
};

// Runs a list of layers with its own activations; the building block of a residual branch.
class path {
 public:
  path() = default;
  explicit path(std::vector<std::unique_ptr<layer>> layers)
      : layers_(std::move(layers)), acts_(layers_.size()), grads_(layers_.size()) {}
  path(const path& other) : acts_(other.layers_.size()), grads_(other.layers_.size()) {
    for (const auto& l : other.layers_) {
      layers_.push_back(l->clone());
      layers_.back()->set_name(l->name());
    }
  }
  path& operator=(const path&) = delete;

  bool empty() const { return layers_.empty(); }
  const std::vector<std::unique_ptr<layer>>& layers() const { return layers_; }
  std::size_t num_params() const {
    std::size_t n = 0;
    for (const auto& l : layers_) {
      n += l->num_params();
    }
    return n;
  }
  std::size_t num_buffers() const {
    std::size_t n = 0;
    for (const auto& l : layers_) {
      n += l->num_buffers();
    }
    return n;
  }
  void bind(float*& params, float*& grads, float*& buffers) {
    for (auto& l : layers_) {
      l->bind(params, grads, buffers);
      params += l->num_params();
      grads += l->num_params();
      buffers += l->num_buffers();
    }
  }
  void reset_parameters(std::mt19937_64& rng) {
    for (auto& l : layers_) {
      l->reset_parameters(rng);
    }
  }
  const tensor& forward(const tensor& x, bool training) {
    const tensor* in = &x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->forward(*in, acts_[i], training);
      in = &acts_[i];
    }
    return *in;
  }
  // Returns the gradient with respect to the path's input. Each layer has its own gradient tensor so
  // that no buffer changes size between steps (re-allocating big tensors costs page faults every step).
  const tensor& backward(const tensor& x, const tensor& dy) {
    const tensor* grad = &dy;
    for (std::size_t i = layers_.size(); i-- > 0;) {
      const tensor& in = i == 0 ? x : acts_[i - 1];
      layers_[i]->backward(in, acts_[i], *grad, &grads_[i]);
      grad = &grads_[i];
    }
    return *grad;
  }

 private:
  std::vector<std::unique_ptr<layer>> layers_;
  std::vector<tensor> acts_;
  std::vector<tensor> grads_;
};

class residual_layer final : public layer {
 public:
  residual_layer(std::vector<std::unique_ptr<layer>> main, std::vector<std::unique_ptr<layer>> shortcut)
      : main_(std::move(main)), shortcut_(std::move(shortcut)) {
    PRSGD_CHECK(!main_.empty()) << "a residual block needs a main path";
    in_ = main_.layers().front()->input_shape();
    out_ = main_.layers().back()->output_shape();
    if (shortcut_.empty()) {
      PRSGD_CHECK(in_ == out_) << "identity shortcut needs equal input and output shapes";
    } else {
      PRSGD_CHECK(shortcut_.layers().front()->input_shape() == in_ &&
                  shortcut_.layers().back()->output_shape() == out_)
          << "residual paths disagree on shapes";
    }
  }
  std::string describe() const override {
    std::string s = "residual[";
    for (const auto& l : main_.layers()) {
      s += l->describe() + " ";
    }
    s += "| ";
    for (const auto& l : shortcut_.layers()) {
      s += l->describe() + " ";
    }
    return s + "]";
  }
  shape3 input_shape() const override { return in_; }
  shape3 output_shape() const override { return out_; }
  std::size_t num_params() const override { return main_.num_params() + shortcut_.num_params(); }
  std::size_t num_buffers() const override { return main_.num_buffers() + shortcut_.num_buffers(); }
  void bind(float* params, float* grads, float* buffers) override {
    main_.bind(params, grads, buffers);
    shortcut_.bind(params, grads, buffers);
  }
  void reset_parameters(std::mt19937_64& rng) override {
    main_.reset_parameters(rng);
    shortcut_.reset_parameters(rng);
  }
  void forward(const tensor& x, tensor& y, bool training) override {
    y = main_.forward(x, training);
    if (shortcut_.empty()) {
      y += x;
    } else {
      y += shortcut_.forward(x, training);
    }
  }
  void backward(const tensor& x, const tensor& /*y*/, const tensor& dy, tensor* dx) override {
    const tensor& dmain = main_.backward(x, dy);
    if (dx != nullptr) {
      *dx = dmain;
    }
    if (shortcut_.empty()) {
      if (dx != nullptr) {
        *dx += dy;
      }
    } else {
      const tensor& dshort = shortcut_.backward(x, dy);
      if (dx != nullptr) {
        *dx += dshort;
      }
    }
  }
  std::unique_ptr<layer> clone() const override { return std::make_unique<residual_layer>(*this); }
  // PyTorch's BasicBlock naming: the main path's layers directly under the block ("conv1", "bn1"), the
  // shortcut's under "shortcut." ("shortcut.0"); unnamed main layers are "main.<j>".
  std::vector<tensor_info> tensors() const override {
    std::vector<tensor_info> out = describe_tensors(main_.layers(), "", "main");
    const std::size_t main_params = main_.num_params();
    const std::size_t main_buffers = main_.num_buffers();
    for (auto& t : describe_tensors(shortcut_.layers(), "shortcut.", "shortcut")) {
      t.offset += t.role == tensor_role::buffer ? main_buffers : main_params;
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  path main_;
  path shortcut_;
  shape3 in_;
  shape3 out_;
};

}  // namespace

std::vector<tensor_info> describe_tensors(const std::vector<std::unique_ptr<layer>>& layers, const std::string& prefix,
                                         const std::string& unnamed) {
  std::vector<tensor_info> out;
  std::size_t params = 0;
  std::size_t buffers = 0;
  std::size_t j = 0;
  for (const auto& l : layers) {
    if (l->num_params() + l->num_buffers() > 0) {
      const std::string base = prefix + (l->name().empty() ? unnamed + "." + std::to_string(j) : l->name()) + ".";
      for (auto t : l->tensors()) {
        t.name = base + t.name;
        t.offset += t.role == tensor_role::buffer ? buffers : params;
        out.push_back(std::move(t));
      }
      ++j;
    }
    params += l->num_params();
    buffers += l->num_buffers();
  }
  return out;
}

std::vector<tensor_info> layer::tensors() const {
  std::vector<tensor_info> out;
  if (num_params() > 0) {
    out.push_back({"params", {static_cast<std::int64_t>(num_params())}, tensor_role::parameter, 0});
  }
  if (num_buffers() > 0) {
    out.push_back({"buffers", {static_cast<std::int64_t>(num_buffers())}, tensor_role::buffer, 0});
  }
  return out;
}

std::unique_ptr<layer> make_linear(shape3 in, int out_features) {
  return std::make_unique<linear_layer>(in, out_features);
}
std::unique_ptr<layer> make_relu(shape3 in) { return std::make_unique<relu_layer>(in); }
std::unique_ptr<layer> make_conv2d(shape3 in, int out_channels, int kernel, int stride, int padding, bool bias) {
  return std::make_unique<conv2d_layer>(in, out_channels, kernel, stride, padding, bias);
}
std::unique_ptr<layer> fuse_relu_max_pool(const layer& conv, int kernel) {
  const auto* c = dynamic_cast<const conv2d_layer*>(&conv);
  return c != nullptr && c->pools(kernel) ? c->with_relu_max_pool(kernel) : nullptr;
}
std::unique_ptr<layer> make_max_pool2d(shape3 in, int kernel) {
  return std::make_unique<max_pool_layer>(in, kernel, false);
}
std::unique_ptr<layer> make_relu_max_pool2d(shape3 in, int kernel) {
  return std::make_unique<max_pool_layer>(in, kernel, true);
}
std::unique_ptr<layer> make_global_avg_pool(shape3 in) { return std::make_unique<global_avg_pool_layer>(in); }
std::unique_ptr<layer> make_batch_norm(shape3 in) { return std::make_unique<batch_norm_layer>(in); }
std::unique_ptr<layer> make_flatten(shape3 in) { return std::make_unique<flatten_layer>(in); }
std::unique_ptr<layer> make_residual(std::vector<std::unique_ptr<layer>> main,
                                     std::vector<std::unique_ptr<layer>> shortcut) {
  return std::make_unique<residual_layer>(std::move(main), std::move(shortcut));
}

float softmax_cross_entropy(const tensor& logits, std::span<const std::int32_t> labels, tensor* dlogits) {
  const index classes = logits.rows();
  const index batch = logits.cols();
  PRSGD_CHECK(static_cast<index>(labels.size()) == batch) << "one label per column";
  if (dlogits != nullptr) {
    dlogits->resize(classes, batch);
  }
  double total = 0.0;
  const float inv_batch = 1.0F / static_cast<float>(batch);
  for (index b = 0; b < batch; ++b) {
    const std::int32_t label = labels[static_cast<std::size_t>(b)];
    PRSGD_CHECK(label >= 0 && label < classes) << "label " << label << " out of range";
    const float m = logits.col(b).maxCoeff();
    float sum = 0.0F;
    for (index k = 0; k < classes; ++k) {
      sum += std::exp(logits(k, b) - m);
    }
    const float log_sum = std::log(sum);
    total += static_cast<double>(log_sum + m - logits(label, b));
    if (dlogits != nullptr) {
      for (index k = 0; k < classes; ++k) {
        (*dlogits)(k, b) = std::exp(logits(k, b) - m - log_sum) * inv_batch;
      }
      (*dlogits)(label, b) -= inv_batch;
    }
  }
  return static_cast<float>(total / static_cast<double>(batch));
}

std::size_t count_correct(const tensor& logits, std::span<const std::int32_t> labels) {
  std::size_t correct = 0;
  for (index b = 0; b < logits.cols(); ++b) {
    index best = 0;
    logits.col(b).maxCoeff(&best);
    if (best == labels[static_cast<std::size_t>(b)]) {
      ++correct;
    }
  }
  return correct;
}

}  // namespace prsgd::algorithms
