// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/actors/protocol.hpp"
#include "prsgd/common/expected.hpp"

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
};

/// Encodes `s` as checkpoint bytes: header {magic "PRSGDCKP", version, payload size, CRC32} + payload.
[[nodiscard]] std::vector<unsigned char> encode_checkpoint(const checkpoint_state& s);
/// Decodes checkpoint bytes. Returns decode_failed (bad magic, version, truncation, sizes) or
/// checksum_mismatch (payload CRC32 differs).
[[nodiscard]] expected<checkpoint_state> decode_checkpoint(const std::vector<unsigned char>& bytes);

/// Writes `bytes` to `path` atomically: temp file in the same directory, fsync, rename, fsync directory.
/// Returns io_error on any failure (the temp file is removed).
[[nodiscard]] expected<void> write_file_atomically(const std::filesystem::path& path,
                                                   const std::vector<unsigned char>& bytes);

}  // namespace prsgd::actors
