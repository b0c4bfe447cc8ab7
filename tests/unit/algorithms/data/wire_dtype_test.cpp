// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/wire_dtype.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace {

using prsgd::errc;
using namespace prsgd::algorithms;

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();

std::vector<float> log_uniform_values(float lo_exp, float hi_exp, std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> e(lo_exp, hi_exp);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = std::exp2(e(gen)) * (neg(gen) ? -1.0F : 1.0F);
  }
  return v;
}

TEST(CodecTest, Bf16RelativeErrorWithinTwoToMinusEight) {
  const auto v = log_uniform_values(-120.0F, 120.0F, 20000, 1);
  const auto bytes = encode(v, wire_dtype::bf16);
  ASSERT_EQ(bytes.size(), v.size() * 2);
  std::vector<float> back(v.size());
  ASSERT_TRUE(decode(bytes, wire_dtype::bf16, back).has_value());
  double worst = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(back[i]) - v[i]) / std::abs(static_cast<double>(v[i])));
  }
  EXPECT_LE(worst, std::ldexp(1.0, -8));
  EXPECT_GT(worst, std::ldexp(1.0, -10));  // it is lossy: the bound is not vacuous
}

TEST(CodecTest, F16RelativeErrorWithinTwoToMinusElevenInNormalRange) {
  auto v = log_uniform_values(-14.0F, 15.99F, 20000, 2);
  v.push_back(f16_max);
  v.push_back(-f16_max);
  v.push_back(std::ldexp(1.0F, -14));
  std::vector<float> back(v.size());
  ASSERT_TRUE(decode(encode(v, wire_dtype::f16), wire_dtype::f16, back).has_value());
  double worst = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    ASSERT_TRUE(std::isfinite(back[i])) << v[i];
    worst = std::max(worst, std::abs(static_cast<double>(back[i]) - v[i]) / std::abs(static_cast<double>(v[i])));
  }
  EXPECT_LE(worst, std::ldexp(1.0, -11));
  EXPECT_GT(worst, std::ldexp(1.0, -13));
}

TEST(CodecTest, F16SubnormalsHaveAbsoluteErrorBound) {
  const auto v = log_uniform_values(-26.0F, -14.0F, 5000, 3);
  std::vector<float> back(v.size());
  ASSERT_TRUE(decode(encode(v, wire_dtype::f16), wire_dtype::f16, back).has_value());
  for (std::size_t i = 0; i < v.size(); ++i) {
    ASSERT_LE(std::abs(static_cast<double>(back[i]) - v[i]), std::ldexp(1.0, -25)) << v[i];
  }
  EXPECT_EQ(f16_to_float(float_to_f16(std::ldexp(1.0F, -24))), std::ldexp(1.0F, -24));  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0F, -25)), 0);                                    // exact half rounds to even (0)
  EXPECT_EQ(float_to_f16(std::ldexp(1.5F, -25)), 1);                                    // above half rounds up
  EXPECT_EQ(float_to_f16(-std::ldexp(1.0F, -30)), 0x8000);                              // underflow keeps the sign
}

TEST(CodecTest, ExactlyRepresentableValuesRoundTrip) {
  for (float x : {0.0F, -0.0F, 1.0F, -2.5F, 0.15625F, 1024.0F, 65504.0F, 3.0F}) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f16_to_float(float_to_f16(x))), std::bit_cast<std::uint32_t>(x)) << x;
  }
  for (float x : {0.0F, -0.0F, 1.0F, -2.5F, 0.15625F, 1024.0F, 65280.0F, 3.0F, 0x1.fep127F}) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(bf16_to_float(float_to_bf16(x))), std::bit_cast<std::uint32_t>(x)) << x;
  }
  // Every one of the 65536 half bit patterns that is not NaN survives decode -> encode.
  for (std::uint32_t h = 0; h < 0x10000U; ++h) {
    const float f = f16_to_float(static_cast<std::uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_f16(f), h) << std::hex << h;
    }
  }
}

TEST(CodecTest, RoundsToNearestEven) {
  // 1 + 2^-11 is the midpoint between 1 and 1 + 2^-10 in f16: ties to even (1).
  EXPECT_EQ(f16_to_float(float_to_f16(1.0F + std::ldexp(1.0F, -11))), 1.0F);
  EXPECT_EQ(f16_to_float(float_to_f16(1.0F + 3 * std::ldexp(1.0F, -11))), 1.0F + std::ldexp(1.0F, -9));
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0F + std::ldexp(1.0F, -8))), 1.0F);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0F + 3 * std::ldexp(1.0F, -8))), 1.0F + std::ldexp(1.0F, -6));
}

