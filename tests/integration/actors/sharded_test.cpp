// SPDX-License-Identifier: Apache-2.0
// Sharded averaging with real `prsgd` processes on 127.0.0.1: a coordinator, K shard owners and N
// workers. A sharded job trains the same model as a star job of the same seed (the owners apply the
// star's averaging to their slices); with a lossy wire dtype every worker rebuilds the owners' x̄ bit for bit;
// a worker killed with SIGKILL mid-job leaves the job to finish with one line per round; an owner killed
// with SIGKILL stops the job with one clear line and status 1, and with a checkpoint directory a restart of
// every process resumes from the last checkpoint and counts every round and every sample once.
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

#include "metrics_lines.hpp"
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
    const auto status = job_.wait_exit(pid, 240s);
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
    const auto status = job_.wait_exit(pid, 240s);
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
                           test::scaled_ms(1500ms)});
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
  ASSERT_TRUE(job_.wait_for_log("averager", "round 3 closed", 120s)) << job_.log("averager");
  ::kill(workers[2], SIGKILL);
  const auto status = job_.wait_exit(avg->pid, 180s);
  ASSERT_EQ(status, 0) << job_.log("averager");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(job_.wait_exit(workers[static_cast<std::size_t>(i)], 20s), 0) << job_.log("worker-0");
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
                           test::scaled_ms(1500ms)});
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
  ASSERT_TRUE(job_.wait_for_log("averager", "round 2 closed", 120s)) << job_.log("averager");
  ::kill(owners[1], SIGKILL);
  const auto status = job_.wait_exit(avg->pid, 60s);
  ASSERT_EQ(status, 1) << job_.log("averager");
  const std::string log = job_.log("averager");
  EXPECT_NE(log.find("prsgd averager: shard owner 1/2"), std::string::npos) << log;
  EXPECT_NE(log.find("the job stops"), std::string::npos) << log;
  for (pid_t w : workers) {
    EXPECT_TRUE(job_.wait_exit(w, 30s)) << "a worker of a stopped job exits";
  }
  EXPECT_EQ(job_.wait_exit(owners[0], 30s), 0) << job_.log("owner-0");
  EXPECT_FALSE(read_metrics(metrics).done) << "a failed job has no done line";
}

// The lines of `text` that start with `prefix` (the one-line messages a process prints on stderr, as opposed
// to its timestamped log lines).
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string l; std::getline(in, l);) {
    if (l.rfind(prefix, 0) == 0) {
      out.push_back(l);
    }
  }
  return out;
}

