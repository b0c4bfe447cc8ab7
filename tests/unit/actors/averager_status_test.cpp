// SPDX-License-Identifier: Apache-2.0
// averager_core::status and on_control, the operator rule, and the STATUS / CONTROL codec, on a fake clock.
#include "prsgd/actors/averager_core.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/status.hpp"

#include "memory_checkpoint_store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <variant>
#include <vector>

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t dim = 4;

class AveragerStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg.interval = 4;
    cfg.heartbeat_interval = 1s;
    cfg.heartbeat_timeout = 60s;
    cfg.idle_rounds = 0;
    cfg.min_workers = 2;
    cfg.shards = 4;
    cfg.max_rounds = 10;
    cfg.rounds_per_epoch = 5;
    cfg.spec.model = "mlp:4";
  }

  void make() {
    auto c = averager_core::make(cfg, clk, std::vector<float>(dim, 0.0F), setup);
    ASSERT_TRUE(c.has_value()) << c.error().message();
    core.emplace(std::move(c).value());
  }

  struct worker {
    member_id id = 0;
    session_token token = 0;
    incarnation_t nonce = 0;
    origin_t origin = 0;
  };

  // JOINs over connection `origin`; returns the id and token from the WELCOME.
  worker join(origin_t origin) {
    join_msg j;
    j.incarnation = 100 + origin;
    j.model_fingerprint = "mlp:4";
    const auto a = core->on_join(j, origin);
    for (const auto& o : a.sends) {
      if (const auto* w = std::get_if<welcome_msg>(&o.msg)) {
        return {w->member, w->token, j.incarnation, origin};
      }
    }
    ADD_FAILURE() << "no WELCOME";
    return {};
  }

  actions submit(const worker& w, std::uint64_t steps = 4) {
    model_msg m;
    m.member = w.id;
    m.incarnation = w.nonce;
    m.averager_incarnation = core->incarnation();
    m.round = core->round();
    m.steps = steps;
    m.samples = steps * 8;
    m.loss_sum = 1;
    m.loss_count = 8;
    m.token = w.token;
    m.params = std::make_shared<const std::vector<float>>(dim, 1.0F);
    return core->on_model(m, w.origin);
  }

  static bool has_restart(const actions& a) {
    return std::any_of(a.sends.begin(), a.sends.end(),
                       [](const outbound& o) { return std::holds_alternative<restart_msg>(o.msg); });
  }

  averager_config cfg;
  averager_setup setup;
  fake_clock clk;
  std::optional<averager_core> core;
};

TEST_F(AveragerStatusTest, ReportsJobAndPerMemberMeasures) {
  make();
  const auto a = join(1);
  const auto b = join(2);
  ASSERT_EQ(core->state(), averager_state::collecting);
  clk.advance(1s);
  (void)submit(a);  // a waits 3 s at the barrier
  clk.advance(3s);
  (void)submit(b);  // closes round 0
  clk.advance(2s);
  (void)submit(b);  // b waits 1 s in round 1
  clk.advance(1s);
  (void)submit(a);

  const auto s = core->status([](origin_t o) { return "10.0.0." + std::to_string(o); });
  EXPECT_EQ(s.state, "collecting");
  EXPECT_EQ(s.fingerprint, "mlp:4");
  EXPECT_EQ(s.round, 2U);
  EXPECT_EQ(s.trained_rounds, 2U);
  EXPECT_EQ(s.rounds_total, 10U);
  EXPECT_DOUBLE_EQ(s.epoch, 0.4);
  // Rounds of 4 s and 3 s: the moving average is 0.7 * 4 + 0.3 * 3 = 3.7 s, 8 rounds to go.
  EXPECT_NEAR(s.eta_s, 8 * 3.7, 1e-9);
  EXPECT_EQ(s.rule, "samples");
  EXPECT_EQ(s.aggregation, "mean");
  EXPECT_EQ(s.accepted, 4U);
  ASSERT_EQ(s.members.size(), 2U);
  const auto& ma = s.members[0];
  const auto& mb = s.members[1];
  EXPECT_EQ(ma.id, a.id);
  EXPECT_EQ(ma.host, "10.0.0.1");
  EXPECT_EQ(ma.state, "training");
  EXPECT_EQ(ma.interval, 4U);
  EXPECT_DOUBLE_EQ(ma.idle_last_s, 0.0);
  EXPECT_DOUBLE_EQ(ma.idle_mean_s, 1.5);  // 3 s, then 0 s
  EXPECT_DOUBLE_EQ(mb.idle_last_s, 1.0);
  EXPECT_DOUBLE_EQ(mb.idle_mean_s, 0.5);
  EXPECT_EQ(ma.bytes_in, 2 * dim * sizeof(float));
  EXPECT_EQ(ma.bytes_out, 3 * dim * sizeof(float));  // RESTARTs of rounds 0, 1, 2
  EXPECT_GT(ma.steps_per_s, 0);
  EXPECT_DOUBLE_EQ(ma.last_seen_s, 0.0);
  clk.advance(5s);
  EXPECT_DOUBLE_EQ(core->status().members[0].last_seen_s, 5.0);
}

