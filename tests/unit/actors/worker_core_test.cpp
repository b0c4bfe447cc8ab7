// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/worker_core.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "prsgd/actors/averager_core.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

flat_buffer buffer(float v) { return std::make_shared<const std::vector<float>>(3, v); }

class WorkerCoreTest : public ::testing::Test {
 protected:
  WorkerCoreTest() : worker(config(), clk) {}

  static worker_config config() {
    worker_config c;
    c.incarnation = 7;
    c.speed_hint = 12.5;
    c.heartbeat_interval = 1s;
    c.join_retry = 2s;
    c.averager_timeout = 5s;
    return c;
  }

  welcome_msg welcome(incarnation_t averager = 1, round_t admitted = 0) {
    welcome_msg w{3, 7, averager, admitted, admitted, training_mode::restarted_sgd, 3, 1s};
    w.token = 0xC0FFEE;
    w.shard_index = 1;
    w.num_shards = 4;
    w.spec.batch_size = 64;
    w.spec.seed = 9;
    return w;
  }
  restart_msg restart(round_t r, float v = 1.0F, incarnation_t averager = 1, std::uint64_t interval = 5) {
    return restart_msg{3, 7, averager, r, buffer(v), interval, 0.1, training_mode::restarted_sgd, {}};
  }
  train_result result(round_t r, float v = 2.0F) { return train_result{r, 5, 320, 64.0, 320, buffer(v)}; }

  template <class T>
  static std::vector<T> of(const actions& a) {
    std::vector<T> found;
    for (const auto& o : a.sends) {
      if (!std::holds_alternative<join_msg>(o.msg)) {
        EXPECT_EQ(o.member, 3U) << "a worker sends as the member it was welcomed as";
      }
      if (const auto* t = std::get_if<T>(&o.msg)) {
        found.push_back(*t);
      }
    }
    return found;
  }

  fake_clock clk;
  worker_core worker;
};

TEST_F(WorkerCoreTest, StartSendsJoinWithIdentityAndSpeedHint) {
  auto a = worker.start();
  auto joins = of<join_msg>(a);
  ASSERT_EQ(joins.size(), 1U);
  EXPECT_EQ(joins[0].member, 0U) << "the averager assigns the id";
  EXPECT_EQ(joins[0].incarnation, 7U) << "the JOIN's nonce";
  EXPECT_EQ(joins[0].incarnation, 7U);
  EXPECT_DOUBLE_EQ(joins[0].speed_hint, 12.5);
  EXPECT_EQ(worker.state(), worker_state::joining);
}

TEST_F(WorkerCoreTest, JoinIsRetriedUntilWelcomed) {
  (void)worker.start();
  clk.advance(1s);
  EXPECT_TRUE(of<join_msg>(worker.tick()).empty());
  clk.advance(1s);
  EXPECT_EQ(of<join_msg>(worker.tick()).size(), 1U);
  (void)worker.on_message(welcome());
  EXPECT_EQ(worker.state(), worker_state::welcomed);
  clk.advance(2s);
  EXPECT_TRUE(of<join_msg>(worker.tick()).empty());
}

// join_timeout: a worker no averager welcomes within it stops and says why, whether it never joined or lost its
// averager and has been rejoining since; a WELCOME in time clears it. 0 (the default) keeps trying.
worker_config joining(std::chrono::nanoseconds retry, std::chrono::nanoseconds timeout) {
  worker_config c;
  c.incarnation = 7;
  c.join_retry = retry;
  c.averager_timeout = 5s;
  c.join_timeout = timeout;
  return c;
}

TEST(WorkerCoreJoinTimeout, GivesUpWhenNoWelcomeComesInTime) {
  fake_clock clk;
  worker_core worker(joining(2s, 9s), clk);
  (void)worker.start();
  for (int i = 0; i < 8; ++i) {
    clk.advance(1s);
    const auto a = worker.tick();
    EXPECT_FALSE(a.stopped) << "after " << i + 1 << " s";
    EXPECT_FALSE(a.gave_up.has_value());
  }
  ASSERT_TRUE(worker.next_wakeup().has_value());
  EXPECT_LE(*worker.next_wakeup(), clk.now() + 1s) << "the core wakes for its deadline, not only for a retry";
  clk.advance(1s);
  const auto a = worker.tick();
  EXPECT_TRUE(a.stopped);
  ASSERT_TRUE(a.gave_up.has_value());
  EXPECT_NE(a.gave_up->find("9 s"), std::string::npos) << *a.gave_up;
  EXPECT_TRUE(a.sends.empty()) << "no JOIN after giving up";
  EXPECT_EQ(worker.state(), worker_state::stopped);
  EXPECT_FALSE(worker.next_wakeup().has_value());
}

