// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/model.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <sstream>

#include "layer_fusion.hpp"
#include "prsgd/algorithms/models.hpp"
#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {

network_builder& network_builder::add(std::unique_ptr<layer> l) {
  PRSGD_CHECK(l->input_shape() == shape_) << "layer " << l->describe() << " does not take the current shape";
  shape_ = l->output_shape();
  layers_.push_back(std::move(l));
  last_is_relu_ = false;
  return *this;
}
network_builder& network_builder::named(std::string name) {
  PRSGD_CHECK(!layers_.empty()) << "named() needs a layer to name";
  layers_.back()->set_name(std::move(name));
  return *this;
}
network_builder& network_builder::conv2d(int out_channels, int kernel, int stride, int padding, bool bias) {
  return add(make_conv2d(shape_, out_channels, kernel, stride, padding, bias));
}
network_builder& network_builder::linear(int out_features) {
  if (shape_.height != 1 || shape_.width != 1) {
    flatten();
  }
  return add(make_linear(shape_, out_features));
}
network_builder& network_builder::relu() {
  add(make_relu(shape_));
  last_is_relu_ = true;
  return *this;
}
network_builder& network_builder::max_pool(int kernel) {
  if (last_is_relu_) {
    layers_.pop_back();  // a ReLU keeps the shape, so shape_ is still its input's
    // conv2d + relu + max pool as one layer where the convolution's kernels can pool (layer_fusion.hpp).
    if (!layers_.empty()) {
      if (auto fused = fuse_relu_max_pool(*layers_.back(), kernel)) {
        fused->set_name(layers_.back()->name());
        layers_.pop_back();
        shape_ = fused->input_shape();
        return add(std::move(fused));
      }
    }
    return add(make_relu_max_pool2d(shape_, kernel));
  }
  return add(make_max_pool2d(shape_, kernel));
}
network_builder& network_builder::global_avg_pool() { return add(make_global_avg_pool(shape_)); }
network_builder& network_builder::batch_norm() { return add(make_batch_norm(shape_)); }
network_builder& network_builder::flatten() { return add(make_flatten(shape_)); }
network_builder& network_builder::residual(const std::function<void(network_builder&)>& main,
                                           const std::function<void(network_builder&)>& shortcut) {
  network_builder m(shape_);
  main(m);
  network_builder s(shape_);
  if (shortcut) {
    shortcut(s);
  }
  return add(make_residual(m.take(), s.take()));
}

model::model(std::string name, shape3 input, int num_classes, std::vector<std::unique_ptr<layer>> layers)
    : name_(std::move(name)), input_(input), classes_(num_classes), layers_(std::move(layers)) {
  std::size_t trainable = 0;
  std::size_t buffers = 0;
  for (const auto& l : layers_) {
    trainable += l->num_params();
    buffers += l->num_buffers();
  }
  flat_ = flat_parameters(trainable, buffers);
  tensors_ = describe_tensors(layers_, "", "layers");
  for (auto& t : tensors_) {
    if (t.role == tensor_role::buffer) {
      t.offset += trainable;
    }
  }
  acts_.resize(layers_.size() + 1);
  dacts_.resize(layers_.size() + 1);
  bind();
}

model::~model() = default;

void model::bind() {
  float* p = flat_.values().data();
  float* g = flat_.grads().data();
  float* b = flat_.buffers().data();
  grad_offset_.clear();
  first_trainable_ = layers_.size();
  for (auto& l : layers_) {
    if (first_trainable_ == layers_.size() && l->num_params() > 0) {
      first_trainable_ = grad_offset_.size();
    }
    grad_offset_.push_back(static_cast<std::size_t>(g - flat_.grads().data()));
    l->bind(p, g, b);
    p += l->num_params();
    g += l->num_params();
    b += l->num_buffers();
  }
}

