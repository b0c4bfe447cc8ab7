// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/role_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace prsgd;
using namespace prsgd::cli;
using namespace std::chrono_literals;

averager_options parse_averager(std::vector<std::string> extra) {
  std::vector<std::string> args{"prsgd", "averager", "--listen", "tcp://127.0.0.1:7500"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto c = parse_command_line(args);
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message());
  return c ? std::get<averager_options>(*c) : averager_options{};
}

worker_options parse_worker(std::vector<std::string> extra) {
  std::vector<std::string> args{"prsgd", "worker", "--averager", "tcp://127.0.0.1:7500"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto c = parse_command_line(args);
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message());
  return c ? std::get<worker_options>(*c) : worker_options{};
}

job_data fake_data() {
  job_data d;
  d.name = "fashion-mnist";
  d.model.input = {1, 28, 28};
  d.model.num_classes = 10;
  d.model.seed = 3;
  d.train_size = 60000;
  return d;
}

job_length plan_for(const averager_options& o) {
  auto p = plan_job(o.schedule, static_cast<std::size_t>(o.model.batch), 60000);
  EXPECT_TRUE(p.has_value());
  return p ? *p : job_length{};
}

TEST(RoleConfigTest, AveragerDefaultsMapToTheCore) {
  const auto o = parse_averager({"--epochs", "2", "--min-workers", "4", "--metrics-jsonl", "m.jsonl"});
  const auto plan = plan_for(o);
  auto cfg = averager_config_from(o, fake_data(), plan, 1234);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  const auto& core = cfg->core;
  EXPECT_EQ(core.mode, actors::training_mode::restarted_sgd);
  EXPECT_EQ(core.intervals, algorithms::interval_kind::fixed);
  EXPECT_EQ(core.interval, 8U);
  EXPECT_EQ(core.total_steps, plan.total_steps);
  // IID data: the averager hands out sample ranges, and --epochs counts passes over them, not rounds.
  EXPECT_EQ(core.max_rounds, 0U);
  EXPECT_EQ(core.max_epochs, 2U);
  EXPECT_EQ(core.data_samples, 60000U);
  EXPECT_EQ(core.data_block, 256U);
  EXPECT_EQ(core.min_workers, 4U);
  EXPECT_EQ(cfg->incarnation, 1234U);
  EXPECT_EQ(core.step_sizes, algorithms::lr_kind::constant);
  EXPECT_DOUBLE_EQ(core.step_size, 0.05);
  EXPECT_EQ(core.deadline, actors::deadline_policy::none);
  EXPECT_FALSE(core.outer.has_value());
  ASSERT_TRUE(core.rule.has_value());  // auto on IID shards: by samples
  EXPECT_EQ(*core.rule, algorithms::averaging_rule::by_samples);
  EXPECT_EQ(core.heartbeat_interval, 500ms);
  EXPECT_EQ(core.heartbeat_timeout, 5000ms);
  EXPECT_EQ(core.rejoin_grace, 10000ms);  // twice the timeout, at least 2 s
  EXPECT_EQ(cfg->model.num_classes, 10);
  EXPECT_EQ(cfg->model.seed, 3U);
  EXPECT_EQ(cfg->model_name, "fmnist-mlp");
  EXPECT_EQ(core.rounds_per_epoch, plan.rounds_per_epoch);
  EXPECT_EQ(cfg->metrics_jsonl, "m.jsonl");
}

// --evaluate-on evaluators: the averager keeps no test set and waits for evaluator processes, with
// --eval-timeout-ms; by default it evaluates x̄ itself.
TEST(RoleConfigTest, EvaluateOnEvaluatorsKeepsTheTestSetOffTheAverager) {
  auto data = fake_data();
  data.test = std::make_shared<const algorithms::dataset>();
  const auto own = parse_averager({});
  auto by_averager = averager_config_from(own, data, plan_for(own), 1);
  ASSERT_TRUE(by_averager.has_value());
  EXPECT_FALSE(by_averager->remote_evaluation);
  EXPECT_EQ(by_averager->test_set, data.test);

  const auto remote = parse_averager({"--evaluate-on", "evaluators", "--eval-timeout-ms", "2500"});
  auto by_evaluators = averager_config_from(remote, data, plan_for(remote), 1);
  ASSERT_TRUE(by_evaluators.has_value());
  EXPECT_TRUE(by_evaluators->remote_evaluation);
  EXPECT_EQ(by_evaluators->test_set, nullptr);
  EXPECT_EQ(by_evaluators->evaluation_timeout, 2500ms);
}

