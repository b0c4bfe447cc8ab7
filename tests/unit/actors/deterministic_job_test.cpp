// SPDX-License-Identifier: Apache-2.0
// A whole PR-SGD job through the real shells — averager_actor and three worker_actors — on the
// deterministic runtime and the in-process network, all on one fake clock: no threads, no sleeps, no wall
// clock. Workers join at the start and mid-run, one leaves, one goes silent and is removed by the
// heartbeat timeout, and the network duplicates MODEL messages. The job must end at its last round with
// every (round, member) model counted at most once, and two runs with the same seed must agree line for
// line. A variant cuts the whole network for longer than the heartbeat timeout: every worker is removed,
// rounds close empty, and the job must still train all its planned rounds.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inproc_link.hpp"
#include "memory_checkpoint_store.hpp"
#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/actors/worker_actor.hpp"
#include "prsgd/runtime/deterministic_system.hpp"
#include "prsgd/transport/fault_injector.hpp"
#include "prsgd/transport/inproc_transport.hpp"
#include "toy_problem.hpp"

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

constexpr round_t rounds = 30;
constexpr round_t join_at = 5;    // worker 3 starts once this many rounds have closed
constexpr round_t leave_at = 10;  // worker 2 leaves
constexpr round_t crash_at = 18;  // worker 3 goes silent (its transport dies without a goodbye)
constexpr std::uint64_t fault_seed = 20261205;

// What one run of the job left behind.
struct job_record {
  std::vector<std::string> lines;  // metrics lines as JSON, in the order the averager wrote them
  std::vector<round_metrics> metrics;
  std::optional<job_summary> summary;
  std::map<std::pair<round_t, member_id>, int> counted;
  std::vector<member_id> members_at_end;
  std::map<member_id, bool> finished;  // worker -> stopped by the averager (false: left)
  std::uint64_t duplicates_injected = 0;
  std::uint64_t checkpoints_written = 0;
};

class DeterministicJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::register_test_linear_model();
    train_ = test::blobs(1024, 1);
    test_ = test::blobs(512, 2);
  }

  static transport_factory inproc(inproc_network& net, const std::string& name) {
    return test::inproc_link(net, name, 500ms);
  }

  averager_actor_config averager_cfg(job_record& rec, std::shared_ptr<checkpoint_store> store) const {
    averager_actor_config c;
    c.core.interval = 4;
    c.core.step_size = 0.05;
    c.core.max_rounds = rounds;
    c.core.min_workers = 2;
    c.core.shards = 3;  // three workers train at once
    c.core.heartbeat_interval = 100ms;
    c.core.heartbeat_timeout = 1s;
    c.core.eval_every = 10;
    c.core.rounds_per_epoch = 8;
    c.core.checkpoint_every = 5;
    c.model_name = test::test_linear_model;
    c.model = test::test_linear_config();
    c.test_set = test_;
    c.checkpoints = std::move(store);
    c.on_round = [&rec](const round_metrics& m) {
      rec.lines.push_back(to_json_line(m));
      rec.metrics.push_back(m);
    };
    c.on_done = [&rec](const job_summary& s) { rec.summary = s; };
    return c;
  }

  worker_actor_config worker_cfg(job_record& rec, member_id id) const {
    worker_actor_config c;
    c.core.incarnation = id;  // the JOIN nonce; the averager assigns member ids and shards
    c.core.heartbeat_interval = 100ms;
    c.core.join_retry = 200ms;
    c.core.averager_timeout = 3s;
    c.model_name = test::test_linear_model;
    c.model = test::test_linear_config();
    c.train_set = train_;
    c.batch_size = 16;
    c.on_finished = [&rec, id](bool stopped) { rec.finished[id] = stopped; };
    return c;
  }

  // Runs the whole job once and returns what it left behind. With `blip_at`, once that many rounds have
  // closed, every message is dropped for `blip_length` of fake time.
  job_record run_job(std::optional<round_t> blip_at = std::nullopt, clock_source::duration blip_length = 2500ms) {
    job_record rec;
    deterministic_system sys;
    fault_injector faults{fault_seed};
    bool blip = false;
    if (blip_at) {
      fault_rule cut;
      cut.stage = fault_stage::send;
      cut.action = fault_action::drop;
      cut.match = [&blip](const fault_context&) { return blip; };
      (void)faults.add(cut);
    }
    fault_rule dup;
    dup.stage = fault_stage::send;
    dup.action = fault_action::duplicate;
    dup.to = "averager";
    dup.match = [](const fault_context& ctx) { return ctx.message != nullptr && ctx.message->size() == 2; };  // MODEL
    dup.probability = 0.3;
    const auto dup_rule = faults.add(dup);
    inproc_network net{sys.clock(), &faults};
    auto store = std::make_shared<memory_checkpoint_store>();

    std::vector<std::shared_ptr<transport>> links(4);
    auto avg = start_averager(sys, averager_cfg(rec, store), inproc(net, "averager"), "inproc://averager", &links[0]);
    EXPECT_TRUE(avg.has_value()) << (avg ? "" : avg.error().message());
    if (!avg) {
      return rec;
    }
    std::map<member_id, actor_ref<worker_actor>> workers;
    auto start = [&](member_id id) {
      auto w =
          start_worker(sys, worker_cfg(rec, id), inproc(net, "worker" + std::to_string(id)), avg->second, &links[id]);
      ASSERT_TRUE(w.has_value()) << w.error().message();
      workers.emplace(id, *w);
    };
    start(1);
    start(2);

    bool joined = false;
    bool left = false;
    bool crashed = false;
    std::optional<clock_source::time_point> blip_until;
    // Deliver and run everything that is due; when nothing is, move the clock by 1 ms.
    for (int idle_steps = 0; !rec.summary && idle_steps < 60'000;) {
      const auto closed = rec.metrics.size();
      if (!joined && closed >= join_at) {
        joined = true;
        start(3);
      }
      if (!left && closed >= leave_at) {
        left = true;
        workers.at(2).tell(&worker_actor::leave);
      }
      if (!crashed && closed >= crash_at) {
        crashed = true;
        std::static_pointer_cast<inproc_transport>(links[3])->kill();
      }
      if (blip_at && !blip_until && closed >= *blip_at) {
        blip = true;
        blip_until = sys.clock().now() + blip_length;
      }
      if (blip && sys.clock().now() >= *blip_until) {
        blip = false;
      }
      const auto moved = net.poll() + sys.dispatch_all();
      if (moved == 0) {
        sys.advance(1ms);
        ++idle_steps;
      }
    }
    EXPECT_TRUE(rec.summary.has_value()) << "the job did not end within 60 s of fake time";
    while (net.poll() + sys.dispatch_all() > 0) {
      // the STOPs sent at the end reach the workers
    }

    for (round_t r = 0; r < rounds; ++r) {
      for (member_id m = 1; m <= 3; ++m) {
        auto n = avg->first.ask([r, m](averager_actor& a) { return a.times_counted(r, m); }).get(1s);
        if (n && *n > 0) {
          rec.counted[{r, m}] = *n;
        }
      }
    }
    auto members = avg->first.ask([](averager_actor& a) { return a.members(); }).get(1s);
    if (members) {
      rec.members_at_end = *members;
    }
    rec.duplicates_injected = faults.triggered(dup_rule);
    rec.checkpoints_written = store->writes();
    for (auto& l : links) {
      if (l) {
        l->stop();
      }
    }
    sys.dispatch_all();
    return rec;
  }

  std::shared_ptr<const algorithms::dataset> train_;
  std::shared_ptr<const algorithms::dataset> test_;
};

