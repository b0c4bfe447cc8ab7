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

inline std::uint16_t bf16_bits(float x) noexcept {
  const std::uint32_t b = bits_of(x);
  // NaN keeps its sign and top payload bits, with the quiet bit forced so it cannot round to Inf. Everything
  // else rounds to nearest even on the 16 dropped bits; a carry into the exponent is the correct result
  // (including overflow to Inf). Written as a select of two values, compared as signed (|x|'s bits fit), so
  // the loops over it vectorise.
  const bool nan = static_cast<std::int32_t>(b & 0x7fffffffU) > 0x7f800000;
  const std::uint32_t rounded = (b + 0x7fffU + ((b >> 16U) & 1U)) >> 16U;
  return static_cast<std::uint16_t>(nan ? (b >> 16U) | 0x0040U : rounded);
}

inline float bf16_value(std::uint16_t h) noexcept { return float_of(static_cast<std::uint32_t>(h) << 16U); }

inline std::uint16_t f16_bits(float x) noexcept {
  // Every case is computed and one is selected, so the loops over it vectorise.
  const std::uint32_t b = bits_of(x);
  const std::uint32_t sign = (b >> 16U) & 0x8000U;
  const std::uint32_t abs = b & 0x7fffffffU;
  // Inf -> Inf; NaN -> quiet NaN with the top payload bits; |x| >= 65520 rounds past 65504 (the largest
  // finite half): overflow to Inf.
  const std::uint32_t nan = 0x7e00U | ((abs >> 13U) & 0x3ffU);
  // Below 2^-14, a half subnormal (or zero): adding 0.5 puts |x|'s bits at 2^-24 steps in the low mantissa
  // bits, and the float addition rounds to nearest even (below 2^-25 to zero, exactly 2^-25 to even = 0).
  const std::uint32_t subnormal = bits_of(float_of(abs) + 0.5F) - 0x3f000000U;
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even; a carry into the
  // exponent is the right encoding.
  const std::uint32_t rebased = abs - 0x38000000U;  // subtract (127 - 15) << 23
  const std::uint32_t normal = (rebased + 0xfffU + ((rebased >> 13U) & 1U)) >> 13U;
  const auto big = static_cast<std::int32_t>(abs) >= 0x477ff000;
  const auto not_a_number = static_cast<std::int32_t>(abs) > 0x7f800000;
  const auto tiny = static_cast<std::int32_t>(abs) < 0x38800000;
  const std::uint32_t magnitude = not_a_number ? nan : big ? 0x7c00U : tiny ? subnormal : normal;
  return static_cast<std::uint16_t>(sign | magnitude);
}

inline float f16_value(std::uint16_t h) noexcept {
  // As in f16_bits, every case is computed and one selected.
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16U;
  const std::uint32_t exp = (h >> 10U) & 0x1fU;
  const std::uint32_t mant = h & 0x3ffU;
  const std::uint32_t special = sign | 0x7f800000U | (mant << 13U);                       // Inf or NaN
  const std::uint32_t subnormal = sign | bits_of(static_cast<float>(mant) * 0x1.0p-24F);  // ±0 or mant·2^-24, exact
  const std::uint32_t normal = sign | ((exp + 112U) << 23U) | (mant << 13U);
  return float_of(exp == 0x1fU ? special : exp == 0 ? subnormal : normal);
}

std::size_t int8_blocks(std::size_t count) noexcept { return (count + int8_block - 1) / int8_block; }

