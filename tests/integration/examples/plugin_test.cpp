// SPDX-License-Identifier: Apache-2.0
// examples/plugin end to end: the stock `prsgd` binary trains the plugin's `fmnist-lenet` on
// Fashion-MNIST and an MLP on the plugin's `spirals` data set with `--plugin`, and refuses both names
// without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "prsgd/algorithms/fashion_mnist.hpp"

namespace {

namespace fs = std::filesystem;

using prsgd::test::run_result;

class ExamplePluginTest : public ::testing::Test {
 protected:
  [[nodiscard]] std::string path(const std::string& name) const { return dir_ / name; }

  static std::string read(const std::string& p) { return prsgd::test::read_file(p); }

  // Runs the prsgd binary with `args` in the test directory, as a user would from a shell.
  run_result run(const std::vector<std::string>& args) {
    return prsgd::test::run(prsgd::test::command(PRSGD_BINARY, args),
                            {.cwd = dir_.path(), .out = path("stdout.txt"), .err = path("stderr.txt")});
  }

  prsgd::test::scratch_dir dir_{"prsgd-example-plugin"};
};

// Returns the last non-empty line of `text`.
std::string last_line(const std::string& text) {
  std::istringstream in{text};
  std::string line;
  std::string last;
  while (std::getline(in, line)) {
    if (!line.empty()) {
      last = line;
    }
  }
  return last;
}

TEST_F(ExamplePluginTest, TrainsFmnistLenetWithTheStockBinary) {
  const std::string data = prsgd::algorithms::fashion_mnist_default_dir();
  if (!fs::exists(data + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed in " << data << " (Debian: dataset-fashion-mnist)";
  }
  // The README's command line: a relative plugin path, which `local` makes absolute for its children.
  fs::copy_file(PRSGD_EXAMPLE_PLUGIN, path("libprsgd_example_plugin.so"));
  auto r = run({"local", "--plugin", "./libprsgd_example_plugin.so", "--model", "fmnist-lenet", "--workers", "2",
                "--rounds", "10", "--interval", "4", "--eval-every", "5", "--metrics-jsonl", "m.jsonl", "--progress",
                "off", "--log-dir", "logs"});
  ASSERT_EQ(r.status, 0) << r.err << "\naverager log:\n" << read(path("logs/averager.log"));

  // Every process loaded the plugin and trained the plugin's model.
  for (const char* name : {"averager", "worker-0", "worker-1"}) {
    const auto log = read(path(std::string{"logs/"} + name + ".log"));
    EXPECT_NE(log.find("provides model 'fmnist-lenet'"), std::string::npos) << name << " log:\n" << log;
  }

  const auto metrics = read(path("m.jsonl"));
  const auto done = last_line(metrics);
  EXPECT_NE(done.find("\"event\":\"done\""), std::string::npos) << "last metrics line: " << done;
  EXPECT_NE(done.find("\"rounds\":10"), std::string::npos) << "last metrics line: " << done;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(done, m, std::regex{"\"test_acc\":([0-9.eE+-]+)"})) << "last metrics line: " << done;
  const double acc = std::stod(m[1].str());
  // Ten classes: chance is 0.1. Forty local steps of LeNet reach about 0.64 (deterministic for a seed).
  EXPECT_GT(acc, 0.5) << "last metrics line: " << done;
  EXPECT_LE(acc, 1.0);
  // Ten rounds, one line each, then the done line.
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 11) << metrics;
}

TEST_F(ExamplePluginTest, TrainsOnThePluginsDataSet) {
  // Nothing to install: the plugin computes its points. Chance is 1/3.
  auto r = run({"local",
                "--plugin",
                PRSGD_EXAMPLE_PLUGIN,
                "--dataset",
                "spirals",
                "--model",
                "mlp:2-64-64-3",
                "--workers",
                "2",
                "--epochs",
                "40",
                "--interval",
                "4",
                "--batch",
                "32",
                "--lr",
                "0.1",
                "--metrics-jsonl",
                "m.jsonl",
                "--progress",
                "off",
                "--log-dir",
                "logs"});
  ASSERT_EQ(r.status, 0) << r.err << "\naverager log:\n" << read(path("logs/averager.log"));
  EXPECT_NE(read(path("logs/worker-0.log")).find("provides dataset 'spirals'"), std::string::npos);
  const auto done = last_line(read(path("m.jsonl")));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(done, m, std::regex{"\"test_acc\":([0-9.eE+-]+)"})) << "last metrics line: " << done;
  EXPECT_GT(std::stod(m[1].str()), 0.8) << "last metrics line: " << done;
  EXPECT_NE(read(path("logs/averager.log")).find("on spirals: 3000 training samples"), std::string::npos);

  // A data set option the plugin does not know is refused before anything starts.
  auto bad = run({"local", "--plugin", PRSGD_EXAMPLE_PLUGIN, "--dataset", "spirals", "--data-option", "turns=2",
                  "--model", "mlp:2-3", "--progress", "off", "--log-dir", "bad-logs"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("data set 'spirals' has no option 'turns' (it takes: arms)"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(path("bad-logs")));
}

TEST_F(ExamplePluginTest, DataSetIsUnknownWithoutThePlugin) {
  auto r = run({"local", "--dataset", "spirals", "--model", "mlp:2-3", "--log-dir", "logs"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
  EXPECT_NE(r.err.find("unknown --dataset 'spirals'"), std::string::npos) << "stderr: " << r.err;
  EXPECT_FALSE(fs::exists(path("logs")));
}

TEST_F(ExamplePluginTest, ModelIsUnknownWithoutThePlugin) {
  auto r = run({"local", "--model", "fmnist-lenet", "--workers", "2", "--rounds", "10", "--interval", "4",
                "--eval-every", "5", "--metrics-jsonl", "m.jsonl", "--log-dir", "logs"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
  EXPECT_NE(r.err.find("unknown model 'fmnist-lenet'"), std::string::npos) << "stderr: " << r.err;
  EXPECT_FALSE(fs::exists(path("logs"))) << "nothing may start after a usage error";
  EXPECT_FALSE(fs::exists(path("m.jsonl")));
}

TEST_F(ExamplePluginTest, RegistersOnlyOnce) {
  // Loading the plugin twice in one process: the second init fails (already_exists) and says why; status 2.
  auto r = run({"local", "--plugin", PRSGD_EXAMPLE_PLUGIN, "--plugin", PRSGD_EXAMPLE_PLUGIN, "--model", "fmnist-lenet",
                "--log-dir", "logs"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("model 'fmnist-lenet' is already registered"), std::string::npos) << "stderr: " << r.err;
  EXPECT_FALSE(fs::exists(path("logs")));
}

}  // namespace