TEST_F(DeterministicJobTest, JoinsLeaveCrashAndDuplicatesStillCountEachModelOnce) {
  SCOPED_TRACE("fault_injector seed " + std::to_string(fault_seed));
  const auto rec = run_job();
  ASSERT_TRUE(rec.summary.has_value());
  const auto& s = *rec.summary;
  EXPECT_TRUE(s.job_over);
  EXPECT_EQ(s.rounds, rounds);
  ASSERT_EQ(rec.metrics.size(), rounds) << "one line per round";
  for (round_t r = 0; r < rounds; ++r) {
    EXPECT_EQ(rec.metrics[r].round, r) << "lines in round order";
  }

  // Exactly once: no (round, member) entered an average twice, and what entered is what the lines say.
  std::size_t averaged = 0;
  for (const auto& m : rec.metrics) {
    averaged += m.submissions;
    for (const auto& [id, offset] : m.arrival_offsets_s) {
      EXPECT_EQ(rec.counted.count({m.round, id}), 1U) << "round " << m.round << " worker " << id;
    }
  }
  for (const auto& [key, n] : rec.counted) {
    EXPECT_EQ(n, 1) << "round " << key.first << " worker " << key.second;
  }
  EXPECT_EQ(rec.counted.size(), averaged);
  EXPECT_EQ(s.counters.accepted, averaged);
  EXPECT_GT(rec.duplicates_injected, 0U);
  EXPECT_GT(s.counters.duplicate + s.counters.late, 0U) << "the duplicated MODELs were seen and dropped";

  // Membership: worker 3 joined mid-run and counted until it went silent; worker 2 counted until it left.
  auto counted_rounds = [&](member_id id) {
    std::vector<round_t> rs;
    for (const auto& [key, n] : rec.counted) {
      if (key.second == id) {
        rs.push_back(key.first);
      }
    }
    return rs;
  };
  const auto w2 = counted_rounds(2);
  const auto w3 = counted_rounds(3);
  ASSERT_FALSE(w2.empty());
  ASSERT_FALSE(w3.empty());
  EXPECT_EQ(w2.front(), 0U);
  EXPECT_LE(w2.back(), leave_at);
  EXPECT_GE(w3.front(), join_at);
  EXPECT_LE(w3.back(), crash_at);
  EXPECT_EQ(counted_rounds(1).size(), rounds) << "worker 1 submitted to every round";
  std::size_t admitted = 0;
  std::size_t removed = 0;
  bool waited_for_timeout = false;
  for (const auto& m : rec.metrics) {
    admitted += m.admitted;
    removed += m.removed;
    waited_for_timeout = waited_for_timeout || (m.round >= crash_at && m.round_s >= 1.0);
  }
  EXPECT_GE(admitted, 1U);
  EXPECT_GE(removed, 1U) << "the silent worker was removed from an open round";
  EXPECT_TRUE(waited_for_timeout) << "a round waited out the heartbeat timeout for the silent worker";
  EXPECT_EQ(rec.members_at_end, std::vector<member_id>{1});
  EXPECT_EQ(rec.metrics.back().members, 1U);
  ASSERT_TRUE(rec.finished.contains(1));
  EXPECT_TRUE(rec.finished.at(1)) << "worker 1 was stopped by the averager";
  ASSERT_TRUE(rec.finished.contains(2));
  EXPECT_FALSE(rec.finished.at(2)) << "worker 2 left";
  EXPECT_FALSE(rec.finished.contains(3)) << "the silent worker never heard the end";

  // Evaluations at rounds 8, 10, 16, 20, 24, 30 (epochs of 8 rounds, every 10, the last), in their lines.
  for (const auto& m : rec.metrics) {
    const auto closed = m.trained_rounds;
    EXPECT_EQ(closed, m.round + 1) << "no round closed empty here";
    const bool evaluated = closed % 8 == 0 || closed % 10 == 0 || closed == rounds;
    EXPECT_EQ(m.test_acc.has_value(), evaluated) << "round " << m.round;
  }
  ASSERT_TRUE(s.test_acc.has_value());
  EXPECT_GT(*s.test_acc, 0.9);
  EXPECT_EQ(s.test_acc, rec.metrics.back().test_acc) << "the final accuracy is the last round's";
  EXPECT_EQ(rec.checkpoints_written, rounds / 5 + 1)
      << "a checkpoint every 5 rounds, into the store, and the finished one at the end";
}

