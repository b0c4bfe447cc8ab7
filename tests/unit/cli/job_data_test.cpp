// SPDX-License-Identifier: Apache-2.0
// How a role picks its data set and how the averager plans the job's length.
#include "prsgd/cli/job_data.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "prsgd/algorithms/dataset_registry.hpp"

namespace prsgd::cli {
namespace {

TEST(ResolveDatasetTest, AutoPicksKeywordsForKwsModelsAndFashionMnistOtherwise) {
  model_options o;
  o.model = "kws-cnn";
  EXPECT_EQ(resolve_dataset(o), "kws");
  o.model = "fmnist-cnn";
  EXPECT_EQ(resolve_dataset(o), "fashion-mnist");
  o.model = "my-plugin-model";
  EXPECT_EQ(resolve_dataset(o), "fashion-mnist");
  o.dataset = "kws";
  EXPECT_EQ(resolve_dataset(o), "kws") << "an explicit --dataset wins";
}

TEST(PlanJobTest, EpochIsOnePassOverTheTrainingSetAcrossAllWorkers) {
  schedule_options s;
  s.min_workers = 4;
  s.interval = 8;
  s.epochs = 3;
  auto j = plan_job(s, 64, 60000);
  ASSERT_TRUE(j) << j.error().message();
  EXPECT_EQ(j->steps_per_epoch, 235U);  // ceil(60000 / 256)
  EXPECT_EQ(j->interval, 8U);
  EXPECT_EQ(j->rounds_per_epoch, 30U);  // ceil(235 / 8)
  EXPECT_EQ(j->rounds, 90U);
  EXPECT_EQ(j->total_steps, 705U);
}

TEST(PlanJobTest, ExplicitRoundsWinAndZeroMinWorkersMeansOne) {
  schedule_options s;
  s.min_workers = 0;
  s.interval = 4;
  s.epochs = 2;
  s.rounds = 7;
  auto j = plan_job(s, 10, 100);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->steps_per_epoch, 10U);
  EXPECT_EQ(j->rounds, 7U);
}

TEST(PlanJobTest, MinibatchModeHasIntervalOne) {
  schedule_options s;
  s.mode = "minibatch";
  s.min_workers = 2;
  s.interval = 16;
  s.epochs = 1;
  auto j = plan_job(s, 50, 1000);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->interval, 1U);
  EXPECT_EQ(j->rounds, 10U);
}

TEST(PlanJobTest, PerWorkerIntervalsUseTheirMeanAndPaperUsesTheRule) {
  schedule_options s;
  s.min_workers = 2;
  s.epochs = 1;
  s.interval_policy = "per-worker";
  s.intervals = {4, 12};
  auto j = plan_job(s, 10, 2000);  // 100 steps per epoch
  ASSERT_TRUE(j);
  EXPECT_EQ(j->interval, 8U);
  EXPECT_EQ(j->rounds, 13U);  // ceil(100 / 8)
  s.interval_policy = "paper";
  s.epochs = 16;  // T = 1600 steps: I = ceil(1600^(1/4) / 2^(3/4)) = ceil(6.32 / 1.68) = 4
  j = plan_job(s, 10, 2000);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->interval, 4U);
  EXPECT_EQ(j->total_steps, 1600U);
}

TEST(PlanJobTest, AJobWithoutRoundsIsRefused) {
  schedule_options s;
  s.epochs = 0;
  s.rounds = 0;
  EXPECT_FALSE(plan_job(s, 64, 60000));
}

// --averaging auto: FedNova's step normalisation removes the objective inconsistency of unequal intervals on
// non-IID shards; on IID shards every local objective is the same, and plain by-samples averaging is unbiased
// with less noise (results/heterogeneous: time-balanced jobs reach a lower accuracy with step-normalised).
TEST(AveragingRuleTest, AutoIsBySamplesOnIidShardsAndLeftToTheAveragerOnNonIid) {
  schedule_options s;
  model_options m;
  ASSERT_EQ(s.averaging, "auto");
  EXPECT_EQ(averaging_rule_for(s, m), algorithms::averaging_rule::by_samples);
  m.non_iid = true;
  EXPECT_EQ(averaging_rule_for(s, m), std::nullopt);  // by samples while the I_i agree, step-normalised after
  for (bool non_iid : {false, true}) {
    m.non_iid = non_iid;
    s.averaging = "step-normalised";
    EXPECT_EQ(averaging_rule_for(s, m), algorithms::averaging_rule::step_normalised);
    s.averaging = "samples";
    EXPECT_EQ(averaging_rule_for(s, m), algorithms::averaging_rule::by_samples);
    s.averaging = "uniform";
    EXPECT_EQ(averaging_rule_for(s, m), algorithms::averaging_rule::uniform);
  }
}

TEST(LoadJobDataTest, MissingDataDirectoryNamesItAndSaysHowToGetTheData) {
  model_options o;
  o.model = "kws-cnn";
  o.data_dir = (std::filesystem::temp_directory_path() / "prsgd-no-such-kws-dir").string();
  auto d = load_job_data(o, data_need::train);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().context.find("prsgd-no-such-kws-dir"), std::string::npos) << d.error().message();
  EXPECT_NE(d.error().context.find("ops/make-kws-data"), std::string::npos) << d.error().message();
  o.model = "fmnist-mlp";
  d = load_job_data(o, data_need::train);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().context.find("dataset-fashion-mnist"), std::string::npos) << d.error().message();
}

