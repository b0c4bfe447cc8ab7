// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/schedule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

using prsgd::errc;
using namespace prsgd::algorithms;

constexpr double tol = 1e-12;

TEST(ScheduleTest, ConstantAndStepDecay) {
  const lr_schedule constant{.kind = lr_kind::constant, .base_lr = 0.05};
  ASSERT_TRUE(validate(constant).has_value());
  EXPECT_NEAR(learning_rate(constant, 0), 0.05, tol);
  EXPECT_NEAR(learning_rate(constant, 123456), 0.05, tol);

  const lr_schedule step{.kind = lr_kind::step_decay, .base_lr = 1.0, .decay_factor = 0.5, .decay_every = 100};
  ASSERT_TRUE(validate(step).has_value());
  EXPECT_NEAR(learning_rate(step, 0), 1.0, tol);
  EXPECT_NEAR(learning_rate(step, 99), 1.0, tol);
  EXPECT_NEAR(learning_rate(step, 100), 0.5, tol);
  EXPECT_NEAR(learning_rate(step, 350), 0.125, tol);
}

TEST(ScheduleTest, CosineHitsEndpointsAndMidpoint) {
  const lr_schedule cos{.kind = lr_kind::cosine, .base_lr = 0.1, .total_steps = 1000, .min_lr = 0.001};
  ASSERT_TRUE(validate(cos).has_value());
  EXPECT_NEAR(learning_rate(cos, 0), 0.1, tol);
  EXPECT_NEAR(learning_rate(cos, 500), 0.001 + 0.099 * 0.5, tol);
  EXPECT_NEAR(learning_rate(cos, 1000), 0.001, tol);
  EXPECT_NEAR(learning_rate(cos, 5000), 0.001, tol);  // stays at the floor after T
  for (std::int64_t t = 1; t <= 1000; ++t) {
    ASSERT_LE(learning_rate(cos, t), learning_rate(cos, t - 1) + tol) << t;  // monotone
  }
}

TEST(ScheduleTest, WarmupRampsLinearlyThenHandsOver) {
  const lr_schedule s{
      .kind = lr_kind::cosine, .base_lr = 0.2, .total_steps = 1100, .warmup_steps = 100, .warmup_start_factor = 0.1};
  ASSERT_TRUE(validate(s).has_value());
  EXPECT_NEAR(learning_rate(s, 0), 0.02, tol);
  EXPECT_NEAR(learning_rate(s, 50), 0.2 * (0.1 + 0.9 * 0.5), tol);
  EXPECT_NEAR(learning_rate(s, 100), 0.2, tol);  // cosine starts after warm-up
  EXPECT_NEAR(learning_rate(s, 600), 0.1, tol);  // midpoint of the 1000-step cosine
  EXPECT_NEAR(learning_rate(s, 1100), 0.0, tol);
  const lr_schedule warm_const{.kind = lr_kind::constant, .base_lr = 1.0, .warmup_steps = 4};
  EXPECT_NEAR(learning_rate(warm_const, 0), 0.0, tol);
  EXPECT_NEAR(learning_rate(warm_const, 1), 0.25, tol);
  EXPECT_NEAR(learning_rate(warm_const, 4), 1.0, tol);
  const lr_schedule warm_step{
      .kind = lr_kind::step_decay, .base_lr = 1.0, .decay_factor = 0.5, .decay_every = 10, .warmup_steps = 10};
  EXPECT_NEAR(learning_rate(warm_step, 19), 1.0, tol);  // decay counts from the end of warm-up
  EXPECT_NEAR(learning_rate(warm_step, 20), 0.5, tol);
}

TEST(ScheduleTest, PaperStepSize) {
  auto g = paper_step_size(0.5, 4, 10000);
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(*g, 0.5 * std::sqrt(4.0 / 10000.0), tol);
  const lr_schedule s{.kind = lr_kind::paper, .total_steps = 10000, .c = 0.5, .num_workers = 4};
  ASSERT_TRUE(validate(s).has_value());
  EXPECT_NEAR(learning_rate(s, 77), 0.01, tol);
  EXPECT_EQ(paper_step_size(0, 4, 100).error().code, errc::invalid_argument);
  EXPECT_EQ(paper_step_size(1, 0, 100).error().code, errc::invalid_argument);
  EXPECT_EQ(paper_step_size(1, 4, 0).error().code, errc::invalid_argument);
}

