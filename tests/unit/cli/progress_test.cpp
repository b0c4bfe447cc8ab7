// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/progress.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using namespace prsgd::cli;

progress_snapshot sample() {
  progress_snapshot s;
  s.round = 12;
  s.total_rounds = 100;
  s.epoch = 0.48;
  s.members = 4;
  s.train_loss = 0.43119;
  s.test_acc = 0.852;
  s.samples_per_s = 10300;
  s.elapsed_s = 9.6;
  return s;
}

TEST(ProgressTest, PlainLineHasEveryFieldAndOneNewline) {
  EXPECT_EQ(format_progress(sample(), progress_style::plain),
            "round 12/100 epoch 0.48 members 4 loss 0.4312 acc 85.20% 10.3k samples/s ETA 1m10s\n");
}

TEST(ProgressTest, MissingValuesShowDashesAndUnknownEta) {
  progress_snapshot s;
  s.round = 3;
  s.members = 2;
  s.samples_per_s = 950;
  EXPECT_EQ(format_progress(s, progress_style::plain),
            "round 3 epoch 0.00 members 2 loss - acc - 950 samples/s ETA ?\n");
}

TEST(ProgressTest, TtyLineRewritesInPlaceAndFitsTheWidth) {
  const auto line = format_progress(sample(), progress_style::tty, 40);
  ASSERT_GE(line.size(), 4u);
  EXPECT_EQ(line.front(), '\r');
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.substr(line.size() - 3), "\x1b[K");
  EXPECT_EQ(line.size() - 4, 39u);  // "\r" + 39 visible columns + "\x1b[K"
  EXPECT_EQ(line.substr(1, 12), "round 12/100");
}

TEST(ProgressTest, UnknownRateShowsDash) {
  auto s = sample();
  s.samples_per_s = 0;
  EXPECT_NE(format_progress(s, progress_style::plain).find(" - samples/s"), std::string::npos);
}

TEST(ProgressTest, EtaScalesElapsedByRoundsLeft) {
  auto s = sample();
  s.elapsed_s = 12;
  EXPECT_DOUBLE_EQ(*estimate_eta_s(s), 88.0);
  s.round = 100;
  EXPECT_DOUBLE_EQ(*estimate_eta_s(s), 0.0);
  s.round = 0;
  EXPECT_FALSE(estimate_eta_s(s).has_value());
}

TEST(ProgressTest, FormatsDurations) {
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(ProgressTest, ReporterEndsTtyLineOnceAndPlainNever) {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* mem = ::open_memstream(&buf, &len);
  ASSERT_NE(mem, nullptr);
  {
    progress_reporter r{mem, progress_style::tty, 80};
    r.update(sample());
    r.update(sample());
    r.finish();
    r.finish();
  }
  std::fclose(mem);
  const std::string out(buf, len);
  std::free(buf);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 2);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
  EXPECT_EQ(out.back(), '\n');
}

TEST(ProgressTest, ReporterOnNonTerminalIsPlain) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  auto r = progress_reporter::for_stream(f);
  EXPECT_EQ(r.style(), progress_style::plain);
  std::fclose(f);
}

}  // namespace
