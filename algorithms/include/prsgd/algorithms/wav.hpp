// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Describes the PCM format a WAV file must have; anything else is rejected, never converted.
struct wav_format {
  /// Samples per second.
  int sample_rate = 16000;
  /// Interleaved channels.
  int channels = 1;
  /// Bits per integer PCM sample: 8 (unsigned), 16, 24 or 32 (signed).
  int bits_per_sample = 16;
};

/// Decodes an in-memory RIFF/WAVE image of integer PCM in `required` format into samples in [-1, 1),
/// interleaved if multichannel. Returns decode_failed with `name` in the context for a non-RIFF or
/// non-WAVE image, a missing or short fmt/data chunk, truncation, a non-PCM encoding or any format
/// mismatch (sample rate, channel count, bit depth); invalid_argument for an unsupported `required`.
[[nodiscard]] expected<std::vector<float>> decode_wav(std::span<const std::uint8_t> bytes, std::string_view name,
                                                      const wav_format& required = {});

/// Reads and decodes `file` like decode_wav(); returns io_error naming the file if it cannot be read.
[[nodiscard]] expected<std::vector<float>> read_wav(const std::filesystem::path& file, const wav_format& required = {});

/// Encodes mono samples (clipped to [-1, 1]) as a canonical 44-byte-header 16-bit PCM WAV image.
[[nodiscard]] std::vector<std::uint8_t> encode_wav(std::span<const float> samples, int sample_rate);

/// Writes encode_wav(samples, sample_rate) to `file`; returns io_error naming the file on failure.
[[nodiscard]] expected<void> write_wav(const std::filesystem::path& file, std::span<const float> samples,
                                       int sample_rate);

}  // namespace prsgd::algorithms
