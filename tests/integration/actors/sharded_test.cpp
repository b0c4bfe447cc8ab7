// SPDX-License-Identifier: Apache-2.0
// Sharded averaging with real `prsgd` processes on 127.0.0.1: a coordinator, K shard owners and N
// workers. A sharded job trains the same model as a star job of the same seed (the owners apply the
// star's averaging to their slices); with a lossy wire dtype every worker rebuilds the owners' x̄ bit for bit;
// a worker killed with SIGKILL mid-job leaves the job to finish with one line per round; an owner killed
// with SIGKILL stops the job with one clear line and status 1.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "prsgd_job.hpp"
#include "time_scale.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The float32 values of a safetensors file written by --save-model (every tensor is F32): the bytes after
// the 8-byte header length and the JSON header, in file order.
std::vector<float> tensor_values(const std::string& path) {
  const std::string bytes = slurp(path);
  if (bytes.size() < 8) {
    return {};
  }
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  if (8 + header > bytes.size()) {
    return {};
  }
  std::vector<float> values((bytes.size() - 8 - header) / sizeof(float));
  std::memcpy(values.data(), bytes.data() + 8 + header, values.size() * sizeof(float));
  return values;
}

// The rounds of the round lines of a metrics file, in file order, and whether it has a done line.
struct metrics_summary {
  std::vector<long> rounds;
  bool done = false;
};

metrics_summary read_metrics(const std::string& path) {
  metrics_summary out;
  std::istringstream in{slurp(path)};
  for (std::string l; std::getline(in, l);) {
    if (l.find("\"event\":\"done\"") != std::string::npos) {
      out.done = true;
    } else if (l.find("\"event\"") == std::string::npos) {
      const auto at = l.find("\"round\":");
      if (at != std::string::npos) {
        out.rounds.push_back(std::stol(l.substr(at + 8)));
      }
    }
  }
  return out;
}

class ShardedTest : public ::testing::Test {
 protected:
  std::vector<std::string> job_args(const std::string& topology, const std::string& metrics, int rounds) {
    std::vector<std::string> a{"--model",      "fmnist-mlp", "--rounds",        std::to_string(rounds),
                               "--interval",   "4",          "--batch",         "32",
                               "--lr",         "0.05",       "--seed",          "7",
                               "--eval-every", "0",          "--metrics-jsonl", metrics,
                               "--progress",   "off",        "--topology",      topology};
    return a;
  }

  test::prsgd_job job_{PRSGD_BINARY, "prsgd-sharded"};
};

// K = 2 owners, N = 4 workers: the final x̄ equals the star job's up to the order of float additions.
TEST_F(ShardedTest, ShardedJobTrainsTheSameModelAsStar) {
  std::vector<std::vector<float>> finals;
  for (const std::string topology : {"star", "sharded"}) {
    auto args = job_args(topology, job_.path(topology + ".jsonl"), 6);
    std::vector<std::string> local{"local",
                                   "--workers",
                                   "4",
                                   "--log-dir",
                                   job_.path("logs-" + topology),
                                   "--save-model",
                                   job_.path(topology + ".safetensors")};
    if (topology == "sharded") {
      local.insert(local.end(), {"--shards", "2"});
    }
    local.insert(local.end(), args.begin(), args.end());
    const pid_t pid = job_.start("local-" + topology, local);
    const auto status = job_.wait_exit(pid, test::scaled(240s));
    ASSERT_EQ(status, 0) << job_.log("local-" + topology) << slurp(job_.path("logs-" + topology + "/averager.log"));
    const auto m = read_metrics(job_.path(topology + ".jsonl"));
    EXPECT_TRUE(m.done) << topology;
    EXPECT_EQ(m.rounds, (std::vector<long>{0, 1, 2, 3, 4, 5})) << topology;
    finals.push_back(tensor_values(job_.path(topology + ".safetensors")));
  }
  ASSERT_FALSE(finals[0].empty());
  ASSERT_EQ(finals[0].size(), finals[1].size());
  double worst = 0;
  for (std::size_t i = 0; i < finals[0].size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(finals[0][i] - finals[1][i])));
  }
  std::printf("largest difference between the star and the sharded x̄: %g\n", worst);
  EXPECT_LE(worst, 1e-4) << "the sharded x̄ must equal the star x̄ up to float order";
}

