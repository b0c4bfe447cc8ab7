// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>

namespace prsgd::cli {

/// Holds what the progress line shows after a round.
struct progress_snapshot {
  /// Rounds completed so far.
  long round = 0;
  /// Total rounds of the job (0 = unknown).
  long total_rounds = 0;
  /// Epochs completed, fractional (e.g. 1.25).
  double epoch = 0;
  /// Members in the current round.
  int members = 0;
  /// Mean training loss of the last round, if known.
  std::optional<double> train_loss;
  /// Test accuracy of the last evaluation in [0, 1], if any.
  std::optional<double> test_acc;
  /// Training samples per second over all workers.
  double samples_per_s = 0;
  /// Wall time since the start, in seconds.
  double elapsed_s = 0;
};

/// Selects how a progress line is written.
enum class progress_style {
  /// A single line rewritten in place ("\r...\x1b[K", no newline), cut to the terminal width.
  tty,
  /// One complete line per update, ending in "\n" (logs, pipes, CI).
  plain,
};

/// Returns the estimated seconds left, or nothing when round or total_rounds is 0.
[[nodiscard]] std::optional<double> estimate_eta_s(const progress_snapshot& s);

/// Returns "1h02m", "3m07s" or "42s" for `seconds` >= 0.
[[nodiscard]] std::string format_duration(double seconds);

/// Returns the text to write for `s`: e.g.
/// "round 12/100 epoch 0.48 members 4 loss 0.4312 acc 85.20% 10.3k samples/s ETA 1m12s".
/// With `tty`, the text starts with "\r", is cut to `width` columns and ends by clearing the rest of the line.
[[nodiscard]] std::string format_progress(const progress_snapshot& s, progress_style style, std::size_t width = 100);

/// Writes progress lines to a stream: an updating line on a terminal, plain lines otherwise.
/// Not thread-safe; call from one thread.
class progress_reporter {
 public:
  /// Writes to `out` (not owned) in `style`.
  progress_reporter(std::FILE* out, progress_style style, std::size_t width = 100);
  progress_reporter(const progress_reporter&) = delete;
  progress_reporter& operator=(const progress_reporter&) = delete;
  /// Takes over `other`'s stream and open line.
  progress_reporter(progress_reporter&& other) noexcept;
  progress_reporter& operator=(progress_reporter&&) = delete;
  /// Ends the updating line, if one is open.
  ~progress_reporter();

  /// Returns a reporter on `out` styled by isatty(fileno(out)) and the terminal's width (COLUMNS).
  [[nodiscard]] static progress_reporter for_stream(std::FILE* out);

  /// Writes the line for `s`.
  void update(const progress_snapshot& s);
  /// Ends the updating line with a newline (no-op for plain or when nothing is open).
  void finish();
  /// Returns the style in use.
  [[nodiscard]] progress_style style() const noexcept { return style_; }

 private:
  std::FILE* out_;
  progress_style style_;
  std::size_t width_;
  bool open_line_ = false;
};

}  // namespace prsgd::cli
