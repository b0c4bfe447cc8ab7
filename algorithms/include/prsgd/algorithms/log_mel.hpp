// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <span>

#include <Eigen/Core>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Parameters of a log-mel spectrogram. The defaults give 98 x 40 features per second of 16 kHz audio.
struct log_mel_options {
  /// Sample rate of the input audio in Hz.
  int sample_rate = 16000;
  /// Analysis window in samples (400 = 25 ms at 16 kHz); periodic Hann, zero-padded to fft_size.
  int window_length = 400;
  /// Hop between frames in samples (160 = 10 ms at 16 kHz).
  int hop_length = 160;
  /// FFT size, a power of two >= window_length.
  int fft_size = 512;
  /// Number of mel bands.
  int num_mels = 40;
  /// Lower edge of the lowest mel band in Hz.
  double min_hz = 20.0;
  /// Upper edge of the highest mel band in Hz (at most sample_rate / 2).
  double max_hz = 8000.0;
  /// Added to each band's energy before the natural log, so silence gives log(eps).
  double eps = 1e-6;
};

/// Row-major frames x mels feature matrix: row t is frame t, so its data is a {1, frames, mels} sample.
using feature_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Computes log-mel spectrograms: frame t covers samples [t*hop, t*hop + window) (no centring, no
/// padding), times a periodic Hann window, zero-padded to fft_size, power spectrum |X_k|^2 of the
/// first fft_size/2+1 bins (Eigen's FFT module, kissfft backend, in double), HTK mel scale
/// mel(f) = 2595 log10(1 + f/700) with num_mels triangular filters of peak 1 (no area normalisation,
/// like librosa htk=True, norm=None) whose edges are equally spaced in mel between min_hz and max_hz,
/// then log(energy + eps). The scale of the input is taken as is (WAV samples in [-1, 1)).
/// Thread-safe: compute() is const and keeps no mutable state.
class log_mel {
 public:
  /// Builds the window and filter bank; returns invalid_argument for inconsistent options or a mel
  /// band that covers no FFT bin.
  [[nodiscard]] static expected<log_mel> make(const log_mel_options& options = {});

  /// Returns the log-mel features of `audio`: num_frames(audio.size()) rows x num_mels columns.
  [[nodiscard]] feature_matrix compute(std::span<const float> audio) const;

  /// Returns the number of frames for `samples` samples: 1 + (samples - window) / hop, or 0 if shorter.
  [[nodiscard]] int num_frames(std::size_t samples) const noexcept;

  /// Returns the options this was made with.
  [[nodiscard]] const log_mel_options& options() const noexcept { return options_; }

  /// Returns the mel filter bank, num_mels x (fft_size / 2 + 1).
  [[nodiscard]] const Eigen::MatrixXd& filter_bank() const noexcept { return filters_; }

 private:
  log_mel(const log_mel_options& options, Eigen::VectorXd window, Eigen::MatrixXd filters)
      : options_(options), window_(std::move(window)), filters_(std::move(filters)) {}

  log_mel_options options_;
  Eigen::VectorXd window_;
  Eigen::MatrixXd filters_;
};

/// Converts a frequency in Hz to HTK mels: 2595 log10(1 + hz / 700).
[[nodiscard]] double hz_to_mel(double hz) noexcept;
/// Converts HTK mels back to Hz.
[[nodiscard]] double mel_to_hz(double mel) noexcept;

}  // namespace prsgd::algorithms
