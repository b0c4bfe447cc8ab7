// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_core.hpp"

#include "memory_checkpoint_store.hpp"
#include "prsgd/actors/shard_owner_core.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t dim = 4;

std::vector<float> filled(float v) { return std::vector<float>(dim, v); }

class AveragerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg.interval = 4;
    cfg.heartbeat_interval = 1s;
    cfg.heartbeat_timeout = 5s;
    cfg.rejoin_grace = 2s;
    cfg.shards = 16;  // enough for every worker a test starts
  }

  averager_core& make(std::vector<float> init = filled(0)) {
    auto c = averager_core::make(cfg, clk, std::move(init), setup);
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message());
    core.emplace(std::move(c).value());
    next_line_round = core->round();
    return *core;
  }

  // Tests name workers by a logical id; the core assigns its own ids. The fixture plays each worker: a JOIN
  // from logical worker k uses nonce k * 2^16 + incarnation and (unless a test says otherwise) connection
  // 1000 + k; every later message of k is sent under k's assigned id, with its token and over its connection.
  // Outgoing actions are translated back to logical ids, so assertions read as before.
  static constexpr origin_t conn_base = 1000;
  static incarnation_t nonce(member_id logical, incarnation_t inc) { return (logical << 16U) + inc; }

  struct identity {
    member_id real = 0;
    session_token token = 0;
    origin_t origin = 0;
  };

  member_id real(member_id logical) const {
    auto it = who.find(logical);
    return it == who.end() ? logical + 1'000'000 : it->second.real;  // an id the core never assigned
  }
  member_id logical(member_id r) const {
    for (const auto& [l, id] : who) {
      if (id.real == r) {
        return l;
      }
    }
    return r >= 1'000'000 ? r - 1'000'000 : r;
  }
  origin_t origin_of(member_id logical_id) const {
    auto it = who.find(logical_id);
    return it == who.end() ? conn_base + logical_id : it->second.origin;
  }
  session_token token_of(member_id logical_id) const {
    auto it = who.find(logical_id);
    return it == who.end() ? 0 : it->second.token;
  }
  template <class M>
  M as_real(M m) const {
    if (m.token == 0) {
      m.token = token_of(m.member);
    }
    m.member = real(m.member);
    return m;
  }
  static constexpr origin_t auto_origin = ~origin_t{0};
  origin_t pick(origin_t from, member_id logical_id) const {
    return from == auto_origin ? origin_of(logical_id) : from;
  }

  actions on_join(join_msg m, origin_t from = auto_origin) {
    const member_id l = m.member;
    const origin_t via = pick(from, l);
    join_origin[nonce(l, m.incarnation)] = via;
    m.incarnation = nonce(l, m.incarnation);
    m.member = 0;
    return run(core->on_join(m, via));
  }
  actions on_leave(leave_msg m, origin_t from = auto_origin) {
    const auto via = pick(from, m.member);
    m.incarnation = nonce(m.member, m.incarnation);
    return run(core->on_leave(as_real(m), via));
  }
  actions on_heartbeat(heartbeat_msg m, origin_t from = auto_origin) {
    const auto via = pick(from, m.member);
    m.incarnation = nonce(m.member, m.incarnation);
    return run(core->on_heartbeat(as_real(m), via));
  }
  actions on_model(model_msg m, origin_t from = auto_origin) {
    const auto via = pick(from, m.member);
    m.incarnation = nonce(m.member, m.incarnation);
    return run(core->on_model(as_real(std::move(m)), via));
  }
  std::vector<member_id> translated(std::vector<member_id> ids) const {
    for (auto& id : ids) {
      id = logical(id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  std::vector<member_id> members() const { return translated(core->members()); }
  std::vector<member_id> pending() const { return translated(core->pending()); }
  std::vector<member_id> submitted() const { return translated(core->submitted()); }
  std::optional<std::uint64_t> interval_of(member_id l) const { return core->interval_of(real(l)); }
  int times_counted(round_t r, member_id l) const { return core->times_counted(r, real(l)); }

  // Plays the shell: carries out what the core asked for (lines, then checkpoints into `store`;
  // evaluations, routes and the end are recorded) and returns the actions for the test to inspect, in
  // logical ids.
  actions run(actions a) {
    EXPECT_EQ(a.wakeup, core->next_wakeup()) << "every result carries the next wakeup";
    for (auto& o : a.sends) {
      if (const auto* w = std::get_if<welcome_msg>(&o.msg)) {
        const member_id l = w->incarnation >> 16U;
        who[l] = identity{w->member, w->token, join_origin[w->incarnation]};
      }
    }
    for (auto& o : a.sends) {
      o.member = logical(o.member);
      std::visit(
          [&](auto& m) {
            m.member = logical(m.member);
            m.incarnation &= 0xFFFFU;
          },
          o.msg);
    }
    for (auto& r : a.routes) {
      r.member = logical(r.member);
      routes[r.member] = r.via;
    }
    for (const auto& e : a.evaluations) {
      evaluations.push_back(e);
    }
    for (const auto& m : a.lines) {
      lines.push_back(m);
      next_line_round = m.round + 1;
    }
    for (const auto& c : a.checkpoints) {
      EXPECT_LE(c.round, next_line_round)
          << "the checkpoint of round " << c.round << " comes only once the lines of the rounds before it are out";
      EXPECT_FALSE(c.finished);
      EXPECT_TRUE(store.write(c).has_value());
      EXPECT_TRUE(store.prune(kept).has_value());
    }
    if (a.done) {
      EXPECT_FALSE(done.has_value()) << "done is reported once";
      done = a.done;
      EXPECT_EQ(done->final_checkpoint.has_value(), setup.checkpoints && done->job_over);
      if (done->final_checkpoint && write_final_checkpoint) {
        EXPECT_TRUE(done->final_checkpoint->finished);
        EXPECT_TRUE(store.write(*done->final_checkpoint).has_value());
      }
    }
    return a;
  }

  std::vector<round_metrics> take_lines() { return std::exchange(lines, {}); }

  actions join(member_id id, incarnation_t inc = 1, double speed = 0) {
    return on_join(join_msg{id, inc, 0, 0, speed, {}, {}});
  }

  model_msg model(member_id id, round_t r, std::vector<float> x, std::uint64_t steps = 4, std::uint64_t samples = 10,
                  incarnation_t inc = 1) {
    model_msg m;
    m.member = id;
    m.incarnation = inc;
    m.averager_incarnation = core->incarnation();
    m.round = r;
    m.steps = steps;
    m.samples = samples;
    m.loss_sum = 2.0 * static_cast<double>(samples);
    m.loss_count = samples;
    m.params = std::make_shared<const std::vector<float>>(std::move(x));
    return m;
  }

  // Submits worker `id`'s model for round r; `steps` 0 means the interval the core assigned (as a real worker).
  actions submit(member_id id, round_t r, float v, std::uint64_t steps = 0) {
    return on_model(model(id, r, filled(v), steps > 0 ? steps : interval_of(id).value_or(4)));
  }

  // Plays a shell whose transport refused the RESTART `r` (as the test sees it, in logical ids).
  actions send_failed(restart_msg r, errc code) {
    const member_id l = r.member;
    r.member = real(l);
    r.incarnation = nonce(l, r.incarnation);
    return run(core->on_send_failed(r.member, any_msg{r}, code));
  }

  actions heartbeat(member_id id, incarnation_t inc = 1) {
    return on_heartbeat(heartbeat_msg{id, inc, core->incarnation(), core->round(), false, 0});
  }

  /// Lets `seconds` seconds pass one at a time: each second the `beating` members heartbeat and the core ticks.
  void beat_for(int seconds, std::initializer_list<member_id> beating) {
    for (int i = 0; i < seconds; ++i) {
      clk.advance(1s);
      for (const member_id id : beating) {
        (void)heartbeat(id);
      }
      (void)run(core->tick());
    }
  }

  template <class T>
  static std::vector<T> of(const actions& out) {
    std::vector<T> found;
    for (const auto& o : out.sends) {
      if (const auto* m = std::get_if<T>(&o.msg)) {
        EXPECT_EQ(m->member, o.member);
        found.push_back(*m);
      }
    }
    return found;
  }

  static restart_msg restart_for(const actions& out, member_id id) {
    for (const auto& m : of<restart_msg>(out)) {
      if (m.member == id) {
        return m;
      }
    }
    ADD_FAILURE() << "no RESTART for worker " << id;
    return {};
  }

  static std::set<member_id> restart_targets(const actions& out, round_t r) {
    std::set<member_id> ids;
    for (const auto& m : of<restart_msg>(out)) {
      EXPECT_EQ(m.round, r);
      ids.insert(m.member);
    }
    return ids;
  }

  fake_clock clk;
  averager_config cfg;
  averager_setup setup;
  std::optional<averager_core> core;
  memory_checkpoint_store store;
  std::size_t kept = 3;
  std::map<member_id, origin_t> routes;
  std::vector<evaluation_request> evaluations;
  std::vector<round_metrics> lines;
  round_t next_line_round = 0;  // the round of the next metrics line the core should hand out
  std::optional<job_summary> done;
  std::map<member_id, identity> who;              // logical id -> assigned id, token, connection
  std::map<incarnation_t, origin_t> join_origin;  // JOIN nonce -> connection it came in on
  bool write_final_checkpoint = true;             // false: the shell "dies" between the done line and that write
};

TEST_F(AveragerCoreTest, FirstJoinerGetsWelcomeThenStartsRoundAtOnce) {
  make(filled(1.5F));
  EXPECT_EQ(core->state(), averager_state::idle);
  auto out = join(7);
  ASSERT_EQ(out.sends.size(), 3U) << "WELCOME, the RESTART's announcement, RESTART";
  auto w = std::get<welcome_msg>(out.sends[0].msg);
  EXPECT_EQ(w.member, 7U);
  EXPECT_EQ(w.admitted_round, 0U);
  EXPECT_EQ(w.model_size, dim);
  EXPECT_EQ(std::get<heartbeat_msg>(out.sends[1].msg).transfer_bytes, dim * sizeof(float));
  auto r = std::get<restart_msg>(out.sends[2].msg);
  EXPECT_EQ(r.round, 0U);
  EXPECT_EQ(r.interval, 4U);
  EXPECT_EQ(*r.model, filled(1.5F));
  EXPECT_EQ(core->state(), averager_state::collecting);
  EXPECT_EQ(members(), std::vector<member_id>{7});
}

// A worker that built x̄_0 itself (the job's seed) names its checksum in JOIN; its first RESTART confirms
// the model instead of carrying it. Another checksum, no checksum, or any later RESTART carries x̄.
TEST_F(AveragerCoreTest, AMemberThatBuiltTheFirstModelGetsItConfirmedNotSent) {
  cfg.min_workers = 3;
  make(filled(1.5F));
  const std::uint64_t mine = slice_checksum(filled(1.5F));
  join_msg holds{1, 1, 0, 0, 0, {}, {}};
  holds.holds = mine;
  (void)on_join(holds);
  join_msg other{2, 1, 0, 0, 0, {}, {}};
  other.holds = mine ^ 1U;
  (void)on_join(other);
  auto out = join(3);
  auto r = restart_for(out, 1);
  EXPECT_FALSE(r.model);
  EXPECT_EQ(r.held, mine);
  for (const member_id id : {member_id{2}, member_id{3}}) {
    r = restart_for(out, id);
    ASSERT_TRUE(r.model) << id;
    EXPECT_EQ(*r.model, filled(1.5F));
    EXPECT_FALSE(r.held);
  }
  // Only member 2's and 3's RESTARTs were announced as payloads.
  std::size_t announced = 0;
  for (const auto& hb : of<heartbeat_msg>(out)) {
    announced += hb.transfer_bytes > 0 ? 1 : 0;
  }
  EXPECT_EQ(announced, 2U);

  // Round 1's x̄ is x̄_0 again (every member sent it back), but member 1 has trained since.
  (void)submit(1, 0, 1.5F);
  (void)submit(2, 0, 1.5F);
  out = submit(3, 0, 1.5F);
  r = restart_for(out, 1);
  ASSERT_TRUE(r.model);
  EXPECT_EQ(*r.model, filled(1.5F));
  EXPECT_FALSE(r.held);
}

TEST_F(AveragerCoreTest, FirstRoundWaitsForMinWorkersThenStartsWithAllOfThem) {
  cfg.min_workers = 3;
  make(filled(1.0F));
  auto out = join(1);
  ASSERT_EQ(out.sends.size(), 1U) << "WELCOME only: round 0 waits for 3 workers";
  EXPECT_EQ(std::get<welcome_msg>(out.sends[0].msg).admitted_round, 0U);
  EXPECT_EQ(core->state(), averager_state::idle);
  out = join(2);
  EXPECT_TRUE(of<restart_msg>(out).empty());
  out = join(3);
  EXPECT_EQ(restart_targets(out, 0), (std::set<member_id>{1, 2, 3}));
  EXPECT_EQ(core->state(), averager_state::collecting);
  EXPECT_EQ(members(), (std::vector<member_id>{1, 2, 3}));
}

TEST_F(AveragerCoreTest, MinWorkersAppliesOnlyToTheFirstRound) {
  cfg.min_workers = 2;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  (void)submit(2, 0, 1.0F);
  EXPECT_EQ(core->round(), 1U);
  (void)(on_leave(leave_msg{1, 1}));
  (void)(on_leave(leave_msg{2, 1}));
  EXPECT_EQ(core->state(), averager_state::idle);
  auto out = join(3);
  EXPECT_EQ(restart_targets(out, core->round()), (std::set<member_id>{3})) << "a lone joiner resumes the job";
}

TEST_F(AveragerCoreTest, MinWorkersWaitingJoinerThatLeavesIsForgotten) {
  cfg.min_workers = 2;
  make();
  (void)join(1);
  (void)(on_leave(leave_msg{1, 1}));
  auto out = join(2);
  EXPECT_TRUE(of<restart_msg>(out).empty()) << "worker 1 left, so only one worker is waiting";
  out = join(3);
  EXPECT_EQ(restart_targets(out, 0), (std::set<member_id>{2, 3}));
}

TEST_F(AveragerCoreTest, JoinMidRoundIsWelcomedAtOnceAndAdmittedAtTheNextBarrier) {
  make();
  (void)join(1);
  (void)join(2);  // arrives while round 0 runs with {1}
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_EQ(pending(), std::vector<member_id>{2});
  auto out = join(3);
  ASSERT_EQ(out.sends.size(), 1U);
  EXPECT_EQ(std::get<welcome_msg>(out.sends[0].msg).admitted_round, 1U);

  out = submit(1, 0, 2.0F);  // the barrier does not wait for joiners
  EXPECT_EQ(core->round(), 1U);
  EXPECT_EQ(restart_targets(out, 1), (std::set<member_id>{1, 2, 3}));
  for (const auto& r : of<restart_msg>(out)) {
    EXPECT_EQ(*r.model, filled(2.0F)) << "joiners receive x̄_{r+1} with everybody else";
  }
  auto m = take_lines();
  ASSERT_EQ(m.size(), 1U);
  EXPECT_EQ(m[0].members, 1U);
  EXPECT_EQ(m[0].admitted, 2U);
}

TEST_F(AveragerCoreTest, LeaveMidRoundStopsTheBarrierWaitingAtOnce) {
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  (void)submit(2, 0, 1.0F);  // round 1 with {1, 2}
  ASSERT_EQ(core->round(), 1U);
  (void)submit(1, 1, 3.0F);
  EXPECT_EQ(core->round(), 1U) << "still waiting for 2";
  auto out = (on_leave(leave_msg{2, 1, core->incarnation(), 1}));
  EXPECT_EQ(core->round(), 2U);
  EXPECT_EQ(restart_targets(out, 2), std::set<member_id>{1});
  EXPECT_EQ(*core->model(), filled(3.0F));
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_EQ(take_lines().back().removed, 1U);
}

TEST_F(AveragerCoreTest, LeaveWithStaleIncarnationIsIgnored) {
  make();
  (void)join(1, 5);
  (void)join(2);
  (void)submit(2, 0, 1.0F);  // wait, 2 is pending: rejected
  auto out = (on_leave(leave_msg{1, 4, core->incarnation(), 0}));
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_TRUE(out.sends.empty());
}

TEST_F(AveragerCoreTest, CrashedWorkerIsRemovedAfterHeartbeatTimeout) {
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  (void)submit(2, 0, 1.0F);
  ASSERT_EQ(members(), (std::vector<member_id>{1, 2}));
  (void)submit(1, 1, 5.0F);
  clk.advance(3s);
  (void)heartbeat(1);
  EXPECT_TRUE(restart_targets(run(core->tick()), 2).empty());
  clk.advance(2s);  // worker 2 silent exactly 5 s: not yet past the timeout
  (void)run(core->tick());
  EXPECT_EQ(core->round(), 1U);
  ASSERT_TRUE(core->next_wakeup().has_value());
  EXPECT_LE(*core->next_wakeup(), clk.now() + 1ns);
  clk.advance(1ms);
  auto out = run(core->tick());
  EXPECT_EQ(core->round(), 2U) << "the barrier closes without the dead worker";
  EXPECT_EQ(restart_targets(out, 2), std::set<member_id>{1});
  auto removed = of<removed_msg>(out);
  ASSERT_EQ(removed.size(), 1U);
  EXPECT_EQ(removed[0].member, 2U);
  EXPECT_EQ(*core->model(), filled(5.0F));
}

// next_wakeup keeps the heartbeat deadlines in a queue checked lazily; it must still name the earliest
// deadline of whoever is silent longest, skip members that left, and include joiners.
TEST_F(AveragerCoreTest, NextWakeupIsTheEarliestSilenceDeadlineAsWorkersHeartbeatAndLeave) {
  cfg.heartbeat_interval = 100s;  // the averager's own heartbeat never comes first here
  make();
  (void)join(1);
  (void)join(2);
  (void)join(3);
  const auto t0 = clk.now();
  ASSERT_TRUE(core->next_wakeup().has_value());
  EXPECT_EQ(*core->next_wakeup(), t0 + 5s + 1ns);
  clk.advance(1s);
  (void)heartbeat(1);
  (void)heartbeat(3);
  EXPECT_EQ(*core->next_wakeup(), t0 + 5s + 1ns) << "worker 2 is silent longest";
  clk.advance(1s);
  (void)heartbeat(2);
  EXPECT_EQ(*core->next_wakeup(), t0 + 1s + 5s + 1ns) << "now workers 1 and 3";
  (void)on_leave(leave_msg{1, 1, core->incarnation(), core->round()});
  (void)on_leave(leave_msg{3, 1, core->incarnation(), core->round()});
  EXPECT_EQ(*core->next_wakeup(), t0 + 2s + 5s + 1ns) << "workers that left set no deadline";
  (void)join(4);  // a joiner's deadline counts as well
  clk.advance(1s);
  (void)heartbeat(2);
  EXPECT_EQ(*core->next_wakeup(), t0 + 2s + 5s + 1ns) << "joiner 4 came at t0 + 2 s";
  clk.advance(5s);
  (void)heartbeat(2);
  (void)run(core->tick());
  EXPECT_EQ(pending(), std::vector<member_id>{}) << "joiner 4 timed out";
  EXPECT_EQ(members(), std::vector<member_id>{2});
  EXPECT_GT(*core->next_wakeup(), clk.now());
}

// A member whose heartbeat announced a MODEL of B bytes is not timed out before timeout + B / rate, though
// its later heartbeats wait behind the model (decision 0024); silent past that, it is removed.
TEST_F(AveragerCoreTest, AnAnnouncedModelExtendsTheHeartbeatTimeoutByItsTransferTime) {
  cfg.slowest_link_bytes_per_s = 1e6;
  cfg.idle_rounds = 0;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  (void)submit(2, 0, 1.0F);
  ASSERT_EQ(members(), (std::vector<member_id>{1, 2}));
  heartbeat_msg hb{2, 1, core->incarnation(), core->round(), false, 0};
  hb.transfer_bytes = 20'000'000;  // 20 s at 1 MB/s
  (void)on_heartbeat(hb);
  const auto announced = clk.now();
  for (int s = 0; s < 25; ++s) {
    clk.advance(1s);
    (void)heartbeat(1);
    (void)run(core->tick());
  }
  EXPECT_EQ(members(), (std::vector<member_id>{1, 2})) << "5 s timeout + 20 s transfer";
  EXPECT_LE(*core->next_wakeup(), announced + 25s + 1ns);
  clk.advance(1ms);
  (void)heartbeat(1);
  auto out = run(core->tick());
  EXPECT_EQ(members(), std::vector<member_id>{1}) << "silent past the allowance";
  EXPECT_EQ(of<removed_msg>(out).size(), 1U);
}

// Every RESTART is announced to its worker, ahead of it, with its size on the wire.
TEST_F(AveragerCoreTest, RestartIsAnnouncedByAHeartbeatCarryingItsSize) {
  make();
  auto out = join(1);
  std::optional<std::size_t> hb_at;
  std::optional<std::size_t> restart_at;
  for (std::size_t i = 0; i < out.sends.size(); ++i) {
    if (const auto* hb = std::get_if<heartbeat_msg>(&out.sends[i].msg); hb != nullptr && hb->transfer_bytes > 0) {
      EXPECT_EQ(hb->transfer_bytes, dim * sizeof(float));
      EXPECT_TRUE(hb->from_averager);
      hb_at = i;
    }
    if (std::holds_alternative<restart_msg>(out.sends[i].msg)) {
      restart_at = i;
    }
  }
  ASSERT_TRUE(hb_at && restart_at);
  EXPECT_EQ(*hb_at + 1, *restart_at) << "the announcement goes right before the RESTART";
}

TEST_F(AveragerCoreTest, AveragerSendsHeartbeatsToMembersAndJoiners) {
  make();
  (void)join(1);
  (void)join(2);
  clk.advance(1s);
  auto hbs = of<heartbeat_msg>(run(core->tick()));
  ASSERT_EQ(hbs.size(), 2U);
  EXPECT_TRUE(hbs[0].from_averager);
  EXPECT_TRUE(of<heartbeat_msg>(run(core->tick())).empty()) << "not again before the interval";
}

TEST_F(AveragerCoreTest, DuplicateModelIsCountedOnce) {
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 0.0F);
  (void)submit(2, 0, 0.0F);
  (void)submit(1, 1, 2.0F);
  (void)submit(1, 1, 2.0F);
  (void)submit(1, 1, 2.0F);
  EXPECT_EQ(core->counters().duplicate, 2U);
  (void)submit(2, 1, 4.0F);
  EXPECT_EQ(*core->model(), filled(3.0F)) << "a double-counted model would pull the mean towards 2";
  EXPECT_EQ(times_counted(1, 1), 1);
  EXPECT_EQ(times_counted(1, 2), 1);
  EXPECT_EQ(take_lines().back().duplicate, 2U);
}

TEST_F(AveragerCoreTest, LateModelForAClosedRoundIsDroppedAndCounted) {
  make();
  (void)join(1);
  (void)submit(1, 0, 1.0F);
  ASSERT_EQ(core->round(), 1U);
  auto out = submit(1, 0, 9.0F);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_EQ(core->counters().late, 1U);
  EXPECT_EQ(core->accounting().back().status, submission_status::late);
  EXPECT_EQ(times_counted(0, 1), 1);
  EXPECT_EQ(*core->model(), filled(1.0F));
}

TEST_F(AveragerCoreTest, ModelForAFutureRoundOrFromANonMemberIsRejected) {
  make();
  (void)join(1);
  (void)join(2);  // pending
  (void)submit(1, 3, 1.0F);
  auto out = submit(2, 0, 1.0F);
  EXPECT_TRUE(of<removed_msg>(out).empty()) << "a joiner is not told to rejoin";
  out = submit(9, 0, 1.0F);
  EXPECT_EQ(of<removed_msg>(out).size(), 1U) << "an unknown worker is told to (re)join";
  EXPECT_EQ(core->counters().rejected, 3U);
  EXPECT_TRUE(submitted().empty());
}

TEST_F(AveragerCoreTest, ReorderedLeaveBeforeModelNeverCountsTheModel) {
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  (void)submit(2, 0, 1.0F);
  (void)(on_leave(leave_msg{2, 1, core->incarnation(), 1}));
  (void)submit(2, 1, 100.0F);  // overtaken by its LEAVE
  EXPECT_EQ(core->accounting().back().status, submission_status::rejected);
  (void)submit(1, 1, 3.0F);
  EXPECT_EQ(*core->model(), filled(3.0F));
  EXPECT_EQ(times_counted(1, 2), 0);
}

TEST_F(AveragerCoreTest, RepeatedJoinResendsWelcomeButAtMostOneRestartPerRound) {
  make();
  auto first = join(1);
  ASSERT_EQ(of<restart_msg>(first).size(), 1U);
  for (int i = 0; i < 100; ++i) {  // a JOIN storm from the same worker (same nonce, same connection)
    auto out = join(1);
    ASSERT_EQ(out.sends.size(), 1U) << "WELCOME again, and no second RESTART in round 0";
    EXPECT_EQ(std::get<welcome_msg>(out.sends[0].msg).admitted_round, 0U);
  }
  EXPECT_EQ(members(), std::vector<member_id>{1}) << "one worker, one member";
  (void)submit(1, 0, 1.0F);
  (void)join(2);
  auto again = join(2);
  ASSERT_EQ(again.sends.size(), 1U) << "a pending joiner only gets WELCOME again";
  EXPECT_EQ(pending(), std::vector<member_id>{2});
}

TEST_F(AveragerCoreTest, RestartedWorkerJoinsAsANewMemberAndTheOldOneTimesOut) {
  make();
  (void)join(1, 1);
  (void)join(2, 1);
  (void)submit(1, 0, 1.0F);
  (void)submit(2, 0, 1.0F);
  const member_id old_id = real(2);
  const session_token old_token = token_of(2);
  // Worker 2 crashed and came back (a new process: a new nonce) while round 1 waits for the old one.
  (void)submit(1, 1, 4.0F);
  auto out = join(2, 2);
  ASSERT_EQ(of<welcome_msg>(out).size(), 1U);
  EXPECT_NE(real(2), old_id) << "a new member id";
  EXPECT_NE(token_of(2), old_token) << "and a new token";
  EXPECT_EQ(core->pending(), std::vector<member_id>{real(2)});
  EXPECT_EQ(core->round(), 1U) << "the old member is still expected";
  // The old member goes silent; the heartbeat timeout removes it and the round closes without it.
  for (int i = 0; i < 6; ++i) {
    clk.advance(1s);
    (void)heartbeat(1);
    (void)heartbeat(2, 2);
    (void)run(core->tick());
  }
  EXPECT_EQ(core->round(), 2U);
  EXPECT_EQ(members(), (std::vector<member_id>{1, 2}));
  EXPECT_FALSE(core->shard_of(old_id).has_value());
}

TEST_F(AveragerCoreTest, NoTwoLiveMembersHoldTheSameShardAndAJoinWaitsForAFreeOne) {
  cfg.shards = 2;
  make();
  (void)join(1);
  (void)join(2);
  EXPECT_EQ(core->shard_of(real(1)), 0U);
  EXPECT_EQ(core->shard_of(real(2)), 1U);
  auto out = join(3);
  EXPECT_TRUE(out.sends.empty()) << "both shards are held: the JOIN waits (the worker repeats it)";
  EXPECT_EQ(core->drops().at("no_free_shard"), 1U);
  (void)on_leave(leave_msg{1, 1, core->incarnation(), 0});
  out = join(3);
  ASSERT_EQ(of<welcome_msg>(out).size(), 1U);
  EXPECT_EQ(of<welcome_msg>(out)[0].shard_index, 0U) << "the shard worker 1 gave up";
  EXPECT_EQ(of<welcome_msg>(out)[0].num_shards, 2U);
}

TEST_F(AveragerCoreTest, HeterogeneousIntervalsUseStepNormalisedAveragingByDefault) {
  cfg.intervals = algorithms::interval_kind::per_worker;
  cfg.per_worker_intervals = {{0, 2}, {1, 8}};  // by shard: worker 1 holds shard 0, worker 2 shard 1
  make(filled(0.0F));
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 0.0F, 2);
  auto out = (on_model(model(2, 0, filled(0.0F), 8)));  // now both are members: intervals 2 and 8
  ASSERT_EQ(core->round(), 1U);
  EXPECT_EQ(interval_of(1), 2U);
  EXPECT_EQ(interval_of(2), 8U);
  for (const auto& r : of<restart_msg>(out)) {
    EXPECT_EQ(r.interval, r.member == 1 ? 2U : 8U);
  }
  // Samples = steps x batch 10, as real workers send them.
  (void)(on_model(model(1, 1, filled(1.0F), 2, 20)));
  (void)(on_model(model(2, 1, filled(8.0F), 8, 80)));
  ASSERT_EQ(core->round(), 2U);
  EXPECT_EQ(core->last_rule(), algorithms::averaging_rule::step_normalised);
  // Equal batches: p = (0.5, 0.5), τ_eff = 5, x̄ + τ_eff Σ p_i Δ_i/τ_i = 0 + 5·(0.5·1/2 + 0.5·8/8) = 3.75;
  // averaging by samples would give (20·1 + 80·8)/100 = 6.6.
  for (float v : *core->model()) {
    EXPECT_NEAR(v, 3.75F, 1e-5F);
  }
  EXPECT_EQ(take_lines().back().rule, "step-normalised");
}

