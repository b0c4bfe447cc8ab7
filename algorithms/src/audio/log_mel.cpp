// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/log_mel.hpp"

#include <cmath>
#include <complex>
#include <numbers>
#include <string>
#include <vector>

#include <unsupported/Eigen/FFT>

namespace prsgd::algorithms {

double hz_to_mel(double hz) noexcept { return 2595.0 * std::log10(1.0 + hz / 700.0); }

double mel_to_hz(double mel) noexcept { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

expected<log_mel> log_mel::make(const log_mel_options& o) {
  const bool pow2 = o.fft_size > 0 && (o.fft_size & (o.fft_size - 1)) == 0;
  if (o.sample_rate <= 0 || o.window_length <= 0 || o.hop_length <= 0 || !pow2 || o.fft_size < o.window_length ||
      o.num_mels <= 0 || o.min_hz < 0.0 || o.max_hz <= o.min_hz || o.max_hz > o.sample_rate / 2.0 || !(o.eps > 0.0)) {
    return fail(errc::invalid_argument,
                "log_mel: inconsistent options (need hop, window > 0, fft_size a power of "
                "two >= window, 0 <= min_hz < max_hz <= sample_rate/2, eps > 0)");
  }
  Eigen::VectorXd window(o.window_length);
  for (int n = 0; n < o.window_length; ++n) {
    // Periodic Hann (numpy: 0.5 - 0.5 cos(2 pi n / N)), as torch.hann_window and librosa use.
    window[n] = 0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * n / o.window_length);
  }
  const int bins = o.fft_size / 2 + 1;
  const double lo = hz_to_mel(o.min_hz);
  const double hi = hz_to_mel(o.max_hz);
  std::vector<double> edges(static_cast<std::size_t>(o.num_mels) + 2);
  for (std::size_t i = 0; i < edges.size(); ++i) {
    edges[i] = mel_to_hz(lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(o.num_mels + 1));
  }
  Eigen::MatrixXd filters = Eigen::MatrixXd::Zero(o.num_mels, bins);
  for (int m = 0; m < o.num_mels; ++m) {
    const double left = edges[static_cast<std::size_t>(m)];
    const double centre = edges[static_cast<std::size_t>(m) + 1];
    const double right = edges[static_cast<std::size_t>(m) + 2];
    for (int k = 0; k < bins; ++k) {
      const double f = static_cast<double>(k) * o.sample_rate / o.fft_size;
      const double w = std::min((f - left) / (centre - left), (right - f) / (right - centre));
      filters(m, k) = std::max(0.0, w);
    }
    if (filters.row(m).sum() <= 0.0) {
      return fail(errc::invalid_argument, "log_mel: mel band " + std::to_string(m) +
                                              " covers no FFT bin; use fewer bands or a larger fft_size");
    }
  }
  return log_mel(o, std::move(window), std::move(filters));
}

int log_mel::num_frames(std::size_t samples) const noexcept {
  const auto win = static_cast<std::size_t>(options_.window_length);
  if (samples < win) {
    return 0;
  }
  return 1 + static_cast<int>((samples - win) / static_cast<std::size_t>(options_.hop_length));
}

feature_matrix log_mel::compute(std::span<const float> audio) const {
  const int frames = num_frames(audio.size());
  const int bins = options_.fft_size / 2 + 1;
  feature_matrix out(frames, options_.num_mels);
  if (frames == 0) {
    return out;
  }
  // A local FFT object: Eigen::FFT caches twiddles in mutable state, so sharing one is not thread-safe.
  Eigen::FFT<double> fft;
  std::vector<double> frame(static_cast<std::size_t>(options_.fft_size), 0.0);
  std::vector<std::complex<double>> spectrum;
  Eigen::MatrixXd power(bins, frames);
  for (int t = 0; t < frames; ++t) {
    const std::size_t start = static_cast<std::size_t>(t) * static_cast<std::size_t>(options_.hop_length);
    for (int n = 0; n < options_.window_length; ++n) {
      frame[static_cast<std::size_t>(n)] = window_[n] * static_cast<double>(audio[start + static_cast<std::size_t>(n)]);
    }
    fft.fwd(spectrum, frame);
    for (int k = 0; k < bins; ++k) {
      power(k, t) = std::norm(spectrum[static_cast<std::size_t>(k)]);
    }
  }
  const Eigen::MatrixXd mel = filters_ * power;  // num_mels x frames
  out = ((mel.array() + options_.eps).log()).transpose().cast<float>();
  return out;
}

}  // namespace prsgd::algorithms
