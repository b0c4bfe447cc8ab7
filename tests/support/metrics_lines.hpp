// SPDX-License-Identifier: Apache-2.0
// The averager's metrics file (--metrics-jsonl) as tests read it: one parsed object per line, enough of
// each to check the accounting (rounds, samples, the data ranges each submission trained on, events).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace prsgd::test {

/// One parsed metrics line: flat numeric fields plus the event name ("" for a round line).
struct metrics_line {
  std::string event;
  std::map<std::string, double> num;
  /// arrival_s: worker id -> seconds from the round's start to its counted submission.
  std::map<int, double> arrival;
  /// data: [member, epoch, begin, end] for each sample range a counted submission trained on.
  std::vector<std::array<std::uint64_t, 4>> data;

  /// Returns the numeric field `k`, or -1 when the line has none.
  [[nodiscard]] double get(const std::string& k) const {
    auto it = num.find(k);
    return it == num.end() ? -1 : it->second;
  }
  [[nodiscard]] bool has(const std::string& k) const { return num.contains(k); }
  /// Returns true for the line of a closed round (no event, a round number).
  [[nodiscard]] bool is_round() const { return event.empty() && has("round"); }
};

/// Parses the top-level "key":number and "event":"x" pairs of one line, plus arrival_s and data (other
/// nested values are skipped).
[[nodiscard]] metrics_line parse_metrics_line(const std::string& text);

/// Returns the complete lines (ending in '}') of the metrics file at `path` as it is now, in file order.
[[nodiscard]] std::vector<metrics_line> read_metrics_lines(const std::string& path);

}  // namespace prsgd::test