TEST_F(AveragerCoreTest, EqualIntervalsAverageBySamples) {
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 0.0F);
  (void)submit(2, 0, 0.0F);
  (void)(on_model(model(1, 1, filled(1.0F), 4, 30)));
  (void)(on_model(model(2, 1, filled(5.0F), 4, 10)));
  EXPECT_EQ(core->last_rule(), algorithms::averaging_rule::by_samples);
  for (float v : *core->model()) {
    EXPECT_NEAR(v, 2.0F, 1e-6F);
  }
}

TEST_F(AveragerCoreTest, ExplicitUniformRuleOverridesTheDefault) {
  cfg.rule = algorithms::averaging_rule::uniform;
  cfg.interval = 8;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 0.0F, 8);
  (void)submit(2, 0, 0.0F, 8);
  auto cut = model(1, 1, filled(1.0F), 2, 30);
  cut.cut = true;  // fewer steps than assigned, said so (a deadline cut the round short)
  (void)(on_model(cut));
  (void)(on_model(model(2, 1, filled(5.0F), 8, 10)));
  EXPECT_EQ(core->last_rule(), algorithms::averaging_rule::uniform);
  EXPECT_EQ(*core->model(), filled(3.0F));
}

TEST_F(AveragerCoreTest, PaperIntervalRuleUsesTAndN) {
  cfg.intervals = algorithms::interval_kind::paper;
  cfg.total_steps = 10'000;  // T^{1/4} = 10
  make();
  (void)join(1);
  EXPECT_EQ(interval_of(1), 10U);
  for (member_id id = 2; id <= 4; ++id) {
    (void)join(id);
  }
  (void)submit(1, 0, 0.0F, 10);
  EXPECT_EQ(interval_of(1), 4U);  // ceil(10 / 4^{3/4}) = ceil(3.54)
}