TEST(WorkerCoreJoinTimeout, CountsFromTheLatestRejoinAndAWelcomeClearsIt) {
  fake_clock clk;
  worker_core worker(joining(1s, 10s), clk);
  (void)worker.start();
  clk.advance(8s);
  (void)worker.tick();
  welcome_msg w{3, 7, 1, 0, 0, training_mode::restarted_sgd, 3, 1s};
  (void)worker.on_message(w);
  ASSERT_EQ(worker.state(), worker_state::welcomed);
  clk.advance(20s);  // welcomed: no deadline, however long the wait; the silence makes it rejoin
  auto a = worker.tick();
  EXPECT_FALSE(a.stopped);
  ASSERT_EQ(worker.state(), worker_state::joining) << "the averager went silent";
  for (int i = 0; i < 9; ++i) {
    clk.advance(1s);
    EXPECT_FALSE(worker.tick().stopped) << "the deadline counts from the rejoin, " << i + 1 << " s ago";
  }
  clk.advance(1s);
  a = worker.tick();
  EXPECT_TRUE(a.stopped);
  EXPECT_TRUE(a.gave_up.has_value());
}

TEST(WorkerCoreJoinTimeout, ZeroKeepsTrying) {
  fake_clock clk;
  worker_core worker(joining(1s, 0s), clk);
  (void)worker.start();
  for (int i = 0; i < 100; ++i) {
    clk.advance(10s);
    const auto a = worker.tick();
    ASSERT_FALSE(a.stopped);
    EXPECT_EQ(a.sends.size(), 1U) << "one JOIN retry";
  }
}

TEST_F(WorkerCoreTest, RestartBecomesATaskAndTheResultBecomesModel) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  auto a = worker.on_message(restart(0, 1.5F));
  ASSERT_TRUE(a.task.has_value());
  EXPECT_EQ(a.task->round, 0U);
  EXPECT_EQ(a.task->interval, 5U);
  EXPECT_DOUBLE_EQ(a.task->step_size, 0.1);
  EXPECT_EQ((*a.task->model)[0], 1.5F);
  EXPECT_EQ(worker.state(), worker_state::training);

  a = worker.on_trained(result(0));
  auto models = of<model_msg>(a);
  ASSERT_EQ(models.size(), 1U);
  EXPECT_EQ(models[0].member, 3U);
  EXPECT_EQ(models[0].incarnation, 7U);
  EXPECT_EQ(models[0].averager_incarnation, 1U);
  EXPECT_EQ(models[0].round, 0U);
  EXPECT_EQ(models[0].steps, 5U);
  EXPECT_EQ(models[0].samples, 320U);
  EXPECT_FALSE(models[0].is_gradient);
  EXPECT_EQ(worker.state(), worker_state::submitted);
  EXPECT_TRUE(of<model_msg>(worker.on_trained(result(0))).empty()) << "one MODEL per round";
}