namespace {

// Checks that every layer's tensors tile its parameters and buffers exactly and that names are unique.
expected<void> check_tensors(const std::string& model_name, const std::vector<std::unique_ptr<layer>>& layers) {
  for (const auto& l : layers) {
    std::vector<bool> params(l->num_params(), false);
    std::vector<bool> buffers(l->num_buffers(), false);
    for (const auto& t : l->tensors()) {
      if (t.role == tensor_role::counter) {
        continue;
      }
      auto& covered = t.role == tensor_role::buffer ? buffers : params;
      if (t.offset > covered.size() || t.size() > covered.size() - t.offset) {
        return fail(errc::invalid_argument, "tensor " + t.name + " of layer " + l->describe() + " in model " +
                                                model_name + " lies outside the layer's values");
      }
      for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
        if (covered[i]) {
          return fail(errc::invalid_argument,
                      "tensors of layer " + l->describe() + " in model " + model_name + " overlap at " + t.name);
        }
        covered[i] = true;
      }
    }
    const auto all = [](const std::vector<bool>& v) {
      return std::all_of(v.begin(), v.end(), [](bool b) { return b; });
    };
    if (!all(params) || !all(buffers)) {
      return fail(errc::invalid_argument, "the tensors of layer " + l->describe() + " in model " + model_name +
                                              " do not cover all of its parameters and buffers");
    }
  }
  std::set<std::string> names;
  for (const auto& t : describe_tensors(layers, "", "layers")) {
    if (!names.insert(t.name).second) {
      return fail(errc::invalid_argument, "model " + model_name + " has two tensors named " + t.name);
    }
  }
  return {};
}

}  // namespace

expected<std::unique_ptr<model>> model::make(std::string name, shape3 input, int num_classes,
                                             std::vector<std::unique_ptr<layer>> layers, std::uint64_t seed) {
  if (layers.empty() || num_classes <= 0) {
    return fail(errc::invalid_argument, "a model needs layers and at least one class");
  }
  shape3 s = input;
  for (const auto& l : layers) {
    if (!l || !(l->input_shape() == s)) {
      return fail(errc::invalid_argument, "layer shapes do not chain in model " + name);
    }
    s = l->output_shape();
  }
  if (!(s == shape3{num_classes, 1, 1})) {
    return fail(errc::invalid_argument, "the last layer of " + name + " does not yield num_classes logits");
  }
  PRSGD_TRY(check_tensors(name, layers));
  std::unique_ptr<model> m(new model(std::move(name), input, num_classes, std::move(layers)));
  std::mt19937_64 rng(seed);
  for (auto& l : m->layers_) {
    l->reset_parameters(rng);
  }
  return m;
}

std::unique_ptr<model> model::clone() const {
  std::vector<std::unique_ptr<layer>> copies;
  copies.reserve(layers_.size());
  for (const auto& l : layers_) {
    copies.push_back(l->clone());
    copies.back()->set_name(l->name());
  }
  std::unique_ptr<model> m(new model(name_, input_, classes_, std::move(copies)));
  std::copy(flat_.values().begin(), flat_.values().end(), m->flat_.values().begin());
  return m;
}

expected<void> model::set_params(std::span<const float> values) {
  if (values.size() != flat_.size()) {
    return fail(errc::invalid_argument,
                "expected " + std::to_string(flat_.size()) + " values, got " + std::to_string(values.size()));
  }
  std::copy(values.begin(), values.end(), flat_.values().begin());
  return {};
}

void model::load_batch(const float* const* samples, std::size_t count) {
  // Dataset samples are (C, H, W) each; the first activation is C x (B*H*W) with one row per channel.
  const auto plane = static_cast<Eigen::Index>(input_.plane());
  const auto n = static_cast<Eigen::Index>(count);
  tensor& x = acts_[0];
  x.resize(input_.channels, n * plane);
  for (Eigen::Index b = 0; b < n; ++b) {
    for (Eigen::Index c = 0; c < input_.channels; ++c) {
      std::memcpy(x.data() + c * x.cols() + b * plane, samples[b] + c * plane,
                  static_cast<std::size_t>(plane) * sizeof(float));
    }
  }
}

void model::backward() {
  // Layers below the first one with parameters need no gradient at all (PyTorch does not compute one
  // for an input that does not require it): for the MLP that skips a 784x512x64 GEMM per step.
  // Layers that can overwrite their gradients do so; only the others' slices are zeroed first.
  for (std::size_t i = layers_.size(); i-- > first_trainable_;) {
    // dacts_[i] is the gradient of acts_[i]; each keeps its size across steps, so no reallocation.
    tensor* dx = i == first_trainable_ ? nullptr : &dacts_[i];
    layer& l = *layers_[i];
    if (!l.backward_overwrite(acts_[i], acts_[i + 1], dacts_[i + 1], dx)) {
      const auto grads = flat_.grads().subspan(grad_offset_[i], l.num_params());
      std::fill(grads.begin(), grads.end(), 0.0F);
      l.backward(acts_[i], acts_[i + 1], dacts_[i + 1], dx);
    }
  }
}

