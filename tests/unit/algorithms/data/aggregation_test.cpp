// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/aggregation.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace {

using prsgd::errc;
using namespace prsgd::algorithms;

// Not a multiple of the kernel's 512-float block, so the last block is partial.
constexpr std::size_t len = 512 * 3 + 37;

std::vector<contribution> wrap(const std::vector<std::vector<float>>& models) {
  std::vector<contribution> out;
  for (const auto& m : models) {
    out.push_back({m, 1, 1});
  }
  return out;
}

// One coordinate per model: models[i] = {values[i]}.
std::vector<std::vector<float>> scalars(const std::vector<float>& values) {
  std::vector<std::vector<float>> out;
  for (float v : values) {
    out.push_back({v});
  }
  return out;
}

float combine1(const std::vector<float>& values, const std::vector<double>& weights, aggregate_options o) {
  const auto models = scalars(values);
  const auto in = wrap(models);
  std::vector<float> out(1);
  const auto done = aggregate(in, weights, {}, o, out);
  EXPECT_TRUE(done.has_value()) << done.error().message();
  return out[0];
}

aggregate_options rule(aggregate_rule r, double trim = 0.25, double clip = 0) { return {r, trim, clip}; }

// The definition, written the slow way: sort (value, weight) pairs per coordinate in double and weigh the
// sorted values with trimmed_coefficients.
std::vector<float> reference_rule(const std::vector<std::vector<float>>& models, const std::vector<double>& w,
                                  const std::vector<float>& ref, double beta) {
  const double s = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<float> out(ref.size());
  for (std::size_t k = 0; k < ref.size(); ++k) {
    std::vector<std::pair<double, double>> vq;
    for (std::size_t i = 0; i < models.size(); ++i) {
      vq.emplace_back(static_cast<double>(models[i][k]) - ref[k], w[i] / s);
    }
    std::sort(vq.begin(), vq.end());
    std::vector<double> q;
    for (const auto& p : vq) {
      q.push_back(p.second);
    }
    const auto r = trimmed_coefficients(q, beta);
    double acc = 0;
    for (std::size_t j = 0; j < r.size(); ++j) {
      acc += r[j] * vq[j].first;
    }
    out[k] = static_cast<float>(ref[k] + s * acc);
  }
  return out;
}

// Weights for the kernel tests: all equal; near-equal (sample counts 512 + a few, which leave the median only
// one or two undecided positions and take the cut-down kernels); or spread over a factor 30 (the full sort).
enum class weight_spread : std::uint8_t { equal, near, wide };

std::vector<double> spread_weights(std::size_t n, weight_spread spread, std::mt19937& gen) {
  std::vector<double> w(n, 1.0 / static_cast<double>(n));
  for (auto& x : w) {
    if (spread == weight_spread::near) {
      x = (512.0 + static_cast<double>(gen() % 8)) / (512.0 * static_cast<double>(n));
    } else if (spread == weight_spread::wide) {
      x = std::uniform_real_distribution<double>(0.1, 3.0)(gen);
    }
  }
  return w;
}

// N models of `coords` normal values with a reference point; one value in `one_in` (on average) of the models
// is special: a tie (0.5, ±0), an infinity of either sign or NaN.
struct models_with_specials {
  std::vector<std::vector<float>> models;
  std::vector<float> ref;
};

models_with_specials make_models_with_specials(std::size_t n, std::size_t coords, unsigned one_in, std::mt19937& gen) {
  std::normal_distribution<float> value(0.0F, 1.0F);
  const std::vector<float> specials{0.0F,
                                    -0.0F,
                                    0.5F,
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::quiet_NaN()};
  models_with_specials out{std::vector<std::vector<float>>(n, std::vector<float>(coords)), std::vector<float>(coords)};
  for (std::size_t k = 0; k < coords; ++k) {
    out.ref[k] = value(gen);
    for (auto& m : out.models) {
      m[k] = gen() % one_in == 0 ? specials[gen() % specials.size()] : value(gen);
    }
  }
  return out;
}

TEST(AggregationTest, ParsesEveryRuleAndNamesTheChoicesOnATypo) {
  for (auto r :
       {aggregate_rule::mean, aggregate_rule::trimmed_mean, aggregate_rule::median, aggregate_rule::norm_clip}) {
    const auto parsed = parse_aggregate_rule(to_string(r));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, r);
  }
  const auto bad = parse_aggregate_rule("trimmed");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_NE(bad.error().message().find("mean | trimmed-mean | median | norm-clip"), std::string::npos);
}

TEST(AggregationTest, TrimmedCoefficientsRemoveWeightMassFromBothEnds) {
  const auto quarter = trimmed_coefficients(std::vector<double>(4, 0.25), 0.25);
  EXPECT_EQ(quarter, (std::vector<double>{0, 0.5, 0.5, 0}));
  const auto fifth = trimmed_coefficients(std::vector<double>(5, 0.2), 0.2);
  for (std::size_t j = 0; j < 5; ++j) {
    EXPECT_NEAR(fifth[j], j == 0 || j == 4 ? 0.0 : 1.0 / 3, 1e-12) << j;
  }
  // A fractional trim takes part of the extreme values' mass: c = .25 .5 .75 1, keep [0.1, 0.9].
  const auto partial = trimmed_coefficients(std::vector<double>(4, 0.25), 0.1);
  EXPECT_NEAR(partial[0], 0.15 / 0.8, 1e-12);
  EXPECT_NEAR(partial[1], 0.25 / 0.8, 1e-12);
  EXPECT_NEAR(partial[2], 0.25 / 0.8, 1e-12);
  EXPECT_NEAR(partial[3], 0.15 / 0.8, 1e-12);
  // β = 0 is the weighted mean.
  EXPECT_EQ(trimmed_coefficients(std::vector<double>{0.3, 0.7}, 0), (std::vector<double>{0.3, 0.7}));
}

