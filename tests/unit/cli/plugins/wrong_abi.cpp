// SPDX-License-Identifier: Apache-2.0
// Built "against" a future ABI version: the loader must refuse it without calling init.
#include <cstdlib>

#include "prsgd/cli/plugin.h"

extern "C" PRSGD_PLUGIN_EXPORT const uint32_t prsgd_plugin_abi_version = PRSGD_PLUGIN_ABI_VERSION + 1;

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_plugin_init(const prsgd_plugin_host*) {
  std::abort();  // must never be called
}
