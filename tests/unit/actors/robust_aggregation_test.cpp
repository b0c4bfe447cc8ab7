// SPDX-License-Identifier: Apache-2.0
// The averager core's robust aggregation: the outlier screen, the --aggregate rules and the refusal of a
// non-finite x̄. The job tests train a real (linear) model: four workers run local SGD on their shards of
// a toy problem in-process, and the core averages their models, with and without a poisoned worker.
#include "prsgd/actors/averager_core.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/actors/metrics.hpp"
#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/sgd.hpp"
#include "toy_problem.hpp"

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t workers = 4;
constexpr round_t rounds = 12;
constexpr std::uint64_t interval = 8;
constexpr std::size_t batch = 16;

/// What the last worker does with its honest update u = x − x̄ before it submits.
enum class attack : std::uint8_t { none, scaled };

// What WELCOME gave test worker k, which joins with nonce k over connection k: the core assigns ids (in
// JOIN order, so worker k gets id k here) and a session token every later message must carry.
struct seat {
  member_id id = 0;
  session_token token = 0;
};

seat join_as(averager_core& core, member_id k, actions* out = nullptr) {
  auto a = core.on_join(join_msg{0, k, 0, 0, 0}, k);
  seat s;
  for (const auto& o : a.sends) {
    if (const auto* w = std::get_if<welcome_msg>(&o.msg)) {
      s = {w->member, w->token};
    }
  }
  EXPECT_NE(s.token, 0U) << "worker " << k << " got no WELCOME";
  if (out != nullptr) {
    *out = std::move(a);
  }
  return s;
}

model_msg model_of(const seat& who, member_id k, round_t r, incarnation_t averager, std::vector<float> x,
                   std::uint64_t steps, std::uint64_t samples) {
  model_msg m;
  m.member = who.id;
  m.incarnation = k;  // the JOIN nonce
  m.token = who.token;
  m.averager_incarnation = averager;
  m.round = r;
  m.steps = steps;
  m.samples = samples;
  m.loss_sum = 0;
  m.loss_count = 0;
  m.params = std::make_shared<const std::vector<float>>(std::move(x));
  return m;
}

struct job_result {
  double accuracy = 0;
  std::uint64_t screened = 0;
  std::vector<round_metrics> lines;
};

class RobustAggregationJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::register_test_linear_model();
    train_ = test::blobs(1024, 11);
    test_ = test::blobs(512, 12);
  }

  job_result run_job(averager_config cfg, attack how) {
    auto proto = algorithms::model_registry::instance().make(test::test_linear_model, test::test_linear_config());
    EXPECT_TRUE(proto.has_value());
    auto net = std::move(proto).value();
    cfg.interval = interval;
    cfg.min_workers = workers;
    cfg.max_rounds = rounds;
    cfg.heartbeat_timeout = 1h;
    cfg.consensus_every = 0;
    const std::vector<float> init(net->params().begin(), net->params().end());
    auto made = averager_core::make(cfg, clk_, init);
    EXPECT_TRUE(made.has_value()) << (made ? "" : made.error().message());
    averager_core core = std::move(made).value();
    job_result result;
    const auto take = [&](const actions& a) {
      result.lines.insert(result.lines.end(), a.lines.begin(), a.lines.end());
    };
    std::map<member_id, seat> seats;
    for (member_id id = 1; id <= workers; ++id) {
      actions a;
      seats[id] = join_as(core, id, &a);
      take(a);
    }
    std::vector<std::size_t> cursor(workers, 0);
    for (round_t r = 0; r < rounds; ++r) {
      EXPECT_EQ(core.round(), r);
      const std::vector<float> xbar = *core.model();
      for (member_id id = 1; id <= workers; ++id) {
        EXPECT_TRUE(net->set_params(xbar).has_value());
        auto opt = algorithms::sgd::make(algorithms::sgd_options{0.05F, 0.0F, 0.0F, 0.0F, false});
        EXPECT_TRUE(opt.has_value());
        for (std::uint64_t s = 0; s < interval; ++s) {
          // Worker id's shard: samples id-1, id-1+N, id-1+2N, ..., cycled.
          std::vector<std::size_t> idx;
          for (std::size_t b = 0; b < batch; ++b) {
            idx.push_back(((cursor[id - 1]++ * workers) + (id - 1)) % train_->size());
          }
          (void)net->train_step(*train_, idx, *opt);
        }
        std::vector<float> x(net->params().begin(), net->params().end());
        if (how == attack::scaled && id == workers) {
          for (std::size_t k = 0; k < x.size(); ++k) {
            x[k] = xbar[k] - 20.0F * (x[k] - xbar[k]);  // a reversed, amplified update
          }
        }
        take(core.on_model(model_of(seats[id], id, r, core.incarnation(), std::move(x), interval, interval * batch),
                           id));
      }
    }
    EXPECT_EQ(core.state(), averager_state::stopped);
    EXPECT_TRUE(net->set_params(*core.model()).has_value());
    result.accuracy = net->evaluate(*test_).accuracy;
    result.screened = core.screened_total();
    return result;
  }

  fake_clock clk_;
  std::shared_ptr<const algorithms::dataset> train_;
  std::shared_ptr<const algorithms::dataset> test_;
};