TEST(RoleConfigTest, NonIidShardsOrRoundsKeepTheirRoundCount) {
  auto o = parse_averager({"--epochs", "2", "--non-iid"});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_EQ(cfg->core.data_samples, 0U) << "label-skewed shards are sampled by the workers";
  EXPECT_EQ(cfg->core.max_epochs, 0U);
  EXPECT_EQ(cfg->core.max_rounds, plan_for(o).rounds);
  o = parse_averager({"--epochs", "0", "--rounds", "7"});
  cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_EQ(cfg->core.data_samples, 60000U);
  EXPECT_EQ(cfg->core.max_epochs, 0U) << "--rounds ends the job; the pool cycles through epochs";
  EXPECT_EQ(cfg->core.max_rounds, 7U);
}

TEST(RoleConfigTest, EveryEnumMapsThroughTheLibraryParsers) {
  const auto o = parse_averager({"--interval-policy", "time-balanced",
                                 "--interval",        "12",
                                 "--deadline",        "adaptive",
                                 "--deadline-mad-k",  "2.5",
                                 "--quorum",          "2",
                                 "--outer",           "nesterov",
                                 "--outer-lr",        "0.7",
                                 "--step-size",       "paper",
                                 "--warmup-rounds",   "3",
                                 "--averaging",       "step-normalised"});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_EQ(cfg->core.intervals, algorithms::interval_kind::time_balanced);
  EXPECT_EQ(cfg->core.interval, 12U);  // the target mean, not a planned I
  EXPECT_EQ(cfg->core.deadline, actors::deadline_policy::adaptive);
  EXPECT_DOUBLE_EQ(cfg->core.mad_k, 2.5);
  EXPECT_EQ(cfg->core.quorum, 2U);
  ASSERT_TRUE(cfg->core.outer.has_value());
  EXPECT_EQ(cfg->core.outer->kind, algorithms::outer_kind::nesterov);
  EXPECT_FLOAT_EQ(cfg->core.outer->lr, 0.7F);
  EXPECT_EQ(cfg->core.step_sizes, algorithms::lr_kind::paper);
  EXPECT_DOUBLE_EQ(cfg->core.step_size_c, 0.05);
  EXPECT_EQ(cfg->core.warmup_rounds, 3U);
  EXPECT_EQ(*cfg->core.rule, algorithms::averaging_rule::step_normalised);
}

TEST(RoleConfigTest, AggregationDefaultsToTheMeanWithTheScreenOn) {
  const auto o = parse_averager({});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value());
  EXPECT_EQ(cfg->core.aggregate.rule, algorithms::aggregate_rule::mean);
  EXPECT_DOUBLE_EQ(cfg->core.screen_k, 4.0);
}

TEST(RoleConfigTest, AggregationOptionsReachTheCore) {
  const auto o = parse_averager({"--aggregate", "trimmed-mean", "--trim", "0.1", "--clip", "2.5", "--screen-k", "0"});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_EQ(cfg->core.aggregate.rule, algorithms::aggregate_rule::trimmed_mean);
  EXPECT_DOUBLE_EQ(cfg->core.aggregate.trim, 0.1);
  EXPECT_DOUBLE_EQ(cfg->core.aggregate.clip, 2.5);
  EXPECT_DOUBLE_EQ(cfg->core.screen_k, 0.0);
  const auto median = parse_averager({"--aggregate", "median"});
  auto m = averager_config_from(median, fake_data(), plan_for(median), 1);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->core.aggregate.rule, algorithms::aggregate_rule::median);
}

