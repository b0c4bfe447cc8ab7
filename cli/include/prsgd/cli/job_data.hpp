// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"

/// What a role loads before it starts: the data set named by --dataset/--model, and the job's length.
namespace prsgd::cli {

/// Says which parts of the data a role needs.
enum class data_need {
  /// The training set (workers).
  train,
  /// The training set's size and the test set (the averager evaluates x̄ and counts epochs).
  train_size_and_test,
  /// The sample shape and class count only (`prsgd local` checks the model against them before launching).
  shape,
};

/// Holds a role's data.
struct job_data {
  /// The data set's registry name, e.g. "fashion-mnist", "npy" or a plugin's.
  std::string name;
  /// Input shape and classes for the model registry (seeded with --seed).
  algorithms::model_config model;
  /// Null unless asked for.
  std::shared_ptr<const algorithms::dataset> train;
  std::shared_ptr<const algorithms::dataset> test;
  /// Training samples (0 for data_need::shape when the data set cannot count them cheaply).
  std::size_t train_size = 0;
  /// FNV-1a hash of the training labels in order (empty for data_need::shape).
  std::optional<std::uint64_t> label_hash;
};

/// Returns the data set --dataset names ("auto": kws for models whose name starts with "kws", else
/// fashion-mnist).
[[nodiscard]] std::string resolve_dataset(const model_options& o);

/// Returns the --data-option KEY=VALUE list as a map; invalid_argument for an entry without '=' or a key given
/// twice.
[[nodiscard]] expected<std::map<std::string, std::string, std::less<>>> parse_data_options(
    const std::vector<std::string>& options);

/// Loads what `need` asks for through `algorithms::dataset_registry::instance()` (built-in data sets and those
/// plugins registered), with --data-dir, --seed and --data-option. Fashion-MNIST comes from --data-dir or
/// Debian's location; the keyword set from --data-dir or data/kws (ops/make-kws-data). Errors are one line
/// naming the file or directory (and, for the built-in sets, how to get the data); an unknown name gives
/// invalid_argument with unknown_dataset_message().
[[nodiscard]] expected<job_data> load_job_data(const model_options& o, data_need need);

/// Returns `names` joined with ", " (a registry's names in an error message).
[[nodiscard]] std::string comma_list(const std::vector<std::string>& names);

/// Returns "unknown --dataset 'x' (registered: ...; a --plugin can add more)".
[[nodiscard]] std::string unknown_dataset_message(const std::string& name);

/// Builds --model for `data`'s sample shape and classes, and returns the registry's error (e.g. an mlp:
/// spec whose IN or OUT differs from the data) prefixed with the model and data set names. On success returns
/// the model's parameter count.
[[nodiscard]] expected<std::size_t> check_model_fits(const model_options& o, const job_data& data);

/// Returns the model fingerprint a JOIN declares and the averager compares: the model's name, input shape,
/// classes and parameter count, e.g. "fmnist-mlp in=1x28x28 out=10 params=203530". Errors as check_model_fits.
[[nodiscard]] expected<std::string> model_fingerprint(const model_options& o, const job_data& data);

/// Returns the data fingerprint a JOIN declares and the averager compares: the data set's name, training
/// samples, sample shape, classes and a hash of the training labels, e.g.
/// "fashion-mnist n=60000 shape=1x28x28 classes=10 labels=5d1b7e0c2a9f3e41".
[[nodiscard]] std::string data_fingerprint(const job_data& data);

/// Holds the job's length as the averager plans it.
struct job_length {
  /// Local steps per worker that make one pass over the training set: ceil(train / (N · batch)).
  std::uint64_t steps_per_epoch = 0;
  /// I (the mean I_i for per-worker intervals; 1 in minibatch mode; the paper's I for --interval-policy paper).
  std::uint64_t interval = 1;
  /// ceil(steps_per_epoch / I).
  std::uint64_t rounds_per_epoch = 0;
  /// --rounds, or epochs · rounds_per_epoch.
  std::uint64_t rounds = 0;
  /// T: local steps per worker over the job (the paper's rules).
  std::uint64_t total_steps = 0;
};

/// Plans the job: N = max(--min-workers, 1). Returns invalid_argument when it would have no rounds.
[[nodiscard]] expected<job_length> plan_job(const schedule_options& s, std::size_t batch, std::size_t train_size);

/// Returns the averaging rule --averaging names. `auto` is by-samples on IID shards (every local objective is
/// the same there, and step normalisation only adds noise when the intervals differ), and on --non-iid shards
/// nullopt: the averager then averages by samples while the intervals agree and step-normalised (FedNova)
/// once they differ.
[[nodiscard]] std::optional<algorithms::averaging_rule> averaging_rule_for(const schedule_options& s,
                                                                           const model_options& m);

}  // namespace prsgd::cli
