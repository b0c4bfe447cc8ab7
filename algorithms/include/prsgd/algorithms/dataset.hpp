// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prsgd::algorithms {

/// Holds a labelled data set in memory: one row-major float sample after another.
/// Value type; not thread-safe for writes, safe to share as `std::shared_ptr<const dataset>`.
struct dataset {
  /// Samples, `size() * sample_size()` floats; sample i starts at `i * sample_size()`.
  std::vector<float> features;
  /// One class index in [0, num_classes) per sample.
  std::vector<std::int32_t> labels;
  /// Shape of one sample as channels, height, width (an MLP sees it flattened).
  std::array<int, 3> shape{1, 1, 1};
  /// Number of classes.
  int num_classes = 0;
  /// Human-readable origin, e.g. the file it came from.
  std::string name;

  /// Returns the number of samples.
  [[nodiscard]] std::size_t size() const noexcept { return labels.size(); }
  /// Returns the number of floats in one sample.
  [[nodiscard]] std::size_t sample_size() const noexcept {
    return static_cast<std::size_t>(shape[0]) * static_cast<std::size_t>(shape[1]) * static_cast<std::size_t>(shape[2]);
  }
  /// Returns a pointer to sample i's first float. @pre i < size()
  [[nodiscard]] const float* sample(std::size_t i) const noexcept { return features.data() + i * sample_size(); }
};

}  // namespace prsgd::algorithms
