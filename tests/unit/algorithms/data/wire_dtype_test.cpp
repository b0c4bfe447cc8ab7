// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/wire_dtype.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
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
