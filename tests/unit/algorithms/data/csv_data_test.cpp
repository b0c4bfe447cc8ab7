// SPDX-License-Identifier: Apache-2.0
// The `csv` data set: header detection, the label column, and malformed files refused with file:line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "files.hpp"
#include "prsgd/algorithms/datasets.hpp"

namespace prsgd::algorithms {
namespace {

class CsvDataTest : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_.path() / name, std::ios::trunc) << text;
  }
  void write_both(const std::string& train, const std::string& test = "1,0.5,0.5\n0,1,2\n") const {
    write("train.csv", train);
    write("test.csv", test);
  }
  expected<loaded_dataset> load(dataset_parts parts = dataset_parts::train) const {
    dataset_request r;
    r.dir = dir_.path();
    r.parts = parts;
    r.options = options_;
    return load_csv_dataset(r);
  }
  std::string error() const {
    auto d = load();
    EXPECT_FALSE(d);
    if (d) {
      return "(no error)";
    }
    EXPECT_EQ(d.error().context.find('\n'), std::string::npos) << d.error().context;
    return d.error().context;
  }

  prsgd::test::scratch_dir dir_{"prsgd-data"};
  std::map<std::string, std::string, std::less<>> options_;
};

TEST_F(CsvDataTest, ReadsRowsWithOrWithoutAHeader) {
  write_both("label,a,b\n2,0.5,-1e-2\n0, 3 ,+4\r\n\n1,\"5\",6\n");
  auto d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->shape, (std::array<int, 3>{1, 1, 2}));
  EXPECT_EQ(d->num_classes, 3);
  EXPECT_EQ(d->train_size, 3U);
  ASSERT_TRUE(d->train);
  EXPECT_EQ(d->train->labels, (std::vector<std::int32_t>{2, 0, 1}));
  EXPECT_EQ(d->train->features, (std::vector<float>{0.5F, -0.01F, 3, 4, 5, 6}));
  write_both("2,0.5,1\n0,3,4\n");
  d = load(dataset_parts::test_and_train_size);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->train_size, 2U);
  ASSERT_TRUE(d->test);
  EXPECT_EQ(d->test->labels, (std::vector<std::int32_t>{1, 0}));
  EXPECT_FALSE(d->train);
}

TEST_F(CsvDataTest, LabelColumnByIndexLastOrName) {
  write_both("a,b,y\n0.5,1,2\n3,4,0\n", "a,b,y\n1,1,1\n");
  options_["label-column"] = "last";
  auto d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->train->labels, (std::vector<std::int32_t>{2, 0}));
  EXPECT_EQ(d->train->features, (std::vector<float>{0.5F, 1, 3, 4}));
  options_["label-column"] = "y";
  d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->train->labels, (std::vector<std::int32_t>{2, 0}));
  options_["label-column"] = "2";
  EXPECT_TRUE(load());
  options_["label-column"] = "z";
  EXPECT_NE(error().find("no column named 'z'"), std::string::npos) << error();
  options_["label-column"] = "3";
  EXPECT_NE(error().find("label-column 3 is beyond its 3 columns"), std::string::npos) << error();
}

TEST_F(CsvDataTest, HeaderOptionOverridesDetection) {
  write_both("7,8,9\n1,2,3\n");
  options_["header"] = "yes";
  auto d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->train_size, 1U) << "the first row was taken as a header";
  options_["header"] = "no";
  write_both("label,a\n1,2\n");
  EXPECT_NE(error().find("train.csv:1: the label ('label', column 0) is not an integer"), std::string::npos) << error();
  options_["header"] = "maybe";
  EXPECT_NE(error().find("header must be auto, yes or no"), std::string::npos);
}

TEST_F(CsvDataTest, MalformedFilesNameFileLineAndProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"label,a,b\n1,2,3\n0,1\n", "train.csv:3: 2 columns, the first row has 3"},
      {"label,a,b\n1,2,3\n0,1,2,4\n", "train.csv:3: 4 columns"},
      {"1,2,3\n0,,2\n", "train.csv:2: column 1 is empty"},
      {"1,2,3\n0,nan,2\n", "train.csv:2: column 1 is NaN or infinite"},
      {"1,2,3\n0,2,inf\n", "train.csv:2: column 2 is NaN or infinite"},
      {"1,2,3\n0,2,x7\n", "train.csv:2: column 2 ('x7') is not a number"},
      {"1.5,2,3\n", "train.csv:1: the label ('1.5', column 0) is not an integer"},
      {"-1,2,3\n", "label -1 at line 1 is negative"},
      {"5\n", "train.csv:1: needs a label column and at least one feature column"},
      {"label,a\n", "train.csv: no data rows"},
      {"", "train.csv: no data rows"},
  };
  for (const auto& [text, needle] : cases) {
    write_both(text);
    const auto e = error();
    EXPECT_NE(e.find(needle), std::string::npos) << "for:\n" << text << "got: " << e;
  }
  write_both("1,2,3\n", "1,2\n");
  EXPECT_NE(error().find("test.csv: 2 columns, but"), std::string::npos) << error();
  write("train.csv", "1,2,3\n");
  std::filesystem::remove(dir_.path() / "test.csv");
  EXPECT_NE(error().find("test.csv: cannot open"), std::string::npos) << error();
}

TEST_F(CsvDataTest, ClassesOptionAndUnknownOptions) {
  write_both("3,1,1\n");
  options_["classes"] = "3";
  EXPECT_NE(error().find("train.csv: label 3 at data row 1 is not below classes=3"), std::string::npos) << error();
  options_["classes"] = "4";
  auto d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->num_classes, 4);
  options_["delimiter"] = ";";
  EXPECT_NE(error().find("has no option 'delimiter'"), std::string::npos) << error();
}

}  // namespace
}  // namespace prsgd::algorithms
