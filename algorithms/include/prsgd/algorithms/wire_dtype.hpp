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
///
/// int8 splits the vector into blocks of int8_block elements (the last one shorter). Each block is its
/// scale s (a float32 power of two, the smallest with max|x| <= 127·s) followed by one int8 q per element,
/// x ≈ q·s with q rounded to nearest, ties to even; the absolute error is at most s/2 <= max|x|/127 in
/// the block. A block holding NaN or Inf is sent with a NaN scale, so it decodes to NaN. Because the
/// scales are powers of two, encoding decoded values again gives the same bytes.
enum class wire_dtype : std::uint8_t {
  /// IEEE binary32, 4 bytes per element (lossless).
  f32,
  /// IEEE binary16, 2 bytes per element.
  f16,
  /// bfloat16 (the top 16 bits of binary32, rounded), 2 bytes per element.
  bf16,
  /// Signed 8-bit integers with one power-of-two float32 scale per block of int8_block elements.
  int8,
};

/// Holds the number of elements that share one int8 scale.
inline constexpr std::size_t int8_block = 256;

/// Holds the largest finite binary16 value.
inline constexpr float f16_max = 65504.0F;

/// Parses "f32" | "bf16" | "f16" | "int8"; returns invalid_argument for anything else.
[[nodiscard]] expected<wire_dtype> parse_wire_dtype(std::string_view name);
/// Returns the name parse_wire_dtype accepts for `dtype`.
[[nodiscard]] std::string_view to_string(wire_dtype dtype) noexcept;
/// Returns the bytes per element of `dtype` (4, 2, or 1 for int8, whose block scales come on top).
[[nodiscard]] std::size_t element_size(wire_dtype dtype) noexcept;
/// Returns true for the encodings that round (all but f32).
[[nodiscard]] constexpr bool lossy(wire_dtype dtype) noexcept { return dtype != wire_dtype::f32; }
/// Returns the encoded size in bytes of `count` elements (int8: with its block scales).
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
/// Returns what a receiver decodes when `in` is sent as `dtype`: decode(encode(in)), without the bytes.
/// Sending the result again is lossless: encode(quantize(x)) decodes to quantize(x) exactly.
[[nodiscard]] std::vector<float> quantize(std::span<const float> in, wire_dtype dtype);

/// Carries what a lossy encoding drops from one vector over to the next one (error feedback): each
/// compress() sends quantize(v + residual) and keeps v + residual − that as the new residual, so the sum
/// of everything sent trails the sum of the inputs by the residual alone, at most one rounding step of
/// the last vector. Used for the deltas a worker sends and for the averager's model updates.
/// Not thread-safe; one instance per stream of vectors.
class error_feedback {
 public:
  /// Returns quantize(v + residual, dtype) and keeps the rounding error as the residual. With f32 it
  /// returns v and the residual stays empty. A residual of another length (the first call, or a model of
  /// another size) starts from zero. A result that is not finite is returned as it is, but its error is
  /// not carried over (the residual is cleared), so one bad vector does not spoil the following ones.
  [[nodiscard]] std::vector<float> compress(std::span<const float> v, wire_dtype dtype);
  /// Forgets the residual.
  void reset() noexcept { residual_.clear(); }
  /// Returns the residual (empty before the first lossy compress and after reset).
  [[nodiscard]] std::span<const float> residual() const noexcept { return residual_; }

 private:
  std::vector<float> residual_;
};

}  // namespace prsgd::algorithms