TEST_F(AveragerCoreTest, TimeBalancedIntervalsGiveFastWorkersMoreSteps) {
  cfg.intervals = algorithms::interval_kind::time_balanced;
  cfg.interval = 10;
  cfg.speed_ema = 1.0;
  cfg.heartbeat_timeout = 60s;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 0.0F, 10);
  ASSERT_EQ(interval_of(2), 10U) << "no measurement yet";
  clk.advance(1s);
  (void)submit(1, 1, 0.0F, 10);  // 10 steps/s
  clk.advance(3s);
  (void)submit(2, 1, 0.0F, 10);  // 10 steps in 4 s: 2.5 steps/s
  // τ = 10 / median(10, 2.5) = 1.6 s: I_1 = 16, I_2 = 4.
  EXPECT_EQ(interval_of(1), 16U);
  EXPECT_EQ(interval_of(2), 4U);
}

TEST_F(AveragerCoreTest, SpeedHintSeedsTimeBalancedIntervals) {
  cfg.intervals = algorithms::interval_kind::time_balanced;
  cfg.interval = 10;
  make();
  (void)join(1, 1, 20.0);
  EXPECT_EQ(interval_of(1), 10U) << "a single worker runs the base interval";
}

TEST_F(AveragerCoreTest, MinibatchModeAppliesOneSgdStepWithTheAveragedGradient) {
  cfg.mode = training_mode::minibatch_sgd;
  cfg.step_size = 0.5;
  make(filled(1.0F));
  auto out = join(1);
  auto r = of<restart_msg>(out);
  ASSERT_EQ(r.size(), 1U);
  EXPECT_EQ(r[0].interval, 1U);
  EXPECT_EQ(r[0].mode, training_mode::minibatch_sgd);
  (void)join(2);
  auto g = model(1, 0, filled(2.0F), 1);
  g.is_gradient = true;
  (void)(on_model(g));
  ASSERT_EQ(core->round(), 1U);
  EXPECT_EQ(*core->model(), filled(0.0F));         // 1 − 0.5·2
  (void)(on_model(model(1, 1, filled(2.0F), 1)));  // a model, not a gradient
  EXPECT_EQ(core->accounting().back().status, submission_status::rejected);
  auto g1 = model(1, 1, filled(2.0F), 1, 10);
  auto g2 = model(2, 1, filled(6.0F), 1, 30);
  g1.is_gradient = g2.is_gradient = true;
  (void)(on_model(g1));
  (void)(on_model(g2));
  EXPECT_EQ(*core->model(), filled(-2.5F));  // 0 − 0.5·(0.25·2 + 0.75·6)
}

TEST_F(AveragerCoreTest, MinibatchModeAveragesBufferValuesInsteadOfSteppingThem) {
  // dim = 4: the first two values are trainable, the last two are buffers (batch-norm statistics) that
  // the workers send as values, not gradients.
  cfg.mode = training_mode::minibatch_sgd;
  cfg.step_size = 0.5;
  cfg.trainable_params = 2;
  make(filled(1.0F));
  (void)join(1);
  auto g = model(1, 0, {2.0F, 2.0F, 7.0F, 9.0F}, 1);
  g.is_gradient = true;
  (void)(on_model(g));
  ASSERT_EQ(core->round(), 1U);
  EXPECT_EQ(*core->model(), (std::vector<float>{0.0F, 0.0F, 7.0F, 9.0F}));
}

TEST_F(AveragerCoreTest, MinibatchModeKeepsAGlobalMomentumBuffer) {
  cfg.mode = training_mode::minibatch_sgd;
  cfg.step_size = 0.5;
  cfg.minibatch_momentum = 0.9;
  make(filled(1.0F));
  (void)join(1);
  for (round_t r = 0; r < 2; ++r) {
    auto g = model(1, r, filled(2.0F), 1);
    g.is_gradient = true;
    (void)(on_model(g));
  }
  // PyTorch's SGD: b1 = g = 2, x1 = 1 − 0.5·2 = 0; b2 = 0.9·2 + 2 = 3.8, x2 = 0 − 0.5·3.8 = −1.9.
  ASSERT_EQ(core->model()->size(), dim);
  for (float v : *core->model()) {
    EXPECT_NEAR(v, -1.9F, 1e-6F);
  }
  EXPECT_EQ(core->snapshot().outer_momentum.size(), dim) << "the momentum buffer is checkpointed";
}

TEST_F(AveragerCoreTest, OuterMomentumAcceleratesTheAveragedDelta) {
  cfg.outer = algorithms::outer_config{algorithms::outer_kind::momentum, 1.0F, 0.5F};
  make(filled(0.0F));
  (void)join(1);
  (void)submit(1, 0, 1.0F);
  EXPECT_EQ(*core->model(), filled(1.0F));  // v = 1
  (void)submit(1, 1, 2.0F);
  EXPECT_EQ(*core->model(), filled(2.5F));  // v = 0.5 + 1
}

TEST_F(AveragerCoreTest, WarmupAndPaperStepSize) {
  cfg.step_sizes = algorithms::lr_kind::paper;
  cfg.step_size_c = 2.0;
  cfg.total_steps = 400;
  cfg.warmup_rounds = 2;
  make();
  auto r0 = of<restart_msg>(join(1));
  ASSERT_EQ(r0.size(), 1U);
  EXPECT_NEAR(r0[0].step_size, 2.0 * std::sqrt(1.0 / 400) * 0.5, 1e-12);
  auto r1 = of<restart_msg>(submit(1, 0, 0.0F));
  EXPECT_NEAR(r1[0].step_size, 0.1, 1e-12);
}

TEST_F(AveragerCoreTest, MetricsRecordLossConsensusBytesAndArrivals) {
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 0.0F);
  ASSERT_EQ(core->round(), 1U);
  (void)take_lines();
  clk.advance(2s);
  auto a = model(1, 1, filled(1.0F), 4, 10);
  a.loss_sum = 10;
  a.loss_count = 10;
  auto b = model(2, 1, filled(3.0F), 4, 10);
  b.loss_sum = 30;
  b.loss_count = 10;
  (void)(on_model(a));
  clk.advance(1s);
  (void)(on_model(b));
  auto ms = take_lines();
  ASSERT_EQ(ms.size(), 1U);
  const auto& m = ms[0];
  EXPECT_EQ(m.round, 1U);
  EXPECT_EQ(m.members, 2U);
  ASSERT_TRUE(m.train_loss.has_value());
  EXPECT_DOUBLE_EQ(*m.train_loss, 40.0 / 20.0);
  EXPECT_DOUBLE_EQ(m.consensus_distance, 4.0);  // each is 1 away from 2 in 4 coordinates
  EXPECT_EQ(m.bytes_in, 2 * dim * sizeof(float));
  EXPECT_EQ(m.bytes_out, 2 * dim * sizeof(float));
  EXPECT_DOUBLE_EQ(m.round_s, 3.0);
  EXPECT_DOUBLE_EQ(m.barrier_wait_s, 1.0);
  ASSERT_EQ(m.arrival_offsets_s.size(), 2U);
  EXPECT_DOUBLE_EQ(m.arrival_offsets_s[0].second, 2.0);
  EXPECT_DOUBLE_EQ(m.arrival_offsets_s[1].second, 3.0);
  EXPECT_FALSE(m.test_acc.has_value());
}

TEST_F(AveragerCoreTest, MaxRoundsStopsEverybody) {
  cfg.max_rounds = 2;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 0.0F);
  auto out = submit(1, 1, 0.0F);
  EXPECT_EQ(out.sends.size(), 0U) << "still waiting for 2";
  out = submit(2, 1, 0.0F);
  EXPECT_EQ(core->state(), averager_state::stopped);
  EXPECT_EQ(of<stop_msg>(out).size(), 2U);
  EXPECT_TRUE(of<restart_msg>(out).empty());
  EXPECT_FALSE(core->next_wakeup().has_value());
}