TEST(CodecTest, InfNanAndOverflowAreDocumented) {
  for (auto dtype : {wire_dtype::f16, wire_dtype::bf16}) {
    std::vector<float> v{inf, -inf, nan, -nan, std::numeric_limits<float>::max()};
    std::vector<float> back(v.size());
    ASSERT_TRUE(decode(encode(v, dtype), dtype, back).has_value());
    EXPECT_EQ(back[0], inf) << to_string(dtype);
    EXPECT_EQ(back[1], -inf);
    EXPECT_TRUE(std::isnan(back[2]));
    EXPECT_TRUE(std::isnan(back[3]));
    EXPECT_TRUE(std::signbit(back[3]));
    EXPECT_EQ(back[4], inf);  // float max overflows both formats
  }
  // A NaN whose payload sits only in the low bits must not collapse to Inf.
  const float low_nan = std::bit_cast<float>(0x7f800001U);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(low_nan))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(low_nan))));
  // f16 overflow threshold: 65519 rounds to 65504, 65520 and beyond become Inf.
  EXPECT_EQ(f16_to_float(float_to_f16(65519.0F)), 65504.0F);
  EXPECT_EQ(f16_to_float(float_to_f16(65520.0F)), inf);
  EXPECT_EQ(f16_to_float(float_to_f16(-1e6F)), -inf);
}

TEST(CodecTest, F32IsLosslessAndLittleEndian) {
  const std::vector<float> v{1.0F, -3.5F, nan};
  const auto bytes = encode(v, wire_dtype::f32);
  ASSERT_EQ(bytes.size(), 12U);
  EXPECT_EQ(bytes[3], std::byte{0x3f});  // 1.0f = 0x3f800000, most significant byte last
  std::vector<float> back(3);
  ASSERT_TRUE(decode(bytes, wire_dtype::f32, back).has_value());
  EXPECT_EQ(back[0], 1.0F);
  EXPECT_EQ(back[1], -3.5F);
  EXPECT_TRUE(std::isnan(back[2]));
  const auto half = encode(std::vector<float>{1.0F}, wire_dtype::f16);
  EXPECT_EQ(half[0], std::byte{0x00});
  EXPECT_EQ(half[1], std::byte{0x3c});  // f16 1.0 = 0x3c00
}

TEST(CodecTest, SizeMismatchesAreErrors) {
  std::vector<float> v(4);
  std::vector<std::byte> small(7);
  auto e = encode(v, wire_dtype::f16, small);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, errc::invalid_argument);
  auto d = decode(small, wire_dtype::f16, v);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, errc::decode_failed);
  EXPECT_EQ(encoded_size(wire_dtype::bf16, 10), 20U);
  EXPECT_EQ(encoded_size(wire_dtype::f32, 10), 40U);
  auto p = parse_wire_dtype("fp8");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, errc::invalid_argument);
  EXPECT_EQ(*parse_wire_dtype("bf16"), wire_dtype::bf16);
}

}  // namespace

namespace {

std::vector<float> normal_values(std::size_t n, float sigma, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0F, sigma);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(gen);
  }
  return v;
}

constexpr wire_dtype all_dtypes[] = {wire_dtype::f32, wire_dtype::bf16, wire_dtype::f16, wire_dtype::int8};

TEST(CodecTest, Int8ErrorIsAtMostHalfAScaleAndScalesArePowersOfTwo) {
  // 1000 elements: three full blocks and a short one; the blocks have very different magnitudes.
  auto v = normal_values(1000, 1.0F, 3);
  for (std::size_t i = 256; i < 512; ++i) {
    v[i] *= 1e-6F;
  }
  for (std::size_t i = 512; i < 768; ++i) {
    v[i] *= 1e4F;
  }
  const auto bytes = encode(v, wire_dtype::int8);
  ASSERT_EQ(bytes.size(), 1000U + 4U * 4U);
  EXPECT_EQ(encoded_size(wire_dtype::int8, 256), 260U);
  EXPECT_EQ(encoded_size(wire_dtype::int8, 0), 0U);
  std::vector<float> back(v.size());
  ASSERT_TRUE(decode(bytes, wire_dtype::int8, back).has_value());
  for (std::size_t b = 0; b < 4; ++b) {
    float scale = 0;
    std::memcpy(&scale, bytes.data() + b * 260, 4);
    int e = 0;
    EXPECT_EQ(std::frexp(scale, &e), 0.5F) << "block " << b << " scale " << scale << " is a power of two";
    float m = 0;
    for (std::size_t i = b * 256; i < std::min<std::size_t>(1000, (b + 1) * 256); ++i) {
      m = std::max(m, std::abs(v[i]));
      EXPECT_LE(std::abs(back[i] - v[i]), scale / 2) << i;
    }
    EXPECT_LE(m, 127 * scale);
    EXPECT_GT(m, 63 * scale) << "the smallest such power of two";
  }
}

