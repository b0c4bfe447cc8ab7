// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Lists how a data set is split across N workers.
enum class shard_scheme : std::uint8_t {
  /// Every epoch, one seeded permutation of all samples is cut into N contiguous, near-equal slices
  /// (like PyTorch's DistributedSampler): disjoint within an epoch, together covering every sample.
  iid,
  /// Non-IID by label: worker w owns the k classes perm[(w·k + j) mod C], j < k, for a seeded class
  /// permutation perm; each class is split evenly among its owners. Requires N·k >= C (full coverage).
  by_label,
  /// Non-IID by Dirichlet(alpha): for each class, proportions q ~ Dir(alpha·1_N) split its samples
  /// across workers. Small alpha = strong skew, large alpha ≈ IID. Retried with fresh draws until every
  /// worker has at least min_samples_per_worker samples.
  dirichlet,
};

/// Parses "iid" | "by-label" | "dirichlet"; returns invalid_argument for anything else.
[[nodiscard]] expected<shard_scheme> parse_shard_scheme(std::string_view name);
/// Returns the name parse_shard_scheme accepts for `scheme`.
[[nodiscard]] std::string_view to_string(shard_scheme scheme) noexcept;

/// Configures a partition; every worker must use the same values (they compute the same partition).
struct shard_config {
  /// The splitting scheme.
  shard_scheme scheme = shard_scheme::iid;
  /// Classes per worker for by_label (k).
  int classes_per_worker = 2;
  /// Concentration for dirichlet.
  double alpha = 0.5;
  /// Smallest shard dirichlet accepts before drawing again (at most 100 attempts).
  std::size_t min_samples_per_worker = 1;
  /// Seeds the partition and every epoch's shuffle.
  std::uint64_t seed = 0;
};

/// Returns, for every worker, the sample indices it owns in `epoch`. For iid the slices are in the
/// epoch's shuffled order; for the non-IID schemes the sets do not depend on `epoch` and are sorted.
/// `labels` holds one class index >= 0 per sample (only its size matters for iid).
/// Returns invalid_argument for num_workers < 1, more workers than samples, a negative label,
/// k outside [1, C] or N·k < C (by_label), alpha <= 0 or an unsatisfiable minimum (dirichlet).
[[nodiscard]] expected<std::vector<std::vector<std::size_t>>> partition(std::span<const std::int32_t> labels,
                                                                        int num_workers, const shard_config& config,
                                                                        std::uint64_t epoch = 0);

/// Holds a sampler's position as plain integers, for checkpoints.
struct sampler_state {
  /// Current epoch (0-based).
  std::uint64_t epoch = 0;
  /// Samples of this epoch's shard already handed out.
  std::uint64_t position = 0;

  friend bool operator==(const sampler_state&, const sampler_state&) = default;
};

/// Yields one worker's mini-batches of sample indices, epoch after epoch, deterministically from
/// (labels, worker, N, config, batch size). Each epoch visits the worker's shard once in a seeded
/// order that differs per epoch and per worker. Batches never span epochs: the last batch of an epoch
/// is short unless drop_last. Value type; not thread-safe (one worker owns it).
class shard_sampler {
 public:
  /// Builds the sampler for `worker` of `num_workers`, positioned at epoch 0.
  /// Returns invalid_argument for a bad partition (see partition()), worker outside [0, N),
  /// batch_size 0, or an empty shard (or one smaller than a batch with drop_last).
  [[nodiscard]] static expected<shard_sampler> make(std::span<const std::int32_t> labels, int worker, int num_workers,
                                                    const shard_config& config, std::size_t batch_size,
                                                    bool drop_last = false);

  /// Returns the next batch (valid until the next call to next_batch or restore) and advances.
  [[nodiscard]] std::span<const std::size_t> next_batch();
  /// Returns the current position (epoch, samples consumed in it).
  [[nodiscard]] sampler_state state() const noexcept { return {epoch_, position_}; }
  /// Moves to `state` (as returned by state(), possibly by another instance with the same inputs).
  /// Returns invalid_argument when state.position exceeds the shard size.
  [[nodiscard]] expected<void> restore(sampler_state state);
  /// Returns the number of samples this worker sees per epoch.
  [[nodiscard]] std::size_t shard_size() const noexcept { return order_.size(); }
  /// Returns the number of batches per epoch.
  [[nodiscard]] std::size_t batches_per_epoch() const noexcept;
  /// Returns the current epoch's visiting order.
  [[nodiscard]] std::span<const std::size_t> epoch_order() const noexcept { return order_; }
  /// Returns the batch size.
  [[nodiscard]] std::size_t batch_size() const noexcept { return batch_size_; }

 private:
  shard_sampler() = default;
  void load_epoch(std::uint64_t epoch);

  std::size_t num_samples_ = 0;     // iid re-partitions all samples every epoch
  std::vector<std::size_t> owned_;  // non-IID: fixed, sorted indices this worker owns
  std::vector<std::size_t> order_;  // the current epoch's order
  shard_config config_;
  int worker_ = 0;
  int num_workers_ = 1;
  std::size_t batch_size_ = 1;
  bool drop_last_ = false;
  std::uint64_t epoch_ = 0;
  std::uint64_t position_ = 0;
};

}  // namespace prsgd::algorithms