// A network blip longer than the heartbeat timeout removes every worker: rounds close with no
// submission. They move the round number on but use up none of the planned rounds, epochs or
// checkpoints: the job still trains all of its rounds.
TEST_F(DeterministicJobTest, ANetworkBlipThatTimesOutEveryWorkerDoesNotUseUpTheJob) {
  const auto rec = run_job(13);
  ASSERT_TRUE(rec.summary.has_value());
  const auto& s = *rec.summary;
  EXPECT_TRUE(s.job_over);
  EXPECT_EQ(s.trained_rounds, rounds) << "the job ends when the planned rounds have trained";
  EXPECT_EQ(s.rounds, rec.metrics.size());
  std::size_t empty = 0;
  std::uint64_t trained = 0;
  for (std::size_t i = 0; i < rec.metrics.size(); ++i) {
    const auto& m = rec.metrics[i];
    EXPECT_EQ(m.round, i);
    if (m.submissions == 0) {
      ++empty;
      EXPECT_FALSE(m.test_acc.has_value()) << "an empty round is not evaluated";
    } else {
      ++trained;
    }
    EXPECT_EQ(m.trained_rounds, trained) << "round " << m.round;
    ASSERT_TRUE(m.epoch.has_value());
    EXPECT_DOUBLE_EQ(*m.epoch, static_cast<double>(trained) / 8) << "round " << m.round;
  }
  EXPECT_GE(empty, 1U) << "the blip must have emptied at least one round";
  EXPECT_EQ(rec.metrics.size(), rounds + empty);
  EXPECT_EQ(rec.checkpoints_written, rounds / 5 + 1) << "no checkpoint for an empty round";
  ASSERT_TRUE(s.test_acc.has_value());
  EXPECT_GT(*s.test_acc, 0.9);
}

// The inbox between the transport and the averager is bounded: what arrives while it is full is dropped on
// arrival, and the count is reported (on_drop "inbox_full") with the next message the actor handles.
TEST_F(DeterministicJobTest, AFullInboxDropsOnArrivalAndReportsTheCount) {
  job_record rec;
  deterministic_system sys;
  inproc_network net{sys.clock()};
  auto cfg = averager_cfg(rec, std::make_shared<memory_checkpoint_store>());
  cfg.inbox_max_messages = 3;
  std::map<std::string, std::uint64_t> drops;
  cfg.on_drop = [&drops](std::string_view reason, std::uint64_t n) { drops[std::string{reason}] += n; };
  std::shared_ptr<transport> link;
  auto avg = start_averager(sys, std::move(cfg), inproc(net, "averager"), "inproc://averager", &link);
  ASSERT_TRUE(avg) << avg.error().message();
  sys.dispatch_all();
  transport_handlers quiet;
  quiet.on_message = [](peer_id, multipart) {};
  quiet.on_peer = [](const peer_event&) {};
  auto flood = inproc(net, "flood")(std::move(quiet));
  ASSERT_TRUE(flood);
  auto peer = (*flood)->connect(avg->second, {});
  ASSERT_TRUE(peer);
  net.run_until_idle();
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE((*flood)->send(*peer, multipart{frame::copy(std::string_view{"not a message"})}));
  }
  net.run_until_idle();  // the transport hands all ten over; the actor has not run yet
  EXPECT_TRUE(drops.empty());
  sys.dispatch_all();
  EXPECT_EQ(drops["inbox_full"], 7U);
  EXPECT_EQ(drops["malformed"], 3U);
  (*flood)->stop();
  link->stop();
}