TEST(AggregationTest, MedianOfEqualWeightsIsTheMiddleValueOrTheMeanOfTheTwoMiddleOnes) {
  EXPECT_FLOAT_EQ(combine1({3, -1, 7}, {1.0 / 3, 1.0 / 3, 1.0 / 3}, rule(aggregate_rule::median)), 3);
  EXPECT_NEAR(combine1({1, 10, 2, 3}, {0.25, 0.25, 0.25, 0.25}, rule(aggregate_rule::median)), 2.5, 1e-4);
  EXPECT_FLOAT_EQ(combine1({5}, {1}, rule(aggregate_rule::median)), 5);
  // Two values: the median is their mean.
  EXPECT_NEAR(combine1({1, 4}, {0.5, 0.5}, rule(aggregate_rule::median)), 2.5, 1e-4);
}

TEST(AggregationTest, WeightedMedianIsWhereTheCumulativeWeightCrossesOneHalf) {
  // Sorted: 1 (0.1), 2 (0.2), 5 (0.7): the cumulative weight crosses 1/2 inside the value 5.
  EXPECT_FLOAT_EQ(combine1({5, 1, 2}, {0.7, 0.1, 0.2}, rule(aggregate_rule::median)), 5);
  // Exactly 1/2 after the second value: the mean of the values on either side.
  EXPECT_NEAR(combine1({1, 2, 3}, {0.25, 0.25, 0.5}, rule(aggregate_rule::median)), 2.5, 1e-4);
  // Weights that do not sum to 1 (step-normalised) scale the result by their sum.
  EXPECT_FLOAT_EQ(combine1({5, 1, 2}, {1.4, 0.2, 0.4}, rule(aggregate_rule::median)), 10);
}

TEST(AggregationTest, WeightedTrimmedMeanKeepsTheMiddleMass) {
  // Sorted 1 (0.4), 2 (0.2), 3 (0.2), 4 (0.2), β = 0.25: c = .4 .6 .8 1, keep [0.25, 0.75]:
  // r = 0.15/0.5, 0.2/0.5, 0.15/0.5, 0 → 0.3 + 0.8 + 0.9.
  EXPECT_NEAR(combine1({4, 3, 1, 2}, {0.2, 0.2, 0.4, 0.2}, rule(aggregate_rule::trimmed_mean, 0.25)), 2.0, 1e-5);
  // Equal weights, β = 1/4 of 4: the mean of the two middle values.
  EXPECT_NEAR(combine1({100, 1, 2, -50}, {0.25, 0.25, 0.25, 0.25}, rule(aggregate_rule::trimmed_mean, 0.25)), 1.5,
              1e-5);
  // β = 0: the weighted mean.
  EXPECT_NEAR(combine1({1, 3}, {0.25, 0.75}, rule(aggregate_rule::trimmed_mean, 0)), 2.5, 1e-6);
}

TEST(AggregationTest, TheWeightSumScalesTheCombinedUpdate) {
  // Step-normalised weights need not sum to 1: x̄' = x̄ + s·A(u; q) with s = Σ w.
  const std::vector<std::vector<float>> models{{2}, {4}, {30}};
  const std::vector<float> ref{1};
  std::vector<float> out(1);
  ASSERT_TRUE(aggregate(wrap(models), std::vector<double>{0.5, 0.5, 0.5}, ref, rule(aggregate_rule::median), out));
  EXPECT_NEAR(out[0], 1 + 1.5 * 3, 1e-5);  // median update 3, s = 1.5
  ASSERT_TRUE(aggregate(wrap(models), std::vector<double>{0.5, 0.5, 0.5}, ref, rule(aggregate_rule::mean), out));
  EXPECT_NEAR(out[0], 1 + 0.5 * (1 + 3 + 29), 1e-5);
}

TEST(AggregationTest, NormClipScalesLongUpdatesDownToTheRadius) {
  const std::vector<std::vector<float>> models{{3, 4}, {1, 0}};
  std::vector<float> out(2);
  ASSERT_TRUE(
      aggregate(wrap(models), std::vector<double>{0.5, 0.5}, {}, rule(aggregate_rule::norm_clip, 0.25, 2), out));
  EXPECT_NEAR(out[0], 0.5 * (1.2 + 1), 1e-6);  // (3,4) clipped to norm 2 is (1.2, 1.6)
  EXPECT_NEAR(out[1], 0.5 * 1.6, 1e-6);
  // clip 0: the median of the norms 5 and 1, 3: (3,4) becomes (1.8, 2.4).
  ASSERT_TRUE(aggregate(wrap(models), std::vector<double>{0.5, 0.5}, {}, rule(aggregate_rule::norm_clip), out));
  EXPECT_NEAR(out[0], 0.5 * (1.8 + 1), 1e-6);
  EXPECT_NEAR(out[1], 0.5 * 2.4, 1e-6);
}

TEST(AggregationTest, VectorisedKernelMatchesTheDefinitionForEveryNAndWeights) {
  std::mt19937 gen(7);
  std::normal_distribution<float> value(0.0F, 1.0F);
  // Up to 17: every register kernel (1..16) and the blocked path beyond them.
  for (std::size_t n = 1; n <= 17; ++n) {
    // Fewer coordinates for the larger N (still a partial 512-float block for the blocked path at 17).
    const std::size_t coords = n <= 9 ? len : 600;
    std::vector<std::vector<float>> models(n, std::vector<float>(coords));
    std::vector<float> ref(coords);
    for (auto& x : ref) {
      x = value(gen);
    }
    for (auto& m : models) {
      for (auto& x : m) {
        x = value(gen);
      }
    }
    // A few exact ties, which the sort must keep consistent with their weights.
    for (std::size_t k = 0; k < coords; k += 97) {
      for (auto& m : models) {
        m[k] = 0.5F;
      }
    }
    for (const weight_spread spread : {weight_spread::equal, weight_spread::near, weight_spread::wide}) {
      const bool equal = spread == weight_spread::equal;
      const auto w = spread_weights(n, spread, gen);
      for (const auto& [r, beta] :
           {std::pair{aggregate_rule::trimmed_mean, 0.2}, std::pair{aggregate_rule::trimmed_mean, 0.0},
            std::pair{aggregate_rule::median, 0.5 - median_tie_mass}}) {
        std::vector<float> out(coords);
        ASSERT_TRUE(aggregate(wrap(models), w, ref, rule(r, r == aggregate_rule::median ? 0.25 : beta), out));
        const auto want = reference_rule(models, w, ref, beta);
        for (std::size_t k = 0; k < coords; ++k) {
          ASSERT_NEAR(out[k], want[k], 2e-4)
              << "n=" << n << " equal=" << equal << " rule=" << to_string(r) << " k=" << k;
        }
      }
    }
  }
}