// With a lossy wire dtype the MODEL carries x_i − x̄_r compressed with error feedback, one feedback stream per
// shard owner over its slice (the whole vector in a star); a gradient is compressed as it is.
TEST_F(WorkerCoreTest, LossyModelCarriesTheChangeWithErrorFeedbackPerSlice) {
  const auto bits = [](const std::vector<float>& v) {
    std::vector<std::uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  };
  const std::vector<float> xbar{1.0F, -2.0F, 0.5F, 3.0F, 0.125F};
  for (const std::size_t owners : {0U, 2U}) {
    SCOPED_TRACE(owners);
    worker_core w(config(), clk);
    (void)w.start();
    auto wm = welcome();
    wm.spec.wire = algorithms::wire_dtype::bf16;
    wm.owners.assign(owners, "inproc://owner");
    (void)w.on_message(wm);
    const std::size_t K = std::max<std::size_t>(owners, 1);
    std::vector<algorithms::error_feedback> expected_feedback(K);
    for (round_t r = 0; r < 2; ++r) {
      auto rs = restart(r);
      rs.model = std::make_shared<const std::vector<float>>(xbar);
      ASSERT_TRUE(w.on_message(rs).task.has_value());
      std::vector<float> x(xbar.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        x[i] = xbar[i] + 0.0123457F * static_cast<float>(i + 1 + r);  // not representable in bf16
      }
      auto tr = result(r);
      tr.params = std::make_shared<const std::vector<float>>(x);
      const auto models = of<model_msg>(w.on_trained(tr));
      ASSERT_EQ(models.size(), 1U);
      EXPECT_TRUE(models[0].delta);
      EXPECT_EQ(models[0].dtype, algorithms::wire_dtype::bf16);
      std::vector<float> want;
      for (std::size_t k = 0; k < K; ++k) {
        const auto b = slice_begin(x.size(), K, k);
        const auto e = slice_begin(x.size(), K, k + 1);
        std::vector<float> change(x.begin() + b, x.begin() + e);
        for (std::size_t i = 0; i < change.size(); ++i) {
          change[i] -= xbar[b + i];
        }
        const auto part = expected_feedback[k].compress(change, algorithms::wire_dtype::bf16);
        want.insert(want.end(), part.begin(), part.end());
      }
      ASSERT_TRUE(models[0].params);
      EXPECT_EQ(bits(*models[0].params), bits(want)) << "round " << r;
      EXPECT_EQ(bits(*tr.params), bits(x)) << "the trained model is left as it is";
    }
  }
}

// A RESTART that confirms a model the shell could not fill in (it no longer holds the model it built) is not
// trained from: the worker rejoins, and its new membership gets x̄ whole.
TEST_F(WorkerCoreTest, AConfirmedModelTheShellDidNotFillInMakesTheWorkerRejoin) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  auto confirmed = restart(0);
  confirmed.model.reset();
  confirmed.held = 0x1234U;
  const auto a = worker.on_message(confirmed);
  EXPECT_FALSE(a.task.has_value());
  EXPECT_EQ(of<join_msg>(a).size(), 1U);
}

TEST_F(WorkerCoreTest, DuplicateAndOlderRestartsAreIgnored) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  ASSERT_TRUE(worker.on_message(restart(4)).task.has_value());
  EXPECT_FALSE(worker.on_message(restart(4)).task.has_value());
  EXPECT_FALSE(worker.on_message(restart(3)).task.has_value());
  auto other = restart(5);
  other.incarnation = 6;  // for a previous incarnation of this worker
  EXPECT_FALSE(worker.on_message(other).task.has_value());
  other = restart(5);
  other.member = 4;
  EXPECT_FALSE(worker.on_message(other).task.has_value());
}

TEST_F(WorkerCoreTest, NewerRestartWhileTrainingCancelsAndObsoleteResultIsDropped) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  (void)worker.on_message(restart(0));
  auto a = worker.on_message(restart(1));  // a deadline closed round 0 without us
  EXPECT_TRUE(a.cancel_task);
  ASSERT_TRUE(a.task.has_value());
  EXPECT_EQ(a.task->round, 1U);
  EXPECT_TRUE(of<model_msg>(worker.on_trained(result(0))).empty());
  EXPECT_EQ(of<model_msg>(worker.on_trained(result(1))).size(), 1U);
}

TEST_F(WorkerCoreTest, NewAveragerIncarnationInHeartbeatTriggersRejoin) {
  (void)worker.start();
  (void)worker.on_message(welcome(1));
  (void)worker.on_message(restart(8));
  auto a = worker.on_message(heartbeat_msg{3, 7, 2, 6, true});
  EXPECT_TRUE(a.cancel_task);
  auto joins = of<join_msg>(a);
  ASSERT_EQ(joins.size(), 1U);
  EXPECT_EQ(worker.state(), worker_state::joining);
  (void)worker.on_message(welcome(2, 6));
  EXPECT_EQ(worker.averager_incarnation(), 2U);
  // The resumed averager restarts from its checkpoint round 6 < 8: accepted, it is a new incarnation.
  auto t = worker.on_message(restart(6, 1.0F, 2));
  ASSERT_TRUE(t.task.has_value());
  EXPECT_EQ(t.task->round, 6U);
  EXPECT_FALSE(worker.on_message(restart(9, 1.0F, 1)).task.has_value()) << "from the dead incarnation";
  auto models = of<model_msg>(worker.on_trained(result(6)));
  ASSERT_EQ(models.size(), 1U);
  EXPECT_EQ(models[0].averager_incarnation, 2U);
}

