// SPDX-License-Identifier: Apache-2.0
// The `wav-folder` data set: both layouts, label order, the feature cache, and refused folders.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include "files.hpp"
#include "prsgd/algorithms/datasets.hpp"
#include "prsgd/algorithms/wav.hpp"

namespace prsgd::algorithms {
namespace {

namespace fs = std::filesystem;

std::vector<float> tone(double hz) {
  std::vector<float> x(8000);  // half a second: the loader pads to one
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(0.3 * std::sin(2.0 * std::numbers::pi * hz * static_cast<double>(i) / 16000.0));
  }
  return x;
}

class WavFolderTest : public ::testing::Test {
 protected:
  void add(const fs::path& rel, double hz) const {
    fs::create_directories((root() / rel).parent_path());
    ASSERT_TRUE(write_wav(root() / rel, tone(hz), 16000).has_value());
  }
  [[nodiscard]] const fs::path& root() const { return dir_.path(); }
  expected<loaded_dataset> load(dataset_parts parts = dataset_parts::train) const {
    dataset_request r;
    r.dir = root();
    r.parts = parts;
    r.options = options_;
    return load_wav_folder_dataset(r);
  }
  std::string error() const {
    auto d = load();
    return d ? std::string{"(loaded)"} : d.error().context;
  }
  prsgd::test::scratch_dir dir_{"prsgd-data"};
  std::map<std::string, std::string, std::less<>> options_;
};

TEST_F(WavFolderTest, TrainAndTestFoldersWithLabelsInSortedOrder) {
  for (int i = 0; i < 3; ++i) {
    add("train/zeta/" + std::to_string(i) + ".wav", 300 + 10 * i);
    add("train/alpha/" + std::to_string(i) + ".WAV", 2000 + 10 * i);
  }
  add("test/zeta/t.wav", 305);
  add("test/alpha/t.wav", 2005);
  std::ofstream(root() / "train" / "alpha" / "notes.txt") << "not a clip";
  fs::create_directories(root() / "train" / ".hidden");

  auto shape = load(dataset_parts::shape);
  ASSERT_TRUE(shape) << shape.error().message();
  EXPECT_EQ(shape->shape, (std::array<int, 3>{1, 98, 40}));
  EXPECT_EQ(shape->num_classes, 2);
  EXPECT_EQ(shape->train_size, 6U) << "counted from the listing, without featurising";
  EXPECT_FALSE(fs::exists(root() / "features.cache"));

  auto d = load();
  ASSERT_TRUE(d) << d.error().message();
  ASSERT_TRUE(d->train);
  EXPECT_EQ(d->train->labels, (std::vector<std::int32_t>{0, 0, 0, 1, 1, 1})) << "alpha = 0, zeta = 1";
  EXPECT_EQ(d->train->shape, (std::array<int, 3>{1, 98, 40}));
  EXPECT_TRUE(fs::exists(root() / "features.cache"));
  auto t = load(dataset_parts::test_and_train_size);
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->train_size, 6U);
  ASSERT_TRUE(t->test);
  EXPECT_EQ(t->test->labels, (std::vector<std::int32_t>{0, 1}));
  // A cached run gives the same features.
  auto again = load();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->train->features, d->train->features);
}

TEST_F(WavFolderTest, FlatFolderIsSplitByAHashOfThePath) {
  for (int i = 0; i < 20; ++i) {
    add("low/" + std::to_string(i) + ".wav", 300 + i);
    add("high/" + std::to_string(i) + ".wav", 3000 + i);
  }
  auto d = load(dataset_parts::test_and_train_size);
  ASSERT_TRUE(d) << d.error().message();
  const std::size_t test = d->test->size();
  EXPECT_GT(test, 0U);
  EXPECT_EQ(d->train_size + test, 40U);
  options_["test-percent"] = "50";
  auto half = load(dataset_parts::test_and_train_size);
  ASSERT_TRUE(half);
  EXPECT_GT(half->test->size(), test) << "a larger percentage moves more clips to test";
  EXPECT_EQ(load(dataset_parts::test_and_train_size)->test->labels, half->test->labels) << "deterministic";
  options_["test-percent"] = "0";
  EXPECT_NE(error().find("test-percent must be an integer in 1..99"), std::string::npos) << error();
}

TEST_F(WavFolderTest, RefusesInconsistentFolders) {
  EXPECT_NE(error().find("no label folders"), std::string::npos) << error();
  add("train/a/0.wav", 300);
  EXPECT_NE(error().find("has train/ but no test/"), std::string::npos) << error();
  add("test/b/0.wav", 300);
  EXPECT_NE(error().find("label 'b' has no folder in"), std::string::npos) << error();
  fs::remove_all(root() / "test" / "b");
  fs::create_directories(root() / "test" / "a");
  EXPECT_NE(error().find("no test clips in test/<label>/*.wav"), std::string::npos) << error();
  add("test/a/0.wav", 300);
  fs::create_directories(root() / "train" / "c");
  EXPECT_NE(error().find("no training clips (*.wav) for label 'c'"), std::string::npos) << error();
  fs::remove_all(root() / "train" / "c");
  options_["test-percent"] = "10";
  EXPECT_NE(error().find("test-percent does not apply"), std::string::npos) << error();
  options_.clear();
  std::ofstream(root() / "train" / "a" / "1.wav") << "RIFF, but not really";
  const auto e = error();
  EXPECT_NE(e.find("1.wav"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  dataset_request none;
  EXPECT_NE(load_wav_folder_dataset(none).error().context.find("--data-dir"), std::string::npos);
}

}  // namespace
}  // namespace prsgd::algorithms
