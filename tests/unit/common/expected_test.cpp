// SPDX-License-Identifier: Apache-2.0
#include "prsgd/common/expected.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "prsgd/common/check.hpp"
#include "prsgd/common/clock.hpp"
#include "prsgd/common/log.hpp"

namespace {

prsgd::expected<int> half(int x) {
  if (x % 2 != 0) {
    return prsgd::fail(prsgd::errc::invalid_argument, "odd");
  }
  return x / 2;
}

prsgd::expected<int> quarter(int x) {
  auto h = half(x);
  PRSGD_TRY(h);
  return half(*h);
}

TEST(ExpectedTest, HoldsValueOrError) {
  auto ok = half(4);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, 2);
  auto bad = half(3);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, prsgd::errc::invalid_argument);
  EXPECT_EQ(bad.error().message(), "invalid_argument: odd");
  EXPECT_EQ(bad.value_or(-1), -1);
}

TEST(ExpectedTest, TryPropagatesFirstError) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).error().code, prsgd::errc::invalid_argument);
  EXPECT_EQ(quarter(3).error().context, "odd");
}

TEST(ExpectedTest, VoidAndMoveOnly) {
  prsgd::expected<void> ok;
  EXPECT_TRUE(ok);
  prsgd::expected<void> bad = prsgd::fail(prsgd::errc::timeout);
  EXPECT_EQ(bad.error().code, prsgd::errc::timeout);
  prsgd::expected<std::unique_ptr<int>> p = std::make_unique<int>(7);
  auto owned = std::move(p).value();
  EXPECT_EQ(*owned, 7);
}

TEST(ClockTest, FakeClockMovesOnlyWhenAdvanced) {
  prsgd::fake_clock c;
  auto t0 = c.now();
  EXPECT_EQ(c.now(), t0);
  c.advance(std::chrono::milliseconds(5));
  EXPECT_EQ(c.now() - t0, std::chrono::milliseconds(5));
}

TEST(LogTest, ParsesLevels) {
  prsgd::log::level lvl{};
  EXPECT_TRUE(prsgd::log::parse_level("warn", lvl));
  EXPECT_EQ(lvl, prsgd::log::level::warn);
  EXPECT_FALSE(prsgd::log::parse_level("loud", lvl));
}

TEST(CheckDeathTest, AbortsWithContext) {
  EXPECT_DEATH({ PRSGD_CHECK(1 + 1 == 3) << "arithmetic"; }, "check failed: 1 \\+ 1 == 3 arithmetic");
}

}  // namespace
