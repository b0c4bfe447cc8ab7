// SPDX-License-Identifier: Apache-2.0
// Internal to the CLI: the option tables shared by several subcommands, the helpers that register them with
// CLI11 and turn them back into arguments, the YAML config loader and the small checks the validators share.
// options.cpp assembles the subcommands from these; option_checks.cpp validates the parsed groups.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "prsgd/cli/options.hpp"

namespace prsgd::cli::detail {

// CLI11 messages are nearly always one line; make sure of it.
std::string one_line(std::string text);

template <class T>
std::string str(const T& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Shortest text that reads back as the same double (0.05 -> "0.05").
std::string number_text(double v);

inline prsgd::unexpected bad(const std::string& what) { return fail(errc::invalid_argument, what); }

// Vector options collect every occurrence (flags and file are not merged: see apply_config).
template <class T>
CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<T>& target, const std::string& help) {
  return app.add_option(name, target, help)->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// Each group of options that more than one role takes is one table: the table registers the options with
// CLI11 (and so with the YAML config) and turns a parsed group back into arguments (`prsgd local` passes its
// groups to the averager and workers it starts). A new option of a group is one line in option_tables.cpp.
using field_ref =
    std::variant<int*, double*, std::uint64_t*, std::string*, bool*, std::vector<int>*, std::vector<std::string>*>;

struct option_def {
  std::string name;  // with the leading dashes
  std::string help;
  field_ref field;
  bool path = false;           // a file or directory: passed on as an absolute path
  std::string type_name = {};  // the value's name in --help ("" = CLI11's, from the type)
};

std::vector<option_def> liveness_table(liveness_options& o);
std::vector<option_def> model_table(model_options& o);
std::vector<option_def> schedule_table(schedule_options& o);
std::vector<option_def> save_table(save_options& o);
std::vector<option_def> operations_table(operations_options& o);

void add_table(CLI::App& app, const std::vector<option_def>& table, const std::string& group);
std::vector<std::string> table_arguments(const std::vector<option_def>& table);

// The groups as CLI11 options, each under its --help heading.
// `metrics`: false for a role that ignores --metrics-*/--progress (accepted, not listed in --help).
void add_output(CLI::App& app, output_options& o, bool metrics);
void add_liveness(CLI::App& app, liveness_options& o);
// `server` lists --curve-allow, `client` --curve-server-key; the other is accepted but not listed.
void add_security(CLI::App& app, security_options& o, bool server, bool client);
void add_model(CLI::App& app, model_options& o);
void add_schedule(CLI::App& app, schedule_options& o);
void add_save(CLI::App& app, save_options& o);
void add_operations(CLI::App& app, operations_options& o);
// --config, --log-level and --plugin: the output options that apply to the model tools.
void add_tool_output(CLI::App& app, output_options& o);
// --model (default: the weights file's), --dataset, --data-dir.
void add_tool_model(CLI::App& app, model_options& o);

// Applies the YAML file's keys to the options of `sub` that were not given on the command line.
expected<void> apply_config(CLI::App& sub, const std::string& path);

// Checks shared by the validators: "--x must be one of a|b (got 'c')", "--x must be at least N".
expected<void> one_of(const std::string& value, std::initializer_list<std::string_view> allowed,
                      const std::string& what);
expected<void> at_least(long long value, long long min, const std::string& what);

// Turns an enum parser's error into the option's usage error: "--deadline: unknown deadline 'x' (none | ...)".
template <class T>
expected<void> parsed(const std::string& what, const expected<T>& value, const std::string& also = {}) {
  if (!value) {
    return bad(what + ": " + value.error().context + (also.empty() ? "" : ", or " + also));
  }
  return {};
}

}  // namespace prsgd::cli::detail
