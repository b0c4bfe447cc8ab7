// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace prsgd::actors {
namespace {

TEST(MetricsJsonTest, QuotesAndEscapesStrings) {
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_quote("l1\nl2\t\r"), "\"l1\\nl2\\t\\r\"");
  EXPECT_EQ(json_quote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(json_quote("x̄"), "\"x̄\"") << "UTF-8 passes through";
}

TEST(MetricsJsonTest, RoundLineHasTheRequiredFieldsAndNulls) {
  round_metrics m;
  m.round = 12;
  m.members = 4;
  m.wall_s = 1.5;
  m.train_loss = 0.25;
  m.bytes_in = 1024;
  m.bytes_out = 2048;
  m.late = 1;
  m.duplicate = 2;
  m.rejected = 3;
  m.consensus_distance = std::nan("");
  m.rule = "step-normalised";
  m.arrival_offsets_s = {{7, 0.5}};
  const auto line = to_json_line(m);
  for (const char* field :
       {"\"round\":12", "\"members\":4", "\"wall_s\":1.5", "\"train_loss\":0.25", "\"test_acc\":null",
        "\"bytes_in\":1024", "\"bytes_out\":2048", "\"late\":1", "\"duplicate\":2", "\"rejected\":3",
        "\"consensus_distance\":null", "\"rule\":\"step-normalised\"", "\"arrival_s\":{\"7\":0.5}"}) {
    EXPECT_NE(line.find(field), std::string::npos) << field << " in " << line;
  }
  EXPECT_EQ(line.front(), '{');
  EXPECT_EQ(line.back(), '}');
  EXPECT_EQ(line.find('\n'), std::string::npos);
  m.test_acc = 0.875;
  EXPECT_NE(to_json_line(m).find("\"test_acc\":0.875"), std::string::npos);
}

TEST(MetricsWriterTest, WritesOneLinePerRoundAndADoneLine) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "prsgd_metrics_test.jsonl";
  {
    auto w = metrics_writer::open(path.string());
    ASSERT_TRUE(w.has_value());
    round_metrics m;
    m.round = 0;
    ASSERT_TRUE(w->write(m).has_value());
    m.round = 1;
    m.test_acc = 0.75;
    m.test_loss = 0.625;
    ASSERT_TRUE(w->write(m).has_value());
    ASSERT_TRUE(w->write_done(0.91, 0.25, 2, 2, 3.5).has_value());
  }
  std::ifstream in{path};
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
  }
  ASSERT_EQ(lines.size(), 3U);
  EXPECT_EQ(lines[0].rfind("{\"round\":0,", 0), 0U);
  // Not evaluated: both null. Evaluated: the loss beside the accuracy.
  EXPECT_NE(lines[0].find("\"test_acc\":null,\"test_loss\":null,"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"test_acc\":0.75,\"test_loss\":0.625,"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2],
            "{\"event\":\"done\",\"test_acc\":0.91,\"test_loss\":0.25,\"rounds\":2,\"trained_rounds\":2,"
            "\"wall_s\":3.5}");
  std::filesystem::remove(path);
}

// A resumed averager runs the rounds from its checkpoint on again: the lines the lost incarnation wrote
// for them, its done line and a line cut short by the crash are dropped, so each round keeps one line.
TEST(MetricsWriterTest, OpenResumedDropsTheLinesOfRoundsThatRunAgain) {
  const auto path = std::filesystem::path(::testing::TempDir()) / "prsgd_metrics_resumed_test.jsonl";
  {
    auto w = metrics_writer::open(path.string());
    ASSERT_TRUE(w.has_value());
    round_metrics m;
    for (round_t r = 0; r < 8; ++r) {
      m.round = r;
      ASSERT_TRUE(w->write(m).has_value());
      if (r == 2) {
        ASSERT_TRUE(w->write_resumed(3, 7).has_value());
      }
    }
    ASSERT_TRUE(w->write_done(0.5, std::nullopt, 8, 8, 1.0).has_value());
  }
  {
    std::ofstream cut{path, std::ios::app};
    cut << R"({"round":8,"members":)";  // killed in the middle of a line
  }
  {
    auto w = metrics_writer::open_resumed(path.string(), 5);
    ASSERT_TRUE(w.has_value()) << w.error().message();
    ASSERT_TRUE(w->write_resumed(5, 9).has_value());
  }
  std::ifstream in{path};
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
  }
  ASSERT_EQ(lines.size(), 7U);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i].rfind("{\"round\":" + std::to_string(i) + ",", 0), 0U) << lines[i];
  }
  EXPECT_EQ(lines[3], R"({"event":"resumed","round":3,"incarnation":7})");
  EXPECT_EQ(lines[4].rfind(R"({"round":3,)", 0), 0U);
  EXPECT_EQ(lines[5].rfind(R"({"round":4,)", 0), 0U);
  EXPECT_EQ(lines[6], R"({"event":"resumed","round":5,"incarnation":9})");
  std::filesystem::remove(path);
}

TEST(MetricsWriterTest, OpenFailsWithIoError) {
  auto w = metrics_writer::open("/nonexistent-dir/for/sure/metrics.jsonl");
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().code, errc::io_error);
}

}  // namespace
}  // namespace prsgd::actors