TEST(CodecTest, Int8NonFiniteBlockDecodesToNanAndZeroBlockToZero) {
  std::vector<float> v(512, 0.0F);
  v[300] = inf;
  std::vector<float> back(v.size(), 1.0F);
  ASSERT_TRUE(decode(encode(v, wire_dtype::int8), wire_dtype::int8, back).has_value());
  for (std::size_t i = 0; i < 256; ++i) {
    EXPECT_EQ(back[i], 0.0F);
  }
  for (std::size_t i = 256; i < 512; ++i) {
    EXPECT_TRUE(std::isnan(back[i])) << i;
  }
}

TEST(CodecTest, QuantizeIsWhatTheReceiverDecodesAndSendingItAgainIsLossless) {
  const auto v = normal_values(777, 0.01F, 4);
  for (const auto dtype : all_dtypes) {
    const auto q = quantize(v, dtype);
    std::vector<float> back(v.size());
    ASSERT_TRUE(decode(encode(v, dtype), dtype, back).has_value());
    EXPECT_EQ(std::memcmp(back.data(), q.data(), q.size() * 4), 0) << to_string(dtype);
    std::vector<float> again(v.size());
    ASSERT_TRUE(decode(encode(q, dtype), dtype, again).has_value());
    EXPECT_EQ(std::memcmp(again.data(), q.data(), q.size() * 4), 0) << to_string(dtype) << " is idempotent";
    EXPECT_EQ(*parse_wire_dtype(to_string(dtype)), dtype);
  }
}

// A plain, branchy binary16 conversion to check the library's select-based one against.
std::uint16_t f16_reference(float x) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((b >> 16U) & 0x8000U);
  const std::uint32_t abs = b & 0x7fffffffU;
  if (abs >= 0x7f800000U) {
    return static_cast<std::uint16_t>(sign | 0x7c00U | (abs > 0x7f800000U ? 0x0200U | ((abs >> 13U) & 0x3ffU) : 0U));
  }
  if (abs >= 0x477ff000U) {
    return static_cast<std::uint16_t>(sign | 0x7c00U);
  }
  if (abs < 0x38800000U) {
    if (abs < 0x33000000U) {
      return sign;
    }
    const std::uint32_t exp = abs >> 23U;
    const std::uint32_t mant = (abs & 0x7fffffU) | 0x800000U;
    const std::uint32_t shift = 126U - exp;
    const std::uint32_t half = 1U << (shift - 1U);
    const std::uint32_t rest = mant & ((1U << shift) - 1U);
    std::uint32_t out = mant >> shift;
    if (rest > half || (rest == half && (out & 1U) != 0U)) {
      ++out;
    }
    return static_cast<std::uint16_t>(sign | out);
  }
  const std::uint32_t rebased = abs - 0x38000000U;
  const std::uint32_t rounding = 0xfffU + ((rebased >> 13U) & 1U);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13U));
}

float f16_value_reference(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16U;
  const std::uint32_t exp = (h >> 10U) & 0x1fU;
  const std::uint32_t mant = h & 0x3ffU;
  if (exp == 0x1fU) {
    return std::bit_cast<float>(sign | 0x7f800000U | (mant << 13U));
  }
  if (exp == 0) {
    return (sign != 0 ? -1.0F : 1.0F) * static_cast<float>(mant) * 0x1.0p-24F;
  }
  return std::bit_cast<float>(sign | ((exp + 112U) << 23U) | (mant << 13U));
}

