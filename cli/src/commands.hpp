// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <signal.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/cli/launcher.hpp"
#include "prsgd/cli/options.hpp"
#include "prsgd/cli/plugin_loader.hpp"
#include "prsgd/cli/progress.hpp"
#include "prsgd/common/expected.hpp"

/// The `prsgd` subcommands. main() parses and validates, then calls exactly one of these; each returns the
/// process exit status: 0 success, 1 runtime failure, 2 usage error (bad option, refused plugin, bad key file),
/// 3 stopped by a signal (averager, worker and evaluator).
namespace prsgd::cli {

/// Exit status for a usage error (bad option/value/config/plugin).
inline constexpr int exit_usage = 2;
/// Exit status for a failure at run time.
inline constexpr int exit_failure = 1;
/// Exit status of an averager or worker that a stop signal (SIGTERM, SIGINT) ended cleanly before the job
/// did: the worker left, the averager checkpointed (or ended the job early). 0 means the job finished.
inline constexpr int exit_stopped = 3;

/// Prepares a process for any role: sets the log level, loads the plugins in order (they register models in
/// `prsgd::algorithms::model_registry::instance()` and data sets in `dataset_registry::instance()`), then,
/// when `model` is not empty, checks that the model registry knows it (a name or an mlp:/cnn: spec), and when
/// `dataset` is not empty, that the data set registry does. Returns the plugin's error, or invalid_argument
/// "unknown model 'x' (registered: ...)" / "unknown --dataset 'x' (registered: ...)".
[[nodiscard]] expected<std::vector<loaded_plugin>> prepare_process(const output_options& o,
                                                                   const std::string& model = {},
                                                                   const std::string& dataset = {});

/// Creates the directory `file` goes into when it does not exist; io_error naming it and `what` otherwise.
[[nodiscard]] expected<void> make_parent_directory(const std::string& file, const std::string& what);

/// Returns the exit status for a failure to load the data: exit_usage for bad input (a missing, malformed or
/// inconsistent file, a bad --data-option), exit_failure for an I/O error.
[[nodiscard]] int data_error_status(const error& e);

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts later; returns the set. Call it first
/// in a role, before any thread starts. Threads that already exist (OpenBLAS starts its pool before main)
/// may still receive them, so a handler that only records the signal replaces the default action.
sigset_t block_stop_signals();
/// Waits up to `wait` for SIGINT/SIGTERM (taken with sigtimedwait, or recorded by that handler); returns the
/// signal or 0. Main thread only.
int take_signal(const sigset_t& set, std::chrono::milliseconds wait);

/// Writes the bound `endpoint` to `file` (--endpoint-file) when `file` is not empty. On failure prints
/// "prsgd <role>: <why>" to stderr and returns false.
[[nodiscard]] bool announce_endpoint(const std::string& role, const std::string& file, const std::string& endpoint);

/// Returns a progress reporter on stderr for --progress `mode` (auto | plain | off; off = none).
[[nodiscard]] std::optional<progress_reporter> make_progress_reporter(const std::string& mode);

/// Runs the head node. (Wired to the runtime by the lead: cli/src/roles.cpp.)
int run_head(const head_options& o);
/// Runs the averager actor until the job ends. (Wired to actors/ by the lead: cli/src/roles.cpp.)
int run_averager(const averager_options& o);
/// Runs one worker actor until the averager ends the job. (Wired to actors/ by the lead: cli/src/roles.cpp.)
int run_worker(const worker_options& o);
/// Scores x̄ for an averager with --evaluate-on evaluators until the job ends (cli/src/evaluator_role.cpp).
int run_evaluator(const evaluator_options& o);
/// Starts [head,] averager and workers as processes of this binary, shows progress, waits, reports.
int run_local(const local_options& o);
/// Asks a running averager for its status (`prsgd status`) or steers it (`prsgd ctl`).
int run_operator(const operator_options& o);
/// Writes a CURVE key pair.
int run_keygen(const keygen_options& o);

// The trained model out (cli/src/model_commands.cpp).
/// Writes the model of the newest valid checkpoint as safetensors.
int run_export(const export_options& o);
/// Scores safetensors weights on the test split: accuracy, per-class accuracy, confusion matrix.
int run_eval(const eval_options& o);
/// Prints the top-k classes of input files.
int run_predict(const predict_options& o);

// Looking at runs and registries (cli/src/info_commands.cpp).
/// Draws metrics files with gnuplot.
int run_plot(const plot_options& o);
/// Lists the registered models or data sets.
int run_list(const list_options& o);
/// Prints a shell completion script.
int run_completion(const completion_options& o);

}  // namespace prsgd::cli
