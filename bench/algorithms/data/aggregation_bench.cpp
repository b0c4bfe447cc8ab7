// SPDX-License-Identifier: Apache-2.0
// Round cost of the robust aggregation rules against the mean, as the averager runs them at the barrier:
// mean = average() (the fused averaging kernel), the others = averaging_weights() + aggregate() over
// x_i − x̄. Equal weights (uniform, or samples with equal counts) and unequal weights (samples differing)
// take different kernels, so both are measured; so is the outlier screen (one norm pass per input).
// CPU time at fmnist-cnn's, fmnist-mlp's, a 2M-float and a 10M-float model's size for N = 4, 8, 16;
// bench/robust/round_cost.py runs it and writes the medians and ratios to bench/robust/round_cost.md.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "prsgd/algorithms/aggregation.hpp"
#include "prsgd/algorithms/averaging.hpp"

namespace {

using namespace prsgd::algorithms;

struct round_data {
  std::vector<std::vector<float>> inputs;
  std::vector<float> previous;
  std::vector<float> out;
  std::vector<contribution> in;
};

round_data make_round(std::size_t n, std::size_t len, bool equal) {
  round_data r;
  std::mt19937 gen(42);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> pattern(4096 + 31);
  for (auto& x : pattern) {
    x = dist(gen);
  }
  auto fill = [&](std::vector<float>& v, std::size_t shift) {
    v.resize(len);
    for (std::size_t j = 0; j < len; ++j) {
      v[j] = pattern[(j * 7 + shift) % pattern.size()];
    }
  };
  r.inputs.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    fill(r.inputs[i], i * 97);
  }
  fill(r.previous, 13);
  fill(r.out, 0);  // touch every page before timing
  for (std::size_t i = 0; i < n; ++i) {
    r.in.push_back({r.inputs[i], equal ? 512.0 : 512.0 + static_cast<double>(i), 8});
  }
  return r;
}

void BM_Mean(benchmark::State& state, bool equal) {
  auto r = make_round(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)), equal);
  for (auto _ : state) {
    auto ok = average(r.in, r.previous, averaging_rule::by_samples, r.out);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(r.out.data());
    benchmark::ClobberMemory();
  }
}

void BM_Robust(benchmark::State& state, aggregate_rule rule, bool equal) {
  auto r = make_round(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)), equal);
  aggregate_options o;
  o.rule = rule;
  for (auto _ : state) {
    auto w = averaging_weights(r.in, averaging_rule::by_samples);
    auto ok = aggregate(r.in, *w, r.previous, o, r.out);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(r.out.data());
    benchmark::ClobberMemory();
  }
}

void BM_Screen(benchmark::State& state) {
  auto r = make_round(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)), true);
  for (auto _ : state) {
    auto norms = update_norms(r.in, r.previous);
    auto verdict = screen_updates(*norms, 4.0);
    benchmark::DoNotOptimize(verdict);
  }
}

// The job's real sizes: fmnist-cnn's 28,938 parameters (every input stays in L2 or L3), fmnist-mlp's 535,818,
// and 2M- and 10M-float models (every input streams from memory), N = 4, 8 and 16 members.
constexpr std::int64_t fmnist_cnn_floats = 28'938;
constexpr std::int64_t fmnist_mlp_floats = 535'818;
constexpr std::int64_t mid_model_floats = 2'000'000;
constexpr std::int64_t large_model_floats = 10'000'000;

void members(benchmark::internal::Benchmark* b) {
  for (std::int64_t floats : {fmnist_cnn_floats, fmnist_mlp_floats, mid_model_floats, large_model_floats}) {
    for (std::int64_t n : {4, 8, 16}) {
      b->Args({n, floats});
    }
  }
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_Mean, equal, true)->Apply(members);
BENCHMARK_CAPTURE(BM_Robust, trimmed_mean_equal, aggregate_rule::trimmed_mean, true)->Apply(members);
BENCHMARK_CAPTURE(BM_Robust, median_equal, aggregate_rule::median, true)->Apply(members);
BENCHMARK_CAPTURE(BM_Mean, unequal, false)->Apply(members);
BENCHMARK_CAPTURE(BM_Robust, trimmed_mean_unequal, aggregate_rule::trimmed_mean, false)->Apply(members);
BENCHMARK_CAPTURE(BM_Robust, median_unequal, aggregate_rule::median, false)->Apply(members);
BENCHMARK_CAPTURE(BM_Robust, norm_clip, aggregate_rule::norm_clip, true)->Apply(members);
BENCHMARK(BM_Screen)->Apply(members);

}  // namespace

BENCHMARK_MAIN();
