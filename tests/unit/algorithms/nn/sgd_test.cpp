// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sgd.hpp"

#include <vector>

#include <gtest/gtest.h>

namespace prsgd::algorithms {
namespace {

TEST(NnSgdTest, PlainStepIsGradientDescent) {
  auto opt = sgd::make({.learning_rate = 0.5F, .momentum = 0.0F});
  ASSERT_TRUE(opt);
  std::vector<float> p{1.0F, -2.0F};
  const std::vector<float> g{0.2F, 0.4F};
  opt->step(p, g);
  EXPECT_FLOAT_EQ(p[0], 0.9F);
  EXPECT_FLOAT_EQ(p[1], -2.2F);
  EXPECT_TRUE(opt->momentum_buffer().empty());
}

// Reference values follow torch.optim.SGD's documented update rule, computed by hand.
TEST(NnSgdTest, MomentumWeightDecayMatchesPytorchRule) {
  auto opt = sgd::make({.learning_rate = 0.1F, .momentum = 0.9F, .dampening = 0.0F, .weight_decay = 0.01F});
  ASSERT_TRUE(opt);
  std::vector<float> p{1.0F};
  // step 1: d = 0.5 + 0.01 = 0.51; b = 0.51; p = 1 - 0.051 = 0.949
  opt->step(p, std::vector<float>{0.5F});
  EXPECT_NEAR(p[0], 0.949F, 1e-6F);
  // step 2: d = 0.5 + 0.00949 = 0.50949; b = 0.459 + 0.50949 = 0.96849; p = 0.949 - 0.096849
  opt->step(p, std::vector<float>{0.5F});
  EXPECT_NEAR(opt->momentum_buffer()[0], 0.96849F, 1e-5F);
  EXPECT_NEAR(p[0], 0.852151F, 1e-5F);
}

TEST(NnSgdTest, NesterovLooksAhead) {
  auto opt = sgd::make({.learning_rate = 0.1F, .momentum = 0.5F, .nesterov = true});
  ASSERT_TRUE(opt);
  std::vector<float> p{0.0F};
  opt->step(p, std::vector<float>{1.0F});  // b = 1; p -= 0.1 * (1 + 0.5) = -0.15
  EXPECT_NEAR(p[0], -0.15F, 1e-6F);
  opt->step(p, std::vector<float>{1.0F});  // b = 1.5; p -= 0.1 * (1 + 0.75) = -0.325
  EXPECT_NEAR(p[0], -0.325F, 1e-6F);
}

TEST(NnSgdTest, ResetMomentumRestartsTheBuffer) {
  auto opt = sgd::make({.learning_rate = 1.0F, .momentum = 0.9F});
  ASSERT_TRUE(opt);
  std::vector<float> p{0.0F, 0.0F};
  opt->step(p, std::vector<float>{1.0F, 1.0F});
  opt->step(p, std::vector<float>{1.0F, 1.0F});
  EXPECT_NEAR(opt->momentum_buffer()[0], 1.9F, 1e-6F);
  opt->reset_momentum();
  EXPECT_TRUE(opt->momentum_buffer().empty());
  const float before = p[0];
  opt->step(p, std::vector<float>{1.0F, 1.0F});
  EXPECT_NEAR(p[0], before - 1.0F, 1e-6F);  // a fresh buffer equals the gradient
}

TEST(NnSgdTest, RejectsInvalidOptions) {
  EXPECT_EQ(sgd::make({.learning_rate = -1.0F}).error().code, errc::invalid_argument);
  EXPECT_EQ(sgd::make({.momentum = 0.0F, .nesterov = true}).error().code, errc::invalid_argument);
  EXPECT_EQ(sgd::make({.dampening = 2.0F}).error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace prsgd::algorithms
