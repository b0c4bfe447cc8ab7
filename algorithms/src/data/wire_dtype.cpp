// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/wire_dtype.hpp"

#include "prsgd/algorithms/wire_change.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace prsgd::algorithms {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire is little-endian; add byte swaps for BE hosts");

std::uint32_t bits_of(float x) noexcept { return std::bit_cast<std::uint32_t>(x); }
float float_of(std::uint32_t b) noexcept { return std::bit_cast<float>(b); }

std::size_t int8_blocks(std::size_t count) noexcept { return (count + int8_block - 1) / int8_block; }

// The int8 scale of a block: the smallest power of two s with max|x| <= 127·s (NaN for a non-finite block,
// 0 for an all-zero one). Powers of two make x/s and q·s exact, which keeps encoding idempotent.
float int8_scale(std::span<const float> block) noexcept {
  float m = 0;
  for (const float x : block) {
    const float a = std::abs(x);
    if (!(a <= std::numeric_limits<float>::max())) {
      return std::numeric_limits<float>::quiet_NaN();  // NaN or Inf
    }
    m = std::max(m, a);
  }
  if (m == 0) {
    return 0;
  }
  int e = 0;
  const float f = std::frexp(m / 127.0F, &e);  // m/127 = f·2^e, f in [0.5, 1)
  if (f == 0.5F) {
    --e;  // exactly a power of two
  }
  return std::ldexp(1.0F, std::max(e, std::numeric_limits<float>::min_exponent - std::numeric_limits<float>::digits));
}

std::int8_t int8_of(float x, float scale) noexcept {
  if (scale == 0 || std::isnan(scale)) {
    return 0;
  }
  return static_cast<std::int8_t>(std::clamp(std::nearbyint(x / scale), -127.0F, 127.0F));
}

}  // namespace

expected<wire_dtype> parse_wire_dtype(std::string_view name) {
  if (name == "f32") {
    return wire_dtype::f32;
  }
  if (name == "f16") {
    return wire_dtype::f16;
  }
  if (name == "bf16") {
    return wire_dtype::bf16;
  }
  if (name == "int8") {
    return wire_dtype::int8;
  }
  return fail(errc::invalid_argument, "unknown wire dtype '" + std::string{name} + "' (f32 | bf16 | f16 | int8)");
}

std::string_view to_string(wire_dtype dtype) noexcept {
  switch (dtype) {
    case wire_dtype::f32: return "f32";
    case wire_dtype::f16: return "f16";
    case wire_dtype::bf16: return "bf16";
    case wire_dtype::int8: return "int8";
  }
  return "unknown";
}

std::size_t element_size(wire_dtype dtype) noexcept {
  switch (dtype) {
    case wire_dtype::f32: return 4;
    case wire_dtype::f16:
    case wire_dtype::bf16: return 2;
    case wire_dtype::int8: return 1;
  }
  return 4;
}

std::size_t encoded_size(wire_dtype dtype, std::size_t count) noexcept {
  return element_size(dtype) * count + (dtype == wire_dtype::int8 ? sizeof(float) * int8_blocks(count) : 0);
}

std::uint16_t float_to_bf16(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  if ((b & 0x7fffffffU) > 0x7f800000U) {
    // NaN: keep sign and the top payload bits, force the quiet bit so it cannot round to Inf.
    return static_cast<std::uint16_t>((b >> 16U) | 0x0040U);
  }
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is the correct result
  // (including overflow to Inf).
  const std::uint32_t rounding = 0x7fffU + ((b >> 16U) & 1U);
  return static_cast<std::uint16_t>((b + rounding) >> 16U);
}

float bf16_to_float(std::uint16_t h) noexcept { return float_of(static_cast<std::uint32_t>(h) << 16U); }

std::uint16_t float_to_f16(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16U) & 0x8000U);
  const std::uint32_t abs = b & 0x7fffffffU;
  if (abs >= 0x7f800000U) {
    // Inf -> Inf; NaN -> quiet NaN with the top payload bits.
    return static_cast<std::uint16_t>(sign | 0x7c00U | (abs > 0x7f800000U ? 0x0200U | ((abs >> 13U) & 0x3ffU) : 0U));
  }
  if (abs >= 0x477ff000U) {
    // |x| >= 65520 rounds past 65504 (the largest finite half): overflow to Inf.
    return static_cast<std::uint16_t>(sign | 0x7c00U);
  }
  if (abs < 0x38800000U) {
    // Below 2^-14: a half subnormal (or zero). Shift the full significand into place, rounding to even.
    if (abs < 0x33000000U) {
      return sign;  // below half of the smallest subnormal 2^-24 (exactly half rounds to even = 0)
    }
    const std::uint32_t exp = abs >> 23U;
    const std::uint32_t mant = (abs & 0x7fffffU) | 0x800000U;
    const std::uint32_t shift = 126U - exp;  // 14 + 23 - 10 - (exp - 127) - 1 ... in [14, 24]
    const std::uint32_t half = 1U << (shift - 1U);
    const std::uint32_t rest = mant & ((1U << shift) - 1U);
    std::uint32_t out = mant >> shift;
    if (rest > half || (rest == half && (out & 1U) != 0U)) {
      ++out;  // may carry into the smallest normal, which is the right encoding
    }
    return static_cast<std::uint16_t>(sign | out);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const std::uint32_t rebased = abs - 0x38000000U;  // subtract (127 - 15) << 23
  const std::uint32_t rounding = 0xfffU + ((rebased >> 13U) & 1U);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13U));
}