TEST_F(WorkerCoreTest, RestartFromANewerAveragerIncarnationIsAcceptedOnceWelcomed) {
  (void)worker.start();
  EXPECT_FALSE(worker.on_message(restart(0, 1.0F, 3)).task.has_value()) << "no member id yet: not for us";
  (void)worker.on_message(welcome(1));
  auto a = worker.on_message(restart(0, 1.0F, 3));
  ASSERT_TRUE(a.task.has_value());
  EXPECT_EQ(worker.averager_incarnation(), 3U);
  EXPECT_EQ(worker.state(), worker_state::training);
}

TEST_F(WorkerCoreTest, WelcomeGivesTheMemberIdTokenShardAndJob) {
  (void)worker.start();
  auto other = welcome();
  other.incarnation = 8;  // answers another worker's JOIN
  (void)worker.on_message(other);
  EXPECT_EQ(worker.state(), worker_state::joining);
  (void)worker.on_message(welcome());
  EXPECT_EQ(worker.member(), 3U);
  EXPECT_EQ(worker.shard_index(), 1U);
  EXPECT_EQ(worker.num_shards(), 4U);
  auto a = worker.on_message(restart(0));
  ASSERT_TRUE(a.task.has_value());
  EXPECT_EQ(a.task->shard_index, 1U);
  EXPECT_EQ(a.task->num_shards, 4U);
  EXPECT_EQ(a.task->batch_size, 64U);
  EXPECT_EQ(a.task->seed, 9U);
  auto models = of<model_msg>(worker.on_trained(result(0)));
  ASSERT_EQ(models.size(), 1U);
  EXPECT_EQ(models[0].token, 0xC0FFEEU) << "every message of the member carries its token";
  clk.advance(1s);
  auto hb = of<heartbeat_msg>(worker.tick());
  ASSERT_EQ(hb.size(), 1U);
  EXPECT_EQ(hb[0].token, 0xC0FFEEU);
  auto left = of<leave_msg>(worker.leave());
  ASSERT_EQ(left.size(), 1U);
  EXPECT_EQ(left[0].token, 0xC0FFEEU);
}

TEST_F(WorkerCoreTest, RefusedEndsTheWorkerWithTheReason) {
  (void)worker.start();
  auto a = worker.on_message(refused_msg{0, 8, 1, 0, "not ours"});
  EXPECT_FALSE(a.stopped) << "answers another JOIN";
  a = worker.on_message(refused_msg{0, 7, 1, 0, "model mismatch: the job trains a, the worker has b"});
  EXPECT_TRUE(a.stopped);
  ASSERT_TRUE(a.refused.has_value());
  EXPECT_EQ(*a.refused, "model mismatch: the job trains a, the worker has b");
  EXPECT_EQ(worker.state(), worker_state::stopped);
  EXPECT_FALSE(worker.next_wakeup().has_value());
}

TEST_F(WorkerCoreTest, RejoinForgetsTheMemberIdAndAsksForANewOne) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  auto a = worker.on_message(removed_msg{3, 7, 1, 0});
  auto joins = of<join_msg>(a);
  ASSERT_EQ(joins.size(), 1U);
  EXPECT_EQ(joins[0].member, 0U);
  EXPECT_EQ(worker.member(), 0U);
}

TEST_F(WorkerCoreTest, RemovedTriggersOneRejoin) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  (void)worker.on_message(restart(0));
  auto a = worker.on_message(removed_msg{3, 7, 1, 0});
  EXPECT_EQ(of<join_msg>(a).size(), 1U);
  EXPECT_TRUE(a.cancel_task);
  EXPECT_TRUE(of<join_msg>(worker.on_message(removed_msg{3, 7, 1, 0})).empty());
}

TEST_F(WorkerCoreTest, SilentAveragerLeadsToRejoin) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  clk.advance(5s);
  EXPECT_TRUE(of<join_msg>(worker.tick()).empty());
  clk.advance(1ms);
  EXPECT_EQ(of<join_msg>(worker.tick()).size(), 1U);
  EXPECT_EQ(worker.state(), worker_state::joining);
}

