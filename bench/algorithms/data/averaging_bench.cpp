// SPDX-License-Identifier: Apache-2.0
// Averaging kernel throughput against memory-bandwidth references measured in the same run.
// Bytes moved = bytes read + bytes written: (N + 1) * n * 4 for averaging and the streaming sum
// (N + 2 for step_normalised, which also reads x̄), 2 * N * n * 4 for memcpy. Rates use CPU time: on a
// shared, oversubscribed machine wall time mostly measures the scheduler. Run with
// --benchmark_repetitions=5 and compare medians (HISTORY.md beside this file).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "prsgd/algorithms/averaging.hpp"

namespace {

using namespace prsgd::algorithms;

struct models {
  std::vector<std::vector<float>> inputs;
  std::vector<float> previous;
  std::vector<float> out;
};

models make_models(std::size_t n, std::size_t len) {
  models m;
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> pattern(4096);
  for (auto& x : pattern) {
    x = dist(gen);
  }
  auto fill = [&](std::vector<float>& v, std::size_t shift) {
    v.resize(len);
    for (std::size_t j = 0; j < len; ++j) {
      v[j] = pattern[(j + shift) % pattern.size()];
    }
  };
  m.inputs.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    fill(m.inputs[i], i * 97);
  }
  fill(m.previous, 13);
  fill(m.out, 0);  // touch every page before timing
  return m;
}

void set_bytes(benchmark::State& state, std::size_t bytes_per_iter) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes_per_iter));
}

void BM_Average(benchmark::State& state, averaging_rule rule, store_policy policy = store_policy::automatic) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto len = static_cast<std::size_t>(state.range(1));
  auto m = make_models(n, len);
  std::vector<contribution> in;
  for (std::size_t i = 0; i < n; ++i) {
    in.push_back({m.inputs[i], 64.0 * static_cast<double>(i + 1), static_cast<double>(i + 2)});
  }
  for (auto _ : state) {
    auto r = average(in, m.previous, rule, m.out, policy);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  // step_normalised also reads `previous`.
  const std::size_t streams = n + 1 + (rule == averaging_rule::step_normalised ? 1 : 0);
  set_bytes(state, streams * len * sizeof(float));
}

// A fixed-N, fully unrolled out[j] = Σ x_i[j]: the best case for the same access pattern.
template <std::size_t N>
void streaming_sum(const std::vector<std::vector<float>>& in, float* __restrict out, std::size_t len) {
  const float* p[N];
  for (std::size_t i = 0; i < N; ++i) {
    p[i] = in[i].data();
  }
  for (std::size_t j = 0; j < len; ++j) {
    float s = p[0][j];
    for (std::size_t i = 1; i < N; ++i) {
      s += p[i][j];
    }
    out[j] = s;
  }
}

void BM_StreamingSum(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto len = static_cast<std::size_t>(state.range(1));
  auto m = make_models(n, len);
  for (auto _ : state) {
    switch (n) {
      case 2: streaming_sum<2>(m.inputs, m.out.data(), len); break;
      case 4: streaming_sum<4>(m.inputs, m.out.data(), len); break;
      default: streaming_sum<8>(m.inputs, m.out.data(), len); break;
    }
    benchmark::DoNotOptimize(m.out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, (n + 1) * len * sizeof(float));
}

void BM_Memcpy(benchmark::State& state) {
  // Copies the same total bytes as averaging N models reads, so buffer sizes match cache behaviour.
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto len = static_cast<std::size_t>(state.range(1));
  std::vector<float> src(n * len, 1.0F);
  std::vector<float> dst(n * len, 0.0F);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * len * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * n * len * sizeof(float));
}

void args(benchmark::internal::Benchmark* b) {
  for (std::int64_t len : {1'000'000, 10'000'000}) {
    for (std::int64_t n : {2, 4, 8}) {
      b->Args({n, len});
    }
  }
  b->ArgNames({"N", "floats"})->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Average, uniform, averaging_rule::uniform)->Apply(args);
BENCHMARK_CAPTURE(BM_Average, samples, averaging_rule::by_samples)->Apply(args);
BENCHMARK_CAPTURE(BM_Average, step_normalised, averaging_rule::step_normalised)->Apply(args);
// The two store policies that store_policy::automatic picks between (at streaming_store_threshold()).
BENCHMARK_CAPTURE(BM_Average, uniform_normal_stores, averaging_rule::uniform, store_policy::normal)->Apply(args);
BENCHMARK_CAPTURE(BM_Average, uniform_streaming_stores, averaging_rule::uniform, store_policy::streaming)->Apply(args);
BENCHMARK(BM_StreamingSum)->Apply(args);
BENCHMARK(BM_Memcpy)->Apply(args);
BENCHMARK_MAIN();
