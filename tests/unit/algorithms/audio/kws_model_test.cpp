// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/kws_model.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/sgd.hpp"

namespace prsgd::algorithms {
namespace {

const model_config kws_config{{1, 98, 40}, 12, 7};

TEST(KwsModelTest, RegisteredAndMaps98By40To12Logits) {
  auto& registry = model_registry::instance();
  ASSERT_TRUE(registry.contains("kws-cnn"));
  auto m = registry.make("kws-cnn", kws_config);
  ASSERT_TRUE(m.has_value()) << m.error().message();
  EXPECT_EQ((*m)->name(), "kws-cnn");
  EXPECT_EQ((*m)->input_shape(), (shape3{1, 98, 40}));
  // conv 1->16 (144) + BN (32), 16->32 (4608) + BN (64), 32->64 (18432) + BN (128), fc 64->12 (780).
  EXPECT_EQ((*m)->num_trainable(), 144U + 32U + 4608U + 64U + 18432U + 128U + 780U);
  const std::vector<float> inputs(2 * 98 * 40, -5.0F);
  const tensor& logits = (*m)->predict(inputs, 2);
  EXPECT_EQ(logits.rows(), 12);
  EXPECT_EQ(logits.cols(), 2);
}

TEST(KwsModelTest, SameSeedGivesIdenticalParameters) {
  auto a = make_kws_cnn(kws_config);
  auto b = make_kws_cnn(kws_config);
  auto c = make_kws_cnn({{1, 98, 40}, 12, 8});
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(std::equal((*a)->params().begin(), (*a)->params().end(), (*b)->params().begin()));
  EXPECT_FALSE(std::equal((*a)->params().begin(), (*a)->params().end(), (*c)->params().begin()));
}

TEST(KwsModelTest, RejectsInputsItCannotPool) {
  EXPECT_EQ(make_kws_cnn({{1, 4, 40}, 12, 1}).error().code, errc::invalid_argument);
  EXPECT_EQ(make_kws_cnn({{1, 98, 40}, 0, 1}).error().code, errc::invalid_argument);
  model_registry empty;
  register_kws_models(empty);
  EXPECT_EQ(empty.names(), std::vector<std::string>{"kws-cnn"});
}

// Two synthetic "keywords" on a log-mel-like scale: energy in the low or the high mel bands around
// the centre frames, over a noisy log(eps) floor. A working model separates them in a few steps. A
// 32 x 16 map keeps the test fast; accuracy is not checked in eval mode because batch norm's running
// statistics (momentum 0.1) need far more than ten steps to reach the -12..0 log-mel scale.
TEST(KwsModelTest, LearnsTwoSyntheticKeywords) {
  dataset d;
  d.shape = {1, 32, 16};
  d.num_classes = 12;
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0F, 1.0F);
  constexpr int n = 16;
  for (int i = 0; i < n; ++i) {
    const int label = i % 2;
    for (int t = 0; t < 32; ++t) {
      for (int f = 0; f < 16; ++f) {
        const bool loud = t > 10 && t < 22 && (label == 0 ? f < 6 : f >= 10);
        d.features.push_back((loud ? 0.0F : -12.0F) + noise(rng));
      }
    }
    d.labels.push_back(label);
  }
  auto m = make_kws_cnn({{1, 32, 16}, 12, 7});
  ASSERT_TRUE(m.has_value());
  auto opt = sgd::make({0.05F, 0.9F});
  ASSERT_TRUE(opt.has_value());
  std::vector<std::size_t> batch(n);
  std::iota(batch.begin(), batch.end(), 0U);
  const float first = (*m)->train_step(d, batch, *opt);
  float last = first;
  for (int step = 0; step < 10; ++step) {
    last = (*m)->train_step(d, batch, *opt);
  }
  EXPECT_LT(last, 0.3F * first) << "first " << first << ", after 10 more steps " << last;
}

}  // namespace
}  // namespace prsgd::algorithms