TEST_F(AveragerStatusTest, CountsLateAndRejectedPerMemberAndListsRemovals) {
  make();
  const auto a = join(1);
  const auto b = join(2);
  (void)submit(a);
  (void)submit(b);
  model_msg m;
  m.member = a.id;
  m.incarnation = a.nonce;
  m.averager_incarnation = core->incarnation();
  m.round = 0;  // closed
  m.steps = 4;
  m.samples = 32;
  m.token = a.token;
  m.params = std::make_shared<const std::vector<float>>(dim, 1.0F);
  (void)core->on_model(m, a.origin);
  (void)submit(b, 99);  // more steps than assigned: rejected
  const auto c = join(3);
  leave_msg l{b.id, b.nonce, core->incarnation(), core->round(), b.token};
  (void)core->on_leave(l, b.origin);

  const auto s = core->status();
  ASSERT_EQ(s.members.size(), 1U);
  EXPECT_EQ(s.members[0].late, 1U);
  ASSERT_EQ(s.pending.size(), 1U);
  EXPECT_EQ(s.pending[0].id, c.id);
  EXPECT_EQ(s.pending[0].state, "joining");
  ASSERT_EQ(s.removed.size(), 1U);
  EXPECT_EQ(s.removed[0].id, b.id);
  EXPECT_EQ(s.removed[0].reason, "left");
  EXPECT_EQ(s.removed[0].round, 1U);
  EXPECT_EQ(s.rejected, 1U);
}

TEST_F(AveragerStatusTest, PauseTakesEffectAtTheBarrierAndResumeStartsTheRound) {
  make();
  const auto a = join(1);
  const auto b = join(2);
  auto o = core->on_control(control_op::pause, "");
  EXPECT_TRUE(o.ok) << o.text;
  EXPECT_EQ(core->state(), averager_state::collecting);  // round 0 still closes
  (void)submit(a);
  const auto closed = submit(b);
  EXPECT_EQ(closed.lines.size(), 1U);
  EXPECT_FALSE(has_restart(closed));
  EXPECT_EQ(core->state(), averager_state::paused);
  EXPECT_EQ(core->status().members[0].state, "paused");
  const auto c = join(3);  // waits for the resume
  EXPECT_EQ(core->state(), averager_state::paused);
  clk.advance(10s);
  EXPECT_TRUE(core->tick().sends.size() >= 3U);  // heartbeats go on
  o = core->on_control(control_op::resume, "");
  EXPECT_TRUE(o.ok) << o.text;
  EXPECT_TRUE(has_restart(o.act));
  EXPECT_EQ(core->state(), averager_state::collecting);
  EXPECT_EQ(core->members().size(), 3U);
  EXPECT_FALSE(core->on_control(control_op::resume, "").ok);
  (void)c;
}

