// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "prsgd/cli/plugin.h"

/// Registers the data set `spirals` in the host's data set registry and announces it; returns 0, or non-zero
/// after host->set_error() when the host has no data set registry or the name is taken.
int register_spirals(const prsgd_plugin_host* host);
