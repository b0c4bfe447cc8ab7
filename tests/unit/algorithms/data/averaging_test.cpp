// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/averaging.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using prsgd::errc;
using namespace prsgd::algorithms;

// Odd length so the block loop has a partial last block and the pairwise loop a leftover input.
constexpr std::size_t len = 2048 * 3 + 17;

std::vector<float> random_model(std::uint32_t seed, float scale = 1.0F) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(len);
  for (auto& x : v) {
    x = dist(gen);
  }
  return v;
}

std::vector<contribution> contributions(const std::vector<std::vector<float>>& models, std::vector<double> samples,
                                        std::vector<double> steps) {
  std::vector<contribution> out;
  for (std::size_t i = 0; i < models.size(); ++i) {
    out.push_back({models[i], samples[i], steps[i]});
  }
  return out;
}

TEST(AveragingTest, EqualModelsAverageToThatModelForEveryRule) {
  const auto x = random_model(1);
  for (std::size_t k : {1U, 2U, 3U, 5U, 8U, 9U, 17U}) {
    std::vector<std::vector<float>> models(k, x);
    auto in = contributions(models, std::vector<double>(k, 10.0), std::vector<double>(k, 4.0));
    for (auto rule : {averaging_rule::uniform, averaging_rule::by_samples, averaging_rule::step_normalised}) {
      std::vector<float> out(len, -7.0F);
      const auto prev = random_model(99);
      ASSERT_TRUE(average(in, prev, rule, out).has_value());
      for (std::size_t j = 0; j < len; ++j) {
        ASSERT_NEAR(out[j], x[j], 2e-6F) << "k=" << k << " rule=" << to_string(rule) << " j=" << j;
      }
    }
  }
}

TEST(AveragingTest, UniformMatchesReferenceMean) {
  std::vector<std::vector<float>> models;
  for (std::uint32_t i = 0; i < 5; ++i) {
    models.push_back(random_model(i + 10));
  }
  auto in = contributions(models, {1, 2, 3, 4, 5}, {1, 1, 1, 1, 1});
  std::vector<float> out(len);
  ASSERT_TRUE(average(in, {}, averaging_rule::uniform, out).has_value());
  for (std::size_t j = 0; j < len; ++j) {
    double ref = 0;
    for (const auto& m : models) {
      ref += m[j];
    }
    ASSERT_NEAR(out[j], ref / 5.0, 1e-6) << j;
  }
}

TEST(AveragingTest, BySamplesMatchesReferenceWeightedMean) {
  std::vector<std::vector<float>> models;
  for (std::uint32_t i = 0; i < 4; ++i) {
    models.push_back(random_model(i + 20));
  }
  const std::vector<double> samples{64, 128, 32, 256};
  auto in = contributions(models, samples, {1, 1, 1, 1});
  std::vector<float> out(len);
  ASSERT_TRUE(average(in, {}, averaging_rule::by_samples, out).has_value());
  for (std::size_t j = 0; j < len; ++j) {
    double ref = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      ref += samples[i] / 480.0 * models[i][j];
    }
    ASSERT_NEAR(out[j], ref, 1e-6) << j;
  }
}

TEST(AveragingTest, StepNormalisedWithEqualStepsEqualsBySamples) {
  const auto prev = random_model(30);
  std::vector<std::vector<float>> models;
  for (std::uint32_t i = 0; i < 3; ++i) {
    models.push_back(random_model(i + 31));
  }
  auto in = contributions(models, {100, 300, 50}, {7, 7, 7});
  std::vector<float> a(len);
  std::vector<float> b(len);
  ASSERT_TRUE(average(in, prev, averaging_rule::by_samples, a).has_value());
  ASSERT_TRUE(average(in, prev, averaging_rule::step_normalised, b).has_value());
  for (std::size_t j = 0; j < len; ++j) {
    ASSERT_NEAR(a[j], b[j], 2e-6F) << j;
  }
}