TEST_F(AveragerStatusTest, IntervalPolicyAndDeadlineChangeFromTheNextRound) {
  make();
  const auto a = join(1);
  const auto b = join(2);
  EXPECT_FALSE(core->on_control(control_op::set_interval, "0").ok);
  EXPECT_FALSE(core->on_control(control_op::set_interval, "x").ok);
  EXPECT_FALSE(core->on_control(control_op::set_policy, "sometimes").ok);
  EXPECT_FALSE(core->on_control(control_op::set_deadline, "fixed").ok);
  EXPECT_FALSE(core->on_control(control_op::set_deadline, "fixed:-1").ok);
  auto o = core->on_control(control_op::set_interval, "16");
  EXPECT_TRUE(o.ok) << o.text;
  EXPECT_EQ(o.text, "interval I = 16 from round 1");
  EXPECT_EQ(core->interval_of(a.id), 4U);  // this round keeps its interval
  EXPECT_TRUE(core->on_control(control_op::set_deadline, "fixed:2.5").ok);
  EXPECT_FALSE(core->deadline().has_value());
  (void)submit(a);
  (void)submit(b);
  EXPECT_EQ(core->interval_of(a.id), 16U);
  ASSERT_TRUE(core->deadline().has_value());
  EXPECT_EQ(*core->deadline(), clk.now() + 2500ms);
  EXPECT_TRUE(core->on_control(control_op::set_policy, "paper").ok);
  EXPECT_EQ(core->status().interval_policy, "paper");
  EXPECT_EQ(core->status().deadline, "fixed");
}

TEST_F(AveragerStatusTest, RemoveSendsStopAndClosesTheBarrier) {
  make();
  const auto a = join(1);
  const auto b = join(2);
  (void)submit(a);
  EXPECT_FALSE(core->on_control(control_op::remove, "77").ok);
  auto o = core->on_control(control_op::remove, std::to_string(b.id));
  ASSERT_TRUE(o.ok) << o.text;
  ASSERT_FALSE(o.act.sends.empty());
  const auto* stop = std::get_if<stop_msg>(&o.act.sends.front().msg);
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(o.act.sends.front().member, b.id);
  EXPECT_EQ(o.act.lines.size(), 1U);  // the barrier closed without b
  EXPECT_EQ(core->members(), std::vector<member_id>{a.id});
  EXPECT_EQ(core->status().removed.back().reason, "removed by an operator");
}

TEST_F(AveragerStatusTest, CheckpointNeedsAStoreAndStopEndsTheJob) {
  make();
  EXPECT_FALSE(core->on_control(control_op::checkpoint, "").ok);
  setup.checkpoints = true;
  make();
  const auto a = join(1);
  (void)join(2);
  (void)submit(a);
  auto o = core->on_control(control_op::checkpoint, "");
  ASSERT_TRUE(o.ok) << o.text;
  ASSERT_EQ(o.act.checkpoints.size(), 1U);
  EXPECT_EQ(o.act.checkpoints[0].round, 0U);
  o = core->on_control(control_op::stop, "");
  EXPECT_TRUE(o.ok);
  EXPECT_TRUE(o.act.stopped);
  EXPECT_EQ(core->state(), averager_state::stopped);
  EXPECT_FALSE(core->on_control(control_op::pause, "").ok);
}

TEST(SteeringRuleTest, CurveNeedsAnOperatorKeyWithoutCurveLoopbackOnly) {
  const steering_rule curve{true, {"KEY-A", "KEY-B"}};
  EXPECT_TRUE(may_steer(curve, "KEY-B", "10.1.2.3"));
  EXPECT_FALSE(may_steer(curve, "KEY-C", "127.0.0.1"));
  EXPECT_FALSE(may_steer(curve, "", "127.0.0.1"));
  EXPECT_FALSE(may_steer(steering_rule{true, {}}, "KEY-A", "127.0.0.1"));
  const steering_rule plain{false, {}};
  EXPECT_TRUE(may_steer(plain, "", "127.0.0.1"));
  EXPECT_TRUE(may_steer(plain, "", "127.3.0.9"));
  EXPECT_TRUE(may_steer(plain, "", "::1"));
  EXPECT_FALSE(may_steer(plain, "", "10.0.0.2"));
  EXPECT_FALSE(may_steer(plain, "", "1270.0.0.1"));
  EXPECT_FALSE(may_steer(plain, "", ""));
}

