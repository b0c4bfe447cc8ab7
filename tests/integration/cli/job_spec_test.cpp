// SPDX-License-Identifier: Apache-2.0
// The averager owns the job spec: a worker given only the averager's endpoint (and its data directory)
// trains the job exactly as one given every option by hand; a worker whose own options disagree with the job,
// or that lacks the plugin of the job's model, ends with status 1 and one line saying why.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "prsgd_job.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

std::string data_dir() { return test::fmnist_dir(); }

// A job whose every model option differs from the defaults (what a worker could be given by hand).
const std::vector<std::string> model_options = {
    "--model", "mlp:784-24-10",         "--batch", "24",     "--lr", "0.07", "--momentum",
    "0.5",     "--momentum-on-restart", "reset",   "--seed", "11"};
// How long it runs and how models travel (the averager's alone; a worker follows the job's wire dtype).
const std::vector<std::string> schedule_options = {"--rounds",      "4", "--interval",   "3",
                                                   "--min-workers", "1", "--wire-dtype", "bf16"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The "prsgd worker: ..." lines of a log (log lines are timestamped and do not start with it).
std::vector<std::string> worker_lines(const std::string& log) {
  std::vector<std::string> out;
  for (const auto& line : test::lines_of(log)) {
    if (line.rfind("prsgd worker:", 0) == 0) {
      out.push_back(line);
    }
  }
  return out;
}

// Runs the job with one worker started with `worker_args`; returns the done line of its metrics file.
std::string run_job(test::prsgd_job& job, const std::vector<std::string>& worker_args) {
  auto averager = job.start_averager(
      with(with(model_options, schedule_options), {"--metrics-jsonl", job.path("m.jsonl"), "--progress", "off"}));
  EXPECT_TRUE(averager) << job.log("averager");
  if (!averager) {
    return {};
  }
  const pid_t worker = job.start_worker(0, with({"--progress", "off", "--data-dir", data_dir()}, worker_args));
  EXPECT_EQ(job.wait_exit(averager->pid, 240s), 0) << job.log("averager") << job.log("worker-0");
  EXPECT_EQ(job.wait_exit(worker, 60s), 0) << job.log("worker-0");
  const auto lines = test::lines_of(test::read_file(job.path("m.jsonl")));
  EXPECT_FALSE(lines.empty());
  return lines.empty() ? std::string{} : lines.back();
}

// "test_acc":0.1234 from a done line.
std::string accuracy_of(const std::string& done) {
  const auto at = done.find("\"test_acc\":");
  if (at == std::string::npos) {
    return {};
  }
  const auto end = done.find_first_of(",}", at);
  return done.substr(at, end - at);
}

TEST(JobSpecTest, WorkerWithOnlyTheAveragerTrainsAsIfGivenEveryOption) {
  test::prsgd_job bare{PRSGD_BINARY, "prsgd-spec-bare"};
  const std::string bare_done = run_job(bare, {});
  EXPECT_NE(bare.log("worker-0").find("model mlp:784-24-10 on fashion-mnist, batch 24, lr 0.07, momentum 0.5"),
            std::string::npos)
      << bare.log("worker-0");
  EXPECT_NE(bare.log("worker-0").find(", wire dtype bf16"), std::string::npos) << bare.log("worker-0");

  test::prsgd_job full{PRSGD_BINARY, "prsgd-spec-full"};
  const std::string full_done = run_job(full, model_options);

  ASSERT_NE(accuracy_of(bare_done), "") << bare_done;
  EXPECT_NE(bare_done.find("\"rounds\":4"), std::string::npos) << bare_done;
  // Same seed, same options: the same x̄ in every round, so the same accuracy to the last digit.
  EXPECT_EQ(accuracy_of(bare_done), accuracy_of(full_done)) << bare_done << "\n" << full_done;
}

TEST(JobSpecTest, WorkerWithAConflictingBatchExitsOneWithOneLine) {
  test::prsgd_job job{PRSGD_BINARY, "prsgd-spec-conflict"};
  auto averager = job.start_averager(with(model_options, {"--progress", "off", "--rounds", "1000"}));
  ASSERT_TRUE(averager) << job.log("averager");
  const pid_t worker = job.start_worker(0, {"--progress", "off", "--batch", "64", "--model", "mlp:784-24-10"});
  EXPECT_EQ(job.wait_exit(worker, 60s), 1) << job.log("worker-0");
  const auto lines = worker_lines(job.log("worker-0"));
  ASSERT_EQ(lines.size(), 1U) << job.log("worker-0");
  EXPECT_NE(lines[0].find("batch mismatch: --batch 64 was given, the job at " + averager->endpoint + " uses 24"),
            std::string::npos)
      << lines[0];
}

TEST(JobSpecTest, WorkerWithoutThePluginOfTheJobsModelSaysSo) {
  test::prsgd_job job{PRSGD_BINARY, "prsgd-spec-plugin"};
  auto averager = job.start_averager({"--plugin", PRSGD_TEST_PLUGIN_REGISTERS_MODEL, "--model", "plugin-mlp",
                                      "--rounds", "1000", "--progress", "off"});
  ASSERT_TRUE(averager) << job.log("averager");
  const pid_t worker = job.start_worker(0, {"--progress", "off"});
  EXPECT_EQ(job.wait_exit(worker, 60s), 1) << job.log("worker-0");
  const auto lines = worker_lines(job.log("worker-0"));
  ASSERT_EQ(lines.size(), 1U) << job.log("worker-0");
  EXPECT_NE(lines[0].find("the job trains model 'plugin-mlp', which this worker does not know"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("--plugin"), std::string::npos) << lines[0];

  // With the plugin it joins: the averager found its fingerprints equal to the job's.
  job.start_worker(1, {"--progress", "off", "--plugin", PRSGD_TEST_PLUGIN_REGISTERS_MODEL});
  EXPECT_TRUE(job.wait_for_log("worker-1", "joined as member", 120s)) << job.log("averager") << job.log("worker-1");
}

}  // namespace