TEST(AveragingTest, StepNormalisedMatchesFedNovaFormula) {
  const auto prev = random_model(40);
  std::vector<std::vector<float>> models;
  for (std::uint32_t i = 0; i < 3; ++i) {
    models.push_back(random_model(i + 41));
  }
  const std::vector<double> samples{100, 200, 300};
  const std::vector<double> steps{2, 5, 11};
  auto in = contributions(models, samples, steps);
  std::vector<float> out(len);
  ASSERT_TRUE(average(in, prev, averaging_rule::step_normalised, out).has_value());
  // p_i ∝ samples per step (50, 40, 300/11): the data one step of worker i covers.
  double per_step_total = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    per_step_total += samples[i] / steps[i];
  }
  double tau_eff = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    tau_eff += samples[i] / steps[i] / per_step_total * steps[i];
  }
  for (std::size_t j = 0; j < len; ++j) {
    double ref = prev[j];
    for (std::size_t i = 0; i < 3; ++i) {
      ref += tau_eff * (samples[i] / steps[i] / per_step_total) * (models[i][j] - prev[j]) / steps[i];
    }
    ASSERT_NEAR(out[j], ref, 1e-5) << j;
  }
  // With unequal steps the rule must differ from by-samples (otherwise this test proves nothing).
  std::vector<float> naive(len);
  ASSERT_TRUE(average(in, prev, averaging_rule::by_samples, naive).has_value());
  double diff = 0;
  for (std::size_t j = 0; j < len; ++j) {
    diff += std::abs(naive[j] - out[j]);
  }
  EXPECT_GT(diff / len, 1e-2);
}

TEST(AveragingTest, OutMayAliasPrevious) {
  auto prev = random_model(50);
  const auto x0 = random_model(51);
  const auto x1 = random_model(52);
  std::vector<contribution> in{{x0, 1, 3}, {x1, 2, 5}};
  std::vector<float> expected(len);
  ASSERT_TRUE(average(in, prev, averaging_rule::step_normalised, expected).has_value());
  ASSERT_TRUE(average(in, prev, averaging_rule::step_normalised, prev).has_value());
  for (std::size_t j = 0; j < len; ++j) {
    ASSERT_EQ(prev[j], expected[j]) << j;
  }
}

TEST(AveragingTest, OutMayAliasAnInput) {
  auto x0 = random_model(60);
  const auto x1 = random_model(61);
  const auto x2 = random_model(62);
  std::vector<float> expected(len);
  {
    std::vector<contribution> in{{x0, 1, 1}, {x1, 1, 1}, {x2, 1, 1}};
    ASSERT_TRUE(average(in, {}, averaging_rule::uniform, expected).has_value());
  }
  const auto x0_copy = x0;
  std::vector<contribution> in{{x0_copy, 1, 1}, {x1, 1, 1}, {x2, 1, 1}};
  in[0].params = x0;  // the buffer we overwrite
  in[2].params = x2;
  ASSERT_TRUE(average(in, {}, averaging_rule::uniform, x0).has_value());
  for (std::size_t j = 0; j < len; ++j) {
    ASSERT_EQ(x0[j], expected[j]) << j;
  }
}