const tensor& model::run_forward(bool training) {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->forward(acts_[i], acts_[i + 1], training);
  }
  return acts_.back();
}

float model::forward_backward(std::span<const float> inputs, std::span<const std::int32_t> labels) {
  PRSGD_CHECK(!labels.empty() && inputs.size() == labels.size() * input_.size()) << "bad batch";
  gather_.resize(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    gather_[i] = inputs.data() + i * input_.size();
  }
  load_batch(gather_.data(), labels.size());
  const tensor& logits = run_forward(true);
  const float loss = softmax_cross_entropy(logits, labels, &dacts_.back());
  backward();
  return loss;
}

void model::load_batch(const dataset& data, std::size_t count, const std::function<std::size_t(std::size_t)>& index) {
  if (!data.bytes) {
    gather_.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      gather_[i] = data.sample(index(i));
    }
    load_batch(gather_.data(), count);
    return;
  }
  // Bytes (a shared cache): each becomes its float as the batch is laid out, through the data set's table,
  // so a model sees exactly the values a data set decoded into floats would hold.
  const auto plane = static_cast<Eigen::Index>(input_.plane());
  const auto n = static_cast<Eigen::Index>(count);
  const auto sample_bytes = data.sample_size();
  const auto& values = data.bytes->values;
  tensor& x = acts_[0];
  x.resize(input_.channels, n * plane);
  for (Eigen::Index b = 0; b < n; ++b) {
    const std::uint8_t* in = data.bytes->data + index(static_cast<std::size_t>(b)) * sample_bytes;
    for (Eigen::Index c = 0; c < input_.channels; ++c) {
      float* out = x.data() + c * x.cols() + b * plane;
      const std::uint8_t* from = in + c * plane;
      for (Eigen::Index k = 0; k < plane; ++k) {
        out[k] = values[from[k]];
      }
    }
  }
}

float model::forward_backward(const dataset& data, std::span<const std::size_t> batch) {
  PRSGD_CHECK(data.sample_size() == input_.size()) << "data set samples do not match the model input";
  PRSGD_CHECK(!batch.empty()) << "empty batch";
  labels_.resize(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    PRSGD_CHECK(batch[i] < data.size()) << "sample index out of range";
    labels_[i] = data.labels[batch[i]];
  }
  load_batch(data, batch.size(), [batch](std::size_t i) { return batch[i]; });
  const tensor& logits = run_forward(true);
  const float loss = softmax_cross_entropy(logits, labels_, &dacts_.back());
  backward();
  return loss;
}

float model::train_step(const dataset& data, std::span<const std::size_t> batch, sgd& optimiser) {
  const float loss = forward_backward(data, batch);
  optimiser.step(flat_.trainable(), flat_.grads());
  return loss;
}

const tensor& model::predict(std::span<const float> inputs, std::size_t count) {
  PRSGD_CHECK(count > 0 && inputs.size() == count * input_.size()) << "bad batch";
  gather_.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    gather_[i] = inputs.data() + i * input_.size();
  }
  load_batch(gather_.data(), count);
  return run_forward(false);
}

evaluation model::evaluate(const dataset& data, std::size_t batch_size) {
  PRSGD_CHECK(data.sample_size() == input_.size()) << "data set samples do not match the model input";
  PRSGD_CHECK(batch_size > 0) << "batch size must be positive";
  evaluation out;
  double loss_sum = 0.0;
  std::size_t correct = 0;
  for (std::size_t start = 0; start < data.size(); start += batch_size) {
    const std::size_t n = std::min(batch_size, data.size() - start);
    load_batch(data, n, [start](std::size_t i) { return start + i; });
    const tensor& logits = run_forward(false);
    const std::span<const std::int32_t> labels(data.labels.data() + start, n);
    loss_sum += static_cast<double>(softmax_cross_entropy(logits, labels, nullptr)) * static_cast<double>(n);
    correct += count_correct(logits, labels);
  }
  out.samples = data.size();
  if (out.samples > 0) {
    out.loss = loss_sum / static_cast<double>(out.samples);
    out.accuracy = static_cast<double>(correct) / static_cast<double>(out.samples);
  }
  return out;
}

std::string model::summary() const {
  std::ostringstream s;
  s << name_ << ": input " << input_.channels << "x" << input_.height << "x" << input_.width << ", " << num_trainable()
    << " trainable parameters, " << (num_params() - num_trainable()) << " buffers\n";
  for (const auto& l : layers_) {
    const shape3 o = l->output_shape();
    s << "  " << l->describe() << " -> " << o.channels << "x" << o.height << "x" << o.width << "  (" << l->num_params()
      << ")\n";
  }
  return s.str();
}

