// SPDX-License-Identifier: Apache-2.0
// Example prsgd plugin: adds the model `fmnist-lenet` (a LeNet-5 style conv net for 28x28 images) and
// the data set `spirals` (spirals.cpp) to the stock `prsgd` binaries, without rebuilding prsgd:
//
//   prsgd local --plugin ./libprsgd_example_plugin.so --model fmnist-lenet --workers 2 ...
//
// A plugin is a shared library with two exported symbols (see prsgd/cli/plugin.h): the ABI version it
// was built for, and `prsgd_plugin_init`, which the host calls once, before any actor starts. Here init
// registers a model factory in the host's model registry and a loader in its data set registry. Everything else is
// ordinary C++ against the public prsgd::algorithms API (network_builder + model::make), the same API the built-in
// models use.
#include <cstddef>
#include <memory>
#include <string>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/cli/plugin.h"
#include "prsgd/common/expected.hpp"
#include "spirals.hpp"

namespace {

namespace alg = prsgd::algorithms;

constexpr const char* model_name = "fmnist-lenet";

/// Builds LeNet-5 as in LeCun et al. (1998), with ReLU and max pooling in place of the original
/// tanh and subsampling:
///   conv5x5(6, pad 2) + ReLU + maxpool 2    28x28 -> 28x28x6 -> 14x14x6
///   conv5x5(16)       + ReLU + maxpool 2    14x14 -> 10x10x16 -> 5x5x16
///   fc 400 -> 120 + ReLU, fc 120 -> 84 + ReLU, fc 84 -> classes
/// 61,706 parameters for Fashion-MNIST (fmnist-cnn has 28.9k, fmnist-mlp 536k).
/// Equal seeds give bit-identical models: every worker must start from the same parameters.
prsgd::expected<std::unique_ptr<alg::model>> make_fmnist_lenet(const alg::model_config& config) {
  const alg::shape3 in = config.input;
  // The second convolution has no padding: it needs at least a 5x5 input, i.e. 10x10 after the first
  // pool, and the pool after it needs 2x2 of its 6x6 output, hence at least 12x12 images.
  if (in.channels <= 0 || in.height < 12 || in.width < 12 || config.num_classes <= 0) {
    return prsgd::fail(prsgd::errc::invalid_argument,
                       "fmnist-lenet needs images of at least 12x12 and a positive class count (got " +
                           std::to_string(in.channels) + "x" + std::to_string(in.height) + "x" +
                           std::to_string(in.width) + ", " + std::to_string(config.num_classes) + " classes)");
  }
  alg::network_builder b(in);
  b.conv2d(6, 5, 1, 2).relu().max_pool(2);  // the builder tracks the shape between layers
  b.conv2d(16, 5).relu().max_pool(2);
  b.linear(120).relu();  // linear() flattens first
  b.linear(84).relu();
  b.linear(config.num_classes);
  return alg::model::make(model_name, in, config.num_classes, b.take(), config.seed);
}

}  // namespace

// The exported ABI version; the host refuses the library unless it equals its own.
PRSGD_PLUGIN_DECLARE_ABI();

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_plugin_init(const prsgd_plugin_host* host) {
  // Fields are only ever appended to prsgd_plugin_host: check the host has the one we need.
  if (host->struct_size < offsetof(prsgd_plugin_host, model_registry) + sizeof(host->model_registry) ||
      host->model_registry == nullptr) {
    host->set_error(host->context, "prsgd_example_plugin needs a host with a model registry");
    return 1;
  }
  auto* registry = static_cast<alg::model_registry*>(host->model_registry);
  // The factory is copied into the host's registry; its code stays valid because a plugin that
  // initialised is never unloaded.
  auto added = registry->add(model_name, "LeNet-5 style: conv5x5(6)+pool, conv5x5(16)+pool, fc 120, fc 84 (plugin)",
                             make_fmnist_lenet);
  if (!added) {
    host->set_error(host->context, added.error().message().c_str());  // e.g. already_exists
    return 2;
  }
  if (host->announce(host->context, "model", model_name) != 0) {
    (void)registry->remove(model_name);  // leave the registry as we found it
    host->set_error(host->context, "the host refused to list model 'fmnist-lenet'");
    return 3;
  }
  // And a data set (spirals.cpp); if that fails, take the model back out too.
  if (const int rc = register_spirals(host); rc != 0) {
    (void)registry->remove(model_name);
    return 10 + rc;
  }
  host->log(host->context, PRSGD_PLUGIN_LOG_DEBUG,
            "prsgd_example_plugin: registered model 'fmnist-lenet' and data set 'spirals'");
  return 0;
}