// The int8 scale of a block: the smallest power of two s with max|x| <= 127·s (NaN for a non-finite block,
// 0 for an all-zero one). Powers of two make x/s and q·s exact, which keeps encoding idempotent. The largest
// |x| is found on the bits (for non-negative floats their order is the integers'), so the loop vectorises.
inline float int8_scale(const float* block, std::size_t n) noexcept {
  std::uint32_t top = 0;
  for (std::size_t i = 0; i < n; ++i) {
    top = std::max(top, bits_of(block[i]) & 0x7fffffffU);
  }
  if (top >= 0x7f800000U) {
    return std::numeric_limits<float>::quiet_NaN();  // NaN or Inf
  }
  const float m = float_of(top);
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

// q for x in a block of scale `scale`, which is neither 0 nor NaN.
// Adding +0 turns a −0 (from a small negative x) into the +0 that the int8 0 decodes to.
inline float int8_level(float x, float scale) noexcept {
  return std::clamp(std::nearbyint(x / scale), -127.0F, 127.0F) + 0.0F;
}

// Whether a float is finite, on its bits (vectorises, unlike std::isfinite).
inline bool finite_bits(float x) noexcept { return (bits_of(x) & 0x7f800000U) != 0x7f800000U; }

// The loops over whole vectors. On x86-64 they also get an AVX2 clone picked at load time; both paths do the
// same integer and float operations per element, so they give the same bits. Not under ThreadSanitizer: the
// clones' resolvers are IFUNCs that run before the TSan runtime starts (as in aggregation/kernels.hpp).
#if defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
#define PRSGD_WIRE_VECTORS
#else
#define PRSGD_WIRE_VECTORS __attribute__((target_clones("avx2", "default")))
#endif

// Two-byte elements pass through an aligned block of this many on their way to or from the wire's bytes,
// which need not be aligned for std::uint16_t.
constexpr std::size_t stage_elements = 512;

PRSGD_WIRE_VECTORS void encode_halves(const float* in, std::byte* out, std::size_t n, bool bf16) noexcept {
  alignas(64) std::uint16_t stage[stage_elements];
  for (std::size_t b = 0; b < n; b += stage_elements) {
    const std::size_t m = std::min(stage_elements, n - b);
    if (bf16) {
      for (std::size_t i = 0; i < m; ++i) {
        stage[i] = bf16_bits(in[b + i]);
      }
    } else {
      for (std::size_t i = 0; i < m; ++i) {
        stage[i] = f16_bits(in[b + i]);
      }
    }
    std::memcpy(out + 2 * b, stage, 2 * m);
  }
}

PRSGD_WIRE_VECTORS void decode_halves(const std::byte* in, float* out, std::size_t n, bool bf16) noexcept {
  alignas(64) std::uint16_t stage[stage_elements];
  for (std::size_t b = 0; b < n; b += stage_elements) {
    const std::size_t m = std::min(stage_elements, n - b);
    std::memcpy(stage, in + 2 * b, 2 * m);
    if (bf16) {
      for (std::size_t i = 0; i < m; ++i) {
        out[b + i] = bf16_value(stage[i]);
      }
    } else {
      for (std::size_t i = 0; i < m; ++i) {
        out[b + i] = f16_value(stage[i]);
      }
    }
  }
}

PRSGD_WIRE_VECTORS void encode_int8(const float* in, std::byte* out, std::size_t n) noexcept {
  for (std::size_t b = 0; b < n; b += int8_block) {
    const std::size_t m = std::min(int8_block, n - b);
    const float scale = int8_scale(in + b, m);
    std::memcpy(out, &scale, sizeof scale);
    out += sizeof scale;
    if (scale == 0 || std::isnan(scale)) {
      std::memset(out, 0, m);
    } else {
      for (std::size_t i = 0; i < m; ++i) {
        out[i] = static_cast<std::byte>(static_cast<std::int8_t>(int8_level(in[b + i], scale)));
      }
    }
    out += m;
  }
}

// x = what a receiver decodes when x is sent as `dtype` (lossy), in place. Returns false when a result is not
// finite.
PRSGD_WIRE_VECTORS bool round_trip(float* x, std::size_t n, wire_dtype dtype) noexcept {
  std::uint32_t bad = 0;
  switch (dtype) {
    case wire_dtype::f32: break;
    case wire_dtype::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = bf16_value(bf16_bits(x[i]));
        bad |= static_cast<std::uint32_t>(!finite_bits(x[i]));
      }
      break;
    case wire_dtype::f16:
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = f16_value(f16_bits(x[i]));
        bad |= static_cast<std::uint32_t>(!finite_bits(x[i]));
      }
      break;
    case wire_dtype::int8:
      for (std::size_t b = 0; b < n; b += int8_block) {
        const std::size_t m = std::min(int8_block, n - b);
        float* block = x + b;
        const float scale = int8_scale(block, m);
        if (scale == 0 || std::isnan(scale)) {
          // All zero, or not finite: sent as a NaN scale, received as NaN (0·NaN included).
          const float v = scale == 0 ? 0.0F : std::numeric_limits<float>::quiet_NaN();
          std::fill(block, block + m, v);
          bad |= static_cast<std::uint32_t>(scale != 0);
        } else {
          for (std::size_t i = 0; i < m; ++i) {
            block[i] = int8_level(block[i], scale) * scale;
          }
        }
      }
      break;
  }
  return bad == 0;
}

