// SPDX-License-Identifier: Apache-2.0
// examples/own-data end to end, as its README runs it: the digits of scikit-learn written by the example
// script as NPY and CSV, and synthesised tones as a WAV folder, each trained by the stock `prsgd local` with
// a model given as a spec string; and the one-line refusals (status 2, nothing started) for a model that does
// not fit the data and for a malformed file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace {

namespace fs = std::filesystem;

using prsgd::test::run_result;

class OwnDataTest : public ::testing::Test {
 protected:
  [[nodiscard]] std::string path(const std::string& name) const { return dir_ / name; }

  run_result run(const std::string& exe, const std::vector<std::string>& args) {
    return prsgd::test::run(prsgd::test::command(exe, args),
                            {.cwd = dir_.path(), .out = path("stdout.txt"), .err = path("stderr.txt")});
  }

  // Runs an example script with /usr/bin/python3 and fails the test if it does not succeed.
  void script(const std::string& name, const std::vector<std::string>& args) {
    std::vector<std::string> all{std::string{PRSGD_OWN_DATA_DIR} + "/" + name};
    all.insert(all.end(), args.begin(), args.end());
    auto r = run("/usr/bin/python3", all);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err << r.out;
  }

  // Runs `prsgd local` with `args` and returns the test accuracy of its metrics' done line.
  double train(const std::vector<std::string>& args) {
    std::vector<std::string> all{"local", "--workers",       "2",      "--progress", "off", "--log-dir",
                                 "logs",  "--metrics-jsonl", "m.jsonl"};
    all.insert(all.end(), args.begin(), args.end());
    auto r = run(PRSGD_BINARY, all);
    EXPECT_EQ(r.status, 0) << r.err << "\naverager log:\n" << prsgd::test::read_file(path("logs/averager.log"));
    const auto lines = prsgd::test::lines_of(prsgd::test::read_file(path("m.jsonl")));
    if (lines.empty()) {
      ADD_FAILURE() << "no metrics";
      return -1;
    }
    std::smatch m;
    if (lines.back().find("\"event\":\"done\"") == std::string::npos ||
        !std::regex_search(lines.back(), m, std::regex{"\"test_acc\":([0-9.eE+-]+)"})) {
      ADD_FAILURE() << "no done line with test_acc: " << lines.back();
      return -1;
    }
    return std::stod(m[1].str());
  }

  // Expects a one-line usage error containing `needle`, and that nothing was started.
  void expect_refused(const std::vector<std::string>& args, const std::string& needle) {
    std::vector<std::string> all{"local", "--progress", "off", "--log-dir", "refused-logs"};
    all.insert(all.end(), args.begin(), args.end());
    auto r = run(PRSGD_BINARY, all);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_FALSE(fs::exists(path("refused-logs"))) << "nothing may start after a usage error";
  }

  prsgd::test::scratch_dir dir_{"prsgd-own-data", true};
};

TEST_F(OwnDataTest, DigitsAsNpyReach95PercentWithAnMlpSpec) {
  script("make-digits.py", {"digits"});
  const double acc = train({"--dataset", "npy", "--data-dir", "digits", "--model", "mlp:64-128-10", "--epochs", "20",
                            "--interval", "4", "--batch", "32"});
  EXPECT_GE(acc, 0.95);
  EXPECT_LE(acc, 1.0);
  // 1,797 digits, 20 % held out.
  const auto log = prsgd::test::read_file(path("logs/averager.log"));
  EXPECT_NE(log.find("model mlp:64-128-10 on npy: 1437 training samples"), std::string::npos) << log;
}

