// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/cli/progress.hpp"

namespace prsgd::cli {

/// Holds the fields of one metrics JSON line (docs/cli.md) that the progress line needs. Absent or null
/// fields stay empty.
struct metrics_line {
  /// True for the final {"event":"done",...} line.
  bool done = false;
  std::optional<long> round;
  std::optional<long> rounds;
  std::optional<int> members;
  std::optional<double> wall_s;
  std::optional<double> train_loss;
  std::optional<double> test_acc;
  std::optional<double> epoch;
  /// Training samples consumed in the round (for samples/s).
  std::optional<double> samples;
  /// Payload bytes the averager received and sent in the round.
  std::optional<double> bytes_in;
  std::optional<double> bytes_out;
};

/// Parses one line holding a flat JSON object; nested arrays/objects are skipped. Returns nothing for a line that
/// is not a JSON object.
[[nodiscard]] std::optional<metrics_line> parse_metrics_line(std::string_view line);

/// Folds a metrics line into a progress snapshot (round, members, loss, accuracy, epoch, wall time, samples/s).
/// `total_rounds` is kept from `s` unless the line carries `rounds`.
void apply_metrics_line(progress_snapshot& s, const metrics_line& m);

/// Reads the complete lines appended to a file since the last poll (the file may not exist yet).
/// Not thread-safe.
class metrics_follower {
 public:
  explicit metrics_follower(std::string path) : path_(std::move(path)) {}
  /// Returns the lines completed since the previous call, without their newlines.
  [[nodiscard]] std::vector<std::string> poll();

 private:
  std::string path_;
  std::uint64_t offset_ = 0;
  std::string partial_;
};

}  // namespace prsgd::cli
