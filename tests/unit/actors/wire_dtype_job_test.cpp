// SPDX-License-Identifier: Apache-2.0
// Lossy wire dtypes on the real cores: one averager_core and three worker_cores on one fake clock, every
// message encoded and decoded by the codec on its way. Workers "train" by adding a deterministic step to
// the model they were given. After every RESTART, each worker's model must be bit for bit the averager's
// x̄ (and the checkpoint's), whether the RESTART carried the whole model or a change; a joiner gets
// the whole model.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "prsgd/actors/averager_core.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/worker_core.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;
using algorithms::wire_dtype;

constexpr std::size_t dim = 1000;  // four int8 blocks, the last one short

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class WireDtypeJobTest : public ::testing::TestWithParam<wire_dtype> {
 protected:
  struct worker {
    std::unique_ptr<worker_core> core;
    std::optional<train_task> task;
  };

  void make_averager() {
    averager_config cfg;
    cfg.interval = 2;
    cfg.heartbeat_interval = 1s;
    cfg.heartbeat_timeout = 100s;
    cfg.idle_rounds = 0;
    cfg.min_workers = 2;
    cfg.shards = 8;
    cfg.spec.wire = GetParam();
    std::vector<float> init(dim);
    std::mt19937 gen(7);
    std::normal_distribution<float> d(0.0F, 0.1F);
    for (auto& x : init) {
      x = d(gen);
    }
    auto c = averager_core::make(cfg, clk, init, averager_setup{});
    ASSERT_TRUE(c.has_value()) << c.error().message();
    avg.emplace(std::move(c).value());
  }

  void add_worker(origin_t origin) {
    worker_config cfg;
    cfg.incarnation = origin;
    cfg.heartbeat_interval = 1s;
    cfg.averager_timeout = 100s;
    workers[origin].core = std::make_unique<worker_core>(cfg, clk);
    take_worker(origin, workers[origin].core->start());
  }

  // Carries the worker's messages through the codec to the averager.
  void take_worker(origin_t origin, const actions& a) {
    if (a.task) {
      workers[origin].task = a.task;
    }
    for (const auto& o : a.sends) {
      std::visit(
          [&](const auto& msg) {
            using T = std::decay_t<decltype(msg)>;
            if constexpr (std::is_constructible_v<to_averager, T>) {
              const auto frames = encode(to_averager{msg});
              bytes_up += payload_bytes(frames);
              auto back = decode_to_averager(frames);
              ASSERT_TRUE(back.has_value()) << back.error().message();
              to_averager_queue.emplace_back(origin, std::move(*back));
            }
          },
          o.msg);
    }
  }

  // Carries the averager's messages through the codec to the workers.
  void take_averager(const actions& a) {
    for (const auto& r : a.routes) {
      route[r.member] = r.via;
    }
    for (const auto& o : a.sends) {
      const origin_t to = o.via ? *o.via : route.at(o.member);
      std::visit(
          [&](const auto& msg) {
            using T = std::decay_t<decltype(msg)>;
            if constexpr (std::is_constructible_v<to_worker, T>) {
              if constexpr (std::is_same_v<T, restart_msg>) {
                (msg.base ? changes : wholes) += 1;
              }
              const auto frames = encode(to_worker{msg});
              bytes_down += payload_bytes(frames);
              auto back = decode_to_worker(frames);
              ASSERT_TRUE(back.has_value()) << back.error().message();
              to_worker_queue.emplace_back(to, std::move(*back));
            }
          },
          o.msg);
    }
  }

  void deliver_all() {
    while (!to_averager_queue.empty() || !to_worker_queue.empty()) {
      while (!to_averager_queue.empty()) {
        auto [from, m] = std::move(to_averager_queue.front());
        to_averager_queue.erase(to_averager_queue.begin());
        take_averager(std::visit(
            [&, from = from](const auto& msg) -> actions {
              using T = std::decay_t<decltype(msg)>;
              if constexpr (std::is_same_v<T, join_msg>) {
                return avg->on_join(msg, from);
              } else if constexpr (std::is_same_v<T, model_msg>) {
                return avg->on_model(msg, from);
              } else if constexpr (std::is_same_v<T, heartbeat_msg>) {
                return avg->on_heartbeat(msg, from);
              } else if constexpr (std::is_same_v<T, leave_msg>) {
                return avg->on_leave(msg, from);
              } else {
                return actions{};
              }
            },
            m));
      }
      while (!to_worker_queue.empty()) {
        auto [to, m] = std::move(to_worker_queue.front());
        to_worker_queue.erase(to_worker_queue.begin());
        auto& w = workers.at(to);
        take_worker(to, w.core->on_message(m));
      }
    }
  }

  // Every worker with a task "trains": x + a step that depends on the worker and the round.
  void train_all() {
    for (auto& [origin, w] : workers) {
      if (!w.task) {
        continue;
      }
      const auto task = *std::exchange(w.task, std::nullopt);
      auto x = *task.model;
      for (std::size_t i = 0; i < x.size(); ++i) {
        x[i] += 0.01F * std::sin(static_cast<float>(i * (origin + 1) + task.round));
      }
      train_result r{task.round, task.interval, 8, 1.0, 8, std::make_shared<const std::vector<float>>(std::move(x))};
      take_worker(origin, w.core->on_trained(r));
    }
    deliver_all();
  }

  // Checks that everybody who is training from round `r` holds exactly the averager's x̄.
  void expect_identical(const char* when) {
    ASSERT_TRUE(avg->model());
    const auto& xbar = *avg->model();
    ASSERT_TRUE(same_bits(avg->snapshot().model, xbar)) << when << ": the checkpoint records x̄";
    int holders = 0;
    for (const auto& [origin, w] : workers) {
      if (w.core->round() != avg->round() || !w.core->restart_model()) {
        continue;
      }
      ++holders;
      EXPECT_TRUE(same_bits(*w.core->restart_model(), xbar))
          << when << ": worker " << origin << " rebuilt another x̄ in round " << avg->round();
    }
    EXPECT_GT(holders, 0) << when;
  }

  fake_clock clk;
  std::optional<averager_core> avg;
  std::map<origin_t, worker> workers;
  std::map<member_id, origin_t> route;
  std::vector<std::pair<origin_t, to_averager>> to_averager_queue;
  std::vector<std::pair<origin_t, to_worker>> to_worker_queue;
  std::uint64_t bytes_up = 0;
  std::uint64_t bytes_down = 0;
  int changes = 0;
  int wholes = 0;
};