TEST(AveragingTest, ManyInputsUseChunksAndMatchReferenceAndAliasedPath) {
  // 11 inputs: one fused chunk of 8 and one of 3; len spans several fused blocks.
  const std::size_t big = 16384 * 2 + 5;
  std::mt19937 gen(123);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<std::vector<float>> models(11, std::vector<float>(big));
  for (auto& m : models) {
    for (auto& x : m) {
      x = dist(gen);
    }
  }
  std::vector<float> prev(big);
  for (auto& x : prev) {
    x = dist(gen);
  }
  std::vector<contribution> in;
  for (std::size_t i = 0; i < models.size(); ++i) {
    in.push_back({models[i], 10.0 + static_cast<double>(i), 1.0 + static_cast<double>(i % 4)});
  }
  for (auto rule : {averaging_rule::uniform, averaging_rule::by_samples, averaging_rule::step_normalised}) {
    auto w = averaging_weights(in, rule);
    ASSERT_TRUE(w.has_value());
    std::vector<float> out(big);
    ASSERT_TRUE(average(in, prev, rule, out).has_value());
    for (std::size_t j = 0; j < big; j += 97) {
      double ref = rule == averaging_rule::step_normalised ? prev[j] : 0.0;
      for (std::size_t i = 0; i < models.size(); ++i) {
        ref += (*w)[i] * (rule == averaging_rule::step_normalised ? models[i][j] - prev[j] : models[i][j]);
      }
      ASSERT_NEAR(out[j], ref, 1e-5) << to_string(rule) << " " << j;
    }
    // Writing over an input takes the blocked path; it must agree bit for bit with the fused one.
    auto x0 = models[0];
    auto aliased_in = in;
    aliased_in[0].params = x0;
    ASSERT_TRUE(average(aliased_in, prev, rule, x0).has_value());
    EXPECT_TRUE(x0 == out) << to_string(rule);
  }
}

// Streaming (non-temporal) stores write whole 64-byte lines from out's first 64-byte boundary and
// normal stores for the head before it and the tail after the last whole line; more than 8 inputs
// accumulate 2048-float blocks in L1 and stream the last pass; inputs are prefetched 512 floats ahead.
// Every split must give the normal path's bits and leave the floats around out untouched.
TEST(AveragingTest, StreamingStoresMatchNormalStoresBitForBitAtEveryAlignment) {
  constexpr std::size_t pad = 16;
  constexpr float guard = -12345.0F;
  const std::size_t max_len = 2 * 2048 + 16 * 5 + 7;
  std::mt19937 gen(321);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  const std::size_t max_n = 17;
  // One extra float per buffer so inputs can start off the out buffer's alignment too.
  std::vector<std::vector<float>> models(max_n, std::vector<float>(max_len + 1));
  std::vector<float> prev(max_len + 1);
  for (auto& m : models) {
    for (auto& x : m) {
      x = dist(gen);
    }
  }
  for (auto& x : prev) {
    x = dist(gen);
  }
  // 64-byte aligned storage so `offset` sets out's misalignment exactly.
  std::vector<float> storage(max_len + 2 * pad + 64);
  float* base = storage.data();
  while (reinterpret_cast<std::uintptr_t>(base) % 64 != 0) {
    ++base;
  }
  std::vector<float> normal(max_len);
  const std::size_t lens[] = {0,      1, 3, 15, 16, 17, 31, 32, 33, 64 + 5, 512 + 16 + 3, 512 + 2 * 16, 2048 + 16 + 1,
                              max_len};
  for (std::size_t n : {1U, 2U, 3U, 8U, 9U, 17U}) {
    for (std::size_t l : lens) {
      for (std::size_t offset : {0U, 1U, 3U, 4U, 8U, 15U}) {
        const std::size_t in_shift = (offset + n) % 2;  // inputs and x̄ at another alignment than out
        std::vector<contribution> in;
        for (std::size_t i = 0; i < n; ++i) {
          in.push_back({std::span<const float>(models[i]).subspan(in_shift, l), 3.0 + static_cast<double>(i),
                        1.0 + static_cast<double>(i % 3)});
        }
        const auto p = std::span<const float>(prev).subspan(in_shift, l);
        for (auto rule : {averaging_rule::uniform, averaging_rule::by_samples, averaging_rule::step_normalised}) {
          ASSERT_TRUE(average(in, p, rule, std::span<float>(normal).first(l), store_policy::normal).has_value());
          std::fill(storage.begin(), storage.end(), guard);
          float* out = base + pad + offset;
          ASSERT_TRUE(average(in, p, rule, std::span<float>(out, l), store_policy::streaming).has_value());
          const std::string where = "n=" + std::to_string(n) + " len=" + std::to_string(l) +
                                    " offset=" + std::to_string(offset) + " rule=" + std::string{to_string(rule)};
          ASSERT_EQ(std::memcmp(out, normal.data(), l * sizeof(float)), 0) << where;
          for (float* g = base; g < out; ++g) {
            ASSERT_EQ(*g, guard) << where << " before out";
          }
          for (float* g = out + l; g < base + 2 * pad + max_len; ++g) {
            ASSERT_EQ(*g, guard) << where << " after out";
          }
        }
      }
    }
  }
}

