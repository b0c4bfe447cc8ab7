// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "prsgd/algorithms/wire_dtype.hpp"

namespace prsgd::algorithms {

/// Turns the step from `prev` to `next` into what a lossy wire dtype sends: the change next − prev, encoded
/// with `feedback`'s error feedback. Returns that change and sets `next` to prev + change, added in float32,
/// which is exactly what a receiver holding `prev` rebuilds. Returns nothing and leaves `next` as it is when
/// the change does not fit the dtype (f16 beyond ±65504); the residual is then forgotten. Both spans must
/// have the same length.
[[nodiscard]] std::optional<std::vector<float>> settle_change(std::span<const float> prev, std::vector<float>& next,
                                                              wire_dtype dtype, error_feedback& feedback);

}  // namespace prsgd::algorithms