TEST(RoleConfigTest, BadAggregationValuesAreUsageErrorsNamingTheOption) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{{"--aggregate", "krum"},
                                                                                    {"--trim", "0.5"},
                                                                                    {"--trim", "-0.1"},
                                                                                    {"--clip", "-1"},
                                                                                    {"--screen-k", "0.5"},
                                                                                    {"--screen-k", "-2"}}) {
    auto c = parse_command_line({"prsgd", "averager", "--listen", "tcp://127.0.0.1:7500", flag, value});
    ASSERT_FALSE(c.has_value()) << flag << " " << value;
    EXPECT_EQ(c.error().code, errc::invalid_argument);
    EXPECT_NE(c.error().context.find(flag), std::string::npos) << c.error().context;
    EXPECT_EQ(c.error().context.find('\n'), std::string::npos);
  }
}

TEST(RoleConfigTest, PerWorkerIntervalsAreKeyedByWorkerId) {
  const auto o = parse_averager({"--interval-policy", "per-worker", "--intervals", "4,8,16"});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value());
  EXPECT_EQ(cfg->core.intervals, algorithms::interval_kind::per_worker);
  EXPECT_EQ(cfg->core.per_worker_intervals, (std::map<actors::member_id, std::uint64_t>{{0, 4}, {1, 8}, {2, 16}}));
}

TEST(RoleConfigTest, MinibatchModeStepsAtTheAveragerWithTheWorkersMomentum) {
  const auto o = parse_averager({"--mode", "minibatch", "--momentum", "0.8"});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value());
  EXPECT_EQ(cfg->core.mode, actors::training_mode::minibatch_sgd);
  EXPECT_EQ(cfg->core.interval, 1U);
  EXPECT_DOUBLE_EQ(cfg->core.minibatch_momentum, 0.8);
}

TEST(RoleConfigTest, NonIidAutoLeavesTheRuleToTheAverager) {
  const auto o = parse_averager({"--non-iid"});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value());
  EXPECT_FALSE(cfg->core.rule.has_value());
}

TEST(RoleConfigTest, AnUnparsableEnumIsAnErrorNotADefault) {
  auto o = parse_averager({});
  const auto plan = plan_for(o);
  o.schedule.interval_policy = "fixd";
  auto cfg = averager_config_from(o, fake_data(), plan, 1);
  ASSERT_FALSE(cfg.has_value());
  EXPECT_EQ(cfg.error().code, errc::invalid_argument);
  EXPECT_NE(cfg.error().context.find("fixd"), std::string::npos);
  o = parse_averager({});
  o.schedule.step_size = "cosine";  // a library schedule the averager does not run
  EXPECT_FALSE(averager_config_from(o, fake_data(), plan, 1).has_value());
  o = parse_averager({});
  o.schedule.deadline = "sometimes";
  EXPECT_FALSE(averager_config_from(o, fake_data(), plan, 1).has_value());
  o = parse_averager({});
  o.schedule.outer = "adam";
  EXPECT_FALSE(averager_config_from(o, fake_data(), plan, 1).has_value());
  o = parse_averager({});
  o.schedule.mode = "sync";
  EXPECT_FALSE(averager_config_from(o, fake_data(), plan, 1).has_value());
}

TEST(RoleConfigTest, CommandLineTyposInEnumsAreUsageErrorsNamingTheOption) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{{"--interval-policy", "fixd"},
                                                                                    {"--deadline", "soon"},
                                                                                    {"--outer", "adam"},
                                                                                    {"--averaging", "mean"},
                                                                                    {"--step-size", "cosine"},
                                                                                    {"--mode", "sync"}}) {
    auto c = parse_command_line({"prsgd", "averager", "--listen", "tcp://127.0.0.1:7500", flag, value});
    ASSERT_FALSE(c.has_value()) << flag;
    EXPECT_EQ(c.error().code, errc::invalid_argument);
    EXPECT_NE(c.error().context.find(flag), std::string::npos) << c.error().context;
    EXPECT_EQ(c.error().context.find('\n'), std::string::npos);
  }
}