// The register kernels compute several coordinates per vector and finish with a scalar loop: every lane must
// do exactly the scalar arithmetic, so a coordinate combined among len others and the same coordinate
// combined alone (the scalar loop) are the same bits, ties, infinities, signed zeros and NaNs included.
TEST(AggregationTest, VectorLanesGiveTheBitsOfTheScalarLoop) {
  std::mt19937 gen(11);
  constexpr std::size_t coords = 8 * 5 + 3;
  for (std::size_t n = 1; n <= 16; ++n) {
    auto data = make_models_with_specials(n, coords, 4, gen);  // every fourth value special
    auto& models = data.models;
    const auto& ref = data.ref;
    for (const weight_spread spread : {weight_spread::equal, weight_spread::near, weight_spread::wide}) {
      const bool equal = spread == weight_spread::equal;
      const auto w = spread_weights(n, spread, gen);
      for (const auto& o : {rule(aggregate_rule::median), rule(aggregate_rule::trimmed_mean, 0.25),
                            rule(aggregate_rule::trimmed_mean, 0.1)}) {
        std::vector<float> all(coords);
        ASSERT_TRUE(aggregate(wrap(models), w, ref, o, all));
        for (std::size_t k = 0; k < coords; ++k) {
          std::vector<std::vector<float>> one;
          for (const auto& m : models) {
            one.push_back({m[k]});
          }
          std::vector<float> alone(1);
          ASSERT_TRUE(aggregate(wrap(one), w, std::vector<float>{ref[k]}, o, alone));
          std::uint32_t a = 0;
          std::uint32_t b = 0;
          std::memcpy(&a, &all[k], sizeof a);
          std::memcpy(&b, &alone[0], sizeof b);
          ASSERT_EQ(a, b) << "n=" << n << " equal=" << equal << " rule=" << to_string(o.rule) << " k=" << k << ": "
                          << all[k] << " among others, " << alone[0] << " alone";
        }
      }
    }
  }
}

// Above streaming_store_threshold() the kernels write out with non-temporal stores; an out that is not on 16
// bytes is written normally. Either way the results are the bits of the normal stores.
TEST(AggregationTest, StreamingStoresGiveTheBitsOfNormalStores) {
  std::mt19937 gen(13);
  std::normal_distribution<float> value(0.0F, 1.0F);
  constexpr std::size_t coords = 8 * 9 + 5;
  for (std::size_t n : {3, 4, 8, 16}) {
    std::vector<std::vector<float>> models(n, std::vector<float>(coords));
    std::vector<float> ref(coords);
    for (std::size_t k = 0; k < coords; ++k) {
      ref[k] = value(gen);
      for (auto& m : models) {
        m[k] = value(gen);
      }
    }
    for (const weight_spread spread : {weight_spread::equal, weight_spread::near, weight_spread::wide}) {
      const auto w = spread_weights(n, spread, gen);
      for (const auto& o : {rule(aggregate_rule::median), rule(aggregate_rule::trimmed_mean, 0.25)}) {
        std::vector<float> normal(coords);
        const std::size_t old = set_streaming_store_threshold(std::numeric_limits<std::size_t>::max());
        ASSERT_TRUE(aggregate(wrap(models), w, ref, o, normal));
        set_streaming_store_threshold(1);
        std::vector<float> streamed(coords);
        std::vector<float> shifted(coords + 1);  // out one float past a 16-byte boundary
        const auto a = aggregate(wrap(models), w, ref, o, streamed);
        const auto b = aggregate(wrap(models), w, ref, o, std::span<float>(shifted).subspan(1));
        set_streaming_store_threshold(old);
        ASSERT_TRUE(a.has_value() && b.has_value());
        EXPECT_EQ(std::memcmp(normal.data(), streamed.data(), coords * sizeof(float)), 0) << n;
        EXPECT_EQ(std::memcmp(normal.data(), shifted.data() + 1, coords * sizeof(float)), 0) << n;
      }
    }
  }
}

// The exact results of the trimmed mean and the median, pinned as a hash of their bits: every N up to 17 (the
// register kernels and the blocked path after them), odd and even, equal weights, near-equal sample counts,
// weights spread over a factor 30 and weights with exact ties at β and at 1/2 (integers 1..N shuffled, or pairs
// of equal weights), with and without a reference, β = 0, 0.1, 0.25, 0.4999 and the median. The values come from
// a fixed integer generator (no library distribution), many of them tied (multiples of 1/4) or ±0.
// Kernels may change how they compute; these bits may not.
std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h = (h ^ p[i]) * 1099511628211ULL;
  }
  return h;
}

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

// A value in [-4, 4): a quarter of them multiples of 1/4 (ties across inputs), a few ±0.
float pinned_value(std::uint64_t& state) {
  const std::uint64_t r = splitmix(state);
  const auto mantissa = static_cast<float>(r >> 40U) / 16777216.0F;  // [0, 1) on a 2^-24 grid
  switch (r % 16) {
    case 0: return 0.0F;
    case 1: return -0.0F;
    case 2:
    case 3:
    case 4:
    case 5: return static_cast<float>(static_cast<int>(r >> 8U) % 32 - 16) / 4.0F;
    default: return mantissa * 8.0F - 4.0F;
  }
}

