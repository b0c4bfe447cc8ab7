// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/common/expected.hpp"

/// Models written as a string instead of C++ (`--model mlp:64-128-10`, `--model cnn:c16k5p2-r-m2-f10`).
///
/// Grammar (no spaces; numbers are decimal, 1..65536):
///
///     spec  := "mlp:" IN ("-" H)* "-" OUT       flatten, Linear+ReLU between sizes, no ReLU after OUT
///            | "cnn:" layer ("-" layer)*        the last layer must be fOUT
///     layer := "c" N "k" K ["s" S] ["p" P]      K x K convolution to N channels, stride S (1), zero padding P (0)
///            | "r"                              ReLU
///            | "m" K                            K x K max pool with stride K
///            | "bn"                             batch norm over the channels
///            | "gap"                            global average pool
///            | "f" N                            fully connected to N outputs (flattens first)
///
/// IN must equal the data set's flattened sample size and OUT its class count; make_spec_model checks both,
/// and every intermediate shape, before it builds anything. `cnn:c16k5p2-r-m2-c32k5p2-r-m2-f10` is
/// fmnist-cnn's architecture.
namespace prsgd::algorithms {

/// Names one layer of a spec.
enum class spec_layer_kind : std::uint8_t { conv, relu, max_pool, batch_norm, global_avg_pool, linear };

/// Holds one parsed layer; fields that the kind does not use stay at their defaults.
struct spec_layer {
  spec_layer_kind kind = spec_layer_kind::relu;
  /// Output channels (conv) or features (linear).
  int out = 0;
  /// Kernel size (conv, max_pool).
  int kernel = 0;
  /// Stride (conv).
  int stride = 1;
  /// Zero padding on each side (conv).
  int padding = 0;

  friend bool operator==(const spec_layer&, const spec_layer&) = default;
};

/// Holds a parsed spec.
struct model_spec {
  /// The spec as written; the model's name.
  std::string name;
  /// The layers in order.
  std::vector<spec_layer> layers;
  /// IN of an `mlp:` spec; empty for `cnn:`.
  std::optional<int> input_size;
};

/// Returns whether `name` starts with "mlp:" or "cnn:" (so it is a spec, not a registry name).
[[nodiscard]] bool is_model_spec(std::string_view name) noexcept;

/// Parses a spec; returns invalid_argument naming the spec and the first bad token.
[[nodiscard]] expected<model_spec> parse_model_spec(std::string_view name);

/// Builds the model `spec` describes for `config`. Returns invalid_argument naming the spec when IN differs
/// from the sample size, OUT from the class count, or a layer does not fit its input (a kernel or pool
/// larger than the image, ...), or when the model would have more than 2^28 parameters.
[[nodiscard]] expected<std::unique_ptr<model>> make_spec_model(const model_spec& spec, const model_config& config);

}  // namespace prsgd::algorithms