// The "x̄ of round R slice K checksum C" debug lines of a log: (R, K) -> C, and how many lines there were.
struct checksums {
  std::map<std::pair<long, long>, std::string> of;
  std::size_t lines = 0;
  bool conflicting = false;
};

checksums read_checksums(const std::string& text) {
  static const std::regex line{R"(x̄ of round (\d+) slice (\d+) checksum (\d+))"};
  checksums out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it) {
    const std::pair<long, long> key{std::stol((*it)[1]), std::stol((*it)[2])};
    const auto [at, added] = out.of.emplace(key, (*it)[3]);
    out.conflicting = out.conflicting || (!added && at->second != (*it)[3]);
    ++out.lines;
  }
  return out;
}

// The test accuracy of the last line of a metrics file that has one (-1 if none).
double last_test_acc(const std::string& path) {
  double acc = -1;
  std::istringstream in{slurp(path)};
  for (std::string l; std::getline(in, l);) {
    const auto at = l.find("\"test_acc\":");
    if (at != std::string::npos && l.compare(at + 11, 4, "null") != 0) {
      acc = std::stod(l.substr(at + 11));
    }
  }
  return acc;
}

// Lossy wire dtypes on sharded averaging: each worker sends every owner its slice of the change with its own
// error feedback, each owner sends its slice of x̄'s change back with its own. Every worker must rebuild,
// for every round, exactly the slices the owners hold (and the coordinator checkpoints), and the job
// must learn about as well as with f32.
TEST_F(ShardedTest, LossyWireDtypesGiveEveryWorkerTheOwnersModelBitForBit) {
  std::map<std::string, double> accuracy;
  for (const std::string dtype : {"f32", "bf16", "int8"}) {
    SCOPED_TRACE(dtype);
    const auto metrics = job_.path(dtype + ".jsonl");
    const auto logs = job_.path("logs-" + dtype);
    auto args = job_args("sharded", metrics, 8);
    std::vector<std::string> local{"local", "--workers", "3",  "--shards",    "2",    "--wire-dtype",
                                   dtype,   "--log-dir", logs, "--log-level", "debug"};
    *(std::find(args.begin(), args.end(), "--eval-every") + 1) = "8";  // the last round is scored
    local.insert(local.end(), args.begin(), args.end());
    const pid_t pid = job_.start("local-" + dtype, local);
    const auto status = job_.wait_exit(pid, test::scaled(240s));
    ASSERT_EQ(status, 0) << job_.log("local-" + dtype) << slurp(logs + "/averager.log");
    const auto m = read_metrics(metrics);
    EXPECT_TRUE(m.done);
    EXPECT_EQ(m.rounds.size(), 8U);
    accuracy[dtype] = last_test_acc(metrics);

    const auto owners = read_checksums(slurp(logs + "/averager.log"));
    EXPECT_FALSE(owners.conflicting) << "an owner reported two different slices for one round";
    ASSERT_GE(owners.of.size(), 2U * 7) << "the coordinator logs every owner's slice of every round";
    for (int i = 0; i < 3; ++i) {
      const auto worker = read_checksums(slurp(logs + "/worker-" + std::to_string(i) + ".log"));
      EXPECT_GE(worker.lines, 2U * 6) << "worker " << i << " restarted from fewer rounds than expected";
      for (const auto& [key, sum] : worker.of) {
        const auto it = owners.of.find(key);
        ASSERT_NE(it, owners.of.end()) << "round " << key.first << " slice " << key.second;
        EXPECT_EQ(sum, it->second) << "worker " << i << " round " << key.first << " slice " << key.second
                                   << ": its x̄ differs from the owner's";
      }
    }
  }
  std::printf("test accuracy after 8 rounds: f32 %.4f, bf16 %.4f, int8 %.4f\n", accuracy["f32"], accuracy["bf16"],
              accuracy["int8"]);
  ASSERT_GT(accuracy["f32"], 0.5);
  EXPECT_NEAR(accuracy["bf16"], accuracy["f32"], 0.03);
  EXPECT_NEAR(accuracy["int8"], accuracy["f32"], 0.05);
}