std::vector<double> pinned_weights(std::size_t n, int kind) {
  std::vector<double> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: w[i] = 1.0 / static_cast<double>(n); break;                     // equal
      case 1: w[i] = 512.0 + static_cast<double>((i * 5) % 8); break;         // near-equal sample counts
      case 2: w[i] = 0.1 + static_cast<double>((i * 7919) % 29) / 10; break;  // spread over a factor 30
      case 3: w[i] = static_cast<double>((i * 5) % n + 1); break;             // 1..N: sums hit 1/4, 1/2 exactly
      default: w[i] = static_cast<double>(i / 2 + 1); break;                  // pairs of equal weights
    }
  }
  return w;
}

TEST(AggregationTest, TrimmedMeanAndMedianKeepTheirExactBits) {
  constexpr std::size_t coords = 16 * 7 + 13;  // vector lanes of either width and a scalar tail
  // Two hashes per N (index N - 1), one per group of kernels. `want_kept`: every case but the unequal-weight trimmed
  // mean at β <= 0.25, i.e. equal weights with every rule, and the median and β = 0.4999 with every weight kind
  // (the exact split-weight kernels). `want_quantized`: the unequal-weight trimmed mean at β = 0, 0.1 and 0.25
  // (weight kinds 1 to 4), which rounds the weights to units of 2^-31 and sums the kept masses in int32
  // (quantized_kernel in aggregation/kernels.hpp): its own rounding of the same definition
  // (EveryWidthMatchesTheDefinitionInLongDouble). For N = 1 and N = 17 that group takes the other kernels (one
  // weight is an equal weight; N = 17 takes the blocked path).
  const std::vector<std::uint64_t> want_kept{
      0x1c9e54fdb8137fc9ULL, 0x937f7ba378ae77f8ULL, 0x02c5eac2c0387a51ULL, 0xe7e90a1812bd938bULL, 0xda4b60f90e77633cULL,
      0x8d25af36991f058eULL, 0x4c7261c724af3b30ULL, 0x829f5e41a346f613ULL, 0x1a843532cdba88f2ULL, 0x1be4221f4d788b09ULL,
      0x27c179ba5878612bULL, 0xa5e758adccd9a971ULL, 0xfbab2639958eeb1fULL, 0xe1eef3d7107d1c8aULL, 0xcf1d323c0e32a1d7ULL,
      0x1e83544870b4ffbfULL, 0xf8a85b7fa5cdc126ULL};
  const std::vector<std::uint64_t> want_quantized{
      0x3a1bb901b155d5e1ULL, 0x6513e4264dad9da1ULL, 0xc6d8031da9d43822ULL, 0x5936115d162991c3ULL, 0xe8ece256b467e445ULL,
      0x88d0f3f253dc496dULL, 0x5a7aad04201dd5a3ULL, 0xd5ebd8241423d253ULL, 0x2efe6b06a8f9de5dULL, 0xd4e09bfb46751bafULL,
      0xa759cfa28a2613f1ULL, 0x5df6d85ed4b96f5bULL, 0x1da493dac6f54e2cULL, 0x301e208bfe542a06ULL, 0x9f1fe3f611691484ULL,
      0x052223464bc2e0b8ULL, 0x9b0f5846008646a8ULL};
  std::uint64_t state = 2026;
  for (std::size_t n = 1; n <= 17; ++n) {
    std::vector<std::vector<float>> models(n, std::vector<float>(coords));
    std::vector<float> ref(coords);
    for (std::size_t k = 0; k < coords; ++k) {
      ref[k] = pinned_value(state);
      for (auto& m : models) {
        m[k] = pinned_value(state);
      }
    }
    std::uint64_t h_kept = 14695981039346656037ULL;
    std::uint64_t h_quantized = 14695981039346656037ULL;
    for (int kind = 0; kind < 5; ++kind) {
      const auto w = pinned_weights(n, kind);
      for (const bool with_ref : {true, false}) {
        for (const auto& o : {rule(aggregate_rule::median), rule(aggregate_rule::trimmed_mean, 0.0),
                              rule(aggregate_rule::trimmed_mean, 0.1), rule(aggregate_rule::trimmed_mean, 0.25),
                              rule(aggregate_rule::trimmed_mean, 0.4999)}) {
          std::vector<float> out(coords);
          ASSERT_TRUE(
              aggregate(wrap(models), w, with_ref ? std::span<const float>(ref) : std::span<const float>(), o, out));
          const bool quantized = kind > 0 && o.rule == aggregate_rule::trimmed_mean && o.trim <= 0.25;
          std::uint64_t& h = quantized ? h_quantized : h_kept;
          h = fnv1a(h, out.data(), out.size() * sizeof(float));
          // And they are the definition's results, up to float rounding.
          const double beta = o.rule == aggregate_rule::median ? 0.5 - median_tie_mass : o.trim;
          const auto zero = std::vector<float>(coords, 0.0F);
          const auto def = reference_rule(models, w, with_ref ? ref : zero, beta);
          const double s = std::accumulate(w.begin(), w.end(), 0.0);
          for (std::size_t k = 0; k < coords; ++k) {
            ASSERT_NEAR(out[k], def[k], 1e-4 * (s + 1)) << "n=" << n << " kind=" << kind << " k=" << k;
          }
        }
      }
    }
    EXPECT_EQ(h_kept, want_kept[n - 1]) << "n=" << n << " kept: 0x" << std::hex << h_kept << "ULL";
    EXPECT_EQ(h_quantized, want_quantized[n - 1]) << "n=" << n << " quantized: 0x" << std::hex << h_quantized << "ULL";
  }
}

