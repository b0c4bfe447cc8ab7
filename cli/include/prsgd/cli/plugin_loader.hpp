// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "prsgd/cli/plugin.h"
#include "prsgd/common/expected.hpp"

namespace prsgd::cli {

/// Describes a plugin that loaded and initialised successfully. The library stays loaded for the life of
/// the process (registered code must stay valid), so this holds no handle.
struct loaded_plugin {
  /// Path it was loaded from.
  std::string path;
  /// The ABI version it declared.
  std::uint32_t abi_version = 0;
  /// What it announced through host->announce(): (kind, name) pairs in call order.
  std::vector<std::pair<std::string, std::string>> provides;
};

/// Loads `path` and runs its prsgd_plugin_init() with a host struct whose model_registry is `model_registry`
/// (a `prsgd::algorithms::model_registry*`, may be null) and whose dataset_registry is `dataset_registry` (a
/// `prsgd::algorithms::dataset_registry*`, may be null).
/// Returns not_found (no such file), decode_failed (dlopen failed: not a shared library, missing symbols),
/// invalid_argument (prsgd_plugin_abi_version or prsgd_plugin_init missing), unsupported (ABI version differs
/// from PRSGD_PLUGIN_ABI_VERSION) or handler_failed (init returned non-zero; the context carries the plugin's
/// set_error() message). A refused library is unloaded again.
/// Not thread-safe: call from the main thread before starting actors.
[[nodiscard]] expected<loaded_plugin> load_plugin(const std::string& path, void* model_registry = nullptr,
                                                  void* dataset_registry = nullptr);

/// Loads every path in order; stops at the first failure.
[[nodiscard]] expected<std::vector<loaded_plugin>> load_plugins(const std::vector<std::string>& paths,
                                                                void* model_registry = nullptr,
                                                                void* dataset_registry = nullptr);

}  // namespace prsgd::cli
