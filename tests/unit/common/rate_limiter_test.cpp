// SPDX-License-Identifier: Apache-2.0
#include "prsgd/common/rate_limiter.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace prsgd {
namespace {

using namespace std::chrono_literals;

TEST(RateLimiterTest, LetsTheBurstThroughThenHoldsBackAndReportsTheCountOnce) {
  fake_clock clock;
  rate_limiter limiter{10s, 3};
  int passed = 0;
  for (int i = 0; i < 50'000; ++i) {
    passed += limiter.allow(clock.now()) ? 1 : 0;
  }
  EXPECT_EQ(passed, 3);
  EXPECT_EQ(limiter.suffix(), "");  // nothing of an earlier window to report yet
  EXPECT_EQ(limiter.suppressed(), 49'997U);

  clock.advance(10s);
  ASSERT_TRUE(limiter.allow(clock.now()));
  EXPECT_EQ(limiter.suffix(), " (and 49,997 more like it in the last 10 s)");
  EXPECT_EQ(limiter.suffix(), "");  // reported once
  EXPECT_TRUE(limiter.allow(clock.now()));
  EXPECT_EQ(limiter.suffix(), "");
}

TEST(RateLimiterTest, AQuietFamilyIsNeverHeldBack) {
  fake_clock clock;
  rate_limiter limiter{10s, 2};
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(limiter.allow(clock.now()));
    EXPECT_EQ(limiter.suffix(), "");
    clock.advance(6s);  // two lines per 10 s at most
  }
  EXPECT_EQ(limiter.suppressed(), 0U);
}

TEST(RateLimiterTest, GroupsThousands) {
  EXPECT_EQ(group_thousands(0), "0");
  EXPECT_EQ(group_thousands(999), "999");
  EXPECT_EQ(group_thousands(1000), "1,000");
  EXPECT_EQ(group_thousands(49812), "49,812");
  EXPECT_EQ(group_thousands(1234567), "1,234,567");
}

}  // namespace
}  // namespace prsgd