TEST_F(RobustAggregationJobTest, ScreenKeepsAPoisonedWorkerOutAndTheJobReachesTheCleanAccuracy) {
  const averager_config screened;  // the defaults: mean, screen at 4 x the median norm
  averager_config unscreened;
  unscreened.screen_k = 0;

  const job_result clean = run_job(screened, attack::none);
  EXPECT_GT(clean.accuracy, 0.9);
  EXPECT_EQ(clean.screened, 0U) << "honest IID updates are never screened";

  const job_result defended = run_job(screened, attack::scaled);
  EXPECT_NEAR(defended.accuracy, clean.accuracy, 0.01);
  EXPECT_EQ(defended.screened, rounds) << "the poisoned update is left out of every round";
  ASSERT_EQ(defended.lines.size(), rounds);
  for (const auto& line : defended.lines) {
    ASSERT_EQ(line.screened.size(), 1U);
    EXPECT_EQ(line.screened[0].first, static_cast<member_id>(workers));
    EXPECT_GT(line.screened[0].second, 4.0);
    EXPECT_EQ(line.submissions, workers - 1);
  }

  const job_result poisoned = run_job(unscreened, attack::scaled);
  RecordProperty("clean_accuracy", std::to_string(clean.accuracy));
  RecordProperty("screened_accuracy", std::to_string(defended.accuracy));
  RecordProperty("unscreened_accuracy", std::to_string(poisoned.accuracy));
  EXPECT_LT(poisoned.accuracy, clean.accuracy - 0.01) << "without the screen the attack must hurt, else this "
                                                         "test shows nothing";
}

TEST_F(RobustAggregationJobTest, MedianAndTrimmedMeanWithstandThePoisonedWorkerWithoutTheScreen) {
  averager_config cfg;
  const job_result clean = run_job(cfg, attack::none);
  cfg.screen_k = 0;
  for (auto rule : {algorithms::aggregate_rule::median, algorithms::aggregate_rule::trimmed_mean}) {
    cfg.aggregate.rule = rule;
    const job_result robust = run_job(cfg, attack::scaled);
    EXPECT_NEAR(robust.accuracy, clean.accuracy, 0.01) << algorithms::to_string(rule);
    ASSERT_FALSE(robust.lines.empty());
    EXPECT_EQ(robust.lines.back().aggregate, algorithms::to_string(rule));
  }
}

// ---- the core alone ----------------------------------------------------------------------------------

class RobustAggregationCoreTest : public ::testing::Test {
 protected:
  averager_core& make(std::size_t n, std::vector<float> init = std::vector<float>(4, 0.0F)) {
    cfg.min_workers = n;
    cfg.heartbeat_timeout = 1h;
    cfg.interval = 4;
    auto c = averager_core::make(cfg, clk, std::move(init));
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message());
    core.emplace(std::move(c).value());
    for (member_id id = 1; id <= n; ++id) {
      seats[id] = join_as(*core, id);
    }
    return *core;
  }

  actions submit(member_id id, std::vector<float> x) {
    auto a = core->on_model(model_of(seats[id], id, core->round(), core->incarnation(), std::move(x), 4, 10), id);
    lines.insert(lines.end(), a.lines.begin(), a.lines.end());
    return a;
  }

  fake_clock clk;
  averager_config cfg;
  std::optional<averager_core> core;
  std::map<member_id, seat> seats;
  std::vector<round_metrics> lines;
};