TEST_P(WireDtypeJobTest, EveryWorkerRebuildsTheAveragersModelBitForBit) {
  make_averager();
  add_worker(1);
  add_worker(2);
  deliver_all();
  ASSERT_EQ(avg->round(), 0U);
  expect_identical("round 0");
  for (int r = 0; r < 12; ++r) {
    if (r == 4) {
      add_worker(3);  // joins mid-run: admitted with the whole model
      deliver_all();
    }
    const auto before = avg->round();
    train_all();
    ASSERT_EQ(avg->round(), before + 1) << "every member submitted";
    expect_identical(("after round " + std::to_string(r)).c_str());
  }
  EXPECT_EQ(avg->round(), 12U);
  const auto lossy = algorithms::lossy(GetParam());
  if (lossy) {
    EXPECT_GT(changes, 0) << "members that held the last x̄ got changes";
    EXPECT_GE(wholes, 3) << "the first RESTARTs and the joiner's were whole";
    // A change costs encoded_size(dtype) bytes instead of 4 per float.
    EXPECT_LT(bytes_up, static_cast<std::uint64_t>(avg->counters().accepted) * dim * 4);
  } else {
    EXPECT_EQ(changes, 0);
  }
}

TEST_P(WireDtypeJobTest, AJoinThatCannotReadTheDtypeIsRefusedWithOneLine) {
  make_averager();
  join_msg j;
  j.incarnation = 99;
  j.wire_dtypes = {};  // a worker that reads f32 only (or an older one that declares nothing)
  const auto out = avg->on_join(j, 99);
  ASSERT_EQ(out.sends.size(), 1U);
  if (algorithms::lossy(GetParam())) {
    const auto* refused = std::get_if<refused_msg>(&out.sends[0].msg);
    ASSERT_NE(refused, nullptr);
    EXPECT_EQ(refused->reason, "wire dtype mismatch: the job sends " + std::string{algorithms::to_string(GetParam())} +
                                   " payloads, the worker reads f32 only");
  } else {
    EXPECT_NE(std::get_if<welcome_msg>(&out.sends[0].msg), nullptr);
  }
}

std::string dtype_name(const ::testing::TestParamInfo<wire_dtype>& p) {
  return std::string{algorithms::to_string(p.param)};
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, WireDtypeJobTest,
                         ::testing::Values(wire_dtype::f32, wire_dtype::bf16, wire_dtype::f16, wire_dtype::int8),
                         dtype_name);

}  // namespace
}  // namespace prsgd::actors
