// SPDX-License-Identifier: Apache-2.0
// Layer fusions that network_builder (model.cpp) applies and conv2d.cpp implements. Private.
#pragma once

#include <memory>

#include "prsgd/algorithms/layers.hpp"

namespace prsgd::algorithms {

/// `conv` followed by relu + max_pool2d(kernel) as one layer with the same parameters, if `conv` is a
/// conv2d that runs them fused (its direct AVX-512 kernels, kernel 2, even output sides); null otherwise.
/// @pre `conv` is not bound yet (the result is a new, unbound layer).
[[nodiscard]] std::unique_ptr<layer> fuse_relu_max_pool(const layer& conv, int kernel);

}  // namespace prsgd::algorithms
