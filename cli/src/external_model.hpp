// SPDX-License-Identifier: Apache-2.0
// Internal to the CLI: `prsgd averager --model external`, a model the averager does not build. The workers
// (PyTorch, through the prsgd Python package) own the network; the averager knows the flat vector's size,
// optionally its tensors' names and shapes (--model-spec), and optionally its initial value (--init-model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::cli {

/// The --model name of a model the averager does not build.
inline constexpr const char* external_model_name = "external";

/// Names one tensor of the flat vector and its shape (row-major, PyTorch's layout).
struct external_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
};

/// Holds what the averager knows of an external model.
struct external_model {
  /// Floats in the flat vector.
  std::size_t size = 0;
  /// The tensors in flat order (empty without --model-spec).
  std::vector<external_tensor> tensors;
  /// x̄_0 from --init-model (empty: the first member's).
  std::vector<float> initial;
};

/// Reads --model-spec and --init-model and checks them against --model-size and each other. Errors are one
/// line naming the file: a spec that is not a list of {name, shape} (or {tensors: [...]}) with unique names
/// and positive dimensions, a size that disagrees with --model-size, an init file that is not safetensors,
/// holds a tensor that is not F32, or (with a spec) lacks a spec tensor or has another shape.
[[nodiscard]] expected<external_model> load_external_model(const external_options& o);

/// Returns the model fingerprint of an external job, "external params=P" (what prsgd.fingerprints.external
/// builds in Python).
[[nodiscard]] std::string external_model_fingerprint(std::size_t size);

/// Returns the data fingerprint of an external job without a label hash, "external n=N".
[[nodiscard]] std::string external_data_fingerprint(std::uint64_t train_size);

/// Writes `params` as safetensors: one F32 tensor per spec tensor, or without a spec one tensor "flat" of
/// shape [P]. Returns invalid_argument when the sizes differ, or the writer's error.
[[nodiscard]] expected<void> write_external(const std::string& path, const external_model& model,
                                            std::span<const float> params, std::map<std::string, std::string> metadata);

}  // namespace prsgd::cli