// Wraps the averager's inproc transport and refuses, as back-pressure would, every RESTART (the only
// two-frame message the averager sends) to the first connection it sends one to.
class refusing_link : public transport {
 public:
  explicit refusing_link(std::unique_ptr<transport> inner) : inner_(std::move(inner)) {}
  const std::string& node_name() const noexcept override { return inner_->node_name(); }
  expected<std::string> bind(std::string_view ep) override { return inner_->bind(ep); }
  expected<peer_id> connect(std::string_view ep, connect_options o) override { return inner_->connect(ep, o); }
  expected<void> disconnect(peer_id peer) override { return inner_->disconnect(peer); }
  expected<void> send(peer_id peer, multipart msg) override {
    if (msg.size() == 2) {
      victim_ = victim_.value_or(peer);
      if (peer == *victim_) {
        ++refused_;
        return fail(errc::overloaded, "test: the peer's queue is full");
      }
    }
    return inner_->send(peer, std::move(msg));
  }
  void stop() override { inner_->stop(); }
  transport_stats stats() const override { return inner_->stats(); }
  std::uint64_t refused() const { return refused_; }

 private:
  std::unique_ptr<transport> inner_;
  std::optional<peer_id> victim_;
  std::uint64_t refused_ = 0;
};

TEST_F(DeterministicJobTest, ARestartThatCannotBeSentRemovesTheMemberInsteadOfStallingTheRound) {
  job_record rec;
  deterministic_system sys;
  inproc_network net{sys.clock()};
  auto cfg = averager_cfg(rec, std::make_shared<memory_checkpoint_store>());
  cfg.core.max_rounds = 6;
  cfg.core.shards = 2;
  cfg.core.idle_rounds = 0;  // only the send failures may remove the member
  cfg.core.heartbeat_timeout = 60s;
  std::map<std::string, std::uint64_t> drops;
  cfg.on_drop = [&drops](std::string_view reason, std::uint64_t n) { drops[std::string{reason}] += n; };
  refusing_link* refusing = nullptr;
  transport_factory make = [&](transport_handlers h) -> expected<std::unique_ptr<transport>> {
    auto t = inproc(net, "averager")(std::move(h));
    if (!t) {
      return std::move(t).error();
    }
    auto r = std::make_unique<refusing_link>(std::move(*t));
    refusing = r.get();
    return std::unique_ptr<transport>(std::move(r));
  };
  std::vector<std::shared_ptr<transport>> links(3);
  auto avg = start_averager(sys, std::move(cfg), make, "inproc://averager", &links[0]);
  ASSERT_TRUE(avg) << avg.error().message();
  for (member_id id = 1; id <= 2; ++id) {
    auto w =
        start_worker(sys, worker_cfg(rec, id), inproc(net, "worker" + std::to_string(id)), avg->second, &links[id]);
    ASSERT_TRUE(w) << w.error().message();
  }
  for (int idle_steps = 0; !rec.summary && idle_steps < 60'000;) {
    if (net.poll() + sys.dispatch_all() == 0) {
      sys.advance(1ms);
      ++idle_steps;
    }
  }
  ASSERT_TRUE(rec.summary.has_value()) << "the job stalled on a RESTART that never left";
  EXPECT_EQ(rec.summary->trained_rounds, 6U);
  // Each member on the refused connection got its RESTART tried 1 + 3 times, then was removed and counted.
  ASSERT_GE(drops["send_failed_removed"], 1U);
  EXPECT_EQ(refusing->refused(), 4 * drops["send_failed_removed"]);
  for (auto& l : links) {
    l->stop();
  }
  sys.dispatch_all();
}

TEST_F(DeterministicJobTest, SameSeedSameJob) {
  const auto a = run_job();
  const auto b = run_job();
  ASSERT_TRUE(a.summary.has_value());
  ASSERT_TRUE(b.summary.has_value());
  EXPECT_EQ(a.lines, b.lines) << "every metrics line, timings included, is the same";
  EXPECT_EQ(a.counted, b.counted);
  EXPECT_EQ(a.summary->test_acc, b.summary->test_acc);
}

}  // namespace
}  // namespace prsgd::actors
