// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/named_entries.hpp"
#include "prsgd/algorithms/params.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/common/mutex.hpp"

namespace prsgd::algorithms {

/// Describes what a model factory must build for: the data's sample shape, classes and the init seed.
struct model_config {
  /// Per-sample input shape, e.g. {1, 28, 28} for Fashion-MNIST.
  shape3 input{1, 28, 28};
  /// Number of output classes.
  int num_classes = 10;
  /// Seed of the parameter initialisation; equal seeds give bit-identical models.
  std::uint64_t seed = 1;
};

/// Builds a model for a configuration, or returns why it cannot (e.g. invalid_argument for a bad shape).
using model_factory = std::function<expected<std::unique_ptr<model>>(const model_config&)>;

/// Maps model names to factories, so the CLI, plugins (dlopen) and jobs add models without touching
/// the core. The process-wide instance starts with the built-in models (see models.hpp).
/// Thread-safe: every member function takes an internal mutex; factories run outside it.
class model_registry {
 public:
  /// Creates an empty registry (tests); most code uses `instance()`.
  model_registry() = default;
  model_registry(const model_registry&) = delete;
  model_registry& operator=(const model_registry&) = delete;

  /// Returns the process-wide registry, created with the built-in models on first use.
  /// Defined in a .cpp, so a plugin shared library sees the same instance as the executable.
  [[nodiscard]] static model_registry& instance();

  /// Registers `factory` under `name`; returns already_exists if the name is taken, invalid_argument if empty.
  [[nodiscard]] expected<void> add(std::string name, std::string description, model_factory factory);
  /// Removes `name`; returns not_found if it was not registered.
  [[nodiscard]] expected<void> remove(std::string_view name);
  /// Builds the model registered as `name`; a name that is not registered but starts with `mlp:` or `cnn:` is
  /// built from its spec (model_spec.hpp). Returns not_found for an unknown name, invalid_argument for a bad
  /// spec or one that does not fit `config`, or the factory's error.
  [[nodiscard]] expected<std::unique_ptr<model>> make(std::string_view name, const model_config& config) const;
  /// Returns whether `name` is registered or is a well-formed `mlp:`/`cnn:` spec.
  [[nodiscard]] bool contains(std::string_view name) const;
  /// Returns the registered names, sorted.
  [[nodiscard]] std::vector<std::string> names() const;
  /// Returns the description given to `add`, or not_found.
  [[nodiscard]] expected<std::string> description(std::string_view name) const;

 private:
  detail::named_entries<model_factory> entries_{"model"};
};

}  // namespace prsgd::algorithms