TEST(LoadJobDataTest, GoesThroughTheDataSetRegistryWithDataOptions) {
  auto& registry = algorithms::dataset_registry::instance();
  std::vector<algorithms::dataset_request> seen;
  ASSERT_TRUE(registry.add("job-data-test-set", "two samples", [&seen](const algorithms::dataset_request& r) {
    seen.push_back(r);
    algorithms::loaded_dataset out;
    out.shape = {1, 2, 3};
    out.num_classes = 4;
    out.train_size = 2;
    algorithms::dataset d;
    d.shape = out.shape;
    d.num_classes = 4;
    d.features.assign(12, 0.0F);
    d.labels = {3, 1};
    if (r.parts == algorithms::dataset_parts::train) {
      out.train = d;
    } else if (r.parts == algorithms::dataset_parts::test_and_train_size) {
      out.test = d;
    }
    return prsgd::expected<algorithms::loaded_dataset>{std::move(out)};
  }));
  model_options o;
  o.dataset = "job-data-test-set";
  o.data_dir = "/some/where";
  o.seed = 9;
  o.data_options = {"size=big", "colour=red"};
  auto d = load_job_data(o, data_need::train);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->name, "job-data-test-set");
  EXPECT_EQ(d->model.input, (algorithms::shape3{1, 2, 3}));
  EXPECT_EQ(d->model.num_classes, 4);
  EXPECT_EQ(d->model.seed, 9U);
  ASSERT_TRUE(d->train);
  EXPECT_FALSE(d->test);
  EXPECT_EQ(d->train_size, 2U);
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0].dir, "/some/where");
  EXPECT_EQ(seen[0].seed, 9U);
  EXPECT_EQ(seen[0].options.at("colour"), "red");
  EXPECT_EQ(seen[0].parts, algorithms::dataset_parts::train);
  d = load_job_data(o, data_need::train_size_and_test);
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->test && !d->train);
  d = load_job_data(o, data_need::shape);
  ASSERT_TRUE(d);
  EXPECT_TRUE(!d->test && !d->train);
  EXPECT_EQ(seen.back().parts, algorithms::dataset_parts::shape);

  // The model is checked against the data's shape and classes.
  o.model = "mlp:6-4";
  EXPECT_TRUE(check_model_fits(o, *d));
  o.model = "mlp:6-5";
  auto fits = check_model_fits(o, *d);
  ASSERT_FALSE(fits);
  EXPECT_NE(fits.error().context.find("--model mlp:6-5 does not fit --dataset job-data-test-set: model 'mlp:6-5' has "
                                      "5 outputs, but the data set has 4 classes"),
            std::string::npos)
      << fits.error().context;

  o.data_options = {"size=big", "size=small"};
  EXPECT_NE(load_job_data(o, data_need::train).error().context.find("'size' is given twice"), std::string::npos);
  o.dataset = "no-such-set";
  o.data_options.clear();
  auto unknown = load_job_data(o, data_need::train);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().context.find("unknown --dataset 'no-such-set' (registered: csv, "), std::string::npos)
      << unknown.error().context;
  ASSERT_TRUE(registry.remove("job-data-test-set"));
}

// The data fingerprint hashes the training labels: the worker (which loads the training split) and the
// averager (which asks for the test split and gets the training labels alone, or through the registry's
// fallback for a loader that does not give them) agree, and a data set of the same size and shape with
// other labels differs.
TEST(LoadJobDataTest, TheDataFingerprintHashesTheTrainingLabels) {
  auto& registry = algorithms::dataset_registry::instance();
  ASSERT_TRUE(registry.add("label-hash-test-set", "three samples", [](const algorithms::dataset_request& r) {
    algorithms::loaded_dataset out;
    out.shape = {1, 1, 2};
    out.num_classes = 3;
    out.train_size = 3;
    algorithms::dataset d;
    d.shape = out.shape;
    d.num_classes = 3;
    d.features.assign(6, 0.0F);
    d.labels = r.options.contains("flip") ? std::vector<std::int32_t>{2, 1, 0} : std::vector<std::int32_t>{0, 1, 2};
    if (r.parts == algorithms::dataset_parts::train) {
      out.train = d;
    } else if (r.parts == algorithms::dataset_parts::test_and_train_size) {
      out.test = d;  // no train_labels: the registry loads the training split for them
    }
    return prsgd::expected<algorithms::loaded_dataset>{std::move(out)};
  }));
  model_options o;
  o.dataset = "label-hash-test-set";
  auto worker = load_job_data(o, data_need::train);
  auto averager = load_job_data(o, data_need::train_size_and_test);
  ASSERT_TRUE(worker && averager);
  EXPECT_EQ(data_fingerprint(*worker), data_fingerprint(*averager));
  EXPECT_NE(data_fingerprint(*worker).find(" labels="), std::string::npos) << data_fingerprint(*worker);
  o.data_options = {"flip=yes"};
  auto other = load_job_data(o, data_need::train);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->train_size, worker->train_size);
  EXPECT_NE(data_fingerprint(*other), data_fingerprint(*worker));
  ASSERT_TRUE(registry.remove("label-hash-test-set"));
}

}  // namespace
}  // namespace prsgd::cli