// Random duplicates, reordering, late and stale messages over many rounds: no (round, worker) is ever
// counted twice, and what was counted is exactly what the rounds report.
TEST_F(AveragerCoreTest, ExactlyOnceAccountingUnderRandomDuplicatesAndReordering) {
  cfg.heartbeat_timeout = 1h;
  cfg.screen_k = 0;  // the replayed models are far apart on purpose; the screen has its own tests
  make();
  const unsigned seed = 12345;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng{seed};
  for (member_id id = 1; id <= 4; ++id) {
    (void)join(id);
  }
  std::vector<model_msg> sent;  // everything ever sent, replayed at random
  for (int step = 0; step < 400; ++step) {
    const auto r = core->round();
    const auto live = members();
    const auto pick = std::uniform_int_distribution<int>(0, 9)(rng);
    if (pick < 5 && !live.empty()) {
      const member_id id = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng)];
      auto m = model(id, r, filled(static_cast<float>(id)));
      sent.push_back(m);
      (void)(on_model(m));
    } else if (pick < 8 && !sent.empty()) {
      (void)(on_model(sent[std::uniform_int_distribution<std::size_t>(0, sent.size() - 1)(rng)]));
    } else if (pick == 8) {
      const member_id id = std::uniform_int_distribution<member_id>(1, 5)(rng);
      (void)(on_leave(leave_msg{id, 1, core->incarnation(), r}));
    } else {
      (void)join(std::uniform_int_distribution<member_id>(1, 5)(rng));
    }
  }
  std::map<std::pair<round_t, member_id>, int> accepted;
  for (const auto& rec : core->accounting()) {
    if (rec.status == submission_status::accepted) {
      EXPECT_EQ(++accepted[std::make_pair(rec.round, rec.member)], 1)
          << "round " << rec.round << " worker " << rec.member;
    }
  }
  std::size_t averaged = 0;
  for (const auto& m : take_lines()) {
    averaged += m.submissions;
    for (const auto& [id, t] : m.arrival_offsets_s) {
      EXPECT_EQ(core->times_counted(m.round, id), 1);  // arrival_offsets_s names the assigned ids
      EXPECT_EQ(accepted.count(std::make_pair(m.round, id)), 1U);
    }
  }
  std::size_t open = submitted().size();
  EXPECT_EQ(averaged + open, accepted.size());
  EXPECT_GT(core->counters().duplicate + core->counters().late, 0U);
  EXPECT_GT(core->round(), 5U);
}

// ---- checkpoints and averager restart --------------------------------------------------------------

class AveragerRestartTest : public AveragerCoreTest {
 protected:
  void SetUp() override {
    AveragerCoreTest::SetUp();
    cfg.checkpoint_every = 1;
  }

  // Starts a new incarnation as the shell does: numbered by the store, resuming its newest checkpoint.
  averager_core& restart(std::vector<float> init = filled(0)) {
    core.reset();
    done.reset();
    auto from_store = setup_from(store);
    EXPECT_TRUE(from_store.has_value());
    const bool evaluations_on = setup.evaluations;
    setup = *from_store;
    setup.evaluations = evaluations_on;
    return make(std::move(init));
  }

  // Runs rounds 0..n-1 with workers 1 and 2 (2 joins round 1); x̄_{r+1} = r + 1.
  void run_rounds(round_t n) {
    (void)join(1);
    (void)join(2);
    for (round_t r = 0; r < n; ++r) {
      (void)submit(1, r, static_cast<float>(r + 1));
      if (r > 0) {
        (void)submit(2, r, static_cast<float>(r + 1));
      }
    }
    ASSERT_EQ(core->round(), n);
  }
};

TEST_F(AveragerRestartTest, NewIncarnationResumesFromTheNewestCheckpointAndWorkersRejoin) {
  restart();
  EXPECT_EQ(core->incarnation(), 1U);
  run_rounds(3);
  const auto old_model = *core->model();
  const auto old_inc = core->incarnation();
  auto stale = model(1, 3, filled(7.0F));  // in flight when the averager dies
  auto older = model(2, 2, filled(7.0F));
  restart(filled(0.0F));  // the old incarnation crashed
  EXPECT_EQ(core->incarnation(), old_inc + 1);
  ASSERT_EQ(core->resumed_from(), 3U);
  EXPECT_EQ(core->round(), 3U);
  EXPECT_EQ(*core->model(), old_model);
  EXPECT_EQ(core->state(), averager_state::rejoin_wait);

  (void)(on_model(stale));
  (void)(on_model(older));
  EXPECT_EQ(core->counters().late, 2U) << "messages to the dead incarnation are late, never counted";
  EXPECT_TRUE(submitted().empty());

  auto out = join(1);
  EXPECT_EQ(std::get<welcome_msg>(out.sends.at(0).msg).averager_incarnation, old_inc + 1);
  EXPECT_TRUE(of<restart_msg>(out).empty()) << "waits for the other checkpointed member";
  out = join(2);
  EXPECT_EQ(restart_targets(out, 3), (std::set<member_id>{1, 2}));
  for (const auto& r : of<restart_msg>(out)) {
    EXPECT_EQ(r.averager_incarnation, old_inc + 1);
    EXPECT_EQ(*r.model, old_model);
  }
  (void)submit(1, 3, 10.0F);
  (void)submit(2, 3, 20.0F);
  EXPECT_EQ(core->round(), 4U);
  EXPECT_EQ(*core->model(), filled(15.0F));
}

// A resumed incarnation hands out again the member ids its lost predecessor gave out after the checkpoint. A
// worker still following the lost incarnation under such an id (it joined after the checkpoint) is told to
// rejoin, over its own connection, on its next HEARTBEAT or MODEL; the worker that holds the id now keeps
// it, and neither message counts as unauthorised. (Refused for the holder's token instead, the worker never
// heard from the averager again and did not exit when the job ended.)
TEST_F(AveragerRestartTest, AWorkerOfALostIncarnationWhoseIdWasGivenAgainIsToldToRejoin) {
  restart();
  run_rounds(3);  // the checkpoint of round 3 knows workers 1 and 2
  (void)join(3);  // after it: this id is lost with the incarnation
  const member_id lost_id = real(3);
  const session_token lost_token = token_of(3);
  const origin_t lost_origin = origin_of(3);
  const incarnation_t lost = core->incarnation();
  restart();
  for (const member_id l : {1U, 2U, 4U}) {
    (void)join(l);
  }
  const auto held = [&](member_id id) {
    const auto m = core->members();
    const auto p = core->pending();
    return std::find(m.begin(), m.end(), id) != m.end() || std::find(p.begin(), p.end(), id) != p.end();
  };
  ASSERT_TRUE(held(lost_id)) << "the scenario needs the lost id handed out again";
  const auto told_to_rejoin = [&](const actions& out) {
    ASSERT_EQ(out.sends.size(), 1U);
    EXPECT_EQ(out.sends[0].via, std::optional<origin_t>{lost_origin});
    ASSERT_TRUE(std::holds_alternative<removed_msg>(out.sends[0].msg));
    const auto& r = std::get<removed_msg>(out.sends[0].msg);
    EXPECT_EQ(r.incarnation, 1U) << "addressed to the lost incarnation's worker";
    EXPECT_EQ(r.averager_incarnation, core->incarnation());
    EXPECT_TRUE(out.routes.empty());
  };
  told_to_rejoin(run(core->on_heartbeat(heartbeat_msg{lost_id, nonce(3, 1), lost, 3, false, lost_token}, lost_origin)));
  auto m = model(3, 3, filled(1.0F));
  m.member = lost_id;
  m.incarnation = nonce(3, 1);
  m.averager_incarnation = lost;
  m.token = lost_token;
  told_to_rejoin(run(core->on_model(m, lost_origin)));
  EXPECT_EQ(core->counters().unauthorised, 0U);
  EXPECT_TRUE(held(lost_id)) << "the holder keeps its id";
  EXPECT_TRUE(submitted().empty());
}

TEST_F(AveragerRestartTest, RejoinGraceExpiresAndTheRoundStartsWithWhoeverCameBack) {
  restart();
  run_rounds(2);
  restart();
  (void)join(2);
  EXPECT_EQ(core->state(), averager_state::rejoin_wait);
  ASSERT_TRUE(core->next_wakeup().has_value());
  clk.advance(2s);
  auto out = run(core->tick());
  EXPECT_EQ(restart_targets(out, 2), std::set<member_id>{2});
  EXPECT_EQ(core->state(), averager_state::collecting);
}

TEST_F(AveragerRestartTest, RejoinGraceExpiresWithNobodyBackGoesIdle) {
  restart();
  run_rounds(2);
  restart();
  clk.advance(3s);
  (void)run(core->tick());
  EXPECT_EQ(core->state(), averager_state::idle);
  auto out = join(4);
  EXPECT_EQ(restart_targets(out, 2), std::set<member_id>{4});
}

TEST_F(AveragerRestartTest, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  restart();
  run_rounds(4);
  ASSERT_EQ(store.list(), (std::vector<round_t>{4, 3, 2})) << "only the newest 3 are kept";
  store.corrupt(4);
  restart();
  ASSERT_EQ(core->resumed_from(), 3U) << "round 4's checkpoint has a bad checksum";
  EXPECT_EQ(*core->model(), filled(3.0F));
  store.truncate(3, 30);
  restart();
  EXPECT_EQ(core->resumed_from(), 2U);
  EXPECT_EQ(*core->model(), filled(2.0F));
}

TEST_F(AveragerRestartTest, IncarnationGrowsEvenWithoutCheckpoints) {
  cfg.checkpoint_every = 0;
  restart();
  EXPECT_EQ(core->incarnation(), 1U);
  restart();
  EXPECT_EQ(core->incarnation(), 2U);
  EXPECT_FALSE(core->resumed_from().has_value());
  EXPECT_EQ(store.writes(), 0U);
}

TEST_F(AveragerRestartTest, CheckpointOfAnotherModelSizeIsRefused) {
  restart();
  run_rounds(1);
  auto c = averager_core::make(cfg, clk, std::vector<float>(dim + 3, 0.0F), *setup_from(store));
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, errc::invalid_argument);
}

TEST_F(AveragerRestartTest, CheckpointsRecordTheModelAndRefuseAnotherOnResume) {
  cfg.model_identity = checkpoint_model{"fmnist-mlp", 1, 28, 28, 10, "fashion-mnist", "abc"};
  restart();
  run_rounds(2);
  auto newest = store.read(2);
  ASSERT_TRUE(newest.has_value());
  ASSERT_TRUE(newest->identity.has_value());
  EXPECT_EQ(*newest->identity, *cfg.model_identity);
  core.reset();
  cfg.model_identity->name = "fmnist-cnn";
  auto c = averager_core::make(cfg, clk, std::vector<float>(dim, 0.0F), *setup_from(store));
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().context.find("is for model fmnist-mlp, not fmnist-cnn"), std::string::npos) << c.error().context;
  cfg.model_identity->name = "fmnist-mlp";
  cfg.model_identity->fingerprint = "other seed";  // only the model's own identity must agree
  EXPECT_TRUE(averager_core::make(cfg, clk, std::vector<float>(dim, 0.0F), *setup_from(store)).has_value());
}

TEST_F(AveragerRestartTest, CheckpointRequestGoesToTheStore) {
  restart();
  (void)join(1);
  const auto before = store.writes();
  auto out = submit(1, 0, 2.0F);
  ASSERT_EQ(out.checkpoints.size(), 1U) << "checkpoint_every = 1";
  EXPECT_EQ(out.checkpoints[0].round, 1U) << "the state at the start of the next round";
  EXPECT_EQ(out.checkpoints[0].model, filled(2.0F));
  EXPECT_EQ(store.writes(), before + 1);
  ASSERT_TRUE(store.read(1).has_value());
  EXPECT_EQ(store.read(1)->members.size(), 1U);
  EXPECT_EQ(out.lines.size(), 1U);
  EXPECT_EQ(restart_targets(out, 1), std::set<member_id>{1});
  setup = averager_setup{};  // a shell without a store is never asked
  make();
  (void)join(1);
  EXPECT_TRUE(submit(1, 0, 2.0F).checkpoints.empty());
}