// ---- built-in models -------------------------------------------------------------------------

namespace {
expected<void> check_config(const model_config& config) {
  if (config.input.channels <= 0 || config.input.height <= 0 || config.input.width <= 0 || config.num_classes <= 0) {
    return fail(errc::invalid_argument, "model_config needs a positive input shape and class count");
  }
  return {};
}
}  // namespace

expected<std::unique_ptr<model>> make_fmnist_mlp(const model_config& config) {
  PRSGD_TRY(check_config(config));
  network_builder b(config.input);
  b.flatten().linear(512).named("fc1").relu().linear(256).named("fc2").relu().linear(config.num_classes).named("fc3");
  return model::make("fmnist-mlp", config.input, config.num_classes, b.take(), config.seed);
}

expected<std::unique_ptr<model>> make_fmnist_cnn(const model_config& config) {
  PRSGD_TRY(check_config(config));
  if (config.input.height % 4 != 0 || config.input.width % 4 != 0) {
    return fail(errc::invalid_argument, "fmnist-cnn needs height and width divisible by 4");
  }
  network_builder b(config.input);
  b.conv2d(16, 5, 1, 2).named("conv1").relu().max_pool(2);
  b.conv2d(32, 5, 1, 2).named("conv2").relu().max_pool(2);
  b.flatten().linear(config.num_classes).named("fc");
  return model::make("fmnist-cnn", config.input, config.num_classes, b.take(), config.seed);
}

expected<std::unique_ptr<model>> make_fmnist_resnet(const model_config& config, int blocks_per_stage) {
  PRSGD_TRY(check_config(config));
  if (blocks_per_stage <= 0 || config.input.height < 4 || config.input.width < 4) {
    return fail(errc::invalid_argument, "fmnist-resnet needs >= 1 block per stage and inputs of at least 4x4");
  }
  network_builder b(config.input);
  // Names as in the usual CIFAR ResNet in PyTorch: conv1, bn1, layer<stage>.<block>.{conv1,bn1,conv2,bn2,
  // shortcut.0,shortcut.1}, fc.
  b.conv2d(16, 3, 1, 1, false).named("conv1").batch_norm().named("bn1").relu();
  for (int stage = 0; stage < 3; ++stage) {
    const int channels = 16 << stage;
    for (int block = 0; block < blocks_per_stage; ++block) {
      const int stride = (stage > 0 && block == 0) ? 2 : 1;
      const bool project = stride != 1 || b.shape().channels != channels;
      std::function<void(network_builder&)> shortcut;
      if (project) {
        shortcut = [&](network_builder& s) {
          s.conv2d(channels, 1, stride, 0, false).named("0").batch_norm().named("1");
        };
      }
      b.residual(
          [&](network_builder& m) {
            m.conv2d(channels, 3, stride, 1, false).named("conv1").batch_norm().named("bn1").relu();
            m.conv2d(channels, 3, 1, 1, false).named("conv2").batch_norm().named("bn2");
          },
          shortcut);
      b.named("layer" + std::to_string(stage + 1) + "." + std::to_string(block));
      b.relu();
    }
  }
  b.global_avg_pool().linear(config.num_classes).named("fc");
  const std::string name =
      blocks_per_stage == 3 ? "fmnist-resnet" : "fmnist-resnet" + std::to_string(6 * blocks_per_stage + 2);
  return model::make(name, config.input, config.num_classes, b.take(), config.seed);
}

void register_builtin_models(model_registry& registry) {
  (void)registry.add("fmnist-mlp", "MLP 784-512-256-10 with ReLU", make_fmnist_mlp);
  (void)registry.add("fmnist-cnn", "conv5x5(16)+pool, conv5x5(32)+pool, fc", make_fmnist_cnn);
  (void)registry.add("fmnist-resnet", "ResNet-20 (3 stages x 3 basic blocks, 16/32/64 channels, batch norm)",
                     [](const model_config& c) { return make_fmnist_resnet(c, 3); });
  (void)registry.add("fmnist-resnet8", "ResNet-8 (3 stages x 1 basic block, 16/32/64 channels, batch norm)",
                     [](const model_config& c) { return make_fmnist_resnet(c, 1); });
}

}  // namespace prsgd::algorithms
