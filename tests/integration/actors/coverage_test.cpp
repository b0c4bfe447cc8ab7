// SPDX-License-Identifier: Apache-2.0
// Per-sample coverage of real `prsgd averager` / `prsgd worker` processes under churn: workers join
// mid-epoch, one leaves (SIGTERM: LEAVE), one is killed with SIGKILL, and another joins in its place. The
// averager's metrics lines list the ranges each accepted submission trained on ("data": positions of the
// epoch's permutation of the training set, a bijection, so every position stands for one sample); every
// position must appear there exactly once per epoch, for every epoch the job ran, and the job must end
// after its --epochs passes whatever the membership.
#include <gtest/gtest.h>
#include <signal.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "prsgd_job.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

constexpr int train_samples = 1200;
constexpr int epochs = 3;

/// One round's line: its epoch field and the [member, epoch, begin, end] entries of "data".
struct round_line {
  double epoch = -1;
  std::vector<std::array<std::uint64_t, 4>> data;
  int removed = 0;
};

std::vector<round_line> round_lines(const std::string& file) {
  std::vector<round_line> out;
  std::ifstream in{file};
  std::string text;
  const std::regex epoch_re{"\"epoch\":([0-9.eE+-]+)"};
  const std::regex removed_re{"\"removed\":([0-9]+)"};
  while (std::getline(in, text)) {
    if (text.empty() || text.back() != '}' || text.find("\"event\"") != std::string::npos ||
        text.find("\"round\"") == std::string::npos) {
      continue;
    }
    round_line l;
    std::smatch m;
    if (std::regex_search(text, m, epoch_re)) {
      l.epoch = std::stod(m[1].str());
    }
    if (std::regex_search(text, m, removed_re)) {
      l.removed = std::stoi(m[1].str());
    }
    const auto at = text.find("\"data\":[");
    if (at != std::string::npos) {
      const auto end = text.find("]]", at);
      const auto stop = end == std::string::npos ? at + 8 : end + 1;
      std::vector<std::uint64_t> nums;
      const char* p = text.c_str() + at + 8;
      while (static_cast<std::size_t>(p - text.c_str()) < stop) {
        if (*p >= '0' && *p <= '9') {
          char* next = nullptr;
          nums.push_back(std::strtoull(p, &next, 10));
          p = next;
        } else {
          ++p;
        }
      }
      for (std::size_t k = 0; k + 3 < nums.size(); k += 4) {
        l.data.push_back({nums[k], nums[k + 1], nums[k + 2], nums[k + 3]});
      }
    }
    out.push_back(std::move(l));
  }
  return out;
}

class CoverageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A small CSV data set: label in column 0, four features.
    std::filesystem::create_directories(data_dir_);
    std::ofstream train{data_dir_ + "/train.csv"};
    for (int i = 0; i < train_samples; ++i) {
      const int label = i % 3;
      train << label << ',' << label + 0.01 * (i % 7) << ',' << 0.5 * label << ',' << (i % 5) * 0.1 << ",1\n";
    }
    std::ofstream test_set{data_dir_ + "/test.csv"};
    for (int i = 0; i < 30; ++i) {
      test_set << i % 3 << ',' << i % 3 << ',' << 0.5 * (i % 3) << ",0.2,1\n";
    }
  }

  std::vector<std::string> data_args() const {
    return {"--dataset", "csv", "--data-dir", data_dir_, "--model", "mlp:4-8-3", "--batch", "8", "--lr", "0.05"};
  }

  pid_t start_worker(int id) {
    auto args = data_args();
    args.insert(args.end(), {"--heartbeat-ms", "100", "--heartbeat-timeout-ms", test::scaled_ms(1500ms),
                             "--slowdown-ms", "10", "--progress", "off"});
    return job_.start_worker(id, args);
  }

  std::size_t lines_now() const { return round_lines(metrics_).size(); }

  bool wait_lines(std::size_t n) {
    return test::wait_until([&] { return lines_now() >= n; }, 60s);
  }

  test::prsgd_job job_{PRSGD_BINARY, "prsgd-coverage"};
  std::string metrics_ = job_.path("metrics.jsonl");
  std::string data_dir_ = job_.path("data");
};

TEST_F(CoverageTest, EverySampleOncePerEpochWithJoinsALeaveAndAKill) {
  auto args = data_args();
  args.insert(args.end(), {"--epochs", std::to_string(epochs), "--interval", "4", "--min-workers", "2", "--max-workers",
                           "4", "--heartbeat-ms", "100", "--heartbeat-timeout-ms", test::scaled_ms(1500ms),
                           "--metrics-jsonl", metrics_, "--progress", "off", "--eval-every", "0"});
  auto averager = job_.start_averager(args);
  ASSERT_TRUE(averager) << job_.log("averager");
  const pid_t w1 = start_worker(1);
  const pid_t w2 = start_worker(2);
  ASSERT_TRUE(wait_lines(3)) << job_.log("averager");
  (void)start_worker(3);  // joins in the first epoch
  ASSERT_TRUE(wait_lines(10)) << job_.log("averager");
  ASSERT_EQ(::kill(w1, SIGTERM), 0);  // leaves (status 3: stopped by a signal)
  EXPECT_EQ(job_.wait_exit(w1, 30s), 3) << job_.log("worker-1");
  ASSERT_TRUE(wait_lines(16)) << job_.log("averager");
  const double epoch_at_kill = round_lines(metrics_).back().epoch;
  EXPECT_GT(epoch_at_kill, 0.0);
  EXPECT_LT(epoch_at_kill, static_cast<double>(epochs) - 0.5) << "the kill comes mid-job";
  ASSERT_EQ(::kill(w2, SIGKILL), 0);  // dies mid-round: its samples go back after the heartbeat timeout
  (void)start_worker(4);
  EXPECT_EQ(job_.wait_exit(averager->pid, 180s), 0) << job_.log("averager");

  const auto lines = round_lines(metrics_);
  ASSERT_FALSE(lines.empty());
  std::map<std::uint64_t, std::vector<int>> hits;
  int removed = 0;
  for (const auto& l : lines) {
    removed += l.removed;
    for (const auto& [member, epoch, begin, end] : l.data) {
      ASSERT_LT(begin, end);
      ASSERT_LE(end, static_cast<std::uint64_t>(train_samples));
      auto& h = hits[epoch];
      h.resize(train_samples, 0);
      for (auto i = begin; i < end; ++i) {
        ++h[i];
      }
    }
  }
  EXPECT_GE(removed, 1) << "the killed worker was removed mid-round";
  std::set<std::uint64_t> trained_by;
  for (const auto& l : lines) {
    for (const auto& d : l.data) {
      trained_by.insert(d[0]);
    }
  }
  EXPECT_EQ(trained_by.size(), 4U) << "all four workers had submissions accepted";
  ASSERT_EQ(hits.size(), static_cast<std::size_t>(epochs)) << "exactly --epochs passes";
  for (const auto& [epoch, h] : hits) {
    int missing = 0;
    int twice = 0;
    for (int x : h) {
      missing += x == 0 ? 1 : 0;
      twice += x > 1 ? 1 : 0;
    }
    EXPECT_EQ(missing, 0) << "epoch " << epoch;
    EXPECT_EQ(twice, 0) << "epoch " << epoch;
  }
  EXPECT_DOUBLE_EQ(lines.back().epoch, static_cast<double>(epochs)) << "the epoch field counts passes";
}

}  // namespace
