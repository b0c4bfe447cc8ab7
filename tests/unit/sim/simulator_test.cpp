// SPDX-License-Identifier: Apache-2.0
#include "simulator.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "prsgd/common/log.hpp"

namespace prsgd::sim {
namespace {

sim_config small() {
  log::set_level(log::level::error);
  sim_config c;
  c.workers = 8;
  c.rounds = 20;
  c.interval = 16;
  c.model_floats = 1e6;
  c.averager_rate = 12.5e6;  // 100 Mbit/s
  c.worker_rate = 12.5e6;
  c.latency_s = 0.0002;
  c.step_s = 0.01;
  return c;
}

TEST(SimulatorTest, EqualWorkersTakeTheStarRoundTime) {
  const sim_config c = small();
  auto r = simulate(c);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->rounds, c.rounds);
  // RESTARTs share the averager's up link (N·4P/B), every worker trains I steps, the MODELs queue on its
  // down link (N·4P/B).
  const double bytes = 4 * c.model_floats + c.header_bytes;
  const double expected =
      2 * static_cast<double>(c.workers) * bytes / c.averager_rate + static_cast<double>(c.interval) * c.step_s;
  EXPECT_NEAR(r->round_s_median, expected, 0.02 * expected);
  EXPECT_NEAR(r->averager_bytes_per_round, 2 * static_cast<double>(c.workers) * bytes,
              0.01 * r->averager_bytes_per_round);
  EXPECT_NEAR(r->worker_bytes_per_round_mean, 2 * bytes, 0.01 * r->worker_bytes_per_round_mean);
  EXPECT_NEAR(r->members_mean, 8.0, 1e-9);
  EXPECT_GT(r->utilisation, 0.0);
  EXPECT_LT(r->utilisation, 0.1);  // the links, not the workers, set the pace here
}

TEST(SimulatorTest, SameSeedSameRun) {
  sim_config c = small();
  c.speed_spread = 3;
  c.straggler_prob = 0.1;
  c.crash_per_hour = 20;
  c.join_per_hour = 160;
  c.max_workers = 16;
  auto a = simulate(c);
  auto b = simulate(c);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->events, b->events);
  EXPECT_EQ(a->round_s_mean, b->round_s_mean);
  c.seed = 2;
  auto d = simulate(c);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(a->events, d->events);
}

TEST(SimulatorTest, CrashedWorkersAreRemovedAndTheJobFinishes) {
  sim_config c = small();
  c.workers = 20;
  c.max_workers = 40;
  c.rounds = 60;
  c.model_floats = 1e5;
  c.crash_per_hour = 60;  // about one crash per worker per minute of simulated time
  c.join_per_hour = 1200;
  auto r = simulate(c);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r->rounds, c.rounds);
  EXPECT_GT(r->crashes, 0U);
  EXPECT_GT(r->joins, 0U);
  EXPECT_GT(r->removed, 0U);  // by heartbeat timeout: a crashed worker says nothing
}

TEST(SimulatorTest, DeadlineCutsStragglersShort) {
  sim_config c = small();
  c.model_floats = 1e4;  // compute-bound
  c.rounds = 40;
  c.straggler_prob = 0.2;
  c.straggler_factor = 10;
  auto waiting = simulate(c);
  c.deadline = actors::deadline_policy::fixed;
  c.deadline_s = 0.3;  // a normal task takes 0.16 s, a straggler's 1.6 s
  c.quorum = 4;
  auto cut = simulate(c);
  ASSERT_TRUE(waiting.has_value() && cut.has_value());
  EXPECT_EQ(waiting->closed_by_deadline, 0U);
  EXPECT_GT(cut->closed_by_deadline, 0U);
  EXPECT_GT(cut->rounds_per_hour, 1.5 * waiting->rounds_per_hour);
}

TEST(SimulatorTest, TimeBalancedIntervalsWaitLess) {
  sim_config c = small();
  c.model_floats = 1e4;
  c.rounds = 40;
  c.speed_spread = 4;
  auto fixed = simulate(c);
  c.intervals = algorithms::interval_kind::time_balanced;
  auto balanced = simulate(c);
  ASSERT_TRUE(fixed.has_value() && balanced.has_value());
  EXPECT_LT(balanced->barrier_wait_s_mean, 0.5 * fixed->barrier_wait_s_mean);
  EXPECT_GT(balanced->utilisation, fixed->utilisation);
}

TEST(SimulatorTest, RefusesABadConfiguration) {
  sim_config c = small();
  c.worker_rate = 0;
  EXPECT_FALSE(simulate(c).has_value());
}

}  // namespace
}  // namespace prsgd::sim
