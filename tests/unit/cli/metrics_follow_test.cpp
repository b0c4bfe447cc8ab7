// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/metrics_follow.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "files.hpp"

namespace {

using namespace prsgd::cli;

TEST(MetricsFollowTest, ParsesRoundLineAndSkipsNestedValues) {
  auto m = parse_metrics_line(
      R"({"round":4,"members":3,"wall_s":2.5,"train_loss":0.75,"test_acc":null,"bytes_in":100,)"
      R"("arrival_offsets_s":[[1,0.1],[2,0.2]],"rule":"samples","samples":192,"closed_by_deadline":false})");
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->done);
  EXPECT_EQ(*m->round, 4);
  EXPECT_EQ(*m->members, 3);
  EXPECT_DOUBLE_EQ(*m->wall_s, 2.5);
  EXPECT_DOUBLE_EQ(*m->train_loss, 0.75);
  EXPECT_FALSE(m->test_acc.has_value());
  EXPECT_DOUBLE_EQ(*m->samples, 192);
}

TEST(MetricsFollowTest, ParsesTheAveragersLineFormat) {
  // The shape actors/metrics.cpp writes: nested per-worker arrivals in an object.
  auto m = parse_metrics_line(
      R"({"round":7,"members":4,"submissions":4,"wall_s":3.25,"round_s":0.5,"barrier_wait_s":0.1,)"
      R"("train_loss":0.5,"test_acc":0.8125,"consensus_distance":0.01,"bytes_in":1,"bytes_out":2,"late":0,)"
      R"("duplicate":0,"rejected":0,"removed":0,"admitted":0,"closed_by_deadline":false,"interval_min":8,)"
      R"("interval_max":8,"step_size":0.05,"rule":"samples","arrival_s":{"1":0.25,"2":0.5}})");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m->round, 7);
  EXPECT_EQ(*m->members, 4);
  EXPECT_DOUBLE_EQ(*m->test_acc, 0.8125);
}

TEST(MetricsFollowTest, ParsesDoneLine) {
  auto m = parse_metrics_line(R"({"event":"done","test_acc":0.87,"rounds":20,"wall_s":31.5})");
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->done);
  EXPECT_EQ(*m->rounds, 20);
  EXPECT_DOUBLE_EQ(*m->test_acc, 0.87);
}

TEST(MetricsFollowTest, RejectsMalformedLines) {
  EXPECT_FALSE(parse_metrics_line("").has_value());
  EXPECT_FALSE(parse_metrics_line("round 3").has_value());
  EXPECT_FALSE(parse_metrics_line(R"({"round":3)").has_value());
  EXPECT_FALSE(parse_metrics_line(R"({"round":})").has_value());
  EXPECT_FALSE(parse_metrics_line(R"({"round":3} trailing)").has_value());
  EXPECT_TRUE(parse_metrics_line("{}").has_value());
}

TEST(MetricsFollowTest, ApplyBuildsSnapshotAndRate) {
  progress_snapshot s;
  apply_metrics_line(s, *parse_metrics_line(R"({"round":0,"members":2,"wall_s":1.0,"samples":100})"));
  EXPECT_EQ(s.round, 1);
  EXPECT_DOUBLE_EQ(s.samples_per_s, 100.0);
  apply_metrics_line(s, *parse_metrics_line(R"({"round":1,"members":3,"wall_s":1.5,"samples":200,"test_acc":0.5})"));
  EXPECT_EQ(s.round, 2);
  EXPECT_EQ(s.members, 3);
  EXPECT_DOUBLE_EQ(s.samples_per_s, 400.0);
  EXPECT_DOUBLE_EQ(*s.test_acc, 0.5);
  apply_metrics_line(s, *parse_metrics_line(R"({"event":"done","rounds":2,"test_acc":0.6,"wall_s":2})"));
  EXPECT_EQ(s.total_rounds, 2);
  EXPECT_DOUBLE_EQ(*s.test_acc, 0.6);
}

TEST(MetricsFollowTest, FollowerReturnsOnlyCompleteNewLines) {
  const prsgd::test::scratch_dir dir{"prsgd-follow"};
  const auto path = dir.path() / "metrics.jsonl";
  metrics_follower f{path.string()};
  EXPECT_TRUE(f.poll().empty());  // not there yet
  {
    std::ofstream out{path};
    out << "{\"round\":0}\n{\"rou" << std::flush;
  }
  auto first = f.poll();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0], "{\"round\":0}");
  {
    std::ofstream out{path, std::ios::app};
    out << "nd\":1}\n" << std::flush;
  }
  auto second = f.poll();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0], "{\"round\":1}");
  EXPECT_TRUE(f.poll().empty());
}

}  // namespace