// The kernels run eight coordinates per vector, or sixteen where the CPU has AVX-512 (set_aggregation_lanes caps
// the width): both give the same bits, ties, infinities, signed zeros and NaNs included. (On a CPU without
// AVX-512 both runs take the eight-lane kernels.)
TEST(AggregationTest, EveryVectorWidthGivesTheSameBits) {
  std::mt19937 gen(17);
  constexpr std::size_t coords = 16 * 6 + 11;  // sixteen-lane vectors, then an eight-lane one, then scalars
  for (std::size_t n = 1; n <= 16; ++n) {
    auto data = make_models_with_specials(n, coords, 5, gen);
    auto& models = data.models;
    const auto& ref = data.ref;
    for (const weight_spread spread : {weight_spread::equal, weight_spread::near, weight_spread::wide}) {
      const auto w = spread_weights(n, spread, gen);
      for (const auto& o : {rule(aggregate_rule::median), rule(aggregate_rule::trimmed_mean, 0.25),
                            rule(aggregate_rule::trimmed_mean, 0.1), rule(aggregate_rule::trimmed_mean, 0.0)}) {
        std::vector<float> narrow(coords);
        std::vector<float> wide(coords);
        const std::size_t old = set_aggregation_lanes(8);
        const auto a = aggregate(wrap(models), w, ref, o, narrow);
        set_aggregation_lanes(16);
        const auto b = aggregate(wrap(models), w, ref, o, wide);
        set_aggregation_lanes(old);
        ASSERT_TRUE(a.has_value() && b.has_value());
        EXPECT_EQ(std::memcmp(narrow.data(), wide.data(), coords * sizeof(float)), 0)
            << "n=" << n << " spread=" << static_cast<int>(spread) << " rule=" << to_string(o.rule);
      }
    }
  }
}

// The definition, once more and independently of trimmed_coefficients, in long double: per coordinate sort the
// updates u_i = x_i − ref by value, cut the weight mass βW from each end of the total W (fractionally where a cut
// falls inside a value's weight), and take the weighted mean of what is left: ref + W · Σ kept_j v_(j) / ((1 − 2β)W).
// Also returns Σ_j |v_(j)| · W (over every value, trimmed or not) + |ref|: the scale the float kernels' error is
// measured against. Any NaN or infinite update makes the expected result non-finite.
struct long_double_result {
  long double value = 0;
  long double scale = 0;
  bool finite = true;
};

long_double_result long_double_rule(const std::vector<std::vector<float>>& models, const std::vector<double>& w,
                                    float ref, std::size_t k, double beta) {
  long double total = 0;
  for (double x : w) {
    total += x;
  }
  std::vector<std::pair<long double, long double>> vw;  // (value, weight)
  long_double_result r;
  long double magnitude = 0;
  for (std::size_t i = 0; i < models.size(); ++i) {
    const long double v = static_cast<long double>(models[i][k]) - static_cast<long double>(ref);
    r.finite = r.finite && std::isfinite(v);
    vw.emplace_back(v, static_cast<long double>(w[i]));
    magnitude += std::isfinite(v) ? std::fabs(v) : 0;
  }
  r.scale = std::fabs(static_cast<long double>(ref)) + total * magnitude;
  if (!r.finite) {
    return r;
  }
  std::sort(vw.begin(), vw.end());
  const long double cut = static_cast<long double>(beta) * total;  // the weight removed at each end
  long double below = 0;                                           // the weight of the values before this one
  long double sum = 0;
  for (const auto& [v, weight] : vw) {
    const long double from = std::max(below, cut);
    const long double to = std::min(below + weight, total - cut);
    if (to > from) {
      sum += (to - from) * v;
    }
    below += weight;
  }
  r.value = static_cast<long double>(ref) + total * sum / (total - 2 * cut);
  return r;
}

// Every vector width (sixteen lanes where the CPU has AVX-512, eight, and the scalar loop for the last
// coordinates) against long_double_rule, for N = 1..17, equal, near-equal, spread and integer weights (1..N: sums
// that meet βW exactly), β = 0, 0.1, 0.25, 0.4, 0.4999 and the median, on normal values with ties, ±0, infinities
// and NaN (with unequal weights any of the last two makes the result NaN or infinite). The float kernels round u_i,
// each coefficient (the unequal-weight trimmed mean also rounds the weights to units of 2^−31, which moves a
// coefficient by at most 2^−24) and each product and sum: a few float roundings of the scale, (N + 4) · 2^−24 of it,
// bound them all (the largest seen is about 2.1 · 2^−24, at N = 1).
TEST(AggregationTest, EveryWidthMatchesTheDefinitionInLongDouble) {
  std::mt19937 gen(19);
  constexpr std::size_t coords = 16 * 4 + 11;  // sixteen-lane vectors, an eight-lane one, then scalars
  for (std::size_t n = 1; n <= 17; ++n) {
    auto data = make_models_with_specials(n, coords, static_cast<unsigned>(4 * n), gen);
    const auto& models = data.models;
    const auto& ref = data.ref;
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<double> w;
      if (kind < 3) {
        w = spread_weights(n, std::array{weight_spread::equal, weight_spread::near, weight_spread::wide}[kind], gen);
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          w.push_back(static_cast<double>((i * 5) % n + 1));
        }
      }
      const bool equal = std::all_of(w.begin(), w.end(), [&](double x) { return x == w[0]; });
      for (const auto& o : {rule(aggregate_rule::trimmed_mean, 0.0), rule(aggregate_rule::trimmed_mean, 0.1),
                            rule(aggregate_rule::trimmed_mean, 0.25), rule(aggregate_rule::trimmed_mean, 0.4),
                            rule(aggregate_rule::trimmed_mean, 0.4999), rule(aggregate_rule::median)}) {
        const double beta = o.rule == aggregate_rule::median ? 0.5 - median_tie_mass : o.trim;
        for (const std::size_t lanes : {std::size_t{8}, std::size_t{16}}) {
          std::vector<float> out(coords);
          const std::size_t old = set_aggregation_lanes(lanes);
          const auto done = aggregate(wrap(models), w, ref, o, out);
          set_aggregation_lanes(old);
          ASSERT_TRUE(done.has_value());
          for (std::size_t k = 0; k < coords; ++k) {
            const auto want = long_double_rule(models, w, ref[k], k, beta);
            const auto where = [&] {  // only built for a failure's message
              return "n=" + std::to_string(n) + " kind=" + std::to_string(kind) + " beta=" + std::to_string(beta) +
                     " lanes=" + std::to_string(lanes) + " k=" + std::to_string(k);
            };
            if (!want.finite) {
              // (With equal weights the min/max network may drop a NaN; the outlier screen leaves NaN updates out.)
              if (!equal) {
                EXPECT_FALSE(std::isfinite(out[k])) << where();
              }
              continue;
            }
            const long double tol = static_cast<long double>(n + 4) * 0x1p-24L * want.scale;
            ASSERT_LE(std::fabs(static_cast<long double>(out[k]) - want.value), tol)
                << where() << ": " << out[k] << " against " << static_cast<double>(want.value);
          }
        }
      }
    }
  }
}

