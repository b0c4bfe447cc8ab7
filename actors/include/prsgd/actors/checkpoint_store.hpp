// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include "prsgd/actors/checkpoint.hpp"
#include "prsgd/actors/protocol.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::actors {

/// Keeps an averager's checkpoints and its incarnation numbers. The averager shell writes the
/// checkpoints its core asks for (actions::checkpoints) and, at start, reads the newest valid one and
/// the next incarnation number to hand to the core. Implementations: file_checkpoint_store (a directory;
/// what `prsgd averager --checkpoint-dir` uses) and, in the tests, an in-memory store.
/// Not thread-safe; used on the averager's strand.
class checkpoint_store {
 public:
  virtual ~checkpoint_store() = default;
  checkpoint_store() = default;
  checkpoint_store(const checkpoint_store&) = delete;
  checkpoint_store& operator=(const checkpoint_store&) = delete;

  /// Writes `s` as the checkpoint of round `s.round`, replacing one of the same round. All or nothing:
  /// after a failure (or a crash during the write) the store holds what it held before.
  [[nodiscard]] virtual expected<void> write(const checkpoint_state& s) = 0;
  /// Returns the newest checkpoint that decodes and verifies; corrupt or truncated ones are logged and
  /// skipped in favour of the previous one. Empty when there is none.
  [[nodiscard]] virtual std::optional<checkpoint_state> read_newest() const = 0;
  /// Returns the rounds of the checkpoints held (valid or not), newest first.
  [[nodiscard]] virtual std::vector<round_t> list() const = 0;
  /// Deletes all but the newest `keep` checkpoints (`keep` >= 1). Returns io_error when one could not be
  /// deleted (the others still are).
  [[nodiscard]] virtual expected<void> prune(std::size_t keep) = 0;
  /// Returns the next averager incarnation, 1 + the highest ever recorded here or in a checkpoint, and
  /// records it, so two incarnations never share a number even if no checkpoint was written in between.
  [[nodiscard]] virtual expected<incarnation_t> next_incarnation() = 0;
};

/// Keeps checkpoints as files `ckpt-<round, 12 digits>.bin` in one directory (format: checkpoint.hpp),
/// written atomically (a temporary file with a unique name, created O_EXCL | O_NOFOLLOW with mode 0600,
/// fsync, rename, fsync of the directory), and the highest incarnation in the file `incarnation`. A store
/// made for writing holds an exclusive lock on the directory (flock on its file `lock`, which records the
/// holder's pid) until it is destroyed, so two averagers never share a directory. Blocking file I/O.
/// Not thread-safe.
class file_checkpoint_store final : public checkpoint_store {
 public:
  /// Uses `dir` for writing, creating it if missing, and locks it (what an averager does). Returns
  /// io_error when it cannot be created or locked, already_exists when another process holds the lock.
  [[nodiscard]] static expected<file_checkpoint_store> make(std::filesystem::path dir);
  /// Uses `dir`, which must exist, without locking it (for programs that only read checkpoints).
  /// Returns not_found when it is not a directory.
  [[nodiscard]] static expected<file_checkpoint_store> open(std::filesystem::path dir);

  file_checkpoint_store(file_checkpoint_store&& other) noexcept
      : dir_(std::move(other.dir_)), lock_fd_(std::exchange(other.lock_fd_, -1)) {}
  file_checkpoint_store& operator=(file_checkpoint_store&&) = delete;
  ~file_checkpoint_store() override;

  [[nodiscard]] expected<void> write(const checkpoint_state& s) override;
  [[nodiscard]] std::optional<checkpoint_state> read_newest() const override;
  [[nodiscard]] std::vector<round_t> list() const override;
  [[nodiscard]] expected<void> prune(std::size_t keep) override;
  [[nodiscard]] expected<incarnation_t> next_incarnation() override;

  /// Returns the checkpoint files present, newest first.
  [[nodiscard]] std::vector<std::filesystem::path> files() const;
  /// Returns the file that holds round `round`'s checkpoint (whether or not it exists).
  [[nodiscard]] std::filesystem::path path_of(round_t round) const;
  /// Moves every checkpoint into a new subdirectory `replaced-<n>` (the lowest n not yet used), so that a
  /// new job can start in the directory without destroying the old job's models. Returns that
  /// subdirectory (empty when there was nothing to move), or io_error.
  [[nodiscard]] expected<std::filesystem::path> set_aside();

 private:
  file_checkpoint_store(std::filesystem::path dir, int lock_fd) : dir_(std::move(dir)), lock_fd_(lock_fd) {}
  std::filesystem::path dir_;
  int lock_fd_ = -1;  // held open (and flocked) by a store made for writing
};

}  // namespace prsgd::actors
