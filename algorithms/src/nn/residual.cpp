// SPDX-License-Identifier: Apache-2.0
// Residual blocks: a main path plus an identity or projection shortcut.
#include "prsgd/algorithms/layers.hpp"

#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {
namespace {

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
      PRSGD_CHECK(shortcut_.layers().front()->input_shape() == in_ && shortcut_.layers().back()->output_shape() == out_)
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

std::unique_ptr<layer> make_residual(std::vector<std::unique_ptr<layer>> main,
                                     std::vector<std::unique_ptr<layer>> shortcut) {
  return std::make_unique<residual_layer>(std::move(main), std::move(shortcut));
}

}  // namespace prsgd::algorithms
