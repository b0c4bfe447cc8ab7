// SPDX-License-Identifier: Apache-2.0
// A C++ plugin that adds a model to the host's registry through the public registry API.
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/models.hpp"
#include "prsgd/cli/plugin.h"

PRSGD_PLUGIN_DECLARE_ABI();

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_plugin_init(const prsgd_plugin_host* host) {
  auto* registry = static_cast<prsgd::algorithms::model_registry*>(host->model_registry);
  if (registry == nullptr) {
    host->set_error(host->context, "this plugin needs the host's model registry");
    return 1;
  }
  auto added =
      registry->add("plugin-mlp", "Fashion-MNIST MLP, registered by a test plugin",
                    [](const prsgd::algorithms::model_config& c) { return prsgd::algorithms::make_fmnist_mlp(c); });
  if (!added) {
    host->set_error(host->context, added.error().message().c_str());
    return 2;
  }
  return host->announce(host->context, "model", "plugin-mlp");
}
