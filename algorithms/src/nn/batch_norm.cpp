// SPDX-License-Identifier: Apache-2.0
// Batch normalisation over the channels, with PyTorch's running statistics.
#include "prsgd/algorithms/layers.hpp"

#include <cmath>

#include "layer_kernels.hpp"
#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {
namespace {

using namespace layer_kernels;

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
        running_var(i) =
            (1.0F - momentum) * running_var(i) + momentum * var * static_cast<float>(n) / static_cast<float>(n - 1);
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

}  // namespace

std::unique_ptr<layer> make_batch_norm(shape3 in) { return std::make_unique<batch_norm_layer>(in); }

}  // namespace prsgd::algorithms
