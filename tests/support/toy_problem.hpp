// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/model_registry.hpp"

namespace prsgd::test {

/// Returns `n` samples of two Gaussian blobs in 8 dimensions (means -1.5 and +1.5, unit variance),
/// labels alternating 0, 1: linearly separable, so a linear model reaches > 95% on a fresh draw.
[[nodiscard]] std::shared_ptr<const algorithms::dataset> blobs(std::size_t n, std::uint64_t seed);

/// Names the model register_test_linear_model registers.
inline constexpr const char* test_linear_model = "test-linear";

/// Returns the model configuration that fits blobs(): 8 inputs, 2 classes, seed 1.
[[nodiscard]] algorithms::model_config test_linear_config();

/// Registers "test-linear" (an 8 -> classes linear classifier) in the process-wide model registry,
/// once; later calls do nothing.
void register_test_linear_model();

}  // namespace prsgd::test