// Empty rounds (every member gone before submitting, e.g. all timed out in a network blip) move r on but
// count neither toward the planned rounds nor the epoch, and ask for no checkpoint of their own.
TEST_F(AveragerRestartTest, EmptyRoundsNeitherUseUpThePlannedRoundsNorAreCheckpointedAgain) {
  cfg.max_rounds = 3;
  cfg.rounds_per_epoch = 2;
  restart();
  (void)join(1);
  (void)submit(1, 0, 1.0F);  // round 0 trains: 1 of 3
  EXPECT_EQ(store.writes(), 1U);
  for (incarnation_t inc = 2; inc <= 3; ++inc) {
    clk.advance(6s);  // the member times out; the open round closes empty
    (void)run(core->tick());
    ASSERT_EQ(core->state(), averager_state::idle);
    EXPECT_EQ(store.writes(), 1U) << "an empty round writes no checkpoint";
    (void)join(1, inc);  // it comes back as a new incarnation
    ASSERT_EQ(core->state(), averager_state::collecting) << "an empty round does not end the job";
  }
  EXPECT_EQ(core->round(), 3U);
  (void)on_model(model(1, 3, filled(2.0F), 4, 10, 3));
  EXPECT_EQ(core->state(), averager_state::collecting);
  (void)on_model(model(1, 4, filled(3.0F), 4, 10, 3));
  EXPECT_EQ(core->state(), averager_state::stopped) << "the third trained round is the last";
  EXPECT_EQ(core->round(), 5U);
  const auto all = take_lines();
  ASSERT_EQ(all.size(), 5U);
  const std::vector<std::uint64_t> trained{1, 1, 1, 2, 3};
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].round, i);
    EXPECT_EQ(all[i].trained_rounds, trained[i]) << "round " << i;
    ASSERT_TRUE(all[i].epoch.has_value());
    EXPECT_DOUBLE_EQ(*all[i].epoch, static_cast<double>(trained[i]) / 2) << "round " << i;
    EXPECT_EQ(all[i].rounds_total, 3U);
  }
  EXPECT_EQ(all[1].submissions, 0U);
  EXPECT_EQ(store.writes(), 4U) << "one checkpoint per trained round, then the finished one";
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->rounds, 5U);
  EXPECT_EQ(done->trained_rounds, 3U);
}

// A crash between a checkpoint and the metrics line of the round before it would lose that line for
// good (the resumed incarnation starts after it): the core hands a checkpoint out only once the lines
// of every round before it are, even while a line waits for its evaluation.
TEST_F(AveragerRestartTest, ACheckpointWaitsUntilTheLinesOfTheRoundsBeforeItAreOut) {
  cfg.eval_every = 2;
  setup.evaluations = true;
  restart();
  (void)join(1);
  auto out = submit(1, 0, 1.0F);
  EXPECT_EQ(out.lines.size(), 1U);
  ASSERT_EQ(out.checkpoints.size(), 1U) << "round 0's line is out: round 1's checkpoint may follow";
  EXPECT_EQ(out.checkpoints[0].round, 1U);
  out = submit(1, 1, 2.0F);  // evaluated: the line of round 1 waits for its accuracy
  EXPECT_TRUE(out.lines.empty());
  EXPECT_TRUE(out.checkpoints.empty()) << "round 2's checkpoint waits for round 1's line";
  out = submit(1, 2, 3.0F);
  EXPECT_TRUE(out.lines.empty());
  EXPECT_TRUE(out.checkpoints.empty());
  EXPECT_EQ(store.list(), (std::vector<round_t>{1}));
  ASSERT_EQ(evaluations.size(), 1U);
  out = run(core->on_evaluated(evaluations[0].id, 0.5));
  ASSERT_EQ(out.lines.size(), 2U);
  ASSERT_EQ(out.checkpoints.size(), 2U);
  EXPECT_EQ(out.checkpoints[0].round, 2U);
  EXPECT_EQ(out.checkpoints[1].round, 3U);
  EXPECT_EQ(out.checkpoints[0].model, filled(2.0F)) << "each checkpoint holds x̄ of its own round";
}

// The end of a job with checkpoints leaves a checkpoint marked finished (written after the done line);
// a new incarnation refuses to resume it.
TEST_F(AveragerRestartTest, AFinishedJobLeavesAFinishedCheckpointThatIsNotResumed) {
  cfg.max_rounds = 2;
  restart();
  run_rounds(2);
  ASSERT_EQ(core->state(), averager_state::stopped);
  ASSERT_TRUE(done.has_value());
  auto newest = store.read_newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_TRUE(newest->finished);
  EXPECT_EQ(newest->round, 2U);
  EXPECT_EQ(newest->model, *core->model());
  core.reset();
  auto from_store = setup_from(store);
  ASSERT_TRUE(from_store.has_value());
  auto c = averager_core::make(cfg, clk, filled(0), *from_store);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().context.find("finished"), std::string::npos) << c.error().context;
}

// Killed after the checkpoint of the last planned round but before the done line: the next incarnation
// trains nothing more; it ends the job (STOP, done) as soon as the members are back.
TEST_F(AveragerRestartTest, ResumedAfterTheLastPlannedRoundEndsWithoutTraining) {
  cfg.max_rounds = 3;
  write_final_checkpoint = false;
  restart();
  run_rounds(3);
  ASSERT_EQ(store.read_newest()->round, 3U);
  ASSERT_FALSE(store.read_newest()->finished);
  write_final_checkpoint = true;
  restart();
  (void)join(1);
  auto out = join(2);
  EXPECT_TRUE(of<restart_msg>(out).empty()) << "no round beyond the planned ones";
  EXPECT_EQ(of<stop_msg>(out).size(), 2U);
  EXPECT_EQ(core->state(), averager_state::stopped);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->trained_rounds, 3U);
  EXPECT_EQ(take_lines().size(), 3U) << "only the first incarnation's lines";
  EXPECT_TRUE(store.read_newest()->finished);
}

TEST_F(AveragerRestartTest, ResumedAfterTheLastPlannedRoundEndsAtTheNextWakeupWhenNobodyComesBack) {
  cfg.max_rounds = 2;
  write_final_checkpoint = false;
  restart();
  run_rounds(2);
  write_final_checkpoint = true;
  restart();
  ASSERT_TRUE(core->next_wakeup().has_value());
  clk.advance(3s);
  (void)run(core->tick());
  EXPECT_EQ(core->state(), averager_state::stopped);
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(done->job_over);
  EXPECT_TRUE(store.read_newest()->finished);
}

// SIGTERM: the held lines go out first, then the checkpoint of the open round, in one result.
TEST_F(AveragerRestartTest, SuspendReleasesTheHeldLinesThenCheckpointsTheOpenRound) {
  cfg.checkpoint_every = 0;
  cfg.eval_every = 1;
  setup.evaluations = true;
  restart();
  (void)join(1);
  (void)submit(1, 0, 1.0F);
  (void)submit(1, 1, 2.0F);
  EXPECT_TRUE(take_lines().empty()) << "waiting for evaluations";
  auto out = run(core->suspend());
  ASSERT_EQ(out.lines.size(), 2U);
  ASSERT_EQ(out.checkpoints.size(), 1U);
  EXPECT_EQ(out.checkpoints[0].round, 2U) << "the open round";
  EXPECT_FALSE(out.checkpoints[0].finished);
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(done->final_checkpoint.has_value()) << "the job is not over";
}

TEST_F(AveragerRestartTest, CheckpointsEveryKRoundsCarryScheduleAndOuterState) {
  cfg.checkpoint_every = 2;
  cfg.outer = algorithms::outer_config{algorithms::outer_kind::momentum, 1.0F, 0.5F};
  cfg.intervals = algorithms::interval_kind::per_worker;
  cfg.per_worker_intervals = {{0, 3}, {1, 6}};  // by shard
  restart();
  run_rounds(5);
  ASSERT_EQ(store.list(), (std::vector<round_t>{4, 2}));
  auto saved = store.read_newest();
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->round, 4U);
  EXPECT_EQ(saved->rounds_completed, 4U);
  EXPECT_EQ(saved->outer_momentum.size(), dim);
  EXPECT_NE(saved->outer_momentum, filled(0.0F));
  ASSERT_EQ(saved->members.size(), 2U);
  EXPECT_EQ(saved->members[0].interval, 3U);
  EXPECT_EQ(saved->members[1].interval, 6U);
  EXPECT_EQ(saved->averager_incarnation, core->incarnation());

  // The resumed incarnation continues with the same momentum: replaying round 4's submissions gives
  // the x̄_5 the uncrashed averager computed (zero momentum would give a different one).
  const auto uncrashed = *core->model();
  restart();
  ASSERT_EQ(core->resumed_from(), 4U);
  EXPECT_EQ(*core->model(), saved->model);
  (void)join(1);
  (void)join(2);
  EXPECT_EQ(interval_of(1), 3U);
  EXPECT_EQ(interval_of(2), 6U);
  (void)submit(1, 4, 5.0F);
  (void)submit(2, 4, 5.0F);
  ASSERT_EQ(core->round(), 5U);
  EXPECT_EQ(*core->model(), uncrashed);
}

TEST_F(AveragerCoreTest, HeartbeatFromUnknownWorkerAsksItToRejoin) {
  make();
  auto out = heartbeat(9);
  auto removed = of<removed_msg>(out);
  ASSERT_EQ(removed.size(), 1U);
  EXPECT_EQ(removed[0].member, 9U);
  EXPECT_EQ(removed[0].averager_incarnation, core->incarnation());
  (void)join(9);
  EXPECT_TRUE(heartbeat(9).sends.empty());
}

TEST_F(AveragerCoreTest, StoppedAveragerAnswersJoinWithStopAndIgnoresModels) {
  make();
  (void)join(1);
  auto out = run(core->stop());
  EXPECT_EQ(of<stop_msg>(out).size(), 1U);
  EXPECT_EQ(of<stop_msg>(join(2)).size(), 1U);
  EXPECT_TRUE(submit(1, 0, 1.0F).sends.empty());
  EXPECT_EQ(core->counters().accepted, 0U);
}

// ---- actions: routes, evaluations and metrics lines -----------------------------------------------

TEST_F(AveragerCoreTest, ClaimsAreCheckedAgainstTheAssignment) {
  cfg.spec.batch_size = 16;
  cfg.rule = algorithms::averaging_rule::by_samples;  // so the average of equal models is that model
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  ASSERT_EQ(core->round(), 1U);
  const auto rejected = [&](model_msg m, const std::string& code) {
    const auto before = core->drops().contains(code) ? core->drops().at(code) : 0;
    (void)on_model(std::move(m));
    EXPECT_EQ(core->accounting().back().status, submission_status::rejected) << code;
    EXPECT_EQ(core->drops().at(code), before + 1) << code;
  };
  // A zero model claiming 2^50 samples: more than 4 steps x batch 16.
  rejected(model(1, 1, filled(0.0F), 4, std::uint64_t{1} << 50U), "samples");
  rejected(model(1, 1, filled(0.0F), 4, 65), "samples");
  rejected(model(1, 1, filled(0.0F), 5, 64), "steps");  // more steps than assigned
  rejected(model(1, 1, filled(0.0F), 3, 48), "steps");  // fewer, without saying the round was cut
  auto nan_loss = model(1, 1, filled(0.0F), 4, 64);
  nan_loss.loss_sum = std::numeric_limits<double>::infinity();
  rejected(nan_loss, "loss");
  EXPECT_EQ(core->submitted(), std::vector<member_id>{});
  auto cut = model(1, 1, filled(2.0F), 3, 48);
  cut.cut = true;
  (void)on_model(cut);
  EXPECT_EQ(core->accounting().back().status, submission_status::accepted) << "fewer steps, flagged as cut short";
  (void)on_model(model(2, 1, filled(2.0F), 4, 64));
  EXPECT_EQ(core->round(), 2U);
  EXPECT_EQ(*core->model(), filled(2.0F)) << "no rejected claim entered the average";
}

TEST_F(AveragerCoreTest, JoinWithAnotherModelOrDataSetIsRefusedWithTheDifference) {
  cfg.spec.model = "fmnist-mlp in=1x28x28 out=10 params=203530";
  cfg.spec.data = "fashion-mnist n=60000 shape=1x28x28 classes=10";
  make();
  auto out = on_join(join_msg{1, 1, 0, 0, 0, "fmnist-cnn in=1x28x28 out=10 params=26474", cfg.spec.data});
  ASSERT_EQ(out.sends.size(), 1U);
  const auto* refused = std::get_if<refused_msg>(&out.sends[0].msg);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->incarnation, 1U) << "answers the JOIN's nonce";
  EXPECT_NE(refused->reason.find("model mismatch"), std::string::npos) << refused->reason;
  EXPECT_NE(refused->reason.find("fmnist-cnn"), std::string::npos) << refused->reason;
  EXPECT_EQ(out.sends[0].via, std::optional<origin_t>{origin_of(1)});
  out = on_join(join_msg{2, 1, 0, 0, 0, cfg.spec.model, "fashion-mnist n=100 shape=1x28x28 classes=10"});
  ASSERT_EQ(out.sends.size(), 1U);
  EXPECT_NE(std::get<refused_msg>(out.sends[0].msg).reason.find("data mismatch"), std::string::npos);
  EXPECT_TRUE(core->members().empty());
  EXPECT_TRUE(core->pending().empty());
  EXPECT_EQ(core->counters().refused, 2U);
  out = on_join(join_msg{3, 1, 0, 0, 0, cfg.spec.model, cfg.spec.data});
  ASSERT_FALSE(of<welcome_msg>(out).empty());
  EXPECT_EQ(of<welcome_msg>(out)[0].spec.model, cfg.spec.model) << "WELCOME carries the job";
  EXPECT_EQ(members(), std::vector<member_id>{3});
}

