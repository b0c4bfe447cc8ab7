// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::actors {

/// Lossless compression of a payload frame (actors/PROTOCOL.md, "Compressed slices"). Of little-endian
/// float values only the top byte (the sign and most of the exponent) is worth compressing: a slice has
/// few different exponents, while the bytes below are close to random. So the frame is one zstd frame
/// (level 1) of the top plane (byte width − 1 of every value), followed by the other planes raw (byte 0 of
/// every value, then byte 1, ...). Values one byte wide (int8 blocks) go through zstd whole.
///
/// Returns the compressed bytes for `bytes` (values of `width` bytes each: 4 for float32, 2 for bf16 and
/// f16, 1 for int8 blocks), or nothing when they would not be smaller than `bytes` or `width` is not 1, 2
/// or 4 or does not divide the size of `bytes`.
[[nodiscard]] std::optional<std::vector<std::byte>> compress_payload(std::span<const std::byte> bytes,
                                                                     std::size_t width);

/// Restores exactly `out.size()` bytes from `packed` (what compress_payload returned for values of
/// `width` bytes). Fails with protocol_error when `packed` is not a zstd frame of exactly the top plane's
/// size followed by exactly the other planes.
[[nodiscard]] expected<void> decompress_payload(std::span<const std::byte> packed, std::size_t width,
                                                std::span<std::byte> out);

}  // namespace prsgd::actors
