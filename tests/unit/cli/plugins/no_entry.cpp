// SPDX-License-Identifier: Apache-2.0
// Declares the ABI version but has no prsgd_plugin_init: the loader must refuse it.
#include "prsgd/cli/plugin.h"

PRSGD_PLUGIN_DECLARE_ABI();

extern "C" PRSGD_PLUGIN_EXPORT int prsgd_plugin_initialise(const prsgd_plugin_host*) { return 0; }