TEST_F(OwnDataTest, ModelThatDoesNotFitTheDataIsRefusedBeforeAnythingStarts) {
  script("make-digits.py", {"digits"});
  expect_refused({"--dataset", "npy", "--data-dir", "digits", "--model", "mlp:784-128-10"},
                 "model 'mlp:784-128-10' takes 784 inputs, but the data set's samples have 64 (1x8x8)");
  expect_refused({"--dataset", "npy", "--data-dir", "digits", "--model", "mlp:64-128-2"},
                 "has 2 outputs, but the data set has 10 classes");
  expect_refused({"--dataset", "npy", "--data-dir", "digits", "--model", "cnn:c8k3-r-m2-m2-m2-f10"},
                 "a 2x2 max pool does not fit");
  expect_refused({"--dataset", "npy", "--data-dir", "digits", "--model", "mlp:64-x-10"}, "'x' is not a layer size");
  expect_refused({"--dataset", "digits", "--model", "mlp:64-10"}, "unknown --dataset 'digits' (registered: ");
  // A malformed file: one line naming it, status 2.
  fs::resize_file(path("digits/train_x.npy"), fs::file_size(path("digits/train_x.npy")) - 3);
  expect_refused({"--dataset", "npy", "--data-dir", "digits", "--model", "mlp:64-10"}, "train_x.npy: truncated");
}

TEST_F(OwnDataTest, DigitsAsCsvWithANamedLabelColumn) {
  script("make-digits.py", {"digits-csv", "--format", "csv"});
  const double acc = train({"--dataset", "csv", "--data-dir", "digits-csv", "--data-option", "label-column=label",
                            "--model", "mlp:64-128-10", "--epochs", "20", "--interval", "4", "--batch", "32"});
  EXPECT_GE(acc, 0.95);
  expect_refused({"--dataset", "csv", "--data-dir", "digits-csv", "--data-option", "label-colum=label"},
                 "data set 'csv' has no option 'label-colum'");
}

// The same digits stored sorted by label (all 0s, then all 1s, ...) train as well as shuffled ones: the
// averager hands out positions of a seeded permutation per epoch, not runs of the file's rows, so no
// member's round is one or two classes. Accuracy only, no timing; the margin covers seed noise.
TEST_F(OwnDataTest, DigitsSortedByLabelTrainAsWellAsShuffled) {
  script("make-digits.py", {"digits"});
  auto r =
      run("/usr/bin/python3", {"-c",
                               "import numpy as np, os, shutil\n"
                               "os.makedirs('sorted')\n"
                               "y = np.load('digits/train_y.npy'); x = np.load('digits/train_x.npy')\n"
                               "o = np.argsort(y, kind='stable')\n"
                               "np.save('sorted/train_x.npy', x[o]); np.save('sorted/train_y.npy', y[o])\n"
                               "assert (np.diff(y[o]) >= 0).all() and len(set(y[:100].tolist())) > 5\n"
                               "for f in ('test_x.npy', 'test_y.npy'): shutil.copy('digits/' + f, 'sorted/' + f)\n"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::vector<std::string> job{"--dataset", "npy",        "--model", "mlp:64-128-10", "--epochs",
                                     "8",         "--interval", "8",       "--batch",       "32"};
  auto with_dir = [&](const std::string& dir) {
    auto a = job;
    a.insert(a.end(), {"--data-dir", dir});
    return a;
  };
  const double shuffled = train(with_dir("digits"));
  const double sorted = train(with_dir("sorted"));
  EXPECT_GE(shuffled, 0.9);
  EXPECT_GE(sorted, shuffled - 0.03) << "sorted " << sorted << ", shuffled " << shuffled;
}

TEST_F(OwnDataTest, TonesAsWavFolder) {
  script("make-tones.py", {"tones"});
  const double acc = train({"--dataset", "wav-folder", "--data-dir", "tones", "--model", "cnn:c8k5s2-r-m2-f4",
                            "--epochs", "10", "--interval", "2", "--batch", "8", "--lr", "0.01"});
  EXPECT_GE(acc, 0.9);
  // Features were computed once and cached for the other processes.
  EXPECT_TRUE(fs::exists(path("tones/features.cache")));
}

}  // namespace
