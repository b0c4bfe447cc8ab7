// SPDX-License-Identifier: Apache-2.0
// The 2-D convolution and its three ways to run: im2col + GEMM (any geometry), the direct AVX-512 kernels
// (direct_conv.hpp) and Winograd (winograd.hpp) for stride-1 "same" convolutions; with relu +
// max_pool2d(2) fused on the direct kernels.
#include "prsgd/algorithms/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

#include "direct_conv.hpp"
#include "layer_fusion.hpp"
#include "layer_kernels.hpp"
#include "prsgd/common/check.hpp"
#include "winograd.hpp"

namespace prsgd::algorithms {
namespace {

using namespace layer_kernels;

// dst[i] = mask[i] ? src[i] : 0 with all-ones / all-zero masks: a vectorised and, no branch.
PRSGD_NN_WIDE_VECTORS void masked_copy(float* __restrict dst, const float* __restrict src,
                                       const std::uint32_t* __restrict mask, index n) {
  for (index i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, src + i, sizeof bits);
    bits &= mask[i];
    std::memcpy(dst + i, &bits, sizeof bits);
  }
}

// dst[i] += mask[i] ? src[i] : 0 (masks as in masked_copy).
PRSGD_NN_WIDE_VECTORS void masked_add(float* __restrict dst, const float* __restrict src,
                                      const std::uint32_t* __restrict mask, index n) {
  for (index i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, src + i, sizeof bits);
    bits &= mask[i];
    float v = 0.0F;
    std::memcpy(&v, &bits, sizeof v);
    dst[i] += v;
  }
}

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
  std::size_t num_params() const override { return weights() + (bias_ ? static_cast<std::size_t>(out_.channels) : 0U); }
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
  std::vector<float> gwt_;            // the weight gradient transposed (patch x cout), see run_backward
  std::vector<float> pad_;            // one padded input plane, see guard()
  std::vector<std::uint32_t> masks_;  // see wrap_masks()
  bool direct_ = false;               // forward and weight gradient through direct_conv
  bool direct_dx_ = false;            // and the input gradient
  direct_conv::plan fplan_;           // the forward convolution
  direct_conv::plan bplan_;           // the input gradient's convolution (cout -> cin)
  std::vector<float> wt_;             // the weights transposed (or flipped) for the direct kernels
  std::vector<float> xpad_;           // one padded input sample (fplan_)
  std::vector<float> dypad_;          // one padded output-gradient sample (bplan_)
  std::vector<float> out_buf_;        // one sample's direct output, positions x channels
  std::vector<float> dyt_;            // one sample's output gradient, positions x channels
#if PRSGD_NN_DIRECT_CONV
  std::unique_ptr<winograd::conv> wino_fwd_;  // the forward convolution through winograd.hpp, if it applies
  std::unique_ptr<winograd::conv> wino_dx_;   // the input gradient's convolution, likewise
#endif
  std::vector<std::uint16_t> pool_masks_;  // the fused pool's masks (direct_conv::relu_max_pool2_sample)
  std::vector<float> pooled_;              // one sample's pooled output or its gradient, positions x channels
  std::vector<float> bias_grad_;           // the fused pool's bias gradient sums
  tensor dy_full_;                         // the convolution's output gradient with a fused pool (not via Winograd)
};

}  // namespace

std::unique_ptr<layer> make_conv2d(shape3 in, int out_channels, int kernel, int stride, int padding, bool bias) {
  return std::make_unique<conv2d_layer>(in, out_channels, kernel, stride, padding, bias);
}
std::unique_ptr<layer> fuse_relu_max_pool(const layer& conv, int kernel) {
  const auto* c = dynamic_cast<const conv2d_layer*>(&conv);
  return c != nullptr && c->pools(kernel) ? c->with_relu_max_pool(kernel) : nullptr;
}

}  // namespace prsgd::algorithms
