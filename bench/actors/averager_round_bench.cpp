// SPDX-License-Identifier: Apache-2.0
// One averager round through averager_core, as the actor shell drives it: N MODEL submissions of n floats
// each, the last closing the barrier (average, account, metrics, RESTART messages for round r+1). The
// workers' buffers are made once and shared, as the codec shares received frames. Time is CPU time (on a
// shared VM wall time mostly measures the scheduler); run with --benchmark_repetitions=5 and compare medians.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "prsgd/actors/averager_core.hpp"

namespace {

using namespace prsgd::actors;

void BM_AveragerRound(benchmark::State& state) {
  const auto workers = static_cast<member_id>(state.range(0));
  const auto floats = static_cast<std::size_t>(state.range(1));
  prsgd::fake_clock clk;
  averager_config cfg;
  cfg.interval = 4;
  cfg.min_workers = workers;
  cfg.consensus_every = static_cast<std::uint64_t>(state.range(2));
  auto made = averager_core::make(cfg, clk, std::vector<float>(floats, 0.0F));
  if (!made) {
    state.SkipWithError(made.error().message().c_str());
    return;
  }
  auto& core = *made;
  for (member_id id = 1; id <= workers; ++id) {
    (void)core.on_join(join_msg{id, 1, 0, 0, 0});
  }
  std::vector<flat_buffer> params;
  for (member_id id = 1; id <= workers; ++id) {
    params.push_back(std::make_shared<const std::vector<float>>(floats, static_cast<float>(id)));
  }
  std::size_t sends = 0;
  for (auto _ : state) {
    const round_t r = core.round();
    for (member_id id = 1; id <= workers; ++id) {
      model_msg m;
      m.member = id;
      m.incarnation = 1;
      m.averager_incarnation = core.incarnation();
      m.round = r;
      m.steps = 4;
      m.samples = 256;
      m.loss_sum = 1.0;
      m.loss_count = 256;
      m.params = params[id - 1];
      auto out = core.on_model(m);
      sends += out.sends.size();
    }
    benchmark::DoNotOptimize(sends);
  }
  state.counters["rounds"] = static_cast<double>(core.round());
}

BENCHMARK(BM_AveragerRound)
    ->ArgNames({"workers", "floats", "consensus_every"})
    ->Args({4, 1 << 20, 1})
    ->Args({8, 1 << 20, 1})
    ->Args({8, 1 << 20, 0})
    ->Args({4, 10 << 20, 1})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
