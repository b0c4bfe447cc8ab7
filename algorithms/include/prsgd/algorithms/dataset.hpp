// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace prsgd::algorithms {

/// Holds samples stored one byte per value, as a data set keeps them on disk (Fashion-MNIST's grey levels),
/// and the table that turns each byte into the float a model sees. The bytes are usually a read-only memory
/// mapping of a cache file that every process of a host shares through the page cache.
/// Immutable once made; safe to share between threads.
struct byte_samples {
  /// Keeps `data` valid (the mapping, or a buffer).
  std::shared_ptr<const void> owner;
  /// `size() * sample_size()` bytes of the owning data set; sample i starts at `i * sample_size()`.
  const std::uint8_t* data = nullptr;
  /// The float value of byte b is `values[b]`.
  std::array<float, 256> values{};
};

/// Holds a labelled data set: one row-major sample after another, as floats in memory or as bytes
/// (`bytes`) that are turned into floats a batch at a time.
/// Value type; not thread-safe for writes, safe to share as `std::shared_ptr<const dataset>`.
struct dataset {
  /// Samples, `size() * sample_size()` floats; sample i starts at `i * sample_size()`. Empty when `bytes`
  /// holds the samples.
  std::vector<float> features;
  /// The samples as bytes (null: they are in `features`).
  std::shared_ptr<const byte_samples> bytes;
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
  /// Returns a pointer to sample i's first float. @pre i < size() and the samples are floats (`bytes` null)
  [[nodiscard]] const float* sample(std::size_t i) const noexcept { return features.data() + i * sample_size(); }
  /// Writes sample i's `sample_size()` floats to `out`, from either storage. @pre i < size()
  void copy_sample(std::size_t i, float* out) const noexcept {
    const std::size_t n = sample_size();
    if (bytes) {
      const std::uint8_t* in = bytes->data + i * n;
      for (std::size_t k = 0; k < n; ++k) {
        out[k] = bytes->values[in[k]];
      }
    } else {
      std::copy_n(features.data() + i * n, n, out);
    }
  }
};

}  // namespace prsgd::algorithms