// A RESTART announced by a heartbeat may take its transfer time on top of the timeout (decision 0024).
TEST_F(WorkerCoreTest, AnAnnouncedRestartKeepsTheAveragerAliveForItsTransferTime) {
  worker_config c = config();
  c.slowest_link_bytes_per_s = 1e6;
  worker_core w{c, clk};
  (void)w.start();
  (void)w.on_message(welcome());
  heartbeat_msg hb{3, 7, 1, 0, true, 0};
  hb.transfer_bytes = 20'000'000;  // 20 s at 1 MB/s
  (void)w.on_message(hb);
  EXPECT_EQ(w.next_wakeup(), clk.now() + 1s) << "heartbeats still follow their interval";
  clk.advance(24s);
  EXPECT_TRUE(of<join_msg>(w.tick()).empty()) << "5 s timeout + 20 s transfer not over yet";
  clk.advance(1s + 1ms);
  EXPECT_EQ(of<join_msg>(w.tick()).size(), 1U) << "silent past the allowance: rejoin";
}

// While its own MODEL is in flight the worker allows the averager the same time: on a saturated uplink the
// averager's messages can stop arriving too (decision 0024).
TEST_F(WorkerCoreTest, ItsOwnModelInFlightKeepsTheAveragerAliveForItsTransferTime) {
  worker_config c = config();
  c.slowest_link_bytes_per_s = 1e6;
  worker_core w{c, clk};
  (void)w.start();
  (void)w.on_message(welcome());
  (void)w.on_message(restart(0));
  train_result r = result(0);
  r.params = std::make_shared<const std::vector<float>>(5'000'000, 1.0F);  // 20 MB: 20 s at 1 MB/s
  (void)w.on_trained(r);
  clk.advance(24s);
  EXPECT_TRUE(of<join_msg>(w.tick()).empty()) << "5 s timeout + 20 s transfer not over yet";
  clk.advance(1s + 1ms);
  EXPECT_EQ(of<join_msg>(w.tick()).size(), 1U) << "silent past the allowance: rejoin";
}

// Every MODEL is announced, ahead of it, with its size on the wire.
TEST_F(WorkerCoreTest, ModelIsAnnouncedByAHeartbeatCarryingItsSize) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  (void)worker.on_message(restart(0));
  auto a = worker.on_trained(result(0));
  ASSERT_EQ(a.sends.size(), 2U);
  const auto* hb = std::get_if<heartbeat_msg>(&a.sends[0].msg);
  ASSERT_NE(hb, nullptr) << "the heartbeat goes first";
  EXPECT_EQ(hb->transfer_bytes, 3U * sizeof(float));
  EXPECT_EQ(hb->token, 0xC0FFEEU);
  EXPECT_NE(std::get_if<model_msg>(&a.sends[1].msg), nullptr);
}

TEST_F(WorkerCoreTest, HeartbeatsFollowTheInterval) {
  (void)worker.start();
  clk.advance(1s);
  EXPECT_TRUE(of<heartbeat_msg>(worker.tick()).empty()) << "no member to speak for before WELCOME";
  (void)worker.on_message(welcome());
  clk.advance(1s);
  auto hb = of<heartbeat_msg>(worker.tick());
  ASSERT_EQ(hb.size(), 1U);
  EXPECT_FALSE(hb[0].from_averager);
  EXPECT_TRUE(of<heartbeat_msg>(worker.tick()).empty());
  ASSERT_TRUE(worker.next_wakeup().has_value());
  EXPECT_EQ(*worker.next_wakeup(), clk.now() + 1s);
}

TEST_F(WorkerCoreTest, LeaveAndStopEndTheWorker) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  (void)worker.on_message(restart(0));
  auto a = worker.leave();
  EXPECT_TRUE(a.stopped);
  EXPECT_TRUE(a.cancel_task);
  EXPECT_EQ(of<leave_msg>(a).size(), 1U);
  EXPECT_FALSE(worker.on_message(restart(1)).task.has_value());
  EXPECT_FALSE(worker.next_wakeup().has_value());

  worker_core other{config(), clk};
  (void)other.start();
  (void)other.on_message(welcome());
  EXPECT_TRUE(other.on_message(stop_msg{3, 7, 1, 0}).stopped);
  EXPECT_EQ(other.state(), worker_state::stopped);
}

TEST_F(WorkerCoreTest, MinibatchTaskSubmitsAGradient) {
  (void)worker.start();
  (void)worker.on_message(welcome());
  auto r = restart(0);
  r.mode = training_mode::minibatch_sgd;
  r.interval = 1;
  auto a = worker.on_message(r);
  ASSERT_TRUE(a.task.has_value());
  EXPECT_EQ(a.task->mode, training_mode::minibatch_sgd);
  auto models = of<model_msg>(worker.on_trained(result(0)));
  ASSERT_EQ(models.size(), 1U);
  EXPECT_TRUE(models[0].is_gradient);
}

