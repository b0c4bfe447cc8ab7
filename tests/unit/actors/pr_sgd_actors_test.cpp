// SPDX-License-Identifier: Apache-2.0
// The PR-SGD actors on the real runtime (thread pool, timers, compute pool) and the in-process transport:
// a whole job trains to convergence, membership changes mid-run, and no model is ever counted twice.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "inproc_link.hpp"
#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/actors/worker_actor.hpp"
#include "prsgd/transport/inproc_transport.hpp"
#include "time_scale.hpp"
#include "toy_problem.hpp"

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

struct job_waiter {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<job_summary> summary;
  std::vector<round_metrics> rounds;

  bool wait(std::chrono::seconds timeout) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, prsgd::test::scaled(timeout), [&] { return summary.has_value(); });
  }
};

class PrSgdActorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::register_test_linear_model();
    train_ = test::blobs(1024, 1);
    test_ = test::blobs(512, 2);
  }

  averager_actor_config averager_cfg(std::uint64_t rounds) {
    averager_actor_config c;
    c.core.interval = 4;
    c.core.step_size = 0.05;
    c.core.max_rounds = rounds;
    c.core.min_workers = 3;  // round 0 waits for all three: toy rounds are too fast for late joiners
    c.core.heartbeat_interval = 50ms;
    c.core.heartbeat_timeout = 600ms;
    c.model_name = test::test_linear_model;
    c.model = test::test_linear_config();
    c.test_set = test_;
    c.core.eval_every = 5;
    c.on_round = [this](const round_metrics& m) {
      std::lock_guard lock(waiter_.mu);
      waiter_.rounds.push_back(m);
    };
    c.on_done = [this](const job_summary& s) {
      std::lock_guard lock(waiter_.mu);
      waiter_.summary = s;
      waiter_.cv.notify_all();
    };
    return c;
  }

  worker_actor_config worker_cfg(member_id id) {
    worker_actor_config c;
    c.core.incarnation = id;  // the JOIN nonce; the averager assigns member ids and shards
    c.core.heartbeat_interval = 50ms;
    c.core.join_retry = 100ms;
    c.core.averager_timeout = 2s;
    c.model_name = test::test_linear_model;
    c.model = test::test_linear_config();
    c.train_set = train_;
    c.batch_size = 16;
    return c;
  }

  transport_factory inproc(const std::string& name) { return test::inproc_link(network_, name, 1000ms); }

  void TearDown() override { network_.stop_driver(); }

  std::shared_ptr<const algorithms::dataset> train_;
  std::shared_ptr<const algorithms::dataset> test_;
  inproc_network network_{steady_clock_source::instance()};
  job_waiter waiter_;
};

TEST_F(PrSgdActorsTest, ThreeWorkersTrainToConvergenceAndCountEachModelOnce) {
  network_.start_driver();
  config sc;
  sc.threads = 2;
  sc.compute_threads = 2;
  actor_system system{sc};
  std::vector<std::shared_ptr<transport>> links(4);
  auto avg = start_averager(system, averager_cfg(20), inproc("averager"), "inproc://averager", &links[0]);
  ASSERT_TRUE(avg) << avg.error().message();
  for (int w = 0; w < 3; ++w) {
    auto wk = start_worker(system, worker_cfg(static_cast<member_id>(w + 1)), inproc("worker" + std::to_string(w)),
                           avg->second, &links[static_cast<std::size_t>(w) + 1]);
    ASSERT_TRUE(wk) << wk.error().message();
  }
  ASSERT_TRUE(waiter_.wait(60s)) << "job did not finish";
  const auto& s = *waiter_.summary;
  EXPECT_EQ(s.rounds, 20u);
  ASSERT_TRUE(s.test_acc.has_value());
  EXPECT_GT(*s.test_acc, 0.95);
  EXPECT_EQ(s.counters.duplicate, 0u);
  // Exactly once: every (round, worker) entered at most one average, and with three healthy workers
  // every round after the first admission holds all three.
  auto ref = avg->first;
  for (round_t r = 0; r < 20; ++r) {
    for (member_id m = 1; m <= 3; ++m) {
      auto n = ref.ask([r, m](averager_actor& a) { return a.times_counted(r, m); }).get(prsgd::test::scaled(5s));
      ASSERT_TRUE(n);
      EXPECT_LE(*n, 1) << "round " << r << " worker " << m;
    }
  }
  std::lock_guard lock(waiter_.mu);
  ASSERT_EQ(waiter_.rounds.size(), 20u);
  EXPECT_EQ(waiter_.rounds.back().members, 3u);
  bool any_acc = false;
  for (const auto& m : waiter_.rounds) {
    any_acc = any_acc || m.test_acc.has_value();
  }
  EXPECT_TRUE(any_acc);
  for (auto& l : links) {
    l->stop();
  }
}

}  // namespace
}  // namespace prsgd::actors
