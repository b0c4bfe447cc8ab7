// SPDX-License-Identifier: Apache-2.0
// `--config FILE`: a YAML mapping of option names to values, applied under the command line.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>

#include "option_tables.hpp"

namespace prsgd::cli::detail {
namespace {

std::string node_to_text(const YAML::Node& n) { return n.Scalar(); }

}  // namespace

expected<void> apply_config(CLI::App& sub, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return fail(errc::not_found, "config file '" + path + "' does not exist or is not a file");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return bad("config file '" + path + "': " + one_line(e.what()));
  }
  if (root.IsNull()) {
    return {};
  }
  if (!root.IsMap()) {
    return bad("config file '" + path + "' must be a mapping of option: value");
  }
  for (const auto& kv : root) {
    std::string key = kv.first.Scalar();
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    CLI::Option* opt =
        (name == "config" || name == "help" || name == "version") ? nullptr : sub.get_option_no_throw("--" + name);
    if (opt == nullptr) {
      return bad("unknown key '" + key + "' in config file '" + path + "' (see prsgd " + sub.get_name() + " --help)");
    }
    if (opt->count() > 0) {
      continue;  // the command line wins
    }
    std::vector<std::string> values;
    const YAML::Node& v = kv.second;
    if (v.IsScalar()) {
      values.push_back(node_to_text(v));
    } else if (v.IsSequence()) {
      for (const auto& item : v) {
        if (!item.IsScalar()) {
          return bad("config file '" + path + "': key '" + key + "' must be a scalar or a list of scalars");
        }
        values.push_back(node_to_text(item));
      }
    } else {
      return bad("config file '" + path + "': key '" + key + "' must be a scalar or a list of scalars");
    }
    try {
      if (opt->get_expected_min() == 0) {
        if (values.size() != 1) {
          return bad("config file '" + path + "': key '" + key + "' must be true or false");
        }
        const auto flag = CLI::detail::to_flag_value(values.front());  // throws on non-boolean text
        opt->add_result(flag > 0 ? "true" : "false");
      } else {
        opt->add_result(values);
      }
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return bad("config file '" + path + "': key '" + key + "': " + one_line(e.what()));
    } catch (const std::exception& e) {
      return bad("config file '" + path + "': key '" + key + "': bad value (" + one_line(e.what()) + ")");
    }
  }
  return {};
}

}  // namespace prsgd::cli::detail
