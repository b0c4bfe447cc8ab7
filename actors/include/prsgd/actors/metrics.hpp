// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prsgd/actors/protocol.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/common/json_quote.hpp"

namespace prsgd::actors {

/// Names samples [begin, end) of epoch `epoch` that member `member` trained on in an accepted submission.
struct consumed_range {
  member_id member = 0;
  std::uint64_t epoch = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

/// Describes one closed round, as the averager saw it. Field meanings: actors/METRICS.md.
struct round_metrics {
  /// The round that closed (its submissions produced x̄_{round+1}).
  round_t round = 0;
  /// Members of the round when it started (|M_r|).
  std::size_t members = 0;
  /// Submissions that entered the average.
  std::size_t submissions = 0;
  /// Training samples behind those submissions (Σ samples_i).
  std::uint64_t samples = 0;
  /// Passes over the training set once x̄_{round+1} exists: samples consumed / training samples when the
  /// averager hands out sample ranges, else trained_rounds / rounds_per_epoch (empty when unknown).
  std::optional<double> epoch;
  /// Rounds that trained so far (closed with at least one submission), this one included.
  std::uint64_t trained_rounds = 0;
  /// Trained rounds the job is planned to run (0 = open-ended).
  std::uint64_t rounds_total = 0;
  /// Seconds from the round's start (RESTART sent) to each accepted submission, per worker.
  std::vector<std::pair<member_id, double>> arrival_offsets_s;
  /// Seconds from the round's start to the barrier closing.
  double round_s = 0;
  /// Seconds from the first accepted submission to the barrier closing (how long the fastest waited).
  double barrier_wait_s = 0;
  /// Seconds since the averager started, at the barrier close.
  double wall_s = 0;
  /// Payload bytes received this round (every MODEL, accepted or not) and sent (RESTARTs).
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  /// Sample-weighted mean training loss of the submissions (empty when none carried loss stats).
  std::optional<double> train_loss;
  /// Test accuracy of x̄_{round+1} if an evaluator reported one for this round.
  std::optional<double> test_acc;
  /// Mean test cross-entropy of the same x̄, when the evaluation reported one.
  std::optional<double> test_loss;
  /// (1/N) Σ ||x_i − x̄_{round+1}||² over the accepted submissions (gradients in minibatch_sgd mode).
  double consensus_distance = 0;
  /// Submissions dropped during this round: for a closed round, repeated, or rejected (bad/non-member).
  std::uint64_t late = 0;
  std::uint64_t duplicate = 0;
  std::uint64_t rejected = 0;
  /// Messages dropped this round because they named a member without its token or came over another connection.
  std::uint64_t unauthorised = 0;
  /// Members removed during the round (LEAVE or heartbeat timeout) and joiners admitted at its close.
  std::size_t removed = 0;
  std::size_t admitted = 0;
  /// True when a deadline closed the barrier before every member submitted.
  bool closed_by_deadline = false;
  /// Smallest and largest interval I_i assigned for the round, and its step size γ.
  std::uint64_t interval_min = 0;
  std::uint64_t interval_max = 0;
  double step_size = 0;
  /// The averaging rule used ("uniform", "samples", "step-normalised").
  std::string rule;
  /// How the weighted updates were combined ("mean", "trimmed-mean", "median", "norm-clip"; empty for an
  /// empty round).
  std::string aggregate;
  /// Submissions the outlier screen left out of this round: (worker, its update norm / the median norm).
  std::vector<std::pair<member_id, double>> screened;
  /// True when the combined x̄ was not finite: the round was refused and x̄ kept.
  bool refused = false;
  /// The sample ranges the round's accepted submissions consumed (empty without sample ranges).
  std::vector<consumed_range> data;
};

/// Describes an operator's request to a running job (`prsgd ctl`), as written to the metrics file.
struct control_event {
  /// The action ("pause", "set-interval", ...) and its argument.
  std::string action;
  std::string arg;
  /// Whether it was carried out, and the line the operator got back.
  bool ok = false;
  std::string result;
  /// Who asked: "key:<Z85 client key>" with CURVE, else "address:<peer address>".
  std::string by;
  /// The averager's open round when it arrived, and seconds since the averager started.
  round_t at_round = 0;
  double wall_s = 0;
};

/// Returns {"event":"control","action":...,"arg":...,"ok":...,"result":...,"by":...,"at_round":...,
/// "wall_s":...} (no trailing newline).
[[nodiscard]] std::string to_json_line(const control_event& e);

/// Returns `text` as a JSON string literal (see prsgd/common/json_quote.hpp).
using ::prsgd::json_quote;

/// Returns one JSON object (no trailing newline) for `m`.
[[nodiscard]] std::string to_json_line(const round_metrics& m);

/// Appends one JSON object per line to a file: one per round, then a final `"event":"done"` line.
/// Not thread-safe; owned by one actor. Flushes after every line so a crash loses at most one line.
class metrics_writer {
 public:
  /// Opens `path` for writing: truncates it, or appends to it when `append`. Returns io_error when it
  /// cannot be opened.
  [[nodiscard]] static expected<metrics_writer> open(const std::string& path, bool append = false);
  /// Opens `path` for an averager that resumed round `round` from a checkpoint: first rewrites the file
  /// (atomically) without what the lost incarnation wrote past the checkpoint — round lines of rounds
  /// >= `round` (those rounds run again), done lines, and an unterminated last line — then appends.
  /// The earlier incarnations' lines of rounds < `round` stay, so each closed round keeps exactly one
  /// line. Returns io_error when the file cannot be read, rewritten or opened.
  [[nodiscard]] static expected<metrics_writer> open_resumed(const std::string& path, round_t round);

  metrics_writer(metrics_writer&&) noexcept = default;
  metrics_writer& operator=(metrics_writer&&) noexcept = default;
  ~metrics_writer() = default;

  /// Writes one round's line. Returns io_error on a failed write.
  [[nodiscard]] expected<void> write(const round_metrics& m);
  /// Writes {"event":"resumed","round":r,"incarnation":i}: a new averager incarnation resumed round r
  /// from a checkpoint, so round lines >= r written before this one are superseded by the ones after it.
  [[nodiscard]] expected<void> write_resumed(round_t round, std::uint64_t incarnation);
  /// Writes an operator's request (to_json_line(control_event)).
  [[nodiscard]] expected<void> write(const control_event& e);
  /// Writes the final line {"event":"done","test_acc":...,"test_loss":...,"rounds":...,"trained_rounds":...,
  /// "wall_s":...}.
  [[nodiscard]] expected<void> write_done(std::optional<double> final_test_acc, std::optional<double> final_test_loss,
                                          round_t rounds, std::uint64_t trained_rounds, double wall_s);

 private:
  struct file_closer {
    void operator()(std::FILE* f) const noexcept;
  };
  explicit metrics_writer(std::FILE* f) : file_(f) {}
  [[nodiscard]] expected<void> put_line(const std::string& line);
  std::unique_ptr<std::FILE, file_closer> file_;
};

}  // namespace prsgd::actors
