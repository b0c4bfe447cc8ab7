// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/outer_optimizer.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using prsgd::errc;
using namespace prsgd::algorithms;

TEST(OuterOptimizerTest, SgdWithUnitLrReproducesPlainAveraging) {
  auto opt = outer_optimizer::make({.kind = outer_kind::sgd, .lr = 1.0F, .momentum = 0.0F}, 3);
  ASSERT_TRUE(opt.has_value());
  const std::vector<float> prev{1, 2, 3};
  const std::vector<float> avg{0.5F, 2.5F, -1};
  std::vector<float> out(3);
  ASSERT_TRUE(opt->apply(prev, avg, out).has_value());
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_FLOAT_EQ(out[k], avg[k]);
  }
}

TEST(OuterOptimizerTest, MomentumAccumulatesDeltas) {
  auto opt = outer_optimizer::make({.kind = outer_kind::momentum, .lr = 0.5F, .momentum = 0.9F}, 1);
  ASSERT_TRUE(opt.has_value());
  std::vector<float> x{10.0F};
  // Each round the average moves 1 below the start: Δ = 1 every round.
  ASSERT_TRUE(opt->apply(x, std::vector<float>{x[0] - 1}, x).has_value());
  EXPECT_FLOAT_EQ(opt->state()[0], 1.0F);
  EXPECT_FLOAT_EQ(x[0], 9.5F);  // 10 - 0.5 * 1
  ASSERT_TRUE(opt->apply(x, std::vector<float>{x[0] - 1}, x).has_value());
  EXPECT_FLOAT_EQ(opt->state()[0], 1.9F);
  EXPECT_FLOAT_EQ(x[0], 9.5F - 0.95F);
}

TEST(OuterOptimizerTest, NesterovMatchesHandComputedSteps) {
  auto opt = outer_optimizer::make({.kind = outer_kind::nesterov, .lr = 0.7F, .momentum = 0.9F}, 2);
  ASSERT_TRUE(opt.has_value());
  std::vector<float> prev{1.0F, -1.0F};
  const std::vector<float> avg{0.0F, -1.0F};
  std::vector<float> out(2);
  ASSERT_TRUE(opt->apply(prev, avg, out).has_value());
  // Δ = (1, 0); m = (1, 0); x' = x − 0.7 (Δ + 0.9 m) = (1 − 1.33, −1).
  EXPECT_NEAR(out[0], 1.0F - 0.7F * 1.9F, 1e-6F);
  EXPECT_NEAR(out[1], -1.0F, 1e-6F);
  ASSERT_TRUE(opt->apply(out, out, out).has_value());  // Δ = 0: momentum still moves the model
  // m = 0.9; x'' = x' − 0.7 (0 + 0.81)
  EXPECT_NEAR(out[0], 1.0F - 0.7F * 1.9F - 0.7F * 0.81F, 1e-6F);
  EXPECT_NEAR(opt->state()[0], 0.9F, 1e-6F);
}

TEST(OuterOptimizerTest, StateRestoresAndResets) {
  auto a = outer_optimizer::make({.kind = outer_kind::nesterov}, 4);
  ASSERT_TRUE(a.has_value());
  const std::vector<float> prev{1, 2, 3, 4};
  const std::vector<float> avg{0.5F, 1.5F, 3.5F, 4};
  std::vector<float> round1(4);
  ASSERT_TRUE(a->apply(prev, avg, round1).has_value());
  // A second optimiser restored from a's checkpoint continues exactly like a.
  auto b = outer_optimizer::make({.kind = outer_kind::nesterov}, 4);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(b->restore(a->state()).has_value());
  std::vector<float> round2_a(4);
  std::vector<float> round2_b(4);
  ASSERT_TRUE(a->apply(round1, avg, round2_a).has_value());
  ASSERT_TRUE(b->apply(round1, avg, round2_b).has_value());
  EXPECT_EQ(round2_a, round2_b);
  // Without the restored momentum the result differs (the check above is not vacuous).
  auto fresh = outer_optimizer::make({.kind = outer_kind::nesterov}, 4);
  ASSERT_TRUE(fresh.has_value());
  std::vector<float> round2_fresh(4);
  ASSERT_TRUE(fresh->apply(round1, avg, round2_fresh).has_value());
  EXPECT_NE(round2_fresh, round2_a);
  a->reset();
  for (float m : a->state()) {
    EXPECT_EQ(m, 0.0F);
  }
  EXPECT_EQ(a->restore(std::vector<float>(3)).error().code, errc::invalid_argument);
}

TEST(OuterOptimizerTest, RejectsBadConfigAndSizes) {
  EXPECT_EQ(outer_optimizer::make({.lr = 0.0F}, 1).error().code, errc::invalid_argument);
  EXPECT_EQ(outer_optimizer::make({.momentum = 1.0F}, 1).error().code, errc::invalid_argument);
  EXPECT_EQ(outer_optimizer::make({.momentum = -0.1F}, 1).error().code, errc::invalid_argument);
  auto opt = outer_optimizer::make({}, 2);
  ASSERT_TRUE(opt.has_value());
  std::vector<float> two(2);
  std::vector<float> three(3);
  EXPECT_EQ(opt->apply(two, three, two).error().code, errc::invalid_argument);
  EXPECT_EQ(parse_outer_kind("adam").error().code, errc::invalid_argument);
  EXPECT_EQ(*parse_outer_kind("nesterov"), outer_kind::nesterov);
}

}  // namespace
