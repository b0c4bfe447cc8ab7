// SPDX-License-Identifier: Apache-2.0
// The C++ log-mel features against an independent numpy implementation (log_mel_reference.py, run with
// /usr/bin/python3 as a child process) on synthetic signals.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.hpp"
#include "prsgd/algorithms/log_mel.hpp"
#include "prsgd/algorithms/wav.hpp"
#include "test_signals.hpp"

namespace prsgd::algorithms {
namespace {

// Largest allowed |C++ - numpy| per log-mel value (natural-log units, i.e. 0.01% relative energy). The
// C++ side computes in double and rounds to float; the observed error is ~5e-7, so this leaves 200x margin.
constexpr double reference_tolerance = 1e-4;

using test::tone;

TEST(LogMelReferenceTest, MatchesNumpyReference) {
  prsgd::test::scratch_dir dir{"prsgd-log-mel"};
  std::vector<std::vector<float>> signals;
  // A chirp from 100 Hz to 7 kHz.
  std::vector<float> chirp(16000);
  for (std::size_t i = 0; i < chirp.size(); ++i) {
    const double t = static_cast<double>(i) / 16000.0;
    chirp[i] = static_cast<float>(0.6 * std::sin(2.0 * std::numbers::pi * (100.0 * t + 0.5 * 6900.0 * t * t)));
  }
  signals.push_back(chirp);
  // Seeded white noise with a silent second half (exercises values near log(eps)).
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 0.1f);
  std::vector<float> noise(16000, 0.0f);
  for (std::size_t i = 0; i < 8000; ++i) {
    noise[i] = gauss(rng);
  }
  signals.push_back(noise);
  // Two amplitude-modulated tones, half a second long (48 frames).
  std::vector<float> am = tone(8000, 300.0, 0.4);
  const std::vector<float> high = tone(8000, 2500.0, 0.2);
  for (std::size_t i = 0; i < am.size(); ++i) {
    am[i] = (am[i] + high[i]) * static_cast<float>(0.5 + 0.5 * std::sin(0.003 * static_cast<double>(i)));
  }
  signals.push_back(am);

  const auto out = dir.path() / "reference.txt";
  std::vector<std::string> reference{"/usr/bin/python3", PRSGD_ALGORITHMS_TEST_DIR "/log_mel_reference.py", out};
  std::vector<std::vector<float>> stored;
  for (std::size_t s = 0; s < signals.size(); ++s) {
    const auto p = dir.path() / ("ref" + std::to_string(s) + ".wav");
    ASSERT_TRUE(write_wav(p, signals[s], 16000).has_value());
    auto back = read_wav(p);  // what both sides see: the 16-bit quantised signal
    ASSERT_TRUE(back.has_value());
    stored.push_back(std::move(back).value());
    reference.push_back(p);
  }
  ASSERT_EQ(prsgd::test::run(reference, {}).status, 0) << "needs python3-numpy (see ops/install-deps.sh)";

  auto made = log_mel::make();
  ASSERT_TRUE(made.has_value());
  const log_mel mel = std::move(made).value();
  std::ifstream in(out);
  double worst = 0.0;
  for (const auto& x : stored) {
    int rows = 0;
    int cols = 0;
    ASSERT_TRUE(in >> rows >> cols);
    const feature_matrix f = mel.compute(x);
    ASSERT_EQ(rows, f.rows());
    ASSERT_EQ(cols, f.cols());
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        double want = 0.0;
        ASSERT_TRUE(in >> want);
        worst = std::max(worst, std::abs(want - static_cast<double>(f(r, c))));
      }
    }
  }
  EXPECT_LT(worst, reference_tolerance);
  RecordProperty("max_abs_error", std::to_string(worst));
  std::printf("log-mel vs numpy: max |error| = %.3g (tolerance %.0e)\n", worst, reference_tolerance);
}

}  // namespace
}  // namespace prsgd::algorithms