TEST_F(AveragerCoreTest, MemberThatHeartbeatsButNeverSubmitsIsRemoved) {
  cfg.idle_rounds = 2;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  ASSERT_EQ(core->round(), 1U);
  (void)submit(1, 1, 1.0F);
  // Worker 2 heartbeats but never submits: after 2 x max(previous round, heartbeat timeout) it goes.
  actions last;
  for (int i = 0; i < 9; ++i) {
    clk.advance(1s);
    (void)heartbeat(1);
    (void)heartbeat(2);
    last = run(core->tick());
    ASSERT_EQ(core->round(), 1U) << "still waiting at " << i + 1 << " s";
  }
  clk.advance(1s);
  (void)heartbeat(2);
  last = run(core->tick());
  EXPECT_EQ(core->round(), 2U);
  EXPECT_EQ(members(), std::vector<member_id>{1});
  ASSERT_EQ(of<removed_msg>(last).size(), 1U);
  EXPECT_EQ(of<removed_msg>(last)[0].member, 2U);
  EXPECT_EQ(core->drops().at("idle"), 1U);
}

TEST_F(AveragerCoreTest, SlowFirstRoundRemovesNobodyThatSubmitsWithinTheIdleLimit) {
  cfg.idle_rounds = 2;
  cfg.min_workers = 2;
  make();
  (void)join(1);
  (void)join(2);
  beat_for(20, {1, 2});  // a slow first round: no previous round to measure against
  EXPECT_EQ(members(), (std::vector<member_id>{1, 2}));
  (void)submit(1, 0, 1.0F);
  beat_for(15, {1, 2});  // worker 2 takes 35 s: within 2 x the 20 s worker 1 took
  EXPECT_EQ(members(), (std::vector<member_id>{1, 2}));
  (void)submit(2, 0, 1.0F);
  EXPECT_EQ(core->round(), 1U);
  EXPECT_FALSE(core->drops().contains("idle"));
}

// The idle limit is measured on the round before, which can be shorter than this one: the first round of a
// fresh job moves no model down (its RESTART only confirms x̄_0), the next moves one each way. A member whose
// heartbeat announced its MODEL is at work, so the limit waits for the announced transfer; a member that
// announced one and still has not submitted when that transfer's allowance is over goes as idle.
TEST_F(AveragerCoreTest, IdleLimitWaitsForAnAnnouncedModel) {
  cfg.idle_rounds = 2;
  cfg.slowest_link_bytes_per_s = 1e6;
  make();
  (void)join(1);
  const auto beat = [&](int seconds) { beat_for(seconds, {1}); };
  beat(9);  // round 0: 9 s, the upload only
  (void)submit(1, 0, 1.0F);
  ASSERT_EQ(core->round(), 1U);
  beat(9);  // round 1: the RESTART comes down for 9 s, then the MODEL is announced and goes up for 9 s
  heartbeat_msg hb{1, 1, core->incarnation(), core->round(), false, 0};
  hb.transfer_bytes = 9'000'000;
  (void)on_heartbeat(hb);
  beat(11);  // past 2 x 9 s since the round began, within the 5 s timeout + 9 s transfer allowance
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_FALSE(core->drops().contains("idle"));
  (void)submit(1, 1, 1.0F);
  EXPECT_EQ(core->round(), 2U);

  // Round 2 lasts as long as round 1 did (20 s), so its cutoff is 40 s out. The member announces a MODEL
  // at 30 s (allowance to 44 s) and never sends it, though it keeps heartbeating: it goes when the
  // allowance is over, not before.
  beat(30);
  hb.round = core->round();
  (void)on_heartbeat(hb);
  beat(14);
  EXPECT_EQ(members(), std::vector<member_id>{1}) << "removed before the announced MODEL could arrive";
  beat(1);
  EXPECT_TRUE(members().empty());
  EXPECT_EQ(core->drops().at("idle"), 1U);
}

// The idle rule waits for an announced MODEL once a round: a member that announces again and again and never
// submits goes when the first allowance it was spared for is over.
TEST_F(AveragerCoreTest, AnnouncingOverAndOverDoesNotKeepAnIdleMember) {
  cfg.idle_rounds = 2;
  cfg.slowest_link_bytes_per_s = 1e6;
  make();
  (void)join(1);
  clk.advance(10s);
  (void)submit(1, 0, 1.0F);
  ASSERT_EQ(core->round(), 1U);
  // Round 1's cutoff is 20 s out. The member announces a 9 s MODEL every second from 15 s on: the first
  // announcement the cutoff sees (at 20 s, allowance to 34 s) is the one it waits for.
  heartbeat_msg hb{1, 1, core->incarnation(), core->round(), false, 0};
  hb.transfer_bytes = 9'000'000;
  for (int s = 1; s <= 40 && !members().empty(); ++s) {
    clk.advance(1s);
    if (s >= 15) {
      (void)on_heartbeat(hb);
    } else {
      (void)heartbeat(1);
    }
    (void)run(core->tick());
    if (s <= 34) {
      ASSERT_EQ(members(), std::vector<member_id>{1}) << "removed at " << s << " s";
    }
  }
  EXPECT_TRUE(members().empty()) << "kept by announcements alone";
  EXPECT_EQ(core->drops().at("idle"), 1U);
}

TEST_F(AveragerCoreTest, MemberThatMissesDeadlineClosedRoundsIsRemoved) {
  cfg.idle_rounds = 2;
  cfg.deadline = deadline_policy::fixed;
  cfg.fixed_deadline = 1s;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  for (round_t r = 1; r <= 2; ++r) {
    (void)submit(1, r, 1.0F);
    clk.advance(1s);
    (void)heartbeat(2);
    (void)run(core->tick());
    ASSERT_EQ(core->round(), r + 1);
  }
  EXPECT_EQ(members(), std::vector<member_id>{1}) << "two rounds closed without worker 2";
}

TEST_F(AveragerCoreTest, AMemberIsBoundToTheClientKeyItJoinedWith) {
  make();
  core->on_connection(10, "KEY-A");
  core->on_connection(11, "KEY-B");
  (void)on_join(join_msg{1, 1, 0, 0, 0, {}, {}}, 10);
  ASSERT_EQ(members(), std::vector<member_id>{1});
  // Member 1's token (say it leaked) from a connection with another key, or with none: refused as wrong_key.
  (void)on_heartbeat(heartbeat_msg{1, 1, core->incarnation(), 0, false, 0}, 11);
  (void)on_model(model(1, 0, filled(1.0F)), 11);
  (void)on_leave(leave_msg{1, 1, core->incarnation(), 0}, 12);
  EXPECT_EQ(core->drops().at("wrong_key"), 3U);
  EXPECT_EQ(core->counters().unauthorised, 3U);
  EXPECT_FALSE(core->drops().contains("wrong_connection"));
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_TRUE(core->accounting().empty());
  // The member's own connection, down and up again with its key, is still the member.
  core->on_disconnected(10);
  core->on_connection(10, "KEY-A");
  (void)on_model(model(1, 0, filled(1.0F)), 10);
  EXPECT_EQ(core->round(), 1U);
  EXPECT_EQ(core->counters().accepted, 1U);
}

TEST_F(AveragerCoreTest, ARestartRefusedForBackPressureIsSentAgainThenTheMemberIsRemoved) {
  cfg.send_retries = 2;
  cfg.idle_rounds = 0;
  make();
  (void)join(1);
  (void)join(2);  // waits for round 1
  auto out = submit(1, 0, 1.0F);
  ASSERT_EQ(core->round(), 1U);
  auto refused = restart_for(out, 2);
  for (std::uint32_t attempt = 1; attempt <= 2; ++attempt) {
    out = send_failed(refused, errc::overloaded);
    EXPECT_TRUE(out.sends.empty());
    ASSERT_TRUE(out.wakeup.has_value());
    EXPECT_LE(*out.wakeup, clk.now() + cfg.heartbeat_interval);
    clk.advance(cfg.heartbeat_interval);
    (void)heartbeat(2);
    out = run(core->tick());
    refused = restart_for(out, 2);  // the same round's RESTART once more
    EXPECT_EQ(refused.round, 1U);
    EXPECT_EQ(members(), (std::vector<member_id>{1, 2}));
  }
  // The third refusal is one more than send_retries: the member goes, and the barrier stops waiting for it.
  out = send_failed(refused, errc::overloaded);
  EXPECT_EQ(of<removed_msg>(out).size(), 1U);
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_EQ(core->drops().at("send_failed"), 3U);
  EXPECT_EQ(core->drops().at("send_failed_removed"), 1U);
  (void)submit(1, 1, 2.0F);
  EXPECT_EQ(core->round(), 2U);
}

TEST_F(AveragerCoreTest, ARestartThatCanNeverBeSentRemovesTheMemberAtOnce) {
  make();
  (void)join(1);
  (void)join(2);
  auto out = submit(1, 0, 1.0F);
  ASSERT_EQ(core->round(), 1U);
  // A RESTART of an older round, or for a member that already submitted, changes nothing.
  auto stale = restart_for(out, 2);
  stale.round = 0;
  (void)send_failed(stale, errc::overloaded);
  EXPECT_EQ(members(), (std::vector<member_id>{1, 2}));
  out = send_failed(restart_for(out, 2), errc::too_large);
  EXPECT_EQ(of<removed_msg>(out).size(), 1U);
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_EQ(core->drops().at("send_failed_removed"), 1U);
}

TEST_F(AveragerCoreTest, MessagesWithoutTheTokenOrFromAnotherConnectionAreDroppedAndCounted) {
  make();
  auto out = on_join(join_msg{1, 1, 0, 0, 0, {}, {}}, 10);
  ASSERT_EQ(out.routes.size(), 1U);
  EXPECT_EQ(out.routes[0].member, 1U);
  EXPECT_EQ(out.routes[0].via, 10U);
  const auto welcome = of<welcome_msg>(out).at(0);
  EXPECT_NE(welcome.token, 0U);
  (void)on_join(join_msg{2, 1, 0, 0, 0, {}, {}}, 20);  // pending: round 0 runs with {1}
  EXPECT_NE(token_of(2), token_of(1));

  // Worker 1's MODEL, token and all, but from another connection: dropped before it is classified.
  const auto accounted = core->accounting().size();
  out = on_model(model(1, 0, filled(1.0F)), 99);
  EXPECT_TRUE(out.sends.empty());
  EXPECT_TRUE(out.routes.empty());
  EXPECT_EQ(core->accounting().size(), accounted);
  // From the right connection but with a guessed token.
  auto forged = model(1, 0, filled(1.0F));
  forged.token = token_of(1) ^ 1U;
  out = on_model(forged, 10);
  EXPECT_TRUE(out.routes.empty());
  // LEAVE and HEARTBEAT naming member 1 from elsewhere, or with token 0, change nothing.
  (void)on_leave(leave_msg{1, 1, core->incarnation(), 0}, 99);
  (void)run(core->on_leave(leave_msg{real(1), nonce(1, 1), core->incarnation(), 0, 0}, 10));  // token 0
  (void)on_heartbeat(heartbeat_msg{1, 1, core->incarnation(), 0, false, 0}, 99);
  EXPECT_EQ(members(), std::vector<member_id>{1});
  EXPECT_EQ(core->submitted(), std::vector<member_id>{});
  EXPECT_EQ(core->counters().unauthorised, 5U);
  EXPECT_EQ(core->drops().at("wrong_connection"), 3U);
  EXPECT_EQ(core->drops().at("bad_token"), 2U);

  // An unknown worker is answered on its own connection, without a route.
  out = on_heartbeat(heartbeat_msg{9, 1, core->incarnation(), 0, false, 0}, 90);
  EXPECT_TRUE(out.routes.empty());
  ASSERT_EQ(out.sends.size(), 1U);
  EXPECT_EQ(out.sends[0].via, std::optional<origin_t>{90});
  EXPECT_FALSE(routes.contains(9));

  // The real worker's MODEL is accepted; RESTARTs go over the members' routes.
  out = on_model(model(1, 0, filled(1.0F)), 10);
  EXPECT_EQ(core->round(), 1U);
  for (const auto& o : out.sends) {
    EXPECT_FALSE(o.via.has_value());
  }
  EXPECT_EQ(routes.at(1), 10U);
  EXPECT_EQ(routes.at(2), 20U);
  EXPECT_EQ(take_lines().back().unauthorised, 5U) << "the round's line counts them";
}