TEST(CodecTest, F16ConversionsMatchAPlainReference) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f16_to_float(bits)), std::bit_cast<std::uint32_t>(f16_value_reference(bits)))
        << std::hex << h;
  }
  std::mt19937 gen(11);
  std::vector<std::uint32_t> mantissas{0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x3000, 0x7fffff, 0x400000};
  for (int i = 0; i < 40; ++i) {
    mantissas.push_back(static_cast<std::uint32_t>(gen()) & 0x7fffffU);
  }
  for (std::uint32_t e = 0; e < 256; ++e) {
    for (const std::uint32_t m : mantissas) {
      for (const std::uint32_t s : {0U, 0x80000000U}) {
        const float x = std::bit_cast<float>(s | (e << 23U) | m);
        ASSERT_EQ(float_to_f16(x), f16_reference(x)) << std::hex << std::bit_cast<std::uint32_t>(x);
      }
    }
  }
  // Every float from 2^-26 to 2^-13 (the subnormal halves and the first normal binade) in steps of 7 ulps.
  for (std::uint32_t b = 0x32800000U; b < 0x39000000U; b += 7) {
    const float x = std::bit_cast<float>(b);
    ASSERT_EQ(float_to_f16(x), f16_reference(x)) << std::hex << b;
  }
  for (int i = 0; i < 1000000; ++i) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(gen()));
    ASSERT_EQ(float_to_f16(x), f16_reference(x)) << std::hex << std::bit_cast<std::uint32_t>(x);
  }
}

// The whole-vector loops (vectorised, with an AVX2 clone on x86-64) against the element converters: every
// 16-bit pattern decoded, random 32-bit patterns (NaNs, infinities, subnormals, ties) encoded at lengths around
// the loops' block sizes and into unaligned bytes, and quantize() against decode(encode()) bit for bit.
TEST(CodecTest, WholeVectorsMatchTheElementConverters) {
  std::vector<std::byte> halves(2 * 65536 + 1);
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    std::memcpy(halves.data() + 1 + 2 * h, &bits, 2);  // at an odd address
  }
  const std::span<const std::byte> all(halves.data() + 1, 2 * 65536);
  std::vector<float> out(65536);
  ASSERT_TRUE(decode(all, wire_dtype::bf16, out).has_value());
  for (std::uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(out[h]),
              std::bit_cast<std::uint32_t>(bf16_to_float(static_cast<std::uint16_t>(h))))
        << std::hex << h;
  }
  ASSERT_TRUE(decode(all, wire_dtype::f16, out).has_value());
  for (std::uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(out[h]),
              std::bit_cast<std::uint32_t>(f16_to_float(static_cast<std::uint16_t>(h))))
        << std::hex << h;
  }

  std::mt19937 gen(7);
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{255}, std::size_t{256}, std::size_t{257},
                              std::size_t{511}, std::size_t{512}, std::size_t{513}, std::size_t{5000}}) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) {
      // Raw bit patterns, ties of both formats (low bits exactly half), and tiny negatives (int8's −0).
      const std::uint32_t r = static_cast<std::uint32_t>(gen());
      switch (i % 4) {
        case 0: v[i] = std::bit_cast<float>(r); break;
        case 1: v[i] = std::bit_cast<float>((r & 0xffff0000U) | 0x8000U); break;
        case 2: v[i] = std::bit_cast<float>((r & 0xc7ffe000U) | 0x38001000U); break;
        default: v[i] = -std::ldexp(static_cast<float>(r % 1000), -20); break;
      }
    }
    std::vector<float> finite_v(v);
    for (auto& x : finite_v) {
      x = std::isfinite(x) ? x : 0.5F;
    }
    for (const auto dtype : {wire_dtype::bf16, wire_dtype::f16}) {
      std::vector<std::byte> bytes(2 * n + 1);
      ASSERT_TRUE(encode(v, dtype, std::span<std::byte>(bytes.data() + 1, 2 * n)).has_value());
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, bytes.data() + 1 + 2 * i, 2);
        ASSERT_EQ(h, dtype == wire_dtype::bf16 ? float_to_bf16(v[i]) : float_to_f16(v[i]))
            << to_string(dtype) << " n " << n << " i " << i << " bits " << std::hex
            << std::bit_cast<std::uint32_t>(v[i]);
      }
    }
    for (const auto dtype : {wire_dtype::bf16, wire_dtype::f16, wire_dtype::int8}) {
      for (const auto* input : {&v, &finite_v}) {
        const auto q = quantize(*input, dtype);
        std::vector<float> back(n);
        ASSERT_TRUE(decode(encode(*input, dtype), dtype, back).has_value());
        ASSERT_EQ(std::memcmp(back.data(), q.data(), 4 * n), 0) << to_string(dtype) << " n " << n;
      }
    }
  }
}

