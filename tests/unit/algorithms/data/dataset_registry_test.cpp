// SPDX-License-Identifier: Apache-2.0
// The data set registry: names, and its checks of what a loader returns.
#include "prsgd/algorithms/dataset_registry.hpp"

#include <gtest/gtest.h>

#include <string>

namespace prsgd::algorithms {
namespace {

dataset tiny(int classes, std::vector<std::int32_t> labels) {
  dataset d;
  d.shape = {1, 1, 2};
  d.num_classes = classes;
  d.labels = std::move(labels);
  d.features.assign(d.labels.size() * 2, 0.5F);
  return d;
}

// A loader that returns what the test sets in `result`.
struct scripted {
  loaded_dataset result;
  expected<loaded_dataset> operator()(const dataset_request& r) const {
    loaded_dataset out = result;
    if (r.parts != dataset_parts::train) {
      out.train.reset();
    }
    if (r.parts != dataset_parts::test_and_train_size) {
      out.test.reset();
    }
    return out;
  }
};

loaded_dataset good() {
  loaded_dataset d;
  d.shape = {1, 1, 2};
  d.num_classes = 3;
  d.train_size = 4;
  d.train = tiny(3, {0, 1, 2, 0});
  d.test = tiny(3, {2, 1});
  return d;
}

std::string load_error(const loaded_dataset& result, dataset_parts parts) {
  dataset_registry r;
  EXPECT_TRUE(r.add("s", "scripted", scripted{result}));
  dataset_request req;
  req.parts = parts;
  auto d = r.load("s", req);
  return d ? std::string{"(no error)"} : d.error().context;
}

TEST(DatasetRegistryTest, AddsRemovesAndListsNames) {
  dataset_registry r;
  EXPECT_TRUE(r.add("b", "second", scripted{good()}));
  EXPECT_TRUE(r.add("a", "first", scripted{good()}));
  EXPECT_EQ(r.add("a", "again", scripted{good()}).error().code, errc::already_exists);
  EXPECT_EQ(r.add("", "no name", scripted{good()}).error().code, errc::invalid_argument);
  EXPECT_EQ(r.add("c", "no loader", {}).error().code, errc::invalid_argument);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*r.description("a"), "first");
  EXPECT_TRUE(r.contains("b"));
  EXPECT_TRUE(r.remove("b"));
  EXPECT_FALSE(r.contains("b"));
  EXPECT_EQ(r.remove("b").error().code, errc::not_found);
  EXPECT_EQ(r.load("b", {}).error().code, errc::not_found);
}

TEST(DatasetRegistryTest, InstanceHasTheBuiltInDataSets) {
  const auto names = dataset_registry::instance().names();
  for (const char* n : {"fashion-mnist", "kws", "npy", "csv", "wav-folder"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

TEST(DatasetRegistryTest, PassesAGoodLoaderThroughAndCountsTheTrainingSet) {
  dataset_registry r;
  ASSERT_TRUE(r.add("s", "scripted", scripted{good()}));
  dataset_request req;
  auto d = r.load("s", req);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->train_size, 4U);
  EXPECT_EQ(d->train->size(), 4U);
  req.parts = dataset_parts::test_and_train_size;
  d = r.load("s", req);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->test->size(), 2U);
  req.parts = dataset_parts::shape;
  EXPECT_TRUE(r.load("s", req));
}

TEST(DatasetRegistryTest, RefusesWhatWouldCrashTraining) {
  auto bad = good();
  bad.train = tiny(3, {0, 3, 1, 0});
  EXPECT_NE(load_error(bad, dataset_parts::train).find("sample 1 has label 3, outside 0..2"), std::string::npos);
  bad = good();
  bad.test->features.pop_back();
  EXPECT_NE(load_error(bad, dataset_parts::test_and_train_size).find("the test split has 3 features for 2 samples"),
            std::string::npos)
      << load_error(bad, dataset_parts::test_and_train_size);
  bad = good();
  bad.train->shape = {1, 2, 1};
  EXPECT_NE(load_error(bad, dataset_parts::train).find("has samples of 1x2x1, the data set says 1x1x2"),
            std::string::npos);
  bad = good();
  bad.test->num_classes = 4;
  EXPECT_NE(load_error(bad, dataset_parts::test_and_train_size).find("has 4 classes"), std::string::npos);
  bad = good();
  bad.train.reset();
  EXPECT_NE(load_error(bad, dataset_parts::train).find("returned no training samples"), std::string::npos);
  bad = good();
  bad.train_size = 0;
  EXPECT_NE(load_error(bad, dataset_parts::test_and_train_size).find("did not say how many training samples"),
            std::string::npos);
  bad = good();
  bad.shape = {1, 0, 2};
  EXPECT_NE(load_error(bad, dataset_parts::shape).find("invalid sample shape 1x0x2"), std::string::npos);
  bad = good();
  bad.num_classes = 0;
  EXPECT_NE(load_error(bad, dataset_parts::shape).find("has no classes"), std::string::npos);
}

TEST(DatasetRegistryTest, CheckDatasetOptionsNamesTheUnknownKey) {
  dataset_request req;
  req.options["colour"] = "red";
  auto e = check_dataset_options(req, "mine", {"size", "shape"});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().context, "data set 'mine' has no option 'colour' (it takes: size, shape)");
  EXPECT_NE(check_dataset_options(req, "mine", {}).error().context.find("(it takes none)"), std::string::npos);
  req.options = {{"size", "1"}};
  EXPECT_TRUE(check_dataset_options(req, "mine", {"size"}));
}

}  // namespace
}  // namespace prsgd::algorithms
