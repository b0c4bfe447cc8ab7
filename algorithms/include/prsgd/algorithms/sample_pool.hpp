// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Names the positions [begin, end) of epoch `epoch`'s order of the training set (see epoch_permutation):
/// position p of epoch e is the sample epoch_permutation{seed, e, samples}(p).
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
  /// Positions per block: every epoch hands out the blocks [k·block, (k+1)·block) of its positions in a
  /// seeded order.
  std::uint64_t block = 256;
  /// Seeds every epoch's block order (and, through epoch_permutation, which sample a position names).
  std::uint64_t seed = 0;
  /// Epochs the pool opens at most (0 = no limit).
  std::uint64_t max_epochs = 0;
};

/// Hands out the training set's samples so that every sample is used once per epoch, whoever
/// trains it: the averager takes ranges for each member's round (`take`), and when the round closes
/// either consumes them (the member's submission entered x̄) or gives them back (lost, rejected, or the
/// member left), so that another member trains them later in the same epoch.
///
/// The pool deals in positions [0, samples) of each epoch's seeded permutation of the samples
/// (epoch_permutation), never in storage order, so a block of positions is a random subset of the data set
/// however the data set is sorted. Every epoch starts as its positions' blocks in an order drawn from (seed,
/// epoch). `take` draws from
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

/// Maps the positions of one epoch to the training samples: a bijection of [0, samples) drawn from (seed,
/// epoch) that needs no table. A balanced Feistel network of six rounds over [0, 4^h), 4^h the smallest
/// power of four >= samples, with cycle walking (apply it again until the value falls below samples).
/// actors/PROTOCOL.md specifies it bit for bit; the Python worker computes the same values.
class epoch_permutation {
 public:
  /// @pre samples > 0
  epoch_permutation(std::uint64_t seed, std::uint64_t epoch, std::uint64_t samples) noexcept;
  /// Returns the sample at `position`. @pre position < size()
  [[nodiscard]] std::uint64_t operator()(std::uint64_t position) const noexcept;
  /// Returns the number of samples permuted.
  [[nodiscard]] std::uint64_t size() const noexcept { return samples_; }

 private:
  [[nodiscard]] std::uint64_t feistel(std::uint64_t x) const noexcept;

  std::uint64_t samples_;
  unsigned half_ = 1;
  std::uint64_t mask_ = 1;
  std::array<std::uint64_t, 6> keys_{};
};

/// Returns `r` as the wire carries it (RESTART's `ranges`): positions counted over all epochs, so that
/// position p of epoch e is e × samples + p and the range implies its epoch.
[[nodiscard]] std::pair<std::uint64_t, std::uint64_t> global_positions(const sample_range& r,
                                                                       std::uint64_t samples) noexcept;

/// Returns the training samples at the global positions `ranges` (as global_positions() gives them) of a
/// data set of `samples`, in an order drawn from (seed, round, member): the samples a member trains in one
/// round, in the order it visits them. @pre samples > 0
[[nodiscard]] std::vector<std::size_t> shuffled_samples(std::span<const std::pair<std::uint64_t, std::uint64_t>> ranges,
                                                        std::uint64_t samples, std::uint64_t seed,
                                                        std::uint64_t round = 0, std::uint64_t member = 0);

}  // namespace prsgd::algorithms
