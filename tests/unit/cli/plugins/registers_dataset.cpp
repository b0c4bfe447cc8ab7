// SPDX-License-Identifier: Apache-2.0
// A C++ plugin that adds a data set to the host's data set registry through the public registry API.
#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/cli/plugin.h"

PRSGD_PLUGIN_DECLARE_ABI();

namespace {

// Four 1-D samples, two classes; the test split repeats the first two.
prsgd::expected<prsgd::algorithms::loaded_dataset> load(const prsgd::algorithms::dataset_request& r) {
  prsgd::algorithms::loaded_dataset out;
  out.shape = {1, 1, 1};
  out.num_classes = 2;
  out.train_size = 4;
  prsgd::algorithms::dataset d;
  d.shape = out.shape;
  d.num_classes = 2;
  d.features = {-1.0F, -2.0F, 1.0F, 2.0F};
  d.labels = {0, 0, 1, 1};
  if (r.parts == prsgd::algorithms::dataset_parts::train) {
    out.train = d;
  } else if (r.parts == prsgd::algorithms::dataset_parts::test_and_train_size) {
    d.features.resize(2);
    d.labels.resize(2);
    out.test = d;
  }
  return out;
}

}  // namespace

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_plugin_init(const prsgd_plugin_host* host) {
  if (!PRSGD_PLUGIN_HOST_HAS(host, dataset_registry) || host->dataset_registry == nullptr) {
    host->set_error(host->context, "this plugin needs the host's data set registry");
    return 1;
  }
  auto* registry = static_cast<prsgd::algorithms::dataset_registry*>(host->dataset_registry);
  auto added = registry->add("plugin-set", "four points, registered by a test plugin", load);
  if (!added) {
    host->set_error(host->context, added.error().message().c_str());
    return 2;
  }
  return host->announce(host->context, "dataset", "plugin-set");
}