// Restores the streaming threshold a test changes.
struct threshold_guard {
  std::size_t saved = set_streaming_store_threshold(0);
  threshold_guard(const threshold_guard&) = delete;
  threshold_guard& operator=(const threshold_guard&) = delete;
  threshold_guard() = default;
  ~threshold_guard() { set_streaming_store_threshold(saved); }
};

TEST(AveragingTest, AutomaticPolicyStreamsOnlyAboveTheThreshold) {
#if !defined(__SSE__)
  GTEST_SKIP() << "no streaming stores on this target";
#endif
  const threshold_guard restore;
  const std::size_t def = streaming_store_threshold();
  EXPECT_GE(def, std::size_t{256} << 10U);  // the core's L2, clamped to [256 KiB, 16 MiB]
  EXPECT_LE(def, std::size_t{16} << 20U);
  EXPECT_EQ(set_streaming_store_threshold(4096), def);
  EXPECT_EQ(streaming_store_threshold(), 4096U);

  std::vector<std::vector<float>> models;
  for (std::uint32_t i = 0; i < 3; ++i) {
    models.push_back(random_model(200 + i));
  }
  auto prev = random_model(210);
  for (auto rule : {averaging_rule::uniform, averaging_rule::by_samples, averaging_rule::step_normalised}) {
    // 1024 floats = 4096 bytes: not above the threshold.
    for (std::size_t l : {std::size_t{1024}, std::size_t{1025}, std::size_t{1000}, len}) {
      std::vector<contribution> in;
      for (const auto& m : models) {
        in.push_back({std::span<const float>(m).first(l), 2, 3});
      }
      const auto p = std::span<const float>(prev).first(l);
      std::vector<float> normal(l);
      std::vector<float> automatic(l);
      const auto before_normal = streaming_store_calls();
      ASSERT_TRUE(average(in, p, rule, normal, store_policy::normal).has_value());
      EXPECT_EQ(streaming_store_calls(), before_normal) << "normal policy never streams";
      const auto before = streaming_store_calls();
      ASSERT_TRUE(average(in, p, rule, automatic).has_value());
      EXPECT_EQ(streaming_store_calls(), before + (l * sizeof(float) > 4096 ? 1 : 0))
          << to_string(rule) << " len=" << l;
      EXPECT_EQ(std::memcmp(automatic.data(), normal.data(), l * sizeof(float)), 0) << to_string(rule);
    }
  }

  // Aliased calls take the blocked path with normal stores, whatever the policy.
  std::vector<contribution> in;
  for (const auto& m : models) {
    in.push_back({m, 2, 3});
  }
  std::vector<float> expected(len);
  ASSERT_TRUE(average(in, prev, averaging_rule::step_normalised, expected, store_policy::normal).has_value());
  const auto before = streaming_store_calls();
  ASSERT_TRUE(average(in, prev, averaging_rule::step_normalised, prev, store_policy::streaming).has_value());
  EXPECT_EQ(streaming_store_calls(), before);
  EXPECT_TRUE(prev == expected);

  // 0 restores the default.
  set_streaming_store_threshold(0);
  EXPECT_EQ(streaming_store_threshold(), def);
}