TEST(RoleConfigTest, WorkerMapsShardSgdAndLiveness) {
  const auto o = parse_worker({"--lr", "0.1", "--momentum", "0.5", "--momentum-on-restart", "reset", "--batch", "32",
                               "--seed", "9", "--non-iid", "--dirichlet-alpha", "0.3", "--slowdown-ms", "7",
                               "--heartbeat-ms", "100", "--heartbeat-timeout-ms", "900"});
  auto data = fake_data();
  auto cfg = worker_config_from(o, data, 42);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_EQ(cfg->core.incarnation, 42U);
  EXPECT_FALSE(cfg->core.model_fingerprint.empty()) << "the JOIN declares the model";
  EXPECT_FALSE(cfg->core.data_fingerprint.empty()) << "and the data";
  EXPECT_EQ(cfg->core.heartbeat_interval, 100ms);
  EXPECT_EQ(cfg->core.averager_timeout, 900ms);
  EXPECT_EQ(cfg->core.join_retry, 200ms);  // at least 200 ms
  EXPECT_EQ(cfg->shard.seed, 9U);
  EXPECT_EQ(cfg->shard.scheme, algorithms::shard_scheme::dirichlet);
  EXPECT_DOUBLE_EQ(cfg->shard.alpha, 0.3);
  EXPECT_FLOAT_EQ(cfg->sgd.learning_rate, 0.1F);
  EXPECT_FLOAT_EQ(cfg->sgd.momentum, 0.5F);
  EXPECT_FALSE(cfg->keep_momentum);
  EXPECT_EQ(cfg->batch_size, 32U);
  EXPECT_EQ(cfg->slowdown, 7ms);
  EXPECT_EQ(cfg->model.seed, 3U);
}

// `prsgd local` passes its groups on with to_arguments: every option of a group must survive the trip, so a
// new option in a table reaches the children without touching the launcher.
TEST(RoleConfigTest, GroupsSurviveTheTripThroughArguments) {
  const auto o = parse_averager({"--model",
                                 "fmnist-cnn",
                                 "--batch",
                                 "17",
                                 "--lr",
                                 "0.125",
                                 "--momentum",
                                 "0.3",
                                 "--momentum-on-restart",
                                 "reset",
                                 "--seed",
                                 "11",
                                 "--non-iid",
                                 "--dirichlet-alpha",
                                 "0.25",
                                 "--mode",
                                 "restarted",
                                 "--epochs",
                                 "0",
                                 "--rounds",
                                 "9",
                                 "--interval",
                                 "5",
                                 "--intervals",
                                 "1,2,3",
                                 "--interval-policy",
                                 "per-worker",
                                 "--deadline",
                                 "fixed",
                                 "--deadline-ms",
                                 "1500",
                                 "--deadline-mad-k",
                                 "1.5",
                                 "--quorum",
                                 "3",
                                 "--step-size",
                                 "paper",
                                 "--warmup-rounds",
                                 "4",
                                 "--outer",
                                 "momentum",
                                 "--outer-lr",
                                 "0.9",
                                 "--outer-momentum",
                                 "0.1",
                                 "--averaging",
                                 "uniform",
                                 "--eval-every",
                                 "6",
                                 "--min-workers",
                                 "2",
                                 "--heartbeat-ms",
                                 "50",
                                 "--heartbeat-timeout-ms",
                                 "700"});
  std::vector<std::string> args;
  for (const auto& part : {to_arguments(o.model), to_arguments(o.schedule), to_arguments(o.liveness)}) {
    args.insert(args.end(), part.begin(), part.end());
  }
  const auto back = parse_averager(args);
  EXPECT_EQ(back.model, o.model);
  EXPECT_EQ(back.schedule, o.schedule);
  EXPECT_EQ(back.liveness, o.liveness);
  EXPECT_EQ(parse_averager(to_arguments(averager_options{}.schedule)).schedule, averager_options{}.schedule);
}