TEST(AggregationTest, UnequalWeightsWithTiesDoNotDependOnWhichInputHoldsTheTie) {
  // 2 appears twice with different weights: whichever of the two the sort puts first, the tied mass is
  // the same, so every order of the inputs gives the same median and trimmed mean.
  std::vector<float> values{2, 1, 2, 3, 5};
  std::vector<double> w{0.1, 0.3, 0.25, 0.2, 0.15};
  std::vector<std::size_t> order{0, 1, 2, 3, 4};
  // Sorted 1 (.3), 2 (.1 + .25), 3 (.2), 5 (.15): the cumulative weight crosses 1/2 inside the 2s.
  // Trimmed, β = 0.2: keep [0.2, 0.8]: 1 weighs .1, the 2s .35, 3 .15 → (0.1 + 0.7 + 0.45) / 0.6.
  do {
    std::vector<float> v;
    std::vector<double> q;
    for (std::size_t i : order) {
      v.push_back(values[i]);
      q.push_back(w[i]);
    }
    EXPECT_NEAR(combine1(v, q, rule(aggregate_rule::median)), 2.0, 1e-6);
    EXPECT_NEAR(combine1(v, q, rule(aggregate_rule::trimmed_mean, 0.2)), 1.25 / 0.6, 1e-5);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(AggregationTest, UnequalWeightsWithOneOrTwoInputs) {
  // N = 1: every rule returns the one update, scaled by its weight (the weight sum).
  EXPECT_FLOAT_EQ(combine1({-3}, {2.5}, rule(aggregate_rule::median)), -7.5);
  EXPECT_FLOAT_EQ(combine1({-3}, {0.4}, rule(aggregate_rule::trimmed_mean, 0.3)), -1.2F);
  // N = 2, unequal: the median is the heavier value, on either side and in either order.
  EXPECT_FLOAT_EQ(combine1({1, 4}, {0.3, 0.7}, rule(aggregate_rule::median)), 4);
  EXPECT_FLOAT_EQ(combine1({4, 1}, {0.3, 0.7}, rule(aggregate_rule::median)), 1);
  EXPECT_FLOAT_EQ(combine1({1, 4}, {0.7, 0.3}, rule(aggregate_rule::median)), 1);
  // Trimmed, β = 0.25 of weights .3 (value 1) and .7 (value 4): keep [.25, .75]: 1 weighs .05, 4 weighs .45.
  EXPECT_NEAR(combine1({1, 4}, {0.3, 0.7}, rule(aggregate_rule::trimmed_mean, 0.25)), (0.05 + 1.8) / 0.5, 1e-5);
  // In the other order 1 weighs .7: kept [.25, .7] of it and [.7, .75] of 4.
  EXPECT_NEAR(combine1({4, 1}, {0.3, 0.7}, rule(aggregate_rule::trimmed_mean, 0.25)), (0.45 + 0.2) / 0.5, 1e-5);
  // Weights that are raw sample counts: normalised, then the result scaled by their sum.
  EXPECT_FLOAT_EQ(combine1({1, 4}, {3e5, 7e5}, rule(aggregate_rule::median)), 4e6F);
}

// Sample counts whose cumulative weight reaches exactly 1/2 inside the sort (512 + 515 = 513 + 514 of 2054):
// the median is then the mean of the two values around the tie, in every order of the inputs, as with equal
// weights; one sample more and the heavier side's value alone.
TEST(AggregationTest, UnequalWeightsWithAnExactTieAtOneHalfAverageTheTwoValuesAroundIt) {
  std::vector<std::size_t> order{0, 1, 2, 3};
  do {
    std::vector<float> v;
    std::vector<double> w;
    std::vector<double> w_off;
    const std::vector<float> values{1, 2, 3, 4};
    const std::vector<double> counts{512, 515, 513, 514};  // 1 and 2 hold exactly half the mass
    for (std::size_t i : order) {
      v.push_back(values[i]);
      w.push_back(counts[i] / 2054);
      w_off.push_back((counts[i] + (i == 1 ? 1 : 0)) / 2055);
    }
    EXPECT_NEAR(combine1(v, w, rule(aggregate_rule::median)), 2.5, 1e-5);
    EXPECT_FLOAT_EQ(combine1(v, w_off, rule(aggregate_rule::median)), 2);
  } while (std::next_permutation(order.begin(), order.end()));
}

// Sixteen inputs weighing 1..16 (sum 136): the inputs weighing 16, 15, 14, 13 and 10 hold the five smallest
// values and exactly half the mass, so the median is the mean of the fifth and sixth smallest values. Every
// one of the 16 weights takes part in the cumulative sums, in an order that changes per coordinate.
TEST(AggregationTest, SixteenUnequalWeightsResolveAnExactTieInEveryCoordinate) {
  constexpr std::size_t n = 16;
  constexpr std::size_t coords = 8 * 3 + 5;  // vector lanes and the scalar loop
  std::vector<double> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = static_cast<double>(i + 1) / 136;
  }
  const std::vector<std::size_t> low{15, 14, 13, 12, 9};  // weights 16 + 15 + 14 + 13 + 10 = 68
  std::mt19937 gen(5);
  std::vector<std::vector<float>> models(n, std::vector<float>(coords));
  std::vector<float> want(coords);
  for (std::size_t k = 0; k < coords; ++k) {
    // The five low inputs get 1..5 in a shuffled order, the others 6..16 shuffled.
    std::vector<float> lows{1, 2, 3, 4, 5};
    std::vector<float> highs{6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    std::shuffle(lows.begin(), lows.end(), gen);
    std::shuffle(highs.begin(), highs.end(), gen);
    for (std::size_t i = 0, l = 0, h = 0; i < n; ++i) {
      const bool is_low = std::find(low.begin(), low.end(), i) != low.end();
      models[i][k] = is_low ? lows[l++] : highs[h++];
    }
    want[k] = 5.5F;
  }
  std::vector<float> out(coords);
  ASSERT_TRUE(aggregate(wrap(models), w, {}, rule(aggregate_rule::median), out));
  for (std::size_t k = 0; k < coords; ++k) {
    EXPECT_NEAR(out[k], want[k], 1e-4) << "k=" << k;
  }
  // Trimmed (β = 0.25 of 136 = 34): the kept mass [34, 102] in the same coordinates, against the definition.
  ASSERT_TRUE(aggregate(wrap(models), w, {}, rule(aggregate_rule::trimmed_mean, 0.25), out));
  const auto trimmed = reference_rule(models, w, std::vector<float>(coords, 0.0F), 0.25);
  for (std::size_t k = 0; k < coords; ++k) {
    EXPECT_NEAR(out[k], trimmed[k], 1e-4) << "k=" << k;
  }
}

// A NaN update that reaches the rules (the screen would have left it out) makes the coordinates it touches NaN
// with unequal weights as with equal ones, so the averager's non-finite check refuses the round.
// Weights 0.5 + i take the full sort; sample counts 512 + i the median's cut-down kernel, where the NaN (or an
// infinity) need not be among the sorted positions it computes.
TEST(AggregationTest, UnequalWeightsPropagateANanUpdate) {
  for (std::size_t n : {1, 2, 3, 5, 8, 16}) {
    for (const double base : {0.5, 512.0}) {
      std::vector<double> w(n);
      for (std::size_t i = 0; i < n; ++i) {
        w[i] = base + static_cast<double>(i);
      }
      for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
          std::vector<float> v(n, 1.0F);
          v[at] = bad;
          const float median = combine1(v, w, rule(aggregate_rule::median));
          const float trimmed = combine1(v, w, rule(aggregate_rule::trimmed_mean, 0.25));
          if (std::isnan(bad)) {
            EXPECT_TRUE(std::isnan(median)) << n << " " << base << " " << at;
            EXPECT_TRUE(std::isnan(trimmed)) << n << " " << base << " " << at;
          } else {
            EXPECT_FALSE(std::isfinite(median)) << n << " " << base << " " << at;
            EXPECT_FALSE(std::isfinite(trimmed)) << n << " " << base << " " << at;
          }
        }
      }
    }
  }
}