float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16U;
  const std::uint32_t exp = (h >> 10U) & 0x1fU;
  const std::uint32_t mant = h & 0x3ffU;
  if (exp == 0x1fU) {
    return float_of(sign | 0x7f800000U | (mant << 13U));
  }
  if (exp == 0) {
    // ±0 or subnormal: mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 0x1.0p-24F;
    return sign != 0 ? -v : v;
  }
  return float_of(sign | ((exp + 112U) << 23U) | (mant << 13U));
}

expected<void> encode(std::span<const float> in, wire_dtype dtype, std::span<std::byte> out) {
  if (out.size() != encoded_size(dtype, in.size())) {
    return fail(errc::invalid_argument, "encode: output has " + std::to_string(out.size()) + " bytes, need " +
                                            std::to_string(encoded_size(dtype, in.size())));
  }
  switch (dtype) {
    case wire_dtype::f32:
      if (!in.empty()) {
        std::memcpy(out.data(), in.data(), in.size_bytes());
      }
      break;
    case wire_dtype::f16:
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint16_t h = float_to_f16(in[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case wire_dtype::bf16:
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint16_t h = float_to_bf16(in[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case wire_dtype::int8: {
      std::byte* o = out.data();
      for (std::size_t b = 0; b < in.size(); b += int8_block) {
        const auto block = in.subspan(b, std::min(int8_block, in.size() - b));
        const float scale = int8_scale(block);
        std::memcpy(o, &scale, sizeof scale);
        o += sizeof scale;
        for (const float x : block) {
          *o++ = static_cast<std::byte>(int8_of(x, scale));
        }
      }
      break;
    }
  }
  return {};
}

std::vector<std::byte> encode(std::span<const float> in, wire_dtype dtype) {
  std::vector<std::byte> out(encoded_size(dtype, in.size()));
  auto r = encode(in, dtype, out);
  (void)r;  // sizes match by construction
  return out;
}

expected<void> decode(std::span<const std::byte> in, wire_dtype dtype, std::span<float> out) {
  if (in.size() != encoded_size(dtype, out.size())) {
    return fail(errc::decode_failed, "decode: " + std::string{to_string(dtype)} + " payload has " +
                                         std::to_string(in.size()) + " bytes, expected " +
                                         std::to_string(encoded_size(dtype, out.size())));
  }
  switch (dtype) {
    case wire_dtype::f32:
      if (!out.empty()) {
        std::memcpy(out.data(), in.data(), in.size());
      }
      break;
    case wire_dtype::f16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, in.data() + 2 * i, 2);
        out[i] = f16_to_float(h);
      }
      break;
    case wire_dtype::bf16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, in.data() + 2 * i, 2);
        out[i] = bf16_to_float(h);
      }
      break;
    case wire_dtype::int8: {
      const std::byte* p = in.data();
      for (std::size_t b = 0; b < out.size(); b += int8_block) {
        float scale = 0;
        std::memcpy(&scale, p, sizeof scale);
        p += sizeof scale;
        const std::size_t end = std::min(out.size(), b + int8_block);
        for (std::size_t i = b; i < end; ++i) {
          out[i] = static_cast<float>(static_cast<std::int8_t>(*p++)) * scale;
        }
      }
      break;
    }
  }
  return {};
}

std::vector<float> quantize(std::span<const float> in, wire_dtype dtype) {
  std::vector<float> out(in.begin(), in.end());
  switch (dtype) {
    case wire_dtype::f32: break;
    case wire_dtype::f16:
      for (auto& x : out) {
        x = f16_to_float(float_to_f16(x));
      }
      break;
    case wire_dtype::bf16:
      for (auto& x : out) {
        x = bf16_to_float(float_to_bf16(x));
      }
      break;
    case wire_dtype::int8:
      for (std::size_t b = 0; b < out.size(); b += int8_block) {
        const std::size_t end = std::min(out.size(), b + int8_block);
        const float scale = int8_scale(in.subspan(b, end - b));
        for (std::size_t i = b; i < end; ++i) {
          out[i] = static_cast<float>(int8_of(in[i], scale)) * scale;
        }
      }
      break;
  }
  return out;
}

std::vector<float> error_feedback::compress(std::span<const float> v, wire_dtype dtype) {
  if (!lossy(dtype)) {
    residual_.clear();
    return {v.begin(), v.end()};
  }
  if (residual_.size() != v.size()) {
    residual_.assign(v.size(), 0.0F);
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    residual_[i] += v[i];  // the vector to send: v + what earlier rounds dropped
  }
  auto sent = quantize(residual_, dtype);
  bool finite = true;
  for (std::size_t i = 0; i < v.size(); ++i) {
    residual_[i] -= sent[i];
    finite = finite && std::isfinite(sent[i]);
  }
  if (!finite) {
    residual_.clear();
  }
  return sent;
}

std::optional<std::vector<float>> settle_change(std::span<const float> prev, std::vector<float>& next, wire_dtype dtype,
                                                error_feedback& feedback) {
  std::vector<float> step(next.size());
  for (std::size_t i = 0; i < next.size(); ++i) {
    step[i] = next[i] - prev[i];
  }
  auto change = feedback.compress(step, dtype);
  if (!std::all_of(change.begin(), change.end(), [](float v) { return std::isfinite(v); })) {
    feedback.reset();
    return std::nullopt;
  }
  for (std::size_t i = 0; i < next.size(); ++i) {
    next[i] = prev[i] + change[i];
  }
  return change;
}

}  // namespace prsgd::algorithms
