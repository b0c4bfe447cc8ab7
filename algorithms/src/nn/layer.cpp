// SPDX-License-Identifier: Apache-2.0
// The layer base's defaults and the tensor names of a layer list, the input shape check, and the
// parameter-free layers relu and flatten.
#include "prsgd/algorithms/layers.hpp"

#include "layer_kernels.hpp"
#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {

namespace layer_kernels {

index batch_of(const tensor& x, shape3 in) {
  PRSGD_CHECK(x.rows() == in.channels && x.cols() % static_cast<index>(in.plane()) == 0)
      << "input " << x.rows() << "x" << x.cols() << " does not fit shape " << in.channels << "x" << in.height << "x"
      << in.width;
  return x.cols() / static_cast<index>(in.plane());
}

}  // namespace layer_kernels

namespace {

using namespace layer_kernels;

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

std::unique_ptr<layer> make_relu(shape3 in) { return std::make_unique<relu_layer>(in); }
std::unique_ptr<layer> make_flatten(shape3 in) { return std::make_unique<flatten_layer>(in); }

}  // namespace prsgd::algorithms
