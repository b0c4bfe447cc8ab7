// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/plugin_loader.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <memory>
#include <set>

#include "prsgd/common/log.hpp"

#ifndef PRSGD_VERSION_STRING
#define PRSGD_VERSION_STRING "unknown"
#endif

namespace prsgd::cli {
namespace {

// What the host callbacks write into while prsgd_plugin_init() runs.
struct host_state {
  std::string component;
  std::string error;
  std::vector<std::pair<std::string, std::string>> provides;
  std::set<std::pair<std::string, std::string>> seen;
};

void host_log(void* context, int level, const char* message) {
  auto* st = static_cast<host_state*>(context);
  const char* text = message != nullptr ? message : "";
  switch (level) {
    case PRSGD_PLUGIN_LOG_DEBUG: PRSGD_LOG(debug, st->component) << text; break;
    case PRSGD_PLUGIN_LOG_WARN: PRSGD_LOG(warn, st->component) << text; break;
    case PRSGD_PLUGIN_LOG_ERROR: PRSGD_LOG(error, st->component) << text; break;
    default: PRSGD_LOG(info, st->component) << text; break;
  }
}

void host_set_error(void* context, const char* message) {
  static_cast<host_state*>(context)->error = message != nullptr ? message : "";
}

int host_announce(void* context, const char* kind, const char* name) {
  auto* st = static_cast<host_state*>(context);
  if (kind == nullptr || name == nullptr || *kind == '\0' || *name == '\0') {
    return 1;
  }
  auto entry = std::make_pair(std::string{kind}, std::string{name});
  if (!st->seen.insert(entry).second) {
    return 1;
  }
  st->provides.push_back(std::move(entry));
  return 0;
}

struct dl_closer {
  void operator()(void* handle) const noexcept { ::dlclose(handle); }
};

}  // namespace

expected<loaded_plugin> load_plugin(const std::string& path, void* model_registry, void* dataset_registry) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return fail(errc::not_found, "plugin '" + path + "' does not exist");
  }
  // dlopen only searches the library path for names without a slash; a plugin is always a file.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  ::dlerror();
  std::unique_ptr<void, dl_closer> handle{::dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL)};
  if (!handle) {
    const char* why = ::dlerror();
    return fail(errc::decode_failed, "cannot load plugin '" + path + "': " + (why != nullptr ? why : "dlopen failed"));
  }
  const auto* abi = static_cast<const std::uint32_t*>(::dlsym(handle.get(), "prsgd_plugin_abi_version"));
  if (abi == nullptr) {
    return fail(errc::invalid_argument, "'" + path +
                                            "' is not a prsgd plugin: it does not export prsgd_plugin_abi_version "
                                            "(use PRSGD_PLUGIN_DECLARE_ABI() from prsgd/cli/plugin.h)");
  }
  if (*abi != PRSGD_PLUGIN_ABI_VERSION) {
    return fail(errc::unsupported, "plugin '" + path + "' was built for plugin ABI version " + std::to_string(*abi) +
                                       ", this prsgd supports version " + std::to_string(PRSGD_PLUGIN_ABI_VERSION) +
                                       "; rebuild it against this prsgd");
  }
  void* sym = ::dlsym(handle.get(), "prsgd_plugin_init");
  if (sym == nullptr) {
    return fail(errc::invalid_argument, "'" + path +
                                            "' is not a prsgd plugin: it does not export "
                                            "extern \"C\" int prsgd_plugin_init(const prsgd_plugin_host*)");
  }
  auto init = reinterpret_cast<prsgd_plugin_init_fn>(sym);  // NOLINT: dlsym returns data pointers

  host_state st;
  st.component = "plugin:" + std::filesystem::path{path}.filename().string();
  prsgd_plugin_host host{};
  host.abi_version = PRSGD_PLUGIN_ABI_VERSION;
  host.struct_size = sizeof(prsgd_plugin_host);
  host.host_version = PRSGD_VERSION_STRING;
  host.context = &st;
  host.log = &host_log;
  host.set_error = &host_set_error;
  host.announce = &host_announce;
  host.model_registry = model_registry;
  host.dataset_registry = dataset_registry;
  const int rc = init(&host);
  if (rc != 0) {
    return fail(errc::handler_failed, "plugin '" + path + "' refused to initialise (code " + std::to_string(rc) + ")" +
                                          (st.error.empty() ? "" : ": " + st.error));
  }
  loaded_plugin out{path, *abi, std::move(st.provides)};
  // Never dlclose a plugin that initialised: registered factories point into it.
  (void)handle.release();
  for (const auto& [kind, name] : out.provides) {
    PRSGD_LOG(info, "plugin") << path << " provides " << kind << " '" << name << "'";
  }
  return out;
}

expected<std::vector<loaded_plugin>> load_plugins(const std::vector<std::string>& paths, void* model_registry,
                                                  void* dataset_registry) {
  std::vector<loaded_plugin> out;
  for (const auto& p : paths) {
    auto loaded = load_plugin(p, model_registry, dataset_registry);
    if (!loaded) {
      return prsgd::unexpected{loaded.error()};
    }
    out.push_back(std::move(*loaded));
  }
  return out;
}

}  // namespace prsgd::cli