TEST_F(WorkerCoreTest, EveryResultCarriesTheNextWakeupUntilTheEnd) {
  auto a = worker.start();
  ASSERT_TRUE(a.wakeup.has_value());
  EXPECT_EQ(a.wakeup, worker.next_wakeup());
  a = worker.on_message(welcome());
  EXPECT_EQ(a.wakeup, worker.next_wakeup());
  a = worker.on_message(restart(0));
  ASSERT_TRUE(a.task.has_value());
  EXPECT_EQ(a.wakeup, worker.next_wakeup());
  clk.advance(1s);
  a = worker.tick();
  EXPECT_EQ(of<heartbeat_msg>(a).size(), 1U);
  EXPECT_EQ(a.wakeup, worker.next_wakeup());
  a = worker.leave();
  EXPECT_TRUE(a.stopped);
  EXPECT_TRUE(a.cancel_task);
  EXPECT_FALSE(a.wakeup.has_value()) << "nothing left to wake up for";
}

// Narrows a core's outbound message to what the other side's core takes.
template <class Variant>
Variant narrow(const any_msg& m) {
  return std::visit(
      [](const auto& x) -> Variant {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_constructible_v<Variant, T>) {
          return x;
        } else {
          ADD_FAILURE() << "message sent in the wrong direction";
          return Variant{};
        }
      },
      m);
}

// Drives averager_core and three worker_cores against each other through a lossless in-memory queue,
// with one worker leaving and one joining midway: every round closes and every model counts once.
TEST(WorkerAveragerLoopTest, WorkersAndAveragerConvergeOnRoundsTogether) {
  fake_clock clk;
  averager_config cfg;
  cfg.interval = 2;
  cfg.max_rounds = 6;
  cfg.shards = 4;
  auto made = averager_core::make(cfg, clk, std::vector<float>(3, 0.0F));
  ASSERT_TRUE(made.has_value());
  auto& avg = *made;
  std::map<member_id, worker_core> workers;
  std::vector<std::pair<member_id, to_averager>> to_avg;
  std::vector<outbound> to_workers;
  auto post = [&](member_id id, const actions& a) {
    for (const auto& o : a.sends) {
      to_avg.emplace_back(id, narrow<to_averager>(o.msg));
    }
  };
  auto add_worker = [&](member_id id) {
    worker_config wc;
    wc.incarnation = 100 + id;  // the averager assigns ids 1, 2, 3 in join order, as the test names them
    auto [it, ok] = workers.emplace(id, worker_core{wc, clk});
    post(id, it->second.start());
  };
  auto handle = [&](member_id id, actions a) {
    post(id, a);
    if (a.task) {
      // "Training": every worker moves its model by +id.
      std::vector<float> x = *a.task->model;
      for (float& v : x) {
        v += static_cast<float>(id);
      }
      auto more = workers.at(id).on_trained(
          train_result{a.task->round, a.task->interval, 10, 1.0, 10, std::make_shared<const std::vector<float>>(x)});
      post(id, more);
    }
  };
  add_worker(1);
  add_worker(2);
  bool left = false;
  for (int guard = 0; guard < 1000 && (!to_avg.empty() || !to_workers.empty()); ++guard) {
    auto batch = std::exchange(to_avg, {});
    for (auto& [from, m] : batch) {
      auto out = avg.on_message(m, from);
      to_workers.insert(to_workers.end(), out.sends.begin(), out.sends.end());
    }
    auto deliveries = std::exchange(to_workers, {});
    for (auto& o : deliveries) {
      if (workers.contains(o.member)) {
        handle(o.member, workers.at(o.member).on_message(narrow<to_worker>(o.msg)));
      }
    }
    if (avg.round() == 2 && !left) {
      left = true;
      handle(2, workers.at(2).leave());
      add_worker(3);
    }
  }
  EXPECT_EQ(avg.state(), averager_state::stopped);
  EXPECT_EQ(avg.round(), 6U);
  EXPECT_EQ(workers.at(1).state(), worker_state::stopped);
  EXPECT_EQ(workers.at(3).state(), worker_state::stopped);
  EXPECT_EQ(avg.counters().duplicate + avg.counters().late + avg.counters().rejected, 0U);
  for (const auto& rec : avg.accounting()) {
    EXPECT_EQ(avg.times_counted(rec.round, rec.member), 1);
  }
}

}  // namespace
}  // namespace prsgd::actors
