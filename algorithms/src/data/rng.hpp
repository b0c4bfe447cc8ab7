// SPDX-License-Identifier: Apache-2.0
#pragma once

// Our own generator and distributions: std::shuffle and std::gamma_distribution are
// implementation-defined, and every worker must compute the same partition bit for bit.

#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>

namespace prsgd::algorithms::detail {

__extension__ using u128 = unsigned __int128;  // __extension__: -Wpedantic knows no __int128

/// Returns the splitmix64 mix of `x` (a bijection; used to derive stream seeds).
inline std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

/// Returns a seed derived from a base seed and a list of stream identifiers.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0,
                                 std::uint64_t c = 0) noexcept {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ a);
  h = splitmix64(h ^ (b + 0x632be59bd9b4e019ULL));
  return splitmix64(h ^ (c + 0x8cb92ba72f3d8dd7ULL));
}

/// Generates 64-bit values with xoshiro256** (Blackman & Vigna). Not thread-safe.
class rng {
 public:
  explicit rng(std::uint64_t seed) noexcept {
    std::uint64_t s = seed;
    for (auto& w : s_) {
      s = splitmix64(s);
      w = s;
    }
  }
  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17U;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// Returns a uniform integer in [0, n) without modulo bias (Lemire). @pre n > 0
  std::uint64_t below(std::uint64_t n) noexcept {
    u128 m = static_cast<u128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<u128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64U);
  }
  /// Returns a uniform double in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11U) * 0x1.0p-53; }
  /// Returns a standard normal draw (Marsaglia polar method).
  double normal() noexcept {
    for (;;) {
      const double u = 2 * uniform() - 1;
      const double v = 2 * uniform() - 1;
      const double s = u * u + v * v;
      if (s > 0 && s < 1) {
        return u * std::sqrt(-2 * std::log(s) / s);
      }
    }
  }
  /// Returns a Gamma(shape, 1) draw (Marsaglia & Tsang; shape < 1 boosted). @pre shape > 0
  double gamma(double shape) noexcept {
    if (shape < 1) {
      double u = uniform();
      while (u <= 0) {
        u = uniform();
      }
      return gamma(shape + 1) * std::pow(u, 1 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1 / std::sqrt(9 * d);
    for (;;) {
      double x = 0;
      double v = 0;
      do {
        x = normal();
        v = 1 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const double u = uniform();
      if (u < 1 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) {
        return d * v;
      }
    }
  }
  /// Shuffles `v` in place (Fisher-Yates).
  template <class T>
  void shuffle(std::span<T> v) noexcept {
    for (std::size_t i = v.size(); i > 1; --i) {
      const auto j = static_cast<std::size_t>(below(i));
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << static_cast<unsigned>(k)) | (x >> static_cast<unsigned>(64 - k));
  }
  std::uint64_t s_[4]{};
};

}  // namespace prsgd::algorithms::detail
