// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Names the samples [begin, end) of the training set, handed out in pass (epoch) `epoch`.
struct sample_range {
  std::uint64_t epoch = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  [[nodiscard]] std::uint64_t size() const noexcept { return end - begin; }
  friend bool operator==(const sample_range&, const sample_range&) = default;
};

/// Holds one open epoch of a sample_pool as plain values, for checkpoints.
struct pool_epoch {
  std::uint64_t epoch = 0;
  /// Samples of this epoch consumed so far.
  std::uint64_t consumed = 0;
  /// [begin, end) ranges not handed out yet, in the order they will be.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> available;

  friend bool operator==(const pool_epoch&, const pool_epoch&) = default;
};

/// Holds a sample_pool's position as plain values, for checkpoints.
struct pool_state {
  /// The next epoch to open.
  std::uint64_t next_epoch = 0;
  /// Epochs every sample of which was consumed.
  std::uint64_t epochs_done = 0;
  /// Epochs opened and not done, ascending.
  std::vector<pool_epoch> open;

  friend bool operator==(const pool_state&, const pool_state&) = default;
};

/// Configures a sample_pool.
struct pool_config {
  /// Training samples (indices [0, samples)).
  std::uint64_t samples = 0;
  /// Samples per block: every epoch hands out the blocks [k·block, (k+1)·block) in a seeded order.
  std::uint64_t block = 256;
  /// Seeds every epoch's block order.
  std::uint64_t seed = 0;
  /// Epochs the pool opens at most (0 = no limit).
  std::uint64_t max_epochs = 0;
};

/// Hands out the training set's sample indices so that every sample is used once per epoch, whoever
/// trains it: the averager takes ranges for each member's round (`take`), and when the round closes
/// either consumes them (the member's submission entered x̄) or gives them back (lost, rejected, or the
/// member left), so that another member trains them later in the same epoch.
///
/// Every epoch starts as the data set's blocks in an order drawn from (seed, epoch). `take` draws from
/// the oldest epoch with samples left first; when it runs dry it opens the next epoch (up to
/// max_epochs), so a request that spans the end of an epoch gets the rest of that epoch and the start of
/// the next. Ranges given back go to the front of their epoch. An epoch is done once all its samples are
/// consumed. Value type, deterministic, no I/O; not thread-safe.
class sample_pool {
 public:
  /// Returns invalid_argument for zero samples or block.
  [[nodiscard]] static expected<sample_pool> make(const pool_config& config);
  /// Rebuilds a pool from `state` (as returned by save(), possibly before a restart); invalid_argument
  /// when it does not fit `config` (ranges outside the data set, counts above it).
  [[nodiscard]] static expected<sample_pool> restore(const pool_config& config, const pool_state& state);

  /// Takes up to `count` samples in at most `max_ranges` ranges (fewer when the epochs allowed run out).
  [[nodiscard]] std::vector<sample_range> take(std::uint64_t count, std::size_t max_ranges);
  /// Puts ranges taken earlier back at the front of their epochs (in the given order).
  void give_back(std::span<const sample_range> ranges);
  /// Marks ranges taken earlier as used; an epoch whose samples are all used is done.
  void consume(std::span<const sample_range> ranges);

  /// Returns the epochs whose samples were all consumed.
  [[nodiscard]] std::uint64_t epochs_done() const noexcept { return epochs_done_; }
  /// Returns the samples consumed over the pool's life divided by the data set's size (passes made).
  [[nodiscard]] double passes() const noexcept;
  /// Returns true when max_epochs epochs are done.
  [[nodiscard]] bool finished() const noexcept { return config_.max_epochs > 0 && epochs_done_ >= config_.max_epochs; }
  /// Returns samples still to consume before max_epochs are done (0 without a limit).
  [[nodiscard]] std::uint64_t remaining() const noexcept;
  /// Returns samples that take() can hand out right now without opening a new epoch.
  [[nodiscard]] std::uint64_t available() const noexcept;
  /// Returns the configuration.
  [[nodiscard]] const pool_config& config() const noexcept { return config_; }
  /// Returns the state; ranges taken and neither consumed nor given back are not in it (give them
  /// back to a copy first to keep them).
  [[nodiscard]] pool_state save() const;

 private:
  struct epoch_entry {
    std::uint64_t consumed = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> available;  // back() is handed out first
  };
  explicit sample_pool(pool_config config) : config_(config) {}
  bool open_next();

  pool_config config_;
  std::uint64_t next_epoch_ = 0;
  std::uint64_t epochs_done_ = 0;
  std::map<std::uint64_t, epoch_entry> open_;
};

/// Returns the sample indices of `ranges` in an order drawn from (seed, round, member): the order a
/// member visits the samples of one round in.
[[nodiscard]] std::vector<std::size_t> shuffled_indices(std::span<const std::pair<std::uint64_t, std::uint64_t>> ranges,
                                                        std::uint64_t seed, std::uint64_t round = 0,
                                                        std::uint64_t member = 0);

}  // namespace prsgd::algorithms