TEST(AveragingTest, SingleInputAndTinyBuffers) {
  const std::vector<float> x{1.5F, -2.0F, 3.25F};
  std::vector<contribution> in{{x, 3, 2}};
  std::vector<float> out(3);
  ASSERT_TRUE(average(in, {}, averaging_rule::by_samples, out).has_value());
  EXPECT_EQ(out, x);
  std::vector<float> empty_out;
  std::vector<contribution> empty_in{{std::span<const float>{}, 1, 1}, {std::span<const float>{}, 1, 1}};
  EXPECT_TRUE(average(empty_in, {}, averaging_rule::uniform, empty_out).has_value());
}

TEST(AveragingTest, ErrorCasesReturnInvalidArgument) {
  const auto x = random_model(70);
  const std::vector<float> short_model(len - 1, 0.0F);
  std::vector<float> out(len);
  const auto prev = random_model(71);
  auto expect_invalid = [&](std::span<const contribution> in, std::span<const float> p, averaging_rule rule) {
    auto r = average(in, p, rule, out);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, errc::invalid_argument) << r.error().message();
  };
  expect_invalid({}, prev, averaging_rule::uniform);
  {
    std::vector<contribution> in{{x, 1, 1}, {short_model, 1, 1}};
    expect_invalid(in, prev, averaging_rule::uniform);
  }
  {
    std::vector<contribution> in{{x, 0, 1}};
    expect_invalid(in, prev, averaging_rule::by_samples);
  }
  {
    std::vector<contribution> in{{x, -1, 1}};
    expect_invalid(in, prev, averaging_rule::step_normalised);
  }
  {
    std::vector<contribution> in{{x, std::numeric_limits<double>::quiet_NaN(), 1}};
    expect_invalid(in, prev, averaging_rule::by_samples);
  }
  {
    std::vector<contribution> in{{x, 1, 0}};
    expect_invalid(in, prev, averaging_rule::step_normalised);
  }
  {
    std::vector<contribution> in{{x, 1, 1}};
    expect_invalid(in, {}, averaging_rule::step_normalised);   // needs previous
    expect_invalid(in, short_model, averaging_rule::uniform);  // wrong-size previous
  }
  // Uniform ignores samples/steps, so zeros are fine there.
  std::vector<contribution> in{{x, 0, 0}};
  EXPECT_TRUE(average(in, {}, averaging_rule::uniform, out).has_value());
}

TEST(AveragingTest, WeightsSumToOneAndMatchFedNova) {
  std::vector<float> dummy(1);
  std::vector<contribution> in{{dummy, 1, 2}, {dummy, 3, 4}};
  auto u = averaging_weights(in, averaging_rule::uniform);
  ASSERT_TRUE(u.has_value());
  EXPECT_DOUBLE_EQ((*u)[0], 0.5);
  auto s = averaging_weights(in, averaging_rule::by_samples);
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ((*s)[0], 0.25);
  EXPECT_DOUBLE_EQ((*s)[1], 0.75);
  auto f = averaging_weights(in, averaging_rule::step_normalised);
  ASSERT_TRUE(f.has_value());
  // Samples per step 0.5 and 0.75: p = (0.4, 0.6), τ_eff = 0.4 * 2 + 0.6 * 4 = 3.2.
  const double tau_eff = 0.4 * 2 + 0.6 * 4;
  EXPECT_NEAR((*f)[0], tau_eff * 0.4 / 2, 1e-12);
  EXPECT_NEAR((*f)[1], tau_eff * 0.6 / 4, 1e-12);
}

