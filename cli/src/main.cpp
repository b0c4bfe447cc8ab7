// SPDX-License-Identifier: Apache-2.0
// The `prsgd` command: parse and validate, then hand over to one run_<subcommand>() (commands.hpp).
#include <cstdio>
#include <exception>
#include <string>
#include <variant>
#include <vector>

#include "commands.hpp"
#include "prsgd/cli/options.hpp"

namespace {

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

}  // namespace

int main(int argc, char** argv) {
  using namespace prsgd::cli;
  try {
    const std::vector<std::string> args(argv, argv + argc);
    auto cmd = parse_command_line(args);
    if (!cmd) {
      std::fprintf(stderr, "%s\n", cmd.error().context.c_str());
      return exit_usage;
    }
    return std::visit(overloaded{
                          [](const help_request& h) {
                            std::fputs(h.text.c_str(), stdout);
                            return 0;
                          },
                          [](const head_options& o) { return run_head(o); },
                          [](const averager_options& o) { return run_averager(o); },
                          [](const worker_options& o) { return run_worker(o); },
                          [](const evaluator_options& o) { return run_evaluator(o); },
                          [](const local_options& o) { return run_local(o); },
                          [](const keygen_options& o) { return run_keygen(o); },
                          [](const export_options& o) { return run_export(o); },
                          [](const eval_options& o) { return run_eval(o); },
                          [](const predict_options& o) { return run_predict(o); },
                          [](const plot_options& o) { return run_plot(o); },
                          [](const list_options& o) { return run_list(o); },
                          [](const completion_options& o) { return run_completion(o); },
                          [](const operator_options& o) { return run_operator(o); },
                      },
                      *cmd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prsgd: unexpected error: %s\n", e.what());
    return exit_failure;
  }
}
