// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Lists the element encodings a flat float model may use on the wire (always little-endian).
///
/// Rounding is to nearest, ties to even. Special values:
/// - NaN stays NaN (sign kept, payload quietened) in f16 and bf16; it never becomes Inf.
/// - ±Inf stays ±Inf.
/// - Overflow: finite floats whose magnitude rounds above the format's largest finite value
///   (f16: 65504, i.e. |x| >= 65520; bf16: ≈3.39e38) become ±Inf. Callers that must not send Inf
///   check all_finite() on the decoded model, or on the input with f16_max in mind.
/// - Underflow: f16 keeps subnormals down to 2^-24 (absolute error <= 2^-25 below 2^-14); smaller
///   magnitudes become ±0. bf16 has float's exponent range, so it only rounds the mantissa.
/// Error bounds for finite results: bf16 relative error <= 2^-8; f16 relative error <= 2^-11 for
/// 2^-14 <= |x| <= 65504.
enum class wire_dtype : std::uint8_t {
  /// IEEE binary32, 4 bytes per element (lossless).
  f32,
  /// IEEE binary16, 2 bytes per element.
  f16,
  /// bfloat16 (the top 16 bits of binary32, rounded), 2 bytes per element.
  bf16,
};

/// Holds the largest finite binary16 value.
inline constexpr float f16_max = 65504.0F;

/// Parses "f32" | "f16" | "bf16"; returns invalid_argument for anything else.
[[nodiscard]] expected<wire_dtype> parse_wire_dtype(std::string_view name);
/// Returns the name parse_wire_dtype accepts for `dtype`.
[[nodiscard]] std::string_view to_string(wire_dtype dtype) noexcept;
/// Returns the bytes per element of `dtype` (4 or 2).
[[nodiscard]] std::size_t element_size(wire_dtype dtype) noexcept;
/// Returns the encoded size in bytes of `count` elements.
[[nodiscard]] std::size_t encoded_size(wire_dtype dtype, std::size_t count) noexcept;

/// Returns `x` rounded to binary16 (bits).
[[nodiscard]] std::uint16_t float_to_f16(float x) noexcept;
/// Returns the float value of binary16 bits `h` (exact).
[[nodiscard]] float f16_to_float(std::uint16_t h) noexcept;
/// Returns `x` rounded to bfloat16 (bits).
[[nodiscard]] std::uint16_t float_to_bf16(float x) noexcept;
/// Returns the float value of bfloat16 bits `h` (exact).
[[nodiscard]] float bf16_to_float(std::uint16_t h) noexcept;

/// Encodes `in` as `dtype` into `out`. Returns invalid_argument when out.size() != encoded_size().
[[nodiscard]] expected<void> encode(std::span<const float> in, wire_dtype dtype, std::span<std::byte> out);
/// Returns `in` encoded as `dtype` in a new buffer.
[[nodiscard]] std::vector<std::byte> encode(std::span<const float> in, wire_dtype dtype);
/// Decodes `in` (as produced by encode) into `out`. Returns decode_failed when in.size() is not
/// encoded_size(dtype, out.size()).
[[nodiscard]] expected<void> decode(std::span<const std::byte> in, wire_dtype dtype, std::span<float> out);

}  // namespace prsgd::algorithms