// A worker killed with SIGKILL mid-job: the coordinator removes it by the heartbeat rules, the owners
// average only the members the coordinator names, and every round is counted once.
TEST_F(ShardedTest, WorkerKilledMidJobStillFinishes) {
  const auto metrics = job_.path("metrics.jsonl");
  auto args = job_args("sharded", metrics, 12);
  args.insert(args.end(), {"--shards", "2", "--min-workers", "3", "--heartbeat-ms", "100", "--heartbeat-timeout-ms",
                           std::to_string(test::scaled(1500ms).count())});
  auto avg = job_.start_averager(args);
  ASSERT_TRUE(avg) << job_.log("averager");
  for (int k = 0; k < 2; ++k) {
    job_.start("owner-" + std::to_string(k), {"averager", "--shard", std::to_string(k) + "/2", "--coordinator",
                                              avg->endpoint, "--listen", "tcp://127.0.0.1:*", "--heartbeat-ms", "100"});
  }
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(job_.start_worker(i, {"--model", "fmnist-mlp", "--batch", "32", "--progress", "off",
                                            "--heartbeat-ms", "100", "--slowdown-ms", "10"}));
  }
  ASSERT_TRUE(job_.wait_for_log("averager", "round 3 closed", test::scaled(120s))) << job_.log("averager");
  ::kill(workers[2], SIGKILL);
  const auto status = job_.wait_exit(avg->pid, test::scaled(180s));
  ASSERT_EQ(status, 0) << job_.log("averager");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(job_.wait_exit(workers[static_cast<std::size_t>(i)], test::scaled(20s)), 0) << job_.log("worker-0");
  }
  const auto m = read_metrics(metrics);
  EXPECT_TRUE(m.done);
  std::set<long> unique(m.rounds.begin(), m.rounds.end());
  EXPECT_EQ(unique.size(), m.rounds.size()) << "one line per round";
  EXPECT_FALSE(m.rounds.empty());
  EXPECT_EQ(job_.log("averager").find("counted twice"), std::string::npos);
}

// An owner killed with SIGKILL: its slice of x̄ is gone, so the coordinator stops the job with one line
// naming the owner and exits 1; the workers get STOP.
TEST_F(ShardedTest, OwnerKilledStopsTheJobWithOneLine) {
  const auto metrics = job_.path("metrics.jsonl");
  auto args = job_args("sharded", metrics, 400);
  args.insert(args.end(), {"--shards", "2", "--min-workers", "2", "--heartbeat-ms", "100", "--heartbeat-timeout-ms",
                           std::to_string(test::scaled(1500ms).count())});
  auto avg = job_.start_averager(args);
  ASSERT_TRUE(avg) << job_.log("averager");
  std::vector<pid_t> owners;
  for (int k = 0; k < 2; ++k) {
    owners.push_back(job_.start("owner-" + std::to_string(k),
                                {"averager", "--shard", std::to_string(k) + "/2", "--coordinator", avg->endpoint,
                                 "--listen", "tcp://127.0.0.1:*", "--heartbeat-ms", "100"}));
  }
  std::vector<pid_t> workers;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(job_.start_worker(i, {"--model", "fmnist-mlp", "--batch", "32", "--progress", "off",
                                            "--heartbeat-ms", "100", "--slowdown-ms", "10"}));
  }
  ASSERT_TRUE(job_.wait_for_log("averager", "round 2 closed", test::scaled(120s))) << job_.log("averager");
  ::kill(owners[1], SIGKILL);
  const auto status = job_.wait_exit(avg->pid, test::scaled(60s));
  ASSERT_EQ(status, 1) << job_.log("averager");
  const std::string log = job_.log("averager");
  EXPECT_NE(log.find("prsgd averager: shard owner 1/2"), std::string::npos) << log;
  EXPECT_NE(log.find("the job stops"), std::string::npos) << log;
  for (pid_t w : workers) {
    EXPECT_TRUE(job_.wait_exit(w, test::scaled(30s))) << "a worker of a stopped job exits";
  }
  EXPECT_EQ(job_.wait_exit(owners[0], test::scaled(30s)), 0) << job_.log("owner-0");
  EXPECT_FALSE(read_metrics(metrics).done) << "a failed job has no done line";
}

}  // namespace
