// SPDX-License-Identifier: Apache-2.0
// A well-formed plugin: declares the ABI, announces a model, logs, and counts its init calls.
#include "prsgd/cli/plugin.h"

PRSGD_PLUGIN_DECLARE_ABI();

namespace {
int init_calls = 0;
}

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_plugin_init(const prsgd_plugin_host* host) {
  if (host == nullptr || host->abi_version != PRSGD_PLUGIN_ABI_VERSION ||
      host->struct_size < sizeof(prsgd_plugin_host)) {
    return 1;
  }
  ++init_calls;
  host->log(host->context, PRSGD_PLUGIN_LOG_INFO, "test plugin initialising");
  // The host passes its registry through; the test passes a sentinel and checks it arrives intact.
  if (host->model_registry != nullptr && *static_cast<int*>(host->model_registry) == 42) {
    *static_cast<int*>(host->model_registry) = 43;
  }
  if (host->announce(host->context, "model", "test-tiny-mlp") != 0) {
    return 2;
  }
  // A duplicate announcement must be refused by the host.
  if (host->announce(host->context, "model", "test-tiny-mlp") == 0) {
    return 3;
  }
  return 0;
}

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_test_plugin_init_calls() { return init_calls; }
