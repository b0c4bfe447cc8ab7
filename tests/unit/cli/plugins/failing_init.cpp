// SPDX-License-Identifier: Apache-2.0
// Initialisation fails and says why through set_error.
#include "prsgd/cli/plugin.h"

PRSGD_PLUGIN_DECLARE_ABI();

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_plugin_init(const prsgd_plugin_host* host) {
  host->set_error(host->context, "needs a GPU that is not there");
  return 7;
}
