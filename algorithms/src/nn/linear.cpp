// SPDX-License-Identifier: Apache-2.0
// The fully connected layer: a GEMM plus the bias.
#include "prsgd/algorithms/layers.hpp"

#include <cmath>

#include "layer_kernels.hpp"
#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {
namespace {

using namespace layer_kernels;

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

}  // namespace

std::unique_ptr<layer> make_linear(shape3 in, int out_features) {
  return std::make_unique<linear_layer>(in, out_features);
}

}  // namespace prsgd::algorithms