TEST(RoleConfigTest, TheUploadBufferReachesTheAveragerInBytes) {
  const auto plain = parse_averager({"--topology", "sharded", "--shards", "2"});
  auto cfg = averager_config_from(plain, fake_data(), plan_for(plain), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_EQ(cfg->upload_buffer, 0U);  // the kernel's autotuning

  const auto capped = parse_averager({"--topology", "sharded", "--shards", "2", "--upload-buffer-kib", "32"});
  cfg = averager_config_from(capped, fake_data(), plan_for(capped), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_EQ(cfg->upload_buffer, 32U * 1024);
  EXPECT_EQ(parse_averager(to_arguments(capped.schedule)).schedule, capped.schedule);
}

TEST(RoleConfigTest, WireCompressionReachesTheAveragersCore) {
  const auto plain = parse_averager({"--topology", "sharded", "--shards", "2"});
  auto cfg = averager_config_from(plain, fake_data(), plan_for(plain), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_FALSE(cfg->core.compress_between_hosts);

  const auto zstd = parse_averager({"--topology", "sharded", "--shards", "2", "--wire-compress", "zstd"});
  cfg = averager_config_from(zstd, fake_data(), plan_for(zstd), 1);
  ASSERT_TRUE(cfg.has_value()) << cfg.error().message();
  EXPECT_TRUE(cfg->core.compress_between_hosts);
  EXPECT_EQ(parse_averager(to_arguments(zstd.schedule)).schedule, zstd.schedule);
}

TEST(RoleConfigTest, TheFrameLimitFollowsTheModelAndAModelThatCannotTravelIsRefused) {
  transport_config cfg;
  ASSERT_TRUE(limit_frames_to_model(cfg, 1000));
  EXPECT_EQ(cfg.max_frame_bytes, 1000 * sizeof(float) + (std::size_t{1} << 20));
  const std::size_t codec_cap = actors::codec_limits{}.max_model_floats;
  ASSERT_TRUE(limit_frames_to_model(cfg, codec_cap));
  // One float more than a training message can carry: every RESTART would fail, so the role does not start.
  auto refused = limit_frames_to_model(cfg, codec_cap + 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::too_large);
  EXPECT_NE(refused.error().message().find("a training message carries at most"), std::string::npos);
}

// ---- the job spec -----------------------------------------------------------------------------------------

actors::job_spec spec_of(const std::vector<std::string>& averager_args) {
  auto spec = job_spec_from(parse_averager(averager_args).model, fake_data());
  EXPECT_TRUE(spec.has_value()) << spec.error().message();
  return spec ? *spec : actors::job_spec{};
}

TEST(RoleConfigTest, JobSpecCarriesWhatAWorkerNeeds) {
  const auto spec = spec_of({"--model", "mlp:784-24-10", "--batch", "24", "--lr", "0.07", "--momentum", "0.5",
                             "--momentum-on-restart", "reset", "--seed", "11", "--non-iid", "--dirichlet-alpha", "0.3",
                             "--data-option", "a=b"});
  EXPECT_EQ(spec.model_name, "mlp:784-24-10");
  EXPECT_EQ(spec.model, "mlp:784-24-10 in=1x28x28 out=10 params=19090");
  EXPECT_EQ(spec.dataset, "fashion-mnist");
  EXPECT_EQ(spec.data_options, std::vector<std::string>{"a=b"});
  EXPECT_EQ(spec.batch_size, 24U);
  EXPECT_EQ(spec.seed, 11U);
  EXPECT_DOUBLE_EQ(spec.lr, 0.07);
  EXPECT_DOUBLE_EQ(spec.momentum, 0.5);
  EXPECT_FALSE(spec.keep_momentum);
  EXPECT_TRUE(spec.non_iid);
  EXPECT_DOUBLE_EQ(spec.dirichlet_alpha, 0.3);
  // The averager announces the same spec.
  const auto o = parse_averager({"--model", "mlp:784-24-10", "--batch", "24"});
  auto cfg = averager_config_from(o, fake_data(), plan_for(o), 1);
  ASSERT_TRUE(cfg.has_value());
  EXPECT_EQ(cfg->core.spec, *job_spec_from(o.model, fake_data()));
}

TEST(RoleConfigTest, WorkerGivenNothingTakesTheWholeSpec) {
  const auto spec = spec_of({"--model", "mlp:784-24-10", "--batch", "24", "--lr", "0.07", "--momentum", "0.5",
                             "--momentum-on-restart", "reset", "--seed", "11", "--data-option", "a=b"});
  const auto w = parse_worker({"--data-dir", "/tmp"});
  EXPECT_TRUE(w.given == std::vector<std::string>{"--data-dir"});
  auto m = adopt_job_spec(spec, w.model, w.given, "tcp://h:7500");
  ASSERT_TRUE(m.has_value()) << m.error().message();
  EXPECT_EQ(m->model, "mlp:784-24-10");
  EXPECT_EQ(m->dataset, "fashion-mnist");
  EXPECT_EQ(m->data_dir, "/tmp");  // the worker's own
  EXPECT_EQ(m->data_options, std::vector<std::string>{"a=b"});
  EXPECT_EQ(m->batch, 24);
  EXPECT_DOUBLE_EQ(m->lr, 0.07);
  EXPECT_DOUBLE_EQ(m->momentum, 0.5);
  EXPECT_EQ(m->momentum_on_restart, "reset");
  EXPECT_EQ(m->seed, 11U);
  EXPECT_FALSE(m->non_iid);
  // And maps to the worker actor as the same options given by hand do.
  const auto by_hand =
      parse_worker({"--data-dir", "/tmp", "--model", "mlp:784-24-10", "--batch", "24", "--lr", "0.07", "--momentum",
                    "0.5", "--momentum-on-restart", "reset", "--seed", "11", "--data-option", "a=b"});
  auto resolved = by_hand.model;
  resolved.dataset = resolve_dataset(resolved);  // "auto" by hand is the data set the job names
  EXPECT_TRUE(*m == resolved);
}

TEST(RoleConfigTest, WorkerOptionsThatAgreeWithTheSpecAreAccepted) {
  const auto spec = spec_of({"--model", "fmnist-mlp", "--batch", "24"});
  const auto w = parse_worker({"--model", "fmnist-mlp", "--batch", "24", "--dataset", "auto", "--lr", "0.05"});
  auto m = adopt_job_spec(spec, w.model, w.given, "tcp://h:7500");
  ASSERT_TRUE(m.has_value()) << m.error().message();
  EXPECT_EQ(m->batch, 24);
}

TEST(RoleConfigTest, EachDisagreementNamesItsField) {
  const auto spec = spec_of({"--model", "fmnist-mlp", "--batch", "24", "--lr", "0.07", "--seed", "11"});
  const auto error_for = [&](const std::vector<std::string>& args) {
    const auto w = parse_worker(args);
    auto m = adopt_job_spec(spec, w.model, w.given, "tcp://h:7500");
    EXPECT_FALSE(m.has_value());
    return m ? std::string{} : m.error().context;
  };
  EXPECT_EQ(error_for({"--batch", "32"}), "batch mismatch: --batch 32 was given, the job at tcp://h:7500 uses 24");
  EXPECT_EQ(error_for({"--model", "fmnist-cnn"}),
            "model mismatch: --model fmnist-cnn was given, the job at tcp://h:7500 trains fmnist-mlp");
  EXPECT_EQ(error_for({"--lr", "0.05"}), "step size mismatch: --lr 0.05 was given, the job at tcp://h:7500 uses 0.07");
  EXPECT_EQ(error_for({"--seed", "1"}), "seed mismatch: --seed 1 was given, the job at tcp://h:7500 uses 11");
  EXPECT_EQ(error_for({"--momentum", "0.8"}),
            "momentum mismatch: --momentum 0.8 was given, the job at tcp://h:7500 uses 0.9");
  EXPECT_EQ(error_for({"--dataset", "kws"}),
            "data set mismatch: --dataset kws was given, the job at tcp://h:7500 trains on fashion-mnist");
  EXPECT_NE(error_for({"--non-iid"}).find("sharding mismatch"), std::string::npos);
  EXPECT_NE(error_for({"--data-option", "x=y"}).find("data option mismatch"), std::string::npos);
  EXPECT_NE(error_for({"--momentum-on-restart", "reset"}).find("momentum on restart mismatch"), std::string::npos);
  // A default value given explicitly is still a statement about the job.
  EXPECT_EQ(error_for({"--batch", "64"}), "batch mismatch: --batch 64 was given, the job at tcp://h:7500 uses 24");
}

}  // namespace
