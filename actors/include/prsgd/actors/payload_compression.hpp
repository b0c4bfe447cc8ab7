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
/// every value, then byte 1, ...). Payloads of one-byte values (int8 blocks) are not compressed: with no raw
/// planes beside it, a tiny zstd frame could stand for a huge payload, and a receiver would have to allocate
/// it before finding out. With width 2 or 4 the raw planes bound what a frame can claim to twice its size.
///
/// Returns the compressed bytes for `bytes` (values of `width` bytes each: 4 for float32, 2 for bf16 and
/// f16), or nothing when they would not be smaller than `bytes` or `width` is not 2 or 4 or does not divide
/// the size of `bytes`.
[[nodiscard]] std::optional<std::vector<std::byte>> compress_payload(std::span<const std::byte> bytes,
                                                                     std::size_t width);

/// Restores the `size` bytes that `packed` (what compress_payload returned for values of `width` bytes)
/// stands for. Fails with protocol_error, before allocating anything, when `packed` is not a zstd frame that
/// states the top plane's size followed by exactly the other planes, and when the frame does not decompress
/// to that size.
[[nodiscard]] expected<std::vector<std::byte>> decompress_payload(std::span<const std::byte> packed, std::size_t width,
                                                                  std::size_t size);

}  // namespace prsgd::actors
