// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "prsgd/algorithms/params.hpp"
#include "prsgd/common/expected.hpp"

/// Reading `prsgd predict`'s input files into model inputs.
namespace prsgd::cli {

/// Holds the samples of one input file in the model's input layout: `count` samples of C x H x W floats.
struct input_samples {
  std::vector<float> values;
  std::size_t count = 0;
};

/// Reads `path` as model inputs of `shape` for data set `dataset`, by its extension:
///  - .png: one image, grayscale for 1-channel models, RGB for 3-channel ones, of exactly H x W pixels;
///  - .npy: uint8 pixels, or float32/float64 values taken as they are (already preprocessed), shaped
///    (C, H, W) or (H, W) for one sample, (N, C, H, W) or (N, H, W) for N (the 2-D forms for C = 1);
///  - .wav: for kws: 16 kHz mono 16-bit PCM, zero-padded or cut to 1 s, as log-mel features;
///  - anything else: an IDX file of unsigned-byte images (rank 3, N x H x W), gzip-compressed or not.
/// Pixels (PNG, IDX, uint8 NPY) are scaled to [0, 1] and, for fashion-mnist, normalised like the
/// training data. Returns invalid_argument (with the path) when the file does not fit the model's input,
/// decode_failed for a malformed file, io_error when it cannot be read.
[[nodiscard]] expected<input_samples> read_model_input(const std::string& path, const algorithms::shape3& shape,
                                                       const std::string& dataset);

/// Holds a parsed NPY array.
struct npy_array {
  /// Its dimensions.
  std::vector<std::size_t> shape;
  /// Its values in C order, converted to float.
  std::vector<float> values;
  /// True for uint8 data (values left in 0..255).
  bool pixels = false;
};

/// Parses NPY bytes (format 1.0-3.0, C order; float32, float64 or uint8). Returns decode_failed saying what
/// is wrong.
[[nodiscard]] expected<npy_array> parse_npy(const std::vector<unsigned char>& bytes);

}  // namespace prsgd::cli