// Error feedback: after any number of rounds, everything sent adds up to everything fed in, up to the
// residual, and the residual is at most one rounding step of the last vector sent.
TEST(ErrorFeedbackTest, AccumulatedSentDeltasTrackTheTrueSumWithinOneQuantum) {
  for (const auto dtype : {wire_dtype::bf16, wire_dtype::f16, wire_dtype::int8}) {
    error_feedback ef;
    constexpr std::size_t n = 600;
    std::vector<double> fed(n, 0.0);
    std::vector<double> sent(n, 0.0);
    double plain_drift = 0;  // the same deltas quantized without error feedback, for contrast
    std::vector<double> plain(n, 0.0);
    for (std::uint32_t round = 0; round < 200; ++round) {
      // Small deltas with a steady drift in one direction: without feedback, bf16 rounding of a value
      // like 1e-3 + noise loses the same bits each round.
      auto d = normal_values(n, 1e-4F, 100 + round);
      for (auto& x : d) {
        x += 1e-3F;
      }
      const auto s = ef.compress(d, dtype);
      const auto p = quantize(d, dtype);
      float quantum = 0;
      for (std::size_t i = 0; i < n; ++i) {
        fed[i] += d[i];
        sent[i] += s[i];
        plain[i] += p[i];
        quantum = std::max(quantum, std::abs(s[i]));
      }
      // One rounding step of this vector: relative 2^-8 (bf16), 2^-11 (f16), max/127 per block (int8).
      const double step =
          dtype == wire_dtype::int8 ? quantum / 127.0 : quantum * (dtype == wire_dtype::bf16 ? 0x1p-8 : 0x1p-11);
      ASSERT_EQ(ef.residual().size(), n);
      for (std::size_t i = 0; i < n; ++i) {
        // sum(sent) + residual == sum(fed), up to float rounding of the running sums.
        EXPECT_NEAR(sent[i] + ef.residual()[i], fed[i], 1e-5 * (1 + std::abs(fed[i]))) << to_string(dtype);
        EXPECT_LE(std::abs(fed[i] - sent[i]), step + 1e-6) << to_string(dtype) << " round " << round << " i " << i;
      }
    }
    double feedback_drift = 0;
    for (std::size_t i = 0; i < n; ++i) {
      plain_drift = std::max(plain_drift, std::abs(fed[i] - plain[i]));
      feedback_drift = std::max(feedback_drift, std::abs(fed[i] - sent[i]));
    }
    EXPECT_GT(plain_drift, 2 * feedback_drift) << to_string(dtype) << ": without feedback the rounding adds up";
  }
}

// compress() is the documented recurrence, bit for bit: sent = quantize(v + residual), residual = v + residual − sent.
TEST(ErrorFeedbackTest, CompressIsTheRecurrenceBitForBit) {
  for (const auto dtype : {wire_dtype::bf16, wire_dtype::f16, wire_dtype::int8}) {
    error_feedback ef;
    std::vector<float> residual(1031, 0.0F);
    for (std::uint32_t round = 0; round < 5; ++round) {
      const auto v = normal_values(residual.size(), 1e-2F, 50 + round);
      std::vector<float> want(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) {
        want[i] = residual[i] + v[i];
      }
      const auto expected = quantize(want, dtype);
      for (std::size_t i = 0; i < v.size(); ++i) {
        residual[i] = want[i] - expected[i];
      }
      const auto sent = ef.compress(v, dtype);
      ASSERT_EQ(std::memcmp(sent.data(), expected.data(), 4 * v.size()), 0) << to_string(dtype) << " round " << round;
      ASSERT_EQ(std::memcmp(ef.residual().data(), residual.data(), 4 * v.size()), 0) << to_string(dtype);
    }
  }
}

TEST(ErrorFeedbackTest, F32PassesThroughAndNonFiniteResultsDoNotPoisonTheResidual) {
  error_feedback ef;
  const std::vector<float> v{1.0F, 2.5e-3F, -7.0F};
  EXPECT_EQ(ef.compress(v, wire_dtype::f32), v);
  EXPECT_TRUE(ef.residual().empty());
  (void)ef.compress(std::vector<float>{nan, 1e-3F, 1.0F}, wire_dtype::bf16);
  EXPECT_TRUE(ef.residual().empty()) << "a NaN round leaves no residual behind";
  const auto s = ef.compress(v, wire_dtype::bf16);
  EXPECT_TRUE(std::all_of(s.begin(), s.end(), [](float x) { return std::isfinite(x); }));
  (void)ef.compress(std::vector<float>{1.0F}, wire_dtype::bf16);
  EXPECT_EQ(ef.residual().size(), 1U) << "another length starts from zero";
}

}  // namespace