TEST_F(AveragerCoreTest, EvaluationsAnsweredOutOfOrderStillReleaseLinesInRoundOrder) {
  setup.evaluations = true;
  cfg.eval_every = 1;
  cfg.max_evaluations = 2;
  make();
  (void)join(1);
  for (round_t r = 0; r < 3; ++r) {
    (void)submit(1, r, static_cast<float>(r + 1));
  }
  EXPECT_TRUE(take_lines().empty()) << "every line waits for its accuracy";
  ASSERT_EQ(evaluations.size(), 2U) << "two at a time; the third waits in the core";
  EXPECT_EQ(evaluations[0].rounds, 1U);
  EXPECT_EQ(*evaluations[0].model, filled(1.0F)) << "x̄ after the round, shared";
  EXPECT_EQ(evaluations[1].rounds, 2U);
  const auto first = evaluations[0].id;
  const auto second = evaluations[1].id;

  auto out = run(core->on_evaluated(second, 0.75, 0.625));
  EXPECT_TRUE(out.lines.empty()) << "round 1's line waits behind round 0's";
  ASSERT_EQ(out.evaluations.size(), 1U) << "the freed evaluator takes the queued request";
  EXPECT_EQ(out.evaluations[0].rounds, 3U);
  const auto third = out.evaluations[0].id;

  out = run(core->on_evaluated(first, 0.5));
  ASSERT_EQ(out.lines.size(), 2U);
  EXPECT_EQ(out.lines[0].round, 0U);
  EXPECT_EQ(out.lines[0].test_acc, std::optional<double>{0.5});
  EXPECT_FALSE(out.lines[0].test_loss.has_value()) << "an evaluation without a loss leaves it null";
  EXPECT_EQ(out.lines[1].round, 1U);
  EXPECT_EQ(out.lines[1].test_acc, std::optional<double>{0.75});
  EXPECT_EQ(out.lines[1].test_loss, std::optional<double>{0.625}) << "the loss stays with its round";

  EXPECT_TRUE(run(core->on_evaluated(first, 0.1)).lines.empty()) << "an answer given twice is ignored";
  out = run(core->on_evaluated(third, std::nullopt, 0.5));  // the evaluation failed
  ASSERT_EQ(out.lines.size(), 1U);
  EXPECT_EQ(out.lines[0].round, 2U);
  EXPECT_FALSE(out.lines[0].test_acc.has_value());
  EXPECT_FALSE(out.lines[0].test_loss.has_value()) << "no loss without an accuracy";
  const auto all = take_lines();
  ASSERT_EQ(all.size(), 3U);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].round, i);
  }
}

TEST_F(AveragerCoreTest, EpochEndsAndTheLastRoundAreEvaluatedAndDoneWaitsForThem) {
  setup.evaluations = true;
  cfg.rounds_per_epoch = 2;
  cfg.max_rounds = 3;
  make();
  (void)join(1);
  (void)submit(1, 0, 1.0F);
  auto lines0 = take_lines();
  ASSERT_EQ(lines0.size(), 1U) << "round 0 ends no epoch: its line leaves at once";
  EXPECT_EQ(lines0[0].epoch, std::optional<double>{0.5});
  EXPECT_EQ(lines0[0].rounds_total, 3U);
  EXPECT_TRUE(evaluations.empty());
  (void)submit(1, 1, 2.0F);
  ASSERT_EQ(evaluations.size(), 1U) << "epoch 1 ends";
  EXPECT_FALSE(evaluations[0].final);
  auto out = submit(1, 2, 3.0F);
  EXPECT_TRUE(out.stopped);
  EXPECT_EQ(of<stop_msg>(out).size(), 1U);
  EXPECT_TRUE(out.lines.empty());
  EXPECT_TRUE(out.evaluations.empty()) << "one evaluation at a time";
  EXPECT_FALSE(done.has_value());
  out = run(core->on_evaluated(evaluations[0].id, 0.6, 1.25));
  ASSERT_EQ(out.lines.size(), 1U);
  ASSERT_EQ(out.evaluations.size(), 1U);
  EXPECT_TRUE(out.evaluations[0].final) << "the last round's x̄ is the final one";
  EXPECT_EQ(out.evaluations[0].rounds, 3U);
  EXPECT_FALSE(done.has_value());
  out = run(core->on_evaluated(out.evaluations[0].id, 0.8, 0.5));
  ASSERT_EQ(out.lines.size(), 1U);
  EXPECT_EQ(out.lines[0].round, 2U);
  EXPECT_EQ(out.lines[0].test_loss, std::optional<double>{0.5});
  ASSERT_TRUE(done.has_value());
  EXPECT_TRUE(done->job_over);
  EXPECT_EQ(done->rounds, 3U);
  EXPECT_EQ(done->test_acc, std::optional<double>{0.8});
  EXPECT_EQ(done->test_loss, std::optional<double>{0.5}) << "the final x̄'s loss, not epoch 1's";
  EXPECT_EQ(done->model, core->model());
  EXPECT_EQ(done->bytes_out, 3 * dim * sizeof(float));
  EXPECT_FALSE(out.wakeup.has_value()) << "a stopped core needs no timer";
}

TEST_F(AveragerCoreTest, StopAsksForAFinalEvaluationOfTheCurrentModel) {
  setup.evaluations = true;
  make();
  (void)join(1);
  (void)submit(1, 0, 1.0F);
  EXPECT_EQ(take_lines().size(), 1U);
  auto out = run(core->stop());
  EXPECT_TRUE(out.stopped);
  ASSERT_EQ(out.evaluations.size(), 1U);
  EXPECT_TRUE(out.evaluations[0].final);
  EXPECT_EQ(out.evaluations[0].rounds, 1U);
  EXPECT_FALSE(done.has_value());
  (void)run(core->on_evaluated(out.evaluations[0].id, 0.9));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->test_acc, std::optional<double>{0.9});
  EXPECT_TRUE(run(core->stop()).sends.empty()) << "stopping twice changes nothing";
}

TEST_F(AveragerCoreTest, WithoutAnEvaluatorStopIsDoneAtOnce) {
  cfg.eval_every = 1;
  make();
  (void)join(1);
  (void)submit(1, 0, 1.0F);
  EXPECT_TRUE(evaluations.empty());
  EXPECT_EQ(take_lines().size(), 1U);
  (void)run(core->stop());
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(done->test_acc.has_value());
  EXPECT_EQ(done->rounds, 1U);
}

TEST_F(AveragerCoreTest, SuspendReleasesHeldLinesAndEndsWithoutStoppingTheJob) {
  setup.evaluations = true;
  cfg.eval_every = 1;
  make();
  (void)join(1);
  (void)join(2);
  (void)submit(1, 0, 1.0F);
  (void)submit(1, 1, 2.0F);
  (void)submit(2, 1, 2.0F);
  ASSERT_EQ(evaluations.size(), 1U);
  EXPECT_TRUE(take_lines().empty());
  auto out = run(core->suspend());
  EXPECT_TRUE(out.stopped);
  EXPECT_TRUE(out.sends.empty()) << "the workers are not told: they rejoin the next incarnation";
  ASSERT_EQ(out.lines.size(), 2U);
  EXPECT_FALSE(out.lines[0].test_acc.has_value());
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(done->job_over);
  EXPECT_TRUE(run(core->on_evaluated(evaluations[0].id, 0.5)).lines.empty()) << "a late answer is ignored";
  EXPECT_EQ(core->state(), averager_state::stopped);
}

TEST(AveragerConfigTest, RejectsInvalidConfigs) {
  fake_clock clk;
  averager_config cfg;
  EXPECT_FALSE(averager_core::make(cfg, clk, {}).has_value());
  cfg.interval = 0;
  EXPECT_FALSE(averager_core::make(cfg, clk, {1.0F}).has_value());
  cfg = {};
  cfg.heartbeat_timeout = 0s;
  EXPECT_FALSE(averager_core::make(cfg, clk, {1.0F}).has_value());
  cfg = {};
  cfg.per_worker_intervals = {{3, 0}};
  EXPECT_FALSE(averager_core::make(cfg, clk, {1.0F}).has_value());
}

// ---- sample ranges: the averager hands out every epoch's samples ----------------------------------------

class AveragerPoolTest : public AveragerCoreTest {
 protected:
  void SetUp() override {
    AveragerCoreTest::SetUp();
    cfg.data_samples = 100;
    cfg.data_block = 10;
    cfg.spec.batch_size = 5;
    cfg.interval = 4;  // 20 samples per member and round
    cfg.max_epochs = 2;
    cfg.idle_rounds = 0;
  }
  // Remembers the ranges of every RESTART in `out` (by logical member).
  void note(const actions& out) {
    for (const auto& r : of<restart_msg>(out)) {
      given[r.member] = r.ranges;
    }
  }
  static std::uint64_t count(const std::vector<index_range>& rs) {
    std::uint64_t n = 0;
    for (const auto& [b, e] : rs) {
      n += e - b;
    }
    return n;
  }
  // Submits what a real worker would: the assigned steps over every sample it was given.
  actions submit_given(member_id id) {
    auto out = on_model(model(id, core->round(), filled(1.0F), interval_of(id).value_or(4), count(given[id])));
    note(out);
    return out;
  }
  std::map<member_id, std::vector<index_range>> given;
};

TEST_F(AveragerPoolTest, EachMemberGetsIntervalTimesBatchDisjointSamples) {
  make();
  note(join(1));
  note(join(2));
  note(join(3));
  ASSERT_EQ(given.size(), 1U) << "the first joiner starts round 0 alone";
  EXPECT_EQ(count(given[1]), 20U);
  note(submit_given(1));
  ASSERT_EQ(given.size(), 3U);
  std::set<std::uint64_t> seen;
  for (const auto& [id, rs] : given) {
    EXPECT_EQ(count(rs), 20U) << "member " << id;
    for (const auto& [b, e] : rs) {
      EXPECT_LT(b, e);
      EXPECT_LE(e, 100U);
      for (auto i = b; i < e; ++i) {
        EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " given twice in one epoch";
      }
    }
  }
}

// The job's last samples are shared by the round's members (a last round smaller than everyone's interval is
// split; a tail smaller than a batch per member goes out with the round before), so x̄ never ends as one
// member's model.
TEST_F(AveragerPoolTest, ALastRoundSmallerThanEveryonesIntervalIsSplit) {
  cfg.data_samples = 90;  // 2 members x 20 per round: 40, 80, then 10 < 2 x batch would be left
  cfg.max_epochs = 1;
  make();
  note(join(1));
  note(join(2));
  note(submit_given(1));  // round 0: member 1 alone; member 2 is admitted for round 1
  ASSERT_EQ(core->round(), 1U);
  EXPECT_EQ(count(given[1]) + count(given[2]), 40U);
  note(submit_given(1));
  note(submit_given(2));
  ASSERT_EQ(core->round(), 2U);
  // 30 left, 40 wanted: each member gets 15 (three short steps), none sits the round out.
  EXPECT_EQ(count(given[1]), 15U);
  EXPECT_EQ(count(given[2]), 15U);
  EXPECT_EQ(interval_of(1), 3U);
  note(submit_given(1));
  note(submit_given(2));
  EXPECT_EQ(core->state(), averager_state::stopped) << "one pass over the 90 samples";
}

TEST_F(AveragerPoolTest, ATailOfLessThanABatchPerMemberGoesOutWithTheRoundBefore) {
  cfg.data_samples = 105;  // 20, then 40; then 45 left, 40 wanted: the 5 after it go out with it
  cfg.max_epochs = 1;
  make();
  note(join(1));
  note(join(2));
  note(submit_given(1));
  note(submit_given(1));
  note(submit_given(2));
  ASSERT_EQ(core->round(), 2U);
  EXPECT_EQ(count(given[1]), 23U);
  EXPECT_EQ(count(given[2]), 22U);
  EXPECT_EQ(interval_of(1), 5U) << "one more, short step";
  note(submit_given(1));
  note(submit_given(2));
  EXPECT_EQ(core->state(), averager_state::stopped) << "one pass over the 105 samples, no round of 5";
}

TEST_F(AveragerPoolTest, ALostMembersSamplesGoToTheNextRound) {
  make();
  note(join(1));
  note(submit_given(1));
  note(join(2));
  note(submit_given(1));  // round 1 had only member 1; 2 is admitted for round 2
  ASSERT_EQ(core->round(), 2U);
  const auto lost = given[2];
  ASSERT_EQ(count(lost), 20U);
  note(submit_given(1));
  note(on_leave(leave_msg{2, 1, core->incarnation(), core->round()}));
  ASSERT_EQ(core->round(), 3U) << "the barrier stops waiting for the member that left";
  EXPECT_EQ(given[1], lost) << "the samples of the member that left come first in the next round";
  const auto& line = lines.back();
  for (const auto& d : line.data) {
    EXPECT_EQ(d.member, core->members().front()) << "only the accepted submission consumed samples";
  }
}

TEST_F(AveragerPoolTest, AClaimOfMoreSamplesThanGivenIsRejected) {
  make();
  note(join(1));
  auto out = on_model(model(1, 0, filled(1.0F), 4, 19));
  EXPECT_EQ(core->counters().accepted, 1U) << "fewer samples (a short last batch) are fine";
  make();
  given.clear();
  who.clear();
  note(join(1));
  out = on_model(model(1, 0, filled(1.0F), 4, 21));
  EXPECT_EQ(core->counters().rejected, 1U);
  EXPECT_EQ(core->drops().at("samples"), 1U);
}