// An owner killed with SIGKILL mid-job, with --checkpoint-dir: the coordinator stops the job with one line
// naming the owner and exits 1, and every other process ends. Restarting the coordinator, both owners and
// the workers on the same directory resumes from the last checkpoint (the rounds closed after it are run
// again), and the finished job's accounting is an uninterrupted run's: each round once, every sample range
// of the epoch at most once, the same totals. The owners start the resumed round from the checkpoint's x̄
// bit for bit, and every worker rebuilds the owners' slices of every round after the resume.
void owner_killed_job_resumes_from_its_checkpoint(test::prsgd_job& job, const std::string& dtype) {
  constexpr int rounds = 20;
  constexpr int workers = 3;
  constexpr int interval = 16;
  constexpr int batch = 32;
  constexpr int every = 4;  // checkpoint every 4 rounds
  const auto metrics = job.path("metrics.jsonl");
  const auto heartbeat_timeout = test::scaled_ms(1500ms);
  std::vector<std::string> args{"--model", "fmnist-mlp", "--rounds", std::to_string(rounds)};
  args.insert(args.end(), {"--interval", std::to_string(interval), "--batch", std::to_string(batch)});
  args.insert(args.end(), {"--lr", "0.05", "--seed", "7", "--eval-every", "0", "--progress", "off"});
  args.insert(args.end(), {"--metrics-jsonl", metrics, "--topology", "sharded", "--shards", "2"});
  args.insert(args.end(), {"--min-workers", std::to_string(workers), "--wire-dtype", dtype});
  args.insert(args.end(), {"--checkpoint-dir", job.path("ckpt"), "--checkpoint-every", std::to_string(every)});
  args.insert(args.end(), {"--heartbeat-ms", "100", "--heartbeat-timeout-ms", heartbeat_timeout});
  args.insert(args.end(), {"--log-level", "debug"});  // the x̄ checksums
  std::vector<std::string> worker_args{"--model", "fmnist-mlp", "--batch", std::to_string(batch), "--progress", "off"};
  worker_args.insert(worker_args.end(), {"--heartbeat-ms", "100", "--heartbeat-timeout-ms", heartbeat_timeout});
  worker_args.insert(worker_args.end(), {"--log-level", "debug"});
  // One incarnation of the job: the coordinator `name`, owners owner-<k><tag>, workers worker-<first..>.
  struct incarnation {
    pid_t coordinator = -1;
    std::vector<pid_t> owners;
    std::vector<pid_t> workers;
  };
  const auto start = [&](const std::string& name, const std::string& tag, int first_worker) {
    incarnation out;
    const bool restart = !job.averager_endpoint().empty();
    auto avg = restart ? job.start_averager(args, name, job.averager_endpoint()) : job.start_averager(args, name);
    EXPECT_TRUE(avg) << job.log(name);
    if (!avg) {
      return out;
    }
    out.coordinator = avg->pid;
    for (int k = 0; k < 2; ++k) {
      out.owners.push_back(job.start("owner-" + std::to_string(k) + tag,
                                     {"averager", "--shard", std::to_string(k) + "/2", "--coordinator", avg->endpoint,
                                      "--listen", "tcp://127.0.0.1:*", "--heartbeat-ms", "100"}));
    }
    for (int i = 0; i < workers; ++i) {
      out.workers.push_back(job.start_worker(first_worker + i, worker_args));
    }
    return out;
  };
  const auto last_round_line = [&] {
    double last = -1;
    for (const auto& l : test::read_metrics_lines(metrics)) {
      last = l.is_round() ? l.get("round") : last;
    }
    return last;
  };

  // 1. Until a checkpoint is saved and the round it holds has closed, then SIGKILL owner 1.
  const auto first = start("coordinator", "", 0);
  ASSERT_GT(first.coordinator, 0);
  ASSERT_TRUE(job.wait_for_log("coordinator", "checkpoint: saved round " + std::to_string(every), 120s))
      << job.log("coordinator");
  ASSERT_TRUE(test::wait_until([&] { return last_round_line() >= every; }, 60s)) << job.log("coordinator");
  ::kill(first.owners[1], SIGKILL);
  ASSERT_EQ(job.wait_exit(first.coordinator, 60s), 1) << job.log("coordinator");
  const auto said = lines_starting(job.log("coordinator"), "prsgd averager: ");
  ASSERT_EQ(said.size(), 1U) << job.log("coordinator");
  EXPECT_NE(said[0].find("shard owner 1/2"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("the job stops"), std::string::npos) << said[0];
  for (std::size_t i = 0; i < first.workers.size(); ++i) {
    EXPECT_EQ(job.wait_exit(first.workers[i], 30s), 0) << job.log("worker-" + std::to_string(i));
  }
  EXPECT_EQ(job.wait_exit(first.owners[0], 30s), 0) << job.log("owner-0");
  const double last_before = last_round_line();
  for (const auto& l : test::read_metrics_lines(metrics)) {
    ASSERT_NE(l.event, "done") << "a stopped job has no done line";
  }

  // 2. Every process again, on the same checkpoint directory and endpoint.
  const auto second = start("coordinator-2", "-2", workers);
  ASSERT_GT(second.coordinator, 0);
  ASSERT_EQ(job.wait_exit(second.coordinator, 180s), 0) << job.log("coordinator-2");
  for (std::size_t i = 0; i < second.workers.size(); ++i) {
    EXPECT_EQ(job.wait_exit(second.workers[i], 30s), 0) << job.log("worker-" + std::to_string(workers + i));
  }
  for (std::size_t k = 0; k < second.owners.size(); ++k) {
    EXPECT_EQ(job.wait_exit(second.owners[k], 30s), 0) << job.log("owner-" + std::to_string(k) + "-2");
  }

  // The metrics file as written: rounds 0..19 once each and in order, one resumed line, one done line.
  const auto all = test::read_metrics_lines(metrics);
  std::vector<double> resumed;
  double expected_round = 0;
  double samples = 0;
  double ranged = 0;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> ranges;  // (epoch, begin) -> end
  std::uint64_t repeated = 0;
  int done = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& l = all[i];
    if (l.event == "resumed") {
      resumed.push_back(l.get("round"));
    } else if (l.event == "done") {
      ++done;
      EXPECT_EQ(i + 1, all.size()) << "the done line is the last";
      EXPECT_EQ(l.get("rounds"), rounds);
      EXPECT_EQ(l.get("trained_rounds"), rounds);
    } else if (l.is_round()) {
      EXPECT_EQ(l.get("round"), expected_round++) << "line " << i << ": each round once, in order";
      EXPECT_EQ(l.get("submissions"), workers) << "round " << l.get("round");
      EXPECT_EQ(l.get("duplicate"), 0);
      samples += l.get("samples");
      for (const auto& [member, epoch, begin, end] : l.data) {
        ranged += static_cast<double>(end - begin);
        repeated += ranges.emplace(std::pair{epoch, begin}, end).second ? 0 : 1;
      }
    }
  }
  EXPECT_EQ(done, 1);
  EXPECT_EQ(expected_round, rounds);
  ASSERT_EQ(resumed.size(), 1U) << "one resumed line";
  EXPECT_GE(resumed[0], every) << "it resumes a checkpoint, not round 0";
  EXPECT_EQ(static_cast<long>(resumed[0]) % every, 0) << "a checkpointed round";
  EXPECT_LE(resumed[0], last_before) << "the rounds closed after the checkpoint are run again";
  // An uninterrupted run: every member trains I steps of B samples in every round.
  EXPECT_EQ(samples, static_cast<double>(rounds) * workers * interval * batch) << "samples counted once";
  EXPECT_EQ(ranged, samples) << "the data ranges hold the counted samples";
  EXPECT_EQ(repeated, 0U) << "no sample range trained twice in an epoch";
  for (auto it = ranges.begin(); it != ranges.end() && std::next(it) != ranges.end(); ++it) {
    const auto next = std::next(it);
    EXPECT_TRUE(next->first.first != it->first.first || it->second <= next->first.second)
        << "epoch " << it->first.first << ": the ranges at " << it->first.second << " and " << next->first.second
        << " overlap";
  }

  // x̄ across the resume: the owners' slices of the resumed round equal the first incarnation's (the
  // checkpoint holds that x̄), and every worker of the second incarnation holds the owners' slices.
  const auto r0 = static_cast<long>(resumed[0]);
  const auto before = read_checksums(job.log("coordinator"));
  const auto after = read_checksums(job.log("coordinator-2"));
  EXPECT_FALSE(after.conflicting) << "an owner reported two different slices for one round";
  for (long k = 0; k < 2; ++k) {
    ASSERT_TRUE(before.of.contains({r0, k})) << "slice " << k << " of round " << r0 << " before the kill";
    ASSERT_TRUE(after.of.contains({r0, k})) << "slice " << k << " of round " << r0 << " after the resume";
    EXPECT_EQ(before.of.at({r0, k}), after.of.at({r0, k})) << "the owners resume from the checkpoint's x̄";
  }
  for (long r = r0; r < rounds; ++r) {
    for (long k = 0; k < 2; ++k) {
      EXPECT_TRUE(after.of.contains({r, k})) << "round " << r << " slice " << k << " reported";
    }
  }
  for (int i = workers; i < 2 * workers; ++i) {
    const auto worker = read_checksums(job.log("worker-" + std::to_string(i)));
    EXPECT_GE(worker.lines, 2U * static_cast<std::size_t>(rounds - r0)) << "worker " << i;
    for (const auto& [key, sum] : worker.of) {
      const auto it = after.of.find(key);
      ASSERT_NE(it, after.of.end()) << "round " << key.first << " slice " << key.second;
      EXPECT_EQ(sum, it->second) << "worker " << i << " round " << key.first << " slice " << key.second
                                 << ": its x̄ differs from the owner's";
    }
  }
  std::printf("%s: stopped after round %g, resumed at round %g\n", dtype.c_str(), last_before, resumed[0]);
}

TEST_F(ShardedTest, OwnerKilledJobResumesFromItsCheckpointAndCountsEveryRoundOnce) {
  owner_killed_job_resumes_from_its_checkpoint(job_, "f32");
}

// The same with bf16 payloads: workers and owners keep error-feedback residuals, which a resume starts from
// zero (the new owners are set up with the checkpoint's x̄ and send it whole).
TEST_F(ShardedTest, OwnerKilledBf16JobResumesFromItsCheckpointAndCountsEveryRoundOnce) {
  owner_killed_job_resumes_from_its_checkpoint(job_, "bf16");
}

}  // namespace