TEST(ScheduleTest, ValidateRejectsBadFields) {
  EXPECT_EQ(validate({.base_lr = 0}).error().code, errc::invalid_argument);
  EXPECT_EQ(validate({.base_lr = std::numeric_limits<double>::quiet_NaN()}).error().code, errc::invalid_argument);
  EXPECT_EQ(validate({.kind = lr_kind::step_decay, .decay_every = 0}).error().code, errc::invalid_argument);
  EXPECT_EQ(validate({.kind = lr_kind::step_decay, .decay_factor = 1.5}).error().code, errc::invalid_argument);
  EXPECT_EQ(validate({.kind = lr_kind::cosine, .total_steps = 10, .warmup_steps = 10}).error().code,
            errc::invalid_argument);
  EXPECT_EQ(validate({.kind = lr_kind::cosine, .base_lr = 0.1, .total_steps = 10, .min_lr = 0.2}).error().code,
            errc::invalid_argument);
  EXPECT_EQ(validate({.warmup_steps = -1}).error().code, errc::invalid_argument);
  EXPECT_EQ(validate({.warmup_start_factor = 2}).error().code, errc::invalid_argument);
  EXPECT_EQ(validate({.kind = lr_kind::paper, .total_steps = 0}).error().code, errc::invalid_argument);
}

TEST(ScheduleTest, PaperIntervalFormula) {
  // I = ceil(T^(1/4) / N^(3/4)).
  EXPECT_EQ(*paper_interval(10000, 1), 10);
  EXPECT_EQ(*paper_interval(16 * 8, 2), 2);      // 128^(1/4)/2^(3/4) = 2 exactly
  EXPECT_EQ(*paper_interval(16 * 8 + 1, 2), 3);  // just above 2
  EXPECT_EQ(*paper_interval(10000, 4), static_cast<int>(std::ceil(10.0 / std::pow(4.0, 0.75))));  // 4
  EXPECT_EQ(*paper_interval(10, 64), 1);                                                          // never below 1
  EXPECT_EQ(*paper_interval(1'000'000, 8), static_cast<int>(std::ceil(std::pow(1e6, 0.25) / std::pow(8.0, 0.75))));
  EXPECT_EQ(paper_interval(0, 1).error().code, errc::invalid_argument);
  EXPECT_EQ(paper_interval(10, 0).error().code, errc::invalid_argument);
}

TEST(ScheduleTest, TimeBalancedIntervalsFollowSpeed) {
  const std::vector<double> speeds{100.0, 50.0, 10.0, 1000.0};
  auto i = time_balanced_intervals(speeds, 0.2, 1, 100);
  ASSERT_TRUE(i.has_value()) << i.error().message();
  EXPECT_EQ(*i, (std::vector<int>{20, 10, 2, 100}));  // 200 clamped to max
  auto low = time_balanced_intervals(std::vector<double>{1.0}, 0.2, 3, 100);
  EXPECT_EQ(*low, (std::vector<int>{3}));  // 0.2 clamped to min
  // Unknown speeds take the median of the known ones (100 and 50 -> 75).
  auto unknown = time_balanced_intervals(std::vector<double>{100.0, 0.0, 50.0, std::nan("")}, 0.2, 1, 100);
  EXPECT_EQ(*unknown, (std::vector<int>{20, 15, 10, 15}));
  auto none = time_balanced_intervals(std::vector<double>{0.0, -1.0}, 0.2, 4, 100);
  EXPECT_EQ(*none, (std::vector<int>{4, 4}));
  EXPECT_EQ(time_balanced_intervals(speeds, 0.0, 1, 10).error().code, errc::invalid_argument);
  EXPECT_EQ(time_balanced_intervals(speeds, 1.0, 0, 10).error().code, errc::invalid_argument);
  EXPECT_EQ(time_balanced_intervals(speeds, 1.0, 5, 4).error().code, errc::invalid_argument);
}

TEST(ScheduleTest, BalancedRoundTimeKeepsTheMeanInterval) {
  // The round lasts as long as `interval` steps take at the workers' mean speed: Σ speed_i · τ = N · interval,
  // so a round processes as many samples as with fixed intervals and --epochs keeps its meaning.
  auto t = balanced_round_time(std::vector<double>{10.0, 20.0, 40.0}, 8);
  ASSERT_TRUE(t.has_value());
  EXPECT_NEAR(*t, 8.0 * 3 / 70, tol);
  // An unknown speed counts as the median of the known ones (10, 40 -> 25): τ = 3 · 8 / 75.
  auto unknown = balanced_round_time(std::vector<double>{10.0, 0.0, 40.0}, 8);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_NEAR(*unknown, 8.0 * 3 / 75, tol);
  // Two fast workers and one five times slower (the heterogeneity experiment): 11, 11, 2 — mean 8, where
  // giving the median worker 8 steps would give 8, 8, 2 and drop a quarter of the slow worker's share.
  const std::vector<double> skewed{100.0, 100.0, 20.0};
  auto skewed_t = balanced_round_time(skewed, 8);
  ASSERT_TRUE(skewed_t.has_value());
  auto skewed_i = time_balanced_intervals(skewed, *skewed_t, 1, 100);
  ASSERT_TRUE(skewed_i.has_value());
  EXPECT_EQ(*skewed_i, (std::vector<int>{11, 11, 2}));
  EXPECT_EQ(balanced_round_time(std::vector<double>{0.0}, 8).error().code, errc::invalid_argument);
  EXPECT_EQ(balanced_round_time(std::vector<double>{1.0}, 0).error().code, errc::invalid_argument);
}