TEST_F(RobustAggregationCoreTest, ScreenedUpdateIsNotCountedAndItsReasonIsInTheLineAndTheAccounting) {
  make(4);
  (void)submit(1, std::vector<float>(4, 1.0F));
  (void)submit(2, std::vector<float>(4, 1.1F));
  (void)submit(3, std::vector<float>(4, 0.9F));
  (void)submit(4, std::vector<float>(4, 100.0F));
  ASSERT_EQ(core->round(), 1U);
  EXPECT_EQ(core->times_counted(0, 4), 0);
  EXPECT_EQ(core->times_counted(0, 1), 1);
  for (float v : *core->model()) {
    EXPECT_NEAR(v, 1.0F, 1e-5F);  // samples-weighted mean of 1, 1.1, 0.9
  }
  EXPECT_EQ(core->screened_total(), 1U);
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0].submissions, 3U);
  EXPECT_EQ(lines[0].samples, 30U);
  const std::string json = to_json_line(lines[0]);
  EXPECT_NE(json.find("\"screened\":{\"4\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"aggregate\":\"mean\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"refused\":false"), std::string::npos) << json;
  bool found = false;
  for (const auto& rec : core->accounting()) {
    if (rec.member == 4 && rec.round == 0) {
      EXPECT_EQ(rec.status, submission_status::rejected);
      EXPECT_NE(rec.reason.find("outlier screen"), std::string::npos) << rec.reason;
      found = true;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(core->counters().accepted, 3U);
}

TEST_F(RobustAggregationCoreTest, TwoWorkersAreNeverScreened) {
  make(2);
  (void)submit(1, std::vector<float>(4, 1.0F));
  (void)submit(2, std::vector<float>(4, 1000.0F));
  ASSERT_EQ(core->round(), 1U);
  EXPECT_EQ(core->screened_total(), 0U);
  EXPECT_EQ(core->times_counted(0, 2), 1);
  EXPECT_NEAR((*core->model())[0], 500.5F, 1e-3F);
}

TEST_F(RobustAggregationCoreTest, NonFiniteAverageIsRefusedAndThePreviousModelKept) {
  cfg.outer = algorithms::outer_config{algorithms::outer_kind::sgd, 4.0F, 0.0F};
  make(1, std::vector<float>(4, 1.0F));
  (void)submit(1, std::vector<float>(4, 3e38F));  // finite, but x̄ + 4 (avg − x̄) overflows
  ASSERT_EQ(core->round(), 1U);
  EXPECT_EQ(core->refused_rounds(), 1U);
  for (float v : *core->model()) {
    EXPECT_EQ(v, 1.0F);
  }
  EXPECT_EQ(core->times_counted(0, 1), 0);
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_TRUE(lines[0].refused);
  EXPECT_EQ(lines[0].submissions, 0U);
  // The job goes on: the next round's sane model is adopted (x̄ − 4·(x̄ − 2) = 5).
  (void)submit(1, std::vector<float>(4, 2.0F));
  ASSERT_EQ(core->round(), 2U);
  EXPECT_EQ(core->refused_rounds(), 1U);
  EXPECT_NEAR((*core->model())[0], 5.0F, 1e-5F);
  EXPECT_FALSE(lines[1].refused);
}

TEST_F(RobustAggregationCoreTest, MedianCombinesTheUpdatesCoordinatewise) {
  cfg.aggregate.rule = algorithms::aggregate_rule::median;
  cfg.screen_k = 0;
  make(3, std::vector<float>{0, 0, 0, 0});
  (void)submit(1, {1, 5, 0, 0});
  (void)submit(2, {2, -5, 0, 0});
  (void)submit(3, {300, 1, 0, 0});
  ASSERT_EQ(core->round(), 1U);
  EXPECT_NEAR((*core->model())[0], 2.0F, 1e-5F);
  EXPECT_NEAR((*core->model())[1], 1.0F, 1e-5F);
}

TEST_F(RobustAggregationCoreTest, MakeRefusesABadTrimOrScreen) {
  cfg.aggregate.trim = 0.5;
  EXPECT_FALSE(averager_core::make(cfg, clk, std::vector<float>(4)).has_value());
  cfg.aggregate.trim = 0.25;
  cfg.screen_k = 0.5;
  EXPECT_FALSE(averager_core::make(cfg, clk, std::vector<float>(4)).has_value());
  cfg.screen_k = 0;
  EXPECT_TRUE(averager_core::make(cfg, clk, std::vector<float>(4)).has_value());
}

}  // namespace
}  // namespace prsgd::actors