TEST(StatusCodecTest, StatusAndControlRoundTrip) {
  auto s = std::make_shared<job_status>();
  s->model = "fmnist-mlp";
  s->round = 7;
  s->eta_s = 12.5;
  s->paused = true;
  member_status m;
  m.id = 3;
  m.host = "127.0.0.1";
  m.idle_mean_s = 0.25;
  s->members.push_back(m);
  s->removed.push_back({9, 1, 5, 2.0, "heartbeat timeout"});
  const auto wire = encode(any_msg{status_reply_msg{0, 42, 1, 7, s}});
  auto back = decode_to_operator(wire);
  ASSERT_TRUE(back.has_value()) << back.error().message();
  const auto& r = std::get<status_reply_msg>(*back);
  EXPECT_EQ(r.incarnation, 42U);
  EXPECT_EQ(to_json(*r.status), to_json(*s));
  EXPECT_EQ(r.status->members.at(0).host, "127.0.0.1");
  EXPECT_EQ(r.status->removed.at(0).reason, "heartbeat timeout");

  control_msg c;
  c.incarnation = 5;
  c.op = control_op::set_deadline;
  c.arg = "fixed:3";
  auto req = decode_to_averager(encode(any_msg{c}));
  ASSERT_TRUE(req.has_value()) << req.error().message();
  EXPECT_EQ(std::get<control_msg>(*req).arg, "fixed:3");
  EXPECT_EQ(std::get<control_msg>(*req).op, control_op::set_deadline);
  auto status_req = decode_to_averager(encode(any_msg{status_request_msg{0, 8, 0, 0}}));
  ASSERT_TRUE(status_req.has_value());
  EXPECT_EQ(std::get<status_request_msg>(*status_req).incarnation, 8U);
  auto reply = decode_to_operator(encode(any_msg{control_reply_msg{0, 5, 1, 2, true, "paused"}}));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(std::get<control_reply_msg>(*reply).text, "paused");
  // Replies are not for workers, requests not for operators.
  EXPECT_FALSE(decode_to_worker(wire).has_value());
  EXPECT_FALSE(decode_to_operator(encode(any_msg{c})).has_value());
}

// A status frame of a few bytes whose list claims 2^32 - 1 entries: msgpack sizes an array when it reads
// its length, so before the status had decoding limits this asked for 128 GiB (found by the codec fuzzer).
TEST(StatusCodecTest, StatusReplyClaimingAHugeListIsRejectedWithoutAllocating) {
  auto wire = encode(any_msg{status_reply_msg{0, 42, 1, 7, std::make_shared<job_status>()}});
  ASSERT_EQ(wire.size(), 2U);
  const std::vector<unsigned char> huge{0x81, 0xa7, 'm', 'e', 'm', 'b', 'e', 'r', 's', 0xdd, 0xff, 0xff, 0xff, 0xff};
  wire[1] = frame::copy(huge.data(), huge.size());
  auto back = decode_to_operator(wire);
  ASSERT_FALSE(back.has_value());
  EXPECT_EQ(back.error().code, errc::too_large) << back.error().message();

  // Nested deeper than a status ever is: the same error.
  const std::vector<unsigned char> deep{0x81, 0xa7, 'm',  'e',  'm', 'b',  'e', 'r',
                                        's',  0x91, 0x81, 0xa1, 'x', 0x91, 0x91};
  wire[1] = frame::copy(deep.data(), deep.size());
  back = decode_to_operator(wire);
  ASSERT_FALSE(back.has_value());
  EXPECT_EQ(back.error().code, errc::too_large) << back.error().message();

  // A list as long as the limit still decodes.
  auto big = std::make_shared<job_status>();
  big->removed.resize(65536);
  auto ok = decode_to_operator(encode(any_msg{status_reply_msg{0, 42, 1, 7, big}}));
  ASSERT_TRUE(ok.has_value()) << ok.error().message();
  EXPECT_EQ(std::get<status_reply_msg>(*ok).status->removed.size(), 65536U);
}

TEST(StatusJsonTest, UnknownValuesAreNull) {
  job_status s;
  s.members.push_back(member_status{});
  const auto j = to_json(s);
  EXPECT_NE(j.find(R"("eta_s":null)"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("idle_last_s":null)"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("members":[{"id":0,)"), std::string::npos) << j;
  EXPECT_NE(to_table(s).find("IDLE-MEAN"), std::string::npos);
}

}  // namespace
}  // namespace prsgd::actors