TEST(AggregationTest, ZeroAndNegativeWeightsAreRefusedWithTheirIndex) {
  const std::vector<std::vector<float>> models{{1}, {2}, {3}};
  std::vector<float> out(1);
  for (auto r : {aggregate_rule::median, aggregate_rule::trimmed_mean, aggregate_rule::mean}) {
    const auto zero = aggregate(wrap(models), std::vector<double>{0.5, 0.0, 0.5}, {}, rule(r), out);
    ASSERT_FALSE(zero.has_value()) << to_string(r);
    EXPECT_EQ(zero.error().code, errc::invalid_argument);
    EXPECT_NE(zero.error().message().find("weight 1"), std::string::npos) << zero.error().message();
    EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{0.5, 0.5, -0.1}, {}, rule(r), out).has_value());
  }
}

// The screen in front of the robust rules is unchanged: an update holding a NaN has a NaN norm, which the
// screen rejects, and the rules then combine only the finite updates.
TEST(AggregationTest, NanUpdateIsScreenedOutBeforeTheRobustRules) {
  const std::vector<float> ref(len, 0.0F);
  std::vector<std::vector<float>> models(5, std::vector<float>(len, 1.0F));
  models[1][len / 2] = std::numeric_limits<float>::quiet_NaN();
  const auto all = wrap(models);
  const auto norms = update_norms(all, ref);
  ASSERT_TRUE(norms.has_value());
  EXPECT_TRUE(std::isnan((*norms)[1]));
  const auto verdict = screen_updates(*norms, 4);
  EXPECT_EQ(verdict.rejected, (std::vector<std::size_t>{1}));
  std::vector<contribution> kept;
  for (std::size_t i : verdict.kept) {
    kept.push_back(all[i]);
  }
  for (auto r : {aggregate_rule::median, aggregate_rule::trimmed_mean}) {
    std::vector<float> out(len);
    ASSERT_TRUE(aggregate(kept, std::vector<double>{0.1, 0.2, 0.3, 0.4}, ref, rule(r), out));
    for (float x : out) {
      ASSERT_FLOAT_EQ(x, 1.0F) << to_string(r);
    }
  }
}

TEST(AggregationTest, MedianAndTrimmedMeanIgnoreOneHugeUpdate) {
  std::mt19937 gen(3);
  std::normal_distribution<float> value(0.0F, 0.01F);
  const std::vector<float> ref(len, 1.0F);
  std::vector<std::vector<float>> models(4, ref);
  for (std::size_t i = 0; i < 3; ++i) {
    for (auto& x : models[i]) {
      x += value(gen);
    }
  }
  for (auto& x : models[3]) {
    x = 1e6F;  // a poisoned model
  }
  for (auto r : {aggregate_rule::median, aggregate_rule::trimmed_mean}) {
    std::vector<float> out(len);
    ASSERT_TRUE(aggregate(wrap(models), std::vector<double>(4, 0.25), ref, rule(r, 0.25), out));
    for (float x : out) {
      ASSERT_LT(std::abs(x - 1.0F), 0.05F) << to_string(r);
    }
  }
}

