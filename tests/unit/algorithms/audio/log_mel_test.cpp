// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/log_mel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "prsgd/algorithms/wav.hpp"
#include "test_signals.hpp"

namespace prsgd::algorithms {
namespace {

using test::tone;

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

}  // namespace
}  // namespace prsgd::algorithms
