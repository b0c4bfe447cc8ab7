// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/fault_injector.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace prsgd {
namespace {

fault_context send_ctx(std::string_view from = "a", std::string_view to = "b") {
  return fault_context{fault_stage::send, from, to, nullptr};
}

TEST(FaultInjectorTest, SameSeedGivesSameDecisions) {
  auto run = [](std::uint64_t seed) {
    fault_injector f(seed);
    f.add(fault_rule{.stage = fault_stage::send, .action = fault_action::drop, .probability = 0.3});
    std::vector<bool> out;
    for (int i = 0; i < 200; ++i) {
      out.push_back(f.decide(send_ctx()).triggered);
    }
    return out;
  };
  const auto a = run(42);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
  const auto hits = std::count(a.begin(), a.end(), true);
  EXPECT_GT(hits, 30);  // ~60 expected out of 200
  EXPECT_LT(hits, 90);
}

TEST(FaultInjectorTest, AfterAndTimesBoundTheTriggers) {
  fault_injector f(1);
  const auto r = f.add(fault_rule{.action = fault_action::duplicate, .after = 3, .times = 2});
  std::vector<bool> fired;
  for (int i = 0; i < 8; ++i) {
    fired.push_back(f.decide(send_ctx()).triggered);
  }
  EXPECT_EQ(fired, (std::vector<bool>{false, false, false, true, true, false, false, false}));
  EXPECT_EQ(f.triggered(r), 2U);
}

TEST(FaultInjectorTest, MatchesStageDirectionAndPredicate) {
  fault_injector f(7);
  f.add(fault_rule{.stage = fault_stage::receive,
                   .action = fault_action::delay,
                   .from = "w1",
                   .to = "avg",
                   .duration = std::chrono::milliseconds(5)});
  const multipart model{frame::copy("MODEL")};
  const multipart other{frame::copy("HEARTBEAT")};
  f.add(fault_rule{.stage = fault_stage::send, .action = fault_action::drop, .match = [](const fault_context& c) {
                     return c.message && c.message->at(0).view() == "MODEL";
                   }});
  EXPECT_FALSE(f.decide(fault_context{fault_stage::send, "w1", "avg", &other}).triggered);
  auto d = f.decide(fault_context{fault_stage::send, "w1", "avg", &model});
  EXPECT_TRUE(d.triggered);
  EXPECT_EQ(d.action, fault_action::drop);
  EXPECT_EQ(d.rule, 1U);
  EXPECT_FALSE(f.decide(fault_context{fault_stage::receive, "w2", "avg", &model}).triggered);
  auto r = f.decide(fault_context{fault_stage::receive, "w1", "avg", &model});
  ASSERT_TRUE(r.triggered);
  EXPECT_EQ(r.action, fault_action::delay);
  EXPECT_EQ(r.duration, std::chrono::milliseconds(5));
  f.clear();
  EXPECT_FALSE(f.decide(fault_context{fault_stage::receive, "w1", "avg", &model}).triggered);
}

TEST(FaultInjectorTest, DescribesSeedAndReadsItFromEnvironment) {
  fault_injector f(123);
  EXPECT_EQ(f.seed(), 123U);
  EXPECT_NE(f.describe().find("PRSGD_FAULT_SEED=123"), std::string::npos);
  ::setenv("PRSGD_FAULT_SEED", "987654321", 1);
  EXPECT_EQ(fault_injector::seed_from_env(), 987654321U);
  EXPECT_EQ(fault_injector().seed(), 987654321U);
  ::unsetenv("PRSGD_FAULT_SEED");
}

}  // namespace
}  // namespace prsgd
