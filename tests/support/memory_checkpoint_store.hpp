// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "prsgd/actors/checkpoint_store.hpp"

namespace prsgd::actors {

/// Keeps checkpoints in memory, encoded exactly as file_checkpoint_store writes them (so reading back
/// goes through decode_checkpoint and its checks), for tests of the averager core and shell. Tests can
/// damage a stored checkpoint, make writes fail, and count writes.
/// Not thread-safe; used on one thread (or one actor's strand) at a time.
class memory_checkpoint_store final : public checkpoint_store {
 public:
  [[nodiscard]] expected<void> write(const checkpoint_state& s) override;
  [[nodiscard]] std::optional<checkpoint_state> read_newest() const override;
  [[nodiscard]] std::vector<round_t> list() const override;
  [[nodiscard]] expected<void> prune(std::size_t keep) override;
  [[nodiscard]] expected<incarnation_t> next_incarnation() override;

  /// Returns round `round`'s checkpoint if it is held and decodes.
  [[nodiscard]] std::optional<checkpoint_state> read(round_t round) const;
  /// Flips one payload byte of round `round`'s checkpoint (its CRC no longer matches). @pre it is held
  void corrupt(round_t round);
  /// Cuts round `round`'s checkpoint to its first `bytes` bytes. @pre it is held
  void truncate(round_t round, std::size_t bytes);
  /// Makes every later write fail with io_error (and leave the store unchanged) while `fail` is true.
  void fail_writes(bool fail) noexcept { fail_writes_ = fail; }
  /// Returns how many writes succeeded.
  [[nodiscard]] std::uint64_t writes() const noexcept { return writes_; }

 private:
  std::map<round_t, std::vector<unsigned char>> bytes_;
  incarnation_t incarnation_ = 0;
  bool fail_writes_ = false;
  std::uint64_t writes_ = 0;
};

}  // namespace prsgd::actors