// Error feedback for bf16 and f16, one pass: residual += v, sent = round_trip(residual), residual -= sent.
// Returns false when something sent is not finite.
PRSGD_WIRE_VECTORS bool feedback_halves(const float* v, float* residual, float* sent, std::size_t n,
                                        bool bf16) noexcept {
  std::uint32_t bad = 0;
  if (bf16) {
    for (std::size_t i = 0; i < n; ++i) {
      const float want = residual[i] + v[i];
      const float s = bf16_value(bf16_bits(want));
      sent[i] = s;
      residual[i] = want - s;
      bad |= static_cast<std::uint32_t>(!finite_bits(s));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const float want = residual[i] + v[i];
      const float s = f16_value(f16_bits(want));
      sent[i] = s;
      residual[i] = want - s;
      bad |= static_cast<std::uint32_t>(!finite_bits(s));
    }
  }
  return bad == 0;
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

std::uint16_t float_to_bf16(float x) noexcept { return bf16_bits(x); }

float bf16_to_float(std::uint16_t h) noexcept { return bf16_value(h); }

std::uint16_t float_to_f16(float x) noexcept { return f16_bits(x); }

float f16_to_float(std::uint16_t h) noexcept { return f16_value(h); }

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
    case wire_dtype::bf16: encode_halves(in.data(), out.data(), in.size(), dtype == wire_dtype::bf16); break;
    case wire_dtype::int8: encode_int8(in.data(), out.data(), in.size()); break;
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
    case wire_dtype::bf16: decode_halves(in.data(), out.data(), out.size(), dtype == wire_dtype::bf16); break;
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
  (void)round_trip(out.data(), out.size(), dtype);
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
  std::vector<float> sent(v.size());
  bool finite = false;
  if (dtype == wire_dtype::int8) {
    // A block's scale depends on the whole block of v + residual, so this takes three passes.
    for (std::size_t i = 0; i < v.size(); ++i) {
      residual_[i] += v[i];  // the vector to send: v + what earlier rounds dropped
    }
    std::copy(residual_.begin(), residual_.end(), sent.begin());
    finite = round_trip(sent.data(), sent.size(), dtype);
    for (std::size_t i = 0; i < v.size(); ++i) {
      residual_[i] -= sent[i];
    }
  } else {
    finite = feedback_halves(v.data(), residual_.data(), sent.data(), v.size(), dtype == wire_dtype::bf16);
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
  std::uint32_t bad = 0;
  for (const float v : change) {
    bad |= static_cast<std::uint32_t>(!finite_bits(v));
  }
  if (bad != 0) {
    feedback.reset();
    return std::nullopt;
  }
  for (std::size_t i = 0; i < next.size(); ++i) {
    next[i] = prev[i] + change[i];
  }
  return change;
}

}  // namespace prsgd::algorithms
