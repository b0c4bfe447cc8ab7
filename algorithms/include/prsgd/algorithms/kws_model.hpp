// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Builds `kws-cnn`, a small keyword-spotting CNN over the {1, frames, mels} log-mel map (98 x 40):
/// three blocks of conv3x3 (16, 32, 64 channels, pad 1, no bias) + batch norm + ReLU + maxpool 2
/// ({1,98,40} -> {16,49,20} -> {32,24,10} -> {64,12,5}), global average pool, fc(64 -> classes).
/// About 24k parameters; batch norm also normalises the raw log-mel scale, so inputs need no scaling.
/// Returns invalid_argument if the input is smaller than 8 x 8 or has no classes.
[[nodiscard]] expected<std::unique_ptr<model>> make_kws_cnn(const model_config& config);

/// Registers `kws-cnn` in `registry`; a name that is already taken is left alone.
/// The library also does this for model_registry::instance() when it is loaded.
void register_kws_models(model_registry& registry);

}  // namespace prsgd::algorithms