TEST(ScheduleTest, SpeedEwmaSmoothsAndForgets) {
  speed_ewma e{.alpha = 0.5};
  ASSERT_TRUE(e.observe(2, 100, 1.0).has_value());
  ASSERT_EQ(e.rates.size(), 3U);
  EXPECT_NEAR(e.rates[2], 100.0, tol);  // the first measurement is taken as is
  EXPECT_EQ(e.rates[0], 0.0);
  ASSERT_TRUE(e.observe(2, 100, 0.5).has_value());
  EXPECT_NEAR(e.rates[2], 150.0, tol);  // 0.5 * 200 + 0.5 * 100
  ASSERT_TRUE(e.observe(2, 100, 0.5).has_value());
  EXPECT_NEAR(e.rates[2], 175.0, tol);
  e.forget(2);
  EXPECT_EQ(e.rates[2], 0.0);
  ASSERT_TRUE(e.observe(2, 30, 1.0).has_value());
  EXPECT_NEAR(e.rates[2], 30.0, tol);
  EXPECT_EQ(e.observe(0, 0, 1).error().code, errc::invalid_argument);
  EXPECT_EQ(e.observe(0, 1, 0).error().code, errc::invalid_argument);
  EXPECT_EQ(e.observe(0, std::numeric_limits<double>::infinity(), 1).error().code, errc::invalid_argument);
  speed_ewma bad{.alpha = 0};
  EXPECT_EQ(bad.observe(0, 1, 1).error().code, errc::invalid_argument);
}

TEST(ScheduleTest, IntervalsForRoundCoversEveryKind) {
  EXPECT_EQ(*intervals_for_round({.kind = interval_kind::fixed, .fixed_interval = 8}, 3), (std::vector<int>{8, 8, 8}));
  EXPECT_EQ(*intervals_for_round({.kind = interval_kind::per_worker, .fixed_interval = 5, .per_worker = {2, 9}}, 3),
            (std::vector<int>{2, 9, 5}));
  EXPECT_EQ(*intervals_for_round({.kind = interval_kind::paper, .total_steps = 10000}, 1), (std::vector<int>{10}));
  const interval_schedule balanced{
      .kind = interval_kind::time_balanced, .fixed_interval = 10, .min_interval = 1, .max_interval = 50};
  // No speeds yet: fixed_interval for all.
  EXPECT_EQ(*intervals_for_round(balanced, 2), (std::vector<int>{10, 10}));
  // Mean speed 70/3 steps/s runs 10 steps in τ = 3/7 s; each worker runs speed · τ steps (sum 30 = 3 · 10).
  const std::vector<double> speeds{10.0, 20.0, 40.0};
  EXPECT_EQ(*intervals_for_round(balanced, 3, speeds), (std::vector<int>{4, 9, 17}));
  auto explicit_target = balanced;
  explicit_target.target_round_s = 2.0;
  EXPECT_EQ(*intervals_for_round(explicit_target, 3, speeds), (std::vector<int>{20, 40, 50}));
  EXPECT_EQ(intervals_for_round({}, 0).error().code, errc::invalid_argument);
  EXPECT_EQ(intervals_for_round({.fixed_interval = 0}, 1).error().code, errc::invalid_argument);
  EXPECT_EQ(intervals_for_round({.kind = interval_kind::per_worker, .per_worker = {0}}, 1).error().code,
            errc::invalid_argument);
}

TEST(ScheduleTest, ParsesKindNames) {
  for (auto k : {lr_kind::constant, lr_kind::step_decay, lr_kind::cosine, lr_kind::paper}) {
    EXPECT_EQ(*parse_lr_kind(to_string(k)), k);
  }
  for (auto k : {interval_kind::fixed, interval_kind::per_worker, interval_kind::paper, interval_kind::time_balanced}) {
    EXPECT_EQ(*parse_interval_kind(to_string(k)), k);
  }
  EXPECT_EQ(parse_lr_kind("linear").error().code, errc::invalid_argument);
  EXPECT_EQ(parse_interval_kind("adaptive").error().code, errc::invalid_argument);
}

}  // namespace
