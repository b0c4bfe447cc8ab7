// SPDX-License-Identifier: Apache-2.0
// What a lossy wire dtype costs the CPU per round: encode (the sender), decode (the receiver), quantize and
// error feedback (a worker's change), settle_change (an owner's or averager's change), beside memcpy of the
// same float32 bytes measured in the same run. The default size is fmnist-mlp's 535,818 floats. Rates use CPU
// time; run with --benchmark_repetitions=5 and compare medians (HISTORY.md beside this file).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "prsgd/algorithms/wire_change.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"

namespace {

using namespace prsgd::algorithms;

constexpr std::int64_t mlp_floats = 535818;

// Model-like values: small, both signs, a few exact zeros.
std::vector<float> values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0F, 0.05F);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = i % 101 == 0 ? 0.0F : dist(gen);
  }
  return v;
}

void float_bytes(benchmark::State& state, std::size_t n) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n * sizeof(float)));
}

void BM_Memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto in = values(n, 1);
  std::vector<float> out(n);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), n * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  float_bytes(state, n);
}

void BM_Encode(benchmark::State& state, wire_dtype dtype) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto in = values(n, 1);
  std::vector<std::byte> out(encoded_size(dtype, n));
  for (auto _ : state) {
    auto ok = encode(in, dtype, out);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(out.data());
  }
  float_bytes(state, n);
}

void BM_Decode(benchmark::State& state, wire_dtype dtype) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto bytes = encode(values(n, 1), dtype);
  std::vector<float> out(n);
  for (auto _ : state) {
    auto ok = decode(bytes, dtype, out);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(out.data());
  }
  float_bytes(state, n);
}

void BM_Quantize(benchmark::State& state, wire_dtype dtype) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto in = values(n, 1);
  for (auto _ : state) {
    auto q = quantize(in, dtype);
    benchmark::DoNotOptimize(q.data());
  }
  float_bytes(state, n);
}

void BM_ErrorFeedback(benchmark::State& state, wire_dtype dtype) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto in = values(n, 1);
  error_feedback feedback;
  for (auto _ : state) {
    auto sent = feedback.compress(in, dtype);
    benchmark::DoNotOptimize(sent.data());
  }
  float_bytes(state, n);
}

void BM_SettleChange(benchmark::State& state, wire_dtype dtype) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto prev = values(n, 1);
  const auto step = values(n, 2);
  std::vector<float> next(n);
  error_feedback feedback;
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) {
      next[i] = prev[i] + step[i];
    }
    auto change = settle_change(prev, next, dtype, feedback);
    benchmark::DoNotOptimize(change);
  }
  float_bytes(state, n);
}

}  // namespace

BENCHMARK(BM_Memcpy)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Encode, bf16, wire_dtype::bf16)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Encode, f16, wire_dtype::f16)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Encode, int8, wire_dtype::int8)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Decode, bf16, wire_dtype::bf16)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Decode, f16, wire_dtype::f16)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Decode, int8, wire_dtype::int8)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Quantize, bf16, wire_dtype::bf16)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Quantize, f16, wire_dtype::f16)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_Quantize, int8, wire_dtype::int8)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_ErrorFeedback, bf16, wire_dtype::bf16)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_ErrorFeedback, int8, wire_dtype::int8)->Arg(mlp_floats);
BENCHMARK_CAPTURE(BM_SettleChange, bf16, wire_dtype::bf16)->Arg(mlp_floats);

BENCHMARK_MAIN();
