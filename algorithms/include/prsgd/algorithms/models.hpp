// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Builds `fmnist-mlp`: flatten, 784-512-256-classes with ReLU (inputs normalised by the data loader).
[[nodiscard]] expected<std::unique_ptr<model>> make_fmnist_mlp(const model_config& config);
/// Builds `fmnist-cnn`: conv(C->16, 5x5, pad 2) + ReLU + maxpool 2, conv(16->32, 5x5, pad 2) + ReLU +
/// maxpool 2, fc(32*(H/4)*(W/4) -> classes). @pre H and W divisible by 4 (28x28 gives fc 1568->10).
[[nodiscard]] expected<std::unique_ptr<model>> make_fmnist_cnn(const model_config& config);
/// Builds `fmnist-resnet`: a ResNet-20 for small images: conv3x3(16)+BN+ReLU, three stages of
/// `blocks_per_stage` basic blocks with 16/32/64 channels (stride 2 and a 1x1 conv+BN shortcut
/// entering stages 2 and 3), global average pool, fc(64 -> classes).
[[nodiscard]] expected<std::unique_ptr<model>> make_fmnist_resnet(const model_config& config, int blocks_per_stage = 3);
/// Registers fmnist-mlp, fmnist-cnn, fmnist-resnet (n = 3, ResNet-20) and fmnist-resnet8 (n = 1) in `registry`.
/// Names that are already taken are left alone.
void register_builtin_models(model_registry& registry);

}  // namespace prsgd::algorithms