// Joins, a leave, a member that dies, over two epochs: every sample enters x̄ exactly once per epoch, the
// job ends after two passes, and the metrics' epoch counts passes.
TEST_F(AveragerPoolTest, ChurnStillConsumesEverySampleOncePerEpochAndEndsAfterTheEpochs) {
  cfg.heartbeat_timeout = 5s;
  make();
  note(join(1));
  note(join(2));
  std::set<member_id> live{1};
  member_id next = 3;
  for (int step = 0; step < 200 && core->state() != averager_state::stopped; ++step) {
    const round_t r = core->round();
    const auto ms = members();
    live = std::set<member_id>(ms.begin(), ms.end());
    std::vector<member_id> restarted;
    for (member_id id : ms) {
      if (core->grant_of(real(id)).empty()) {
        continue;  // sits the round out
      }
      restarted.push_back(id);
    }
    ASSERT_FALSE(restarted.empty());
    if (step % 5 == 2 && restarted.size() > 1) {
      // One member leaves before submitting.
      note(on_leave(leave_msg{restarted.back(), 1, core->incarnation(), r}));
      restarted.pop_back();
    }
    if (step % 7 == 4 && restarted.size() > 1) {
      // One member dies: the others heartbeat until it times out.
      const member_id dead = restarted.front();
      restarted.erase(restarted.begin());
      for (int half = 0; half < 2; ++half) {
        clk.advance(3s);
        for (member_id id : ms) {
          if (id != dead) {
            (void)heartbeat(id);
          }
        }
      }
      note(run(core->tick()));
      const auto after = members();
      EXPECT_FALSE(std::find(after.begin(), after.end(), dead) != after.end()) << "the dead member timed out";
    }
    if (step % 3 == 0) {
      note(join(next++));  // a joiner, admitted at the next barrier
    }
    for (member_id id : restarted) {
      if (core->round() == r && core->state() == averager_state::collecting) {
        note(submit_given(id));
      }
    }
    for (member_id id : live) {
      if (members().empty() || core->state() == averager_state::stopped) {
        break;
      }
      (void)heartbeat(id);
    }
  }
  ASSERT_EQ(core->state(), averager_state::stopped) << "two passes end the job";
  std::map<std::uint64_t, std::vector<int>> hits;
  for (const auto& l : lines) {
    for (const auto& d : l.data) {
      auto& h = hits[d.epoch];
      h.resize(100, 0);
      for (auto i = d.begin; i < d.end; ++i) {
        ++h[i];
      }
    }
  }
  ASSERT_EQ(hits.size(), 2U);
  for (const auto& [epoch, h] : hits) {
    for (std::size_t i = 0; i < h.size(); ++i) {
      EXPECT_EQ(h[i], 1) << "epoch " << epoch << " sample " << i;
    }
  }
  ASSERT_FALSE(lines.empty());
  EXPECT_DOUBLE_EQ(*lines.back().epoch, 2.0);
  EXPECT_EQ(core->pool()->epochs_done(), 2U);
}

TEST_F(AveragerPoolTest, ASnapshotKeepsTheOpenRoundsSamplesForTheNextIncarnation) {
  make();
  note(join(1));
  note(join(2));
  note(submit_given(1));
  note(submit_given(2));  // round 1 open: both hold 20 samples, 2 has submitted
  const auto s = core->snapshot();
  ASSERT_TRUE(s.pool.has_value());
  std::uint64_t available = 0;
  for (const auto& e : s.pool->open) {
    for (const auto& [b, en] : e.available) {
      available += en - b;
    }
    EXPECT_EQ(e.consumed, 20U) << "round 0's one submission; round 1 is open";
  }
  EXPECT_EQ(available, 80U) << "what is not consumed, the open round's grants included";
  setup.resume = s;
  make();
  EXPECT_EQ(core->pool()->save(), *s.pool) << "a resumed incarnation continues the epoch";
}

// RESTART's ranges count positions over all epochs: epoch e's position p goes out as e × samples + p, so
// the worker knows which epoch's permutation a range belongs to.
TEST_F(AveragerPoolTest, RangesOfALaterEpochGoOutAsGlobalPositions) {
  make();
  note(join(1));
  for (int r = 0; r < 5; ++r) {
    note(submit_given(1));  // rounds 0..4 consume epoch 0 (5 × 20 samples)
  }
  ASSERT_FALSE(given[1].empty());
  for (const auto& [b, e] : given[1]) {
    EXPECT_GE(b, 100U) << "epoch 1 starts at global position 100";
    EXPECT_LE(e, 200U);
  }
  ASSERT_FALSE(lines.empty());
  for (const auto& d : lines.back().data) {
    EXPECT_EQ(d.epoch, 0U);
    EXPECT_LE(d.end, 100U) << "the metrics list positions within their epoch";
  }
}

// A format-4 checkpoint's pool names samples in storage order; this version would read its ranges as
// positions of a permutation and train other samples, so it refuses to resume it.
TEST_F(AveragerPoolTest, RefusesToResumeAPoolInStorageOrder) {
  make();
  note(join(1));
  note(submit_given(1));
  auto s = core->snapshot();
  ASSERT_TRUE(s.pool.has_value());
  s.pool_in_storage_order = true;
  averager_setup old = setup;
  old.resume = s;
  auto c = averager_core::make(cfg, clk, filled(0), old);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message().find("storage order"), std::string::npos) << c.error().message();
  s.pool_in_storage_order = false;
  old.resume = s;
  EXPECT_TRUE(averager_core::make(cfg, clk, filled(0), old).has_value());
}

TEST_F(AveragerCoreTest, ExternalJobStartsFromTheFirstJoinersModel) {
  cfg.initial_from_join = true;
  make(filled(0));
  EXPECT_TRUE(core->awaiting_initial_model());
  // Without a model the job cannot start: the JOIN is refused with one line.
  auto out = on_join(join_msg{1, 1, 0, 0, 0, {}, {}});
  ASSERT_EQ(of<refused_msg>(out).size(), 1U);
  EXPECT_NE(of<refused_msg>(out)[0].reason.find("initial model"), std::string::npos);
  EXPECT_TRUE(of<restart_msg>(out).empty());
  // Another size is refused too.
  out = on_join(join_msg{2, 1, 0, 0, 0, {}, {}, std::make_shared<const std::vector<float>>(dim + 1, 1.0F)});
  ASSERT_EQ(of<refused_msg>(out).size(), 1U);
  EXPECT_NE(of<refused_msg>(out)[0].reason.find("initial model mismatch"), std::string::npos);
  // The first JOIN with a model of the right size gives x̄_0 and starts round 0 from it.
  out = on_join(join_msg{3, 1, 0, 0, 0, {}, {}, std::make_shared<const std::vector<float>>(filled(2.5F))});
  EXPECT_FALSE(core->awaiting_initial_model());
  EXPECT_EQ(of<welcome_msg>(out).size(), 1U);
  EXPECT_EQ(*restart_for(out, 3).model, filled(2.5F));
  // A later member's model is not used: it restarts from the job's x̄.
  out = on_join(join_msg{4, 1, 0, 0, 0, {}, {}, std::make_shared<const std::vector<float>>(filled(9.0F))});
  EXPECT_EQ(of<welcome_msg>(out).size(), 1U);
  submit(3, 0, 4.0F);
  EXPECT_EQ(*core->model(), filled(4.0F));
  EXPECT_EQ(core->counters().refused, 2U);
}

TEST_F(AveragerCoreTest, ExternalJobWithoutAModelTakesNoCheckpointWhenSuspended) {
  cfg.initial_from_join = true;
  setup.checkpoints = true;
  make(filled(0));
  auto out = run(core->suspend());
  EXPECT_TRUE(out.checkpoints.empty());
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(done->job_over);
}

TEST_F(AveragerCoreTest, TheFirstMemberDeclaresTheLabelHash) {
  cfg.labels_from_members = true;
  cfg.spec.data = "external n=100";
  make();
  auto out = on_join(join_msg{1, 1, 0, 0, 0, {}, "external n=100 labels=00000000000000aa"});
  EXPECT_EQ(of<welcome_msg>(out).size(), 1U);
  out = on_join(join_msg{2, 1, 0, 0, 0, {}, "external n=100 labels=00000000000000bb"});
  ASSERT_EQ(of<refused_msg>(out).size(), 1U);
  EXPECT_NE(of<refused_msg>(out)[0].reason.find("labels=00000000000000aa"), std::string::npos);
  out = on_join(join_msg{3, 1, 0, 0, 0, {}, "external n=100"});  // declares no hash: nothing to compare
  EXPECT_EQ(of<welcome_msg>(out).size(), 1U);
  out = on_join(join_msg{4, 1, 0, 0, 0, {}, "external n=99 labels=00000000000000aa"});
  ASSERT_EQ(of<refused_msg>(out).size(), 1U);
  EXPECT_NE(of<refused_msg>(out)[0].reason.find("data mismatch"), std::string::npos);
}

// Sharded averaging: a worker that cannot send slices is refused with one line.
TEST_F(AveragerCoreTest, ShardedJobRefusesAWorkerThatCannotSendSlices) {
  cfg.shard_owners = 2;
  make();
  const auto a = join(1);
  ASSERT_EQ(a.sends.size(), 1U);
  const auto* refused = std::get_if<refused_msg>(&a.sends[0].msg);
  ASSERT_NE(refused, nullptr);
  EXPECT_NE(refused->reason.find("shards"), std::string::npos) << refused->reason;
}

// Sharded averaging with compressed payloads: a worker that cannot read them is refused with one line, one
// that can is welcomed; a job that does not compress welcomes both.
TEST_F(AveragerCoreTest, ACompressingShardedJobRefusesAWorkerThatCannotReadCompressedSlices) {
  cfg.shard_owners = 2;
  cfg.min_workers = 3;
  cfg.compress_between_hosts = true;
  make();
  join_msg old{1, 1, 0, 0, 0, {}, {}};
  old.sharding = true;
  auto out = on_join(old);
  ASSERT_EQ(of<refused_msg>(out).size(), 1U);
  EXPECT_NE(of<refused_msg>(out)[0].reason.find("--wire-compress zstd"), std::string::npos)
      << of<refused_msg>(out)[0].reason;
  join_msg current{2, 1, 0, 0, 0, {}, {}};
  current.sharding = true;
  current.reads_compressed = true;
  out = on_join(current);
  EXPECT_EQ(of<welcome_msg>(out).size(), 1U);
  EXPECT_TRUE(of<refused_msg>(out).empty());

  cfg.compress_between_hosts = false;
  make();
  out = on_join(old);
  EXPECT_EQ(of<welcome_msg>(out).size(), 1U);
}

// Sharded averaging: RESTART carries no model, the owners get the recipients, a whole model is rejected,
// and the closed barrier orders the owners to combine exactly the counted members (before the next
// round's recipients).
TEST_F(AveragerCoreTest, ShardedBarrierOrdersTheOwnersToCombineTheCountedMembers) {
  cfg.shard_owners = 2;
  cfg.min_workers = 2;
  cfg.screen_k = 0;
  make();
  for (member_id w : {1U, 2U}) {
    join_msg m{w, 1, 0, 0, 0, {}, {}};
    m.sharding = true;
    const auto a = on_join(m);
    if (w == 2) {
      ASSERT_EQ(a.shard_orders.size(), 1U);
      EXPECT_FALSE(a.shard_orders[0].combine);
      EXPECT_EQ(a.shard_orders[0].round, 0U);
      EXPECT_EQ(a.shard_orders[0].recipients.size(), 2U);
      for (const auto& o : a.sends) {
        if (const auto* r = std::get_if<restart_msg>(&o.msg)) {
          EXPECT_FALSE(r->model) << "the members get x̄ from the owners";
        }
      }
    }
  }
  const auto sliced = [&](member_id id, bool ok) {
    auto m = model(id, 0, {}, interval_of(id).value_or(4), 10);
    m.params.reset();
    m.sliced = true;
    m.slices_ok = ok;
    m.update_norm2 = 1.0;
    return m;
  };
  (void)on_model(model(2, 0, filled(1)));  // a whole model in a sharded job
  EXPECT_EQ(core->counters().rejected, 1U);
  (void)on_model(sliced(2, false));  // an owner found its slice not finite
  EXPECT_EQ(core->counters().rejected, 2U);
  (void)on_model(sliced(1, true));
  const auto a = on_model(sliced(2, true));
  EXPECT_EQ(core->counters().accepted, 2U);
  ASSERT_EQ(a.shard_orders.size(), 2U);
  const auto& combine = a.shard_orders[0];
  EXPECT_TRUE(combine.combine);
  EXPECT_EQ(combine.round, 1U);
  ASSERT_EQ(combine.inputs.size(), 2U);
  EXPECT_EQ(combine.inputs[0].member, real(1));
  EXPECT_EQ(combine.inputs[0].token, token_of(1));
  EXPECT_EQ(combine.inputs[1].samples, 10U);
  EXPECT_FALSE(a.shard_orders[1].combine);
  EXPECT_EQ(a.shard_orders[1].round, 1U);
  EXPECT_EQ(times_counted(0, 1), 1);
  EXPECT_EQ(times_counted(0, 2), 1);
}

}  // namespace
}  // namespace prsgd::actors