TEST(AggregationTest, OutMayAliasTheReference) {
  std::vector<std::vector<float>> models{std::vector<float>(len, 3), std::vector<float>(len, 5),
                                         std::vector<float>(len, 4)};
  std::vector<float> ref(len, 1);
  ASSERT_TRUE(aggregate(wrap(models), std::vector<double>(3, 1.0 / 3), ref, rule(aggregate_rule::median), ref));
  for (float x : ref) {
    ASSERT_FLOAT_EQ(x, 4);
  }
}

TEST(AggregationTest, RefusesBadOptionsWeightsAndSizes) {
  const std::vector<std::vector<float>> models{{1}, {2}};
  std::vector<float> out(1);
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1, 1}, {}, rule(aggregate_rule::trimmed_mean, 0.5), out));
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1, 1}, {}, rule(aggregate_rule::trimmed_mean, -0.1), out));
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1, 1}, {}, rule(aggregate_rule::norm_clip, 0.25, -1), out));
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1}, {}, rule(aggregate_rule::median), out));
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1, 0}, {}, rule(aggregate_rule::median), out));
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1, std::nan("")}, {}, rule(aggregate_rule::median), out));
  EXPECT_FALSE(aggregate({}, {}, {}, rule(aggregate_rule::median), out));
  std::vector<float> two(2);
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1, 1}, {}, rule(aggregate_rule::median), two));
  const std::vector<float> ref{0, 0};
  EXPECT_FALSE(aggregate(wrap(models), std::vector<double>{1, 1}, ref, rule(aggregate_rule::median), out));
}

TEST(AggregationTest, UpdateNormsAreDistancesFromTheReference) {
  const std::vector<std::vector<float>> models{{4, 5}, {1, 1}};
  const std::vector<float> ref{1, 1};
  const auto norms = update_norms(wrap(models), ref);
  ASSERT_TRUE(norms.has_value());
  EXPECT_DOUBLE_EQ((*norms)[0], 5);
  EXPECT_DOUBLE_EQ((*norms)[1], 0);
  const auto from_zero = update_norms(wrap(models), {});
  ASSERT_TRUE(from_zero.has_value());
  EXPECT_NEAR((*from_zero)[0], std::sqrt(41.0), 1e-6);
  const std::vector<float> short_ref{1};
  EXPECT_FALSE(update_norms(wrap(models), short_ref).has_value());
}

TEST(AggregationTest, ScreenRejectsNormsAboveKTimesTheMedian) {
  const std::vector<double> norms{1.0, 1.1, 0.9, 50.0};
  const auto r = screen_updates(norms, 4);
  EXPECT_EQ(r.rejected, (std::vector<std::size_t>{3}));
  EXPECT_EQ(r.kept, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_DOUBLE_EQ(r.median_norm, 1.1);  // the upper median of 0.9 1.0 1.1 50
  // Just at the limit is kept.
  EXPECT_TRUE(screen_updates(std::vector<double>{1, 1, 4}, 4).rejected.empty());
  // A NaN norm is rejected.
  EXPECT_EQ(screen_updates(std::vector<double>{1, 1, std::nan("")}, 4).rejected, (std::vector<std::size_t>{2}));
}

// A NaN norm compares false with everything, so sorting the norms with < left it wherever it stood: in the
// middle of five it became the median, the limit k x NaN, and the screen let everything through.
TEST(AggregationTest, ScreenRejectsANanNormWhereverItStands) {
  for (std::size_t at = 0; at < 5; ++at) {
    std::vector<double> norms(5, 1.0);
    norms[at] = std::nan("");
    const auto r = screen_updates(norms, 4);
    EXPECT_EQ(r.rejected, (std::vector<std::size_t>{at})) << "NaN at " << at;
    EXPECT_DOUBLE_EQ(r.median_norm, 1.0) << "NaN at " << at;
  }
  // More NaNs than the limit allows: the finite median still judges them (and more than half never go).
  const auto many = screen_updates(std::vector<double>{std::nan(""), 1, std::nan(""), 1, 1}, 4);
  EXPECT_EQ(many.rejected, (std::vector<std::size_t>{0, 2}));
  // 40 norms (std::sort's introsort, not its insertion sort) with NaNs spread through them.
  std::vector<double> big(40);
  for (std::size_t i = 0; i < big.size(); ++i) {
    big[i] = i % 7 == 3 ? std::nan("") : 1.0 + static_cast<double>(i % 5) * 0.1;
  }
  const auto r = screen_updates(big, 4);
  for (std::size_t i : r.rejected) {
    EXPECT_TRUE(std::isnan(big[i])) << i;
  }
  EXPECT_EQ(r.rejected.size(), 6U);
}

TEST(AggregationTest, ScreenRejectsNothingWithTwoUpdatesOrAZeroMedian) {
  // With two updates neither can be told to be the outlier.
  EXPECT_TRUE(screen_updates(std::vector<double>{1, 1000}, 2).rejected.empty());
  EXPECT_TRUE(screen_updates(std::vector<double>{1000}, 2).rejected.empty());
  EXPECT_TRUE(screen_updates(std::vector<double>{}, 2).kept.empty());
  // Most workers sent x̄ back unchanged: no scale to judge against.
  EXPECT_TRUE(screen_updates(std::vector<double>{0, 0, 0, 5}, 2).rejected.empty());
}

TEST(AggregationTest, ScreenKeepsAMajority) {
  // Half of the norms huge: the median is between the groups, so at most ⌊(N−1)/2⌋ go.
  const auto r = screen_updates(std::vector<double>{1, 1, 1, 1e9, 1e9}, 1);
  EXPECT_EQ(r.rejected, (std::vector<std::size_t>{3, 4}));
  // Even N: the upper median is the limit's base, so half never go.
  const auto even = screen_updates(std::vector<double>{1, 1, 1e9, 1e9}, 1);
  EXPECT_TRUE(even.rejected.empty());
  EXPECT_EQ(screen_updates(std::vector<double>{1, 1, 1.2, 1e9}, 4).rejected, (std::vector<std::size_t>{3}));
}

}  // namespace
