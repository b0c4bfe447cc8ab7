// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/log_mel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "prsgd/algorithms/wav.hpp"
#include "temp_dir.hpp"

namespace prsgd::algorithms {
namespace {

// Largest allowed |C++ - numpy| per log-mel value (natural-log units, i.e. 0.01% relative energy). The
// C++ side computes in double and rounds to float; the observed error is ~5e-7, so this leaves 200x margin.
constexpr double reference_tolerance = 1e-4;

std::vector<float> tone(std::size_t n, double hz, double amplitude) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(amplitude * std::sin(2.0 * std::numbers::pi * hz * static_cast<double>(i) / 16000.0));
  }
  return x;
}

log_mel make_default() {
  auto m = log_mel::make();
  EXPECT_TRUE(m.has_value());
  return std::move(m).value();
}

TEST(LogMelTest, OneSecondGives98By40) {
  const log_mel mel = make_default();
  EXPECT_EQ(mel.num_frames(16000), 98);
  EXPECT_EQ(mel.num_frames(399), 0);
  EXPECT_EQ(mel.num_frames(400), 1);
  const feature_matrix f = mel.compute(tone(16000, 440.0, 0.5));
  EXPECT_EQ(f.rows(), 98);
  EXPECT_EQ(f.cols(), 40);
  EXPECT_EQ(mel.filter_bank().rows(), 40);
  EXPECT_EQ(mel.filter_bank().cols(), 257);
  EXPECT_EQ(mel.compute(std::vector<float>(100)).rows(), 0);
}

TEST(LogMelTest, SilenceGivesLogEps) {
  const log_mel mel = make_default();
  const feature_matrix f = mel.compute(std::vector<float>(16000, 0.0f));
  EXPECT_NEAR(f.maxCoeff(), std::log(1e-6), 1e-5);
  EXPECT_NEAR(f.minCoeff(), std::log(1e-6), 1e-5);
}

TEST(LogMelTest, ToneLightsUpTheBandAroundItsFrequency) {
  const log_mel mel = make_default();
  for (const double hz : {300.0, 1000.0, 4000.0}) {
    const feature_matrix f = mel.compute(tone(16000, hz, 0.5));
    Eigen::Index band = 0;
    f.row(50).maxCoeff(&band);
    // The winning triangle must contain the tone: its edges are bands band-1 .. band+1 in mel.
    const double lo = hz_to_mel(20.0);
    const double step = (hz_to_mel(8000.0) - lo) / 41.0;
    EXPECT_LT(mel_to_hz(lo + step * static_cast<double>(band)), hz) << hz;
    EXPECT_GT(mel_to_hz(lo + step * static_cast<double>(band + 2)), hz) << hz;
  }
}

TEST(LogMelTest, HtkMelScaleRoundTrips) {
  EXPECT_NEAR(hz_to_mel(700.0), 2595.0 * std::log10(2.0), 1e-9);
  EXPECT_NEAR(mel_to_hz(hz_to_mel(1234.5)), 1234.5, 1e-9);
}

TEST(LogMelTest, RejectsInconsistentOptions) {
  log_mel_options small_fft;
  small_fft.fft_size = 256;  // < window 400
  EXPECT_EQ(log_mel::make(small_fft).error().code, errc::invalid_argument);
  log_mel_options not_pow2;
  not_pow2.fft_size = 500;
  EXPECT_EQ(log_mel::make(not_pow2).error().code, errc::invalid_argument);
  log_mel_options too_many_bands;
  too_many_bands.num_mels = 200;  // low bands narrower than one 31.25 Hz bin
  EXPECT_EQ(log_mel::make(too_many_bands).error().code, errc::invalid_argument);
  log_mel_options above_nyquist;
  above_nyquist.max_hz = 9000.0;
  EXPECT_EQ(log_mel::make(above_nyquist).error().code, errc::invalid_argument);
}

// Compares with tests/unit/algorithms/audio/log_mel_reference.py (numpy's own FFT, float64).
TEST(LogMelTest, MatchesNumpyReference) {
  test::temp_dir dir;
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

  std::string files;
  std::vector<std::vector<float>> stored;
  for (std::size_t s = 0; s < signals.size(); ++s) {
    const auto p = dir.path() / ("ref" + std::to_string(s) + ".wav");
    ASSERT_TRUE(write_wav(p, signals[s], 16000).has_value());
    auto back = read_wav(p);  // what both sides see: the 16-bit quantised signal
    ASSERT_TRUE(back.has_value());
    stored.push_back(std::move(back).value());
    files += " '" + p.string() + "'";
  }
  const auto out = dir.path() / "reference.txt";
  const std::string cmd =
      "/usr/bin/python3 '" PRSGD_AUDIO_TEST_DIR "/log_mel_reference.py' '" + out.string() + "'" + files;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (needs python3-numpy, see ops/install-deps.sh)";

  const log_mel mel = make_default();
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
