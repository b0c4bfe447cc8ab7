// SPDX-License-Identifier: Apache-2.0
// Synthetic audio for the log-mel tests (unit and numpy-reference).
#pragma once

#include <cmath>
#include <cstddef>
#include <numbers>
#include <vector>

namespace prsgd::algorithms::test {

/// Returns `n` samples at 16 kHz of a sine at `hz` with peak `amplitude`.
inline std::vector<float> tone(std::size_t n, double hz, double amplitude) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(amplitude * std::sin(2.0 * std::numbers::pi * hz * static_cast<double>(i) / 16000.0));
  }
  return x;
}

}  // namespace prsgd::algorithms::test
