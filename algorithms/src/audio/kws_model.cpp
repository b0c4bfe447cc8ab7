// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/kws_model.hpp"

#include <string>

namespace prsgd::algorithms {

expected<std::unique_ptr<model>> make_kws_cnn(const model_config& config) {
  if (config.num_classes <= 0 || config.input.channels <= 0 || config.input.height < 8 || config.input.width < 8) {
    return fail(errc::invalid_argument, "kws-cnn needs at least one class and inputs of at least 8 x 8");
  }
  network_builder b(config.input);
  int block = 1;
  for (const int channels : {16, 32, 64}) {
    const std::string n = std::to_string(block++);
    b.conv2d(channels, 3, 1, 1, false).named("conv" + n).batch_norm().named("bn" + n).relu().max_pool(2);
  }
  b.global_avg_pool().linear(config.num_classes).named("fc");
  return model::make("kws-cnn", config.input, config.num_classes, b.take(), config.seed);
}

void register_kws_models(model_registry& registry) {
  (void)registry.add("kws-cnn",
                     "keyword CNN on 98x40 log-mel: 3 x (conv3x3 16/32/64 + BN + ReLU + maxpool 2), avg pool, fc",
                     make_kws_cnn);
}

namespace {
// model_registry::instance() registers only the nn built-ins; this adds kws-cnn when the shared library is
// loaded, so `instance().make("kws-cnn", ...)` works without touching the nn code. In a static build
// the object file must be referenced (e.g. by calling register_kws_models) to be linked in.
[[maybe_unused]] const bool kws_models_registered = [] {
  register_kws_models(model_registry::instance());
  return true;
}();
}  // namespace

}  // namespace prsgd::algorithms
