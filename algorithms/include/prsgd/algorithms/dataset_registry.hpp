// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/named_entries.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Says which parts of a data set a loader must return.
enum class dataset_parts : std::uint8_t {
  /// Sample shape and class count only (a check before any process starts); the train size where cheap.
  shape,
  /// The training split (a worker).
  train,
  /// The test split and the training split's size (the averager, which never trains).
  test_and_train_size,
};

/// Describes what a data set loader is asked for.
struct dataset_request {
  /// Directory holding the data set's files; empty means the loader's default location (it may refuse).
  std::filesystem::path dir;
  /// What to return.
  dataset_parts parts = dataset_parts::train;
  /// The job's seed, for loaders whose split or order is random (equal seeds must give equal data).
  std::uint64_t seed = 1;
  /// Loader-specific settings (`--data-option KEY=VALUE`); a loader refuses keys it does not know.
  std::map<std::string, std::string, std::less<>> options;
};

/// Holds what a loader returns. `shape` and `num_classes` are always set; `train` is set for
/// dataset_parts::train, `test` for dataset_parts::test_and_train_size.
struct loaded_dataset {
  /// Shape of one sample as channels, height, width.
  std::array<int, 3> shape{1, 1, 1};
  /// Number of classes; every label is in [0, num_classes).
  int num_classes = 0;
  /// Samples in the training split; 0 only for dataset_parts::shape when counting them is not cheap.
  std::size_t train_size = 0;
  /// The training split when asked for.
  std::optional<dataset> train;
  /// The test split when asked for.
  std::optional<dataset> test;
  /// The training split's labels, for dataset_parts::test_and_train_size (the averager hashes them into the
  /// data fingerprint). A loader that leaves it empty makes the registry load the training split for them.
  std::optional<std::vector<std::int32_t>> train_labels;
};

/// Loads a data set for a request, or returns why it cannot: a one-line error naming the file and the problem.
using dataset_loader = std::function<expected<loaded_dataset>(const dataset_request&)>;

/// Maps data set names (`--dataset`) to loaders, so built-in formats and plugins (dlopen) add data sets the
/// same way. The process-wide instance starts with the built-in ones (see datasets.hpp).
/// Thread-safe: every member function takes an internal mutex; loaders run outside it.
class dataset_registry {
 public:
  /// Creates an empty registry (tests); most code uses `instance()`.
  dataset_registry() = default;
  dataset_registry(const dataset_registry&) = delete;
  dataset_registry& operator=(const dataset_registry&) = delete;

  /// Returns the process-wide registry, created with the built-in data sets on first use.
  /// Defined in a .cpp, so a plugin shared library sees the same instance as the executable.
  [[nodiscard]] static dataset_registry& instance();

  /// Registers `loader` under `name`; returns already_exists if the name is taken, invalid_argument if empty.
  [[nodiscard]] expected<void> add(std::string name, std::string description, dataset_loader loader);
  /// Removes `name`; returns not_found if it was not registered.
  [[nodiscard]] expected<void> remove(std::string_view name);
  /// Runs the loader registered as `name` and checks what it returned against the request (the parts asked
  /// for are present, shapes agree with `shape`, feature counts match, every label is in range), so a faulty
  /// loader gives an error here instead of a crash in training. Returns not_found for an unknown name,
  /// the loader's error, or invalid_argument naming the data set and the inconsistency.
  [[nodiscard]] expected<loaded_dataset> load(std::string_view name, const dataset_request& request) const;
  /// Returns whether `name` is registered.
  [[nodiscard]] bool contains(std::string_view name) const;
  /// Returns the registered names, sorted.
  [[nodiscard]] std::vector<std::string> names() const;
  /// Returns the description given to `add`, or not_found.
  [[nodiscard]] expected<std::string> description(std::string_view name) const;

 private:
  detail::named_entries<dataset_loader> entries_{"data set"};
};

/// Returns invalid_argument naming `data_set` and the first key of `request.options` not in `known`.
/// Loaders call it first so that a misspelt `--data-option` is refused instead of ignored.
[[nodiscard]] expected<void> check_dataset_options(const dataset_request& request, std::string_view data_set,
                                                   std::initializer_list<std::string_view> known);

}  // namespace prsgd::algorithms
