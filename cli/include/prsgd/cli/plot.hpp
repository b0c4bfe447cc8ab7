// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "prsgd/common/expected.hpp"

/// `prsgd plot`: curves from the averager's metrics JSON lines (docs/cli.md, "Metrics"), drawn by gnuplot.
/// Reading the files and writing the gnuplot script are separate from running gnuplot, so both are testable
/// without a process.
namespace prsgd::cli {

/// Holds one curve: its legend title and its points in file order.
struct plot_series {
  std::string title;
  std::vector<std::pair<double, double>> points;
  /// Drawn with a dashed line (its run is one of plot_request::dashed).
  bool dashed = false;
};

/// Says what a figure shows.
struct plot_request {
  /// The metrics files, one run each.
  std::vector<std::string> runs;
  /// Legend titles by run (missing ones: the file name without its directory and .jsonl).
  std::vector<std::string> labels;
  /// accuracy (test_acc, %) | loss (train_loss) | idle (each worker's idle time at the barrier, summed over
  /// the rounds so far: round_s minus its arrival offset) | bytes (payload bytes in + out, summed, MB).
  std::string y = "accuracy";
  /// round | rounds (trained_rounds: rounds trained so far, 1 after the first) | epoch | wall (seconds; an
  /// averager resumed from a checkpoint continues its predecessor's time).
  std::string x = "round";
  /// A logarithmic x axis; points at x <= 0 are left out.
  bool log_x = false;
  /// Labels of the runs drawn with dashed lines (each must be one of the runs' labels).
  std::vector<std::string> dashed = {};
};

/// Reads the runs and returns the curves: one per run, or for `idle` one per run and worker id ("RUN w3").
/// Lines that are not rounds (the done and resumed events) are skipped; a round without the value (test_acc
/// null, no epoch) adds no point. Returns not_found for a missing file, decode_failed naming FILE:LINE for a
/// line that is not a JSON object, invalid_argument for an unknown y or x or a `dashed` label of no run.
[[nodiscard]] expected<std::vector<plot_series>> read_plot_series(const plot_request& request);

/// Returns a gnuplot script that draws `series` to `output` as `format` (png | svg) of width x height
/// pixels, with the data inline, so gnuplot needs nothing but the script. Empty series are left out.
[[nodiscard]] std::string gnuplot_script(const plot_request& request, const std::vector<plot_series>& series,
                                         const std::string& output, const std::string& format, int width, int height,
                                         const std::string& title);

}  // namespace prsgd::cli