// Time-balanced intervals: equal shards and batches, the slow worker assigned 2 steps and the fast ones 11.
// FedNova weighs each worker by its data share (equal here), not by the steps it was given: p = 1/3 each,
// τ_eff = the mean interval (8). Weighting by this round's samples (∝ steps) would give p = (11, 11, 2) / 24,
// τ_eff = 10.25, and let the fast workers' shards dominate x̄'s direction.
TEST(AveragingTest, StepNormalisedWeighsEqualShardsEquallyWhateverTheirIntervals) {
  std::vector<float> dummy(1);
  const std::vector<double> steps{11, 11, 2};
  std::vector<contribution> in;
  for (double t : steps) {
    in.push_back({dummy, 64 * t, t});
  }
  auto w = averaging_weights(in, averaging_rule::step_normalised);
  ASSERT_TRUE(w.has_value());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR((*w)[i], 8.0 / 3.0 / steps[i], 1e-12) << i;
  }
  // Every worker moved along the same per-step direction d (x_i = x̄ + τ_i d): x̄ advances by τ_eff = 8 steps.
  const auto prev = random_model(60);
  const auto d = random_model(61, 0.01F);
  std::vector<std::vector<float>> models;
  for (double t : steps) {
    std::vector<float> x(len);
    for (std::size_t j = 0; j < len; ++j) {
      x[j] = prev[j] + static_cast<float>(t) * d[j];
    }
    models.push_back(std::move(x));
  }
  std::vector<float> out(len);
  ASSERT_TRUE(
      average(contributions(models, {64 * 11, 64 * 11, 64 * 2}, steps), prev, averaging_rule::step_normalised, out)
          .has_value());
  for (std::size_t j = 0; j < len; ++j) {
    ASSERT_NEAR(out[j], prev[j] + 8 * d[j], 1e-5) << j;
  }
}

TEST(AveragingTest, ParsesRuleNamesAndRoundTrips) {
  for (auto rule : {averaging_rule::uniform, averaging_rule::by_samples, averaging_rule::step_normalised}) {
    auto parsed = parse_averaging_rule(to_string(rule));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, rule);
  }
  auto bad = parse_averaging_rule("mean");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
}

TEST(AveragingTest, AllFiniteDetectsNanAndInfAnywhere) {
  auto x = random_model(80);
  EXPECT_TRUE(all_finite(x));
  EXPECT_TRUE(all_finite({}));
  for (std::size_t pos : {std::size_t{0}, std::size_t{2047}, std::size_t{2048}, len - 1}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()}) {
      auto y = x;
      y[pos] = bad;
      EXPECT_FALSE(all_finite(y)) << pos;
    }
  }
  std::vector<float> edge{std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(), -0.0F};
  EXPECT_TRUE(all_finite(edge));
}

TEST(AveragingTest, ConsensusDistanceMatchesReference) {
  std::vector<std::vector<float>> models;
  for (std::uint32_t i = 0; i < 4; ++i) {
    models.push_back(random_model(i + 90));
  }
  std::vector<std::span<const float>> views(models.begin(), models.end());
  auto d = consensus_distance(views);
  ASSERT_TRUE(d.has_value());
  double ref = 0;
  for (std::size_t j = 0; j < len; ++j) {
    double mean = 0;
    for (const auto& m : models) {
      mean += m[j];
    }
    mean /= 4;
    for (const auto& m : models) {
      ref += (m[j] - mean) * (m[j] - mean);
    }
  }
  ref /= 4;
  EXPECT_NEAR(*d, ref, 1e-5 * ref);
  // Identical models have zero consensus distance; two models at ±1 have distance len.
  std::vector<std::span<const float>> same{models[0], models[0], models[0]};
  EXPECT_NEAR(*consensus_distance(same), 0.0, 1e-9);
  std::vector<float> plus(len, 1.0F);
  std::vector<float> minus(len, -1.0F);
  std::vector<std::span<const float>> pm{plus, minus};
  EXPECT_NEAR(*consensus_distance(pm), static_cast<double>(len), 1e-9);
}

TEST(AveragingTest, ConsensusDistanceRejectsBadInput) {
  EXPECT_EQ(consensus_distance({}).error().code, errc::invalid_argument);
  std::vector<float> a(3);
  std::vector<float> b(4);
  std::vector<std::span<const float>> views{a, b};
  EXPECT_EQ(consensus_distance(views).error().code, errc::invalid_argument);
}

}  // namespace
