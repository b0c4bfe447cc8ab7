// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/actors/protocol.hpp"
#include "prsgd/algorithms/sample_pool.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/common/file_io.hpp"

namespace prsgd::actors {

/// Records one member in a checkpoint: who it was and its schedule state.
struct checkpoint_member {
  member_id member = 0;
  incarnation_t incarnation = 0;
  /// I_i assigned for the next round.
  std::uint64_t interval = 1;
  /// Measured local steps per second (EMA; 0 = not measured yet).
  double speed = 0;
};

/// Identifies the model a checkpoint's x̄ belongs to, so that it can be exported without the job's
/// command line. Recorded from checkpoint format version 2 on.
struct checkpoint_model {
  /// Model registry name, e.g. "fmnist-cnn".
  std::string name;
  /// Per-sample input shape.
  std::int32_t channels = 0;
  std::int32_t height = 0;
  std::int32_t width = 0;
  /// Output classes.
  std::int32_t classes = 0;
  /// Data set name, e.g. "fashion-mnist" ("" = unknown).
  std::string dataset;
  /// The job fingerprint ("" = unknown).
  std::string fingerprint;
  /// Compares every field.
  friend bool operator==(const checkpoint_model&, const checkpoint_model&) = default;
};

/// Holds everything the averager needs to resume: the state at the start of round `round`.
struct checkpoint_state {
  /// The averager incarnation that wrote the checkpoint.
  incarnation_t averager_incarnation = 0;
  /// The round x̄ belongs to: the next round to run. MODELs for rounds < `round` are late after resume.
  round_t round = 0;
  /// x̄_round.
  std::vector<float> model;
  /// M_round at the time of the checkpoint.
  std::vector<checkpoint_member> members;
  /// Rounds completed so far (drives step-size warm-up).
  std::uint64_t rounds_completed = 0;
  /// Outer-optimiser momentum buffer (empty when no outer optimiser runs).
  std::vector<float> outer_momentum;
  /// Past arrival offsets (seconds) that feed the adaptive deadline.
  std::vector<double> arrival_history;
  /// Cumulative late / duplicate / rejected counters.
  std::uint64_t late = 0;
  std::uint64_t duplicate = 0;
  std::uint64_t rejected = 0;
  /// What model x̄ is for (empty when the writer did not say, and in version-1 checkpoints).
  std::optional<checkpoint_model> identity;
  /// True for the checkpoint written when the job ended (x̄ is the final model): an averager started on
  /// it has nothing left to do. Recorded from format version 3 on.
  bool finished = false;
  /// Where the job is in its passes over the training set: the samples of each open epoch not consumed
  /// yet (the open round's grants included). Empty when the job hands out no sample ranges. Recorded from
  /// format version 4 on; the ranges are positions of each epoch's permutation (sample_pool) from version 5
  /// on.
  std::optional<algorithms::pool_state> pool;
  /// True when `pool` came from a format-4 checkpoint, whose ranges are sample indices in storage order:
  /// an averager refuses to resume such a pool (its positions would name other samples).
  bool pool_in_storage_order = false;
};

/// Encodes `s` as checkpoint bytes: header {magic "PRSGDCKP", version, payload size, CRC32} + payload.
/// Writes format version 5 (version 1 plus the model identity, the finished flag, the sample pool in
/// permuted positions).
[[nodiscard]] std::vector<unsigned char> encode_checkpoint(const checkpoint_state& s);
/// Decodes checkpoint bytes of format version 1 (no identity), 2 (no finished flag), 3 (no pool), 4 (a pool
/// in storage order, see pool_in_storage_order) or 5. Returns
/// decode_failed (bad magic, version, truncation, sizes, NaN/Inf in x̄ or the momentum) or
/// checksum_mismatch (payload CRC32 differs).
[[nodiscard]] expected<checkpoint_state> decode_checkpoint(const std::vector<unsigned char>& bytes);

/// Writes a file atomically (see prsgd/common/file_io.hpp).
using ::prsgd::write_file_atomically;

}  // namespace prsgd::actors
