// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::actors {

/// Lossless compression of a payload frame (actors/PROTOCOL.md, "Compressed payloads"): the values'
/// bytes regrouped into planes (byte 0 of every value, then byte 1, ...), then one zstd frame (level 1).
/// The top plane of floats (sign and exponent) repeats a few values; the low planes are close to random
/// and pass through zstd's raw blocks.
///
/// Returns the compressed bytes for `bytes` (values of `width` bytes each: 4 for float32, 2 for bf16 and
/// f16, 1 for int8 blocks), or nothing when they would not be smaller than `bytes`. `width` must divide
/// the size of `bytes`.
[[nodiscard]] std::optional<std::vector<std::byte>> compress_payload(std::span<const std::byte> bytes,
                                                                     std::size_t width);

/// Restores exactly `out.size()` bytes from `packed` (what compress_payload returned for values of
/// `width` bytes). Fails with protocol_error when `packed` is not one zstd frame of exactly that size.
[[nodiscard]] expected<void> decompress_payload(std::span<const std::byte> packed, std::size_t width,
                                                std::span<std::byte> out);

}  // namespace prsgd::actors
