// SPDX-License-Identifier: Apache-2.0
// `prsgd head` and `--head` as a user runs them: a whole local job found through a head, a worker that gives
// up when no averager registers, the head's exit on signals, a stranger's key refused, and an averager that
// is killed and replaced while the head keeps running.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "prsgd_job.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

using test::lines_of;
using test::run_result;

class HeadCommandTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return job_.path(name); }

  static std::string read(const std::string& p) { return test::read_file(p); }

  // Waits up to scaled(`limit`) for `pid`; returns its exit status (128+N for signal N) or -1 on timeout.
  int wait_for(pid_t pid, std::chrono::milliseconds limit) { return job_.wait_exit(pid, limit).value_or(-1); }

  // Runs the prsgd binary to completion (at most scaled(`limit`)) with separate stdout and stderr.
  run_result run(const std::vector<std::string>& args, std::chrono::milliseconds limit = 120s) {
    return job_.run(args, limit);
  }

  // Starts `prsgd head` on a port the system chooses; returns its pid and endpoint once it serves.
  test::listening start_head(const std::vector<std::string>& extra = {}) {
    auto head = job_.start_listening("head", "head", extra);
    EXPECT_TRUE(head) << job_.log("head");
    return head.value_or(test::listening{});
  }

  test::prsgd_job job_{PRSGD_BINARY, "prsgd-head"};
};

TEST_F(HeadCommandTest, LocalWithHeadRunsTheWholeJob) {
  auto r = run({"local", "--with-head", "--workers", "2", "--rounds", "6", "--interval", "4", "--model", "fmnist-mlp",
                "--metrics-jsonl", "m.jsonl", "--progress", "off"});
  ASSERT_EQ(r.status, 0) << r.err << "\nhead log:\n"
                         << read(path("prsgd-logs/head.log")) << "\naverager log:\n"
                         << read(path("prsgd-logs/averager.log"));
  const auto lines = lines_of(read(path("m.jsonl")));
  ASSERT_EQ(lines.size(), 7U) << read(path("m.jsonl"));
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_NE(lines[i].find("\"round\":" + std::to_string(i) + ","), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("\"members\":2,"), std::string::npos) << lines[i];
  }
  EXPECT_NE(lines.back().find("\"event\":\"done\""), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("\"rounds\":6"), std::string::npos) << lines.back();
  // The workers really went through the head, not around it.
  EXPECT_NE(read(path("prsgd-logs/averager.log")).find("registered the averager"), std::string::npos);
  EXPECT_NE(read(path("prsgd-logs/worker-0.log")).find("says the averager is at"), std::string::npos);
}

TEST_F(HeadCommandTest, WorkerGivesUpWhenNoAveragerRegisters) {
  const std::string ep = start_head().endpoint;
  ASSERT_FALSE(ep.empty());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run({"worker", "--head", ep, "--head-timeout-ms", "1500", "--log-level", "warn"}, 30s);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("prsgd worker: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no averager found through the head " + ep + " within 1500 ms"), std::string::npos) << r.err;
  EXPECT_GE(took, 1400ms);
  EXPECT_LT(took, test::scaled(15s));
}

TEST_F(HeadCommandTest, WorkerRefusesANonPositiveHeadTimeout) {
  auto r = run({"worker", "--head", "tcp://127.0.0.1:7400", "--head-timeout-ms", "0"}, 30s);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--head-timeout-ms"), std::string::npos) << r.err;
}

TEST_F(HeadCommandTest, HeadExitsZeroOnSigterm) {
  const pid_t head = start_head().pid;
  ASSERT_GT(head, 0);
  ASSERT_EQ(wait_for(head, 0ms), -1) << "the head exited by itself:\n" << read(path("head.log"));
  ::kill(head, SIGTERM);
  EXPECT_EQ(wait_for(head, 10s), 0) << read(path("head.log"));
}

TEST_F(HeadCommandTest, HeadExitsZeroOnSigint) {
  const pid_t head = start_head().pid;
  ASSERT_GT(head, 0);
  ::kill(head, SIGINT);
  EXPECT_EQ(wait_for(head, 10s), 0) << read(path("head.log"));
}

// With CURVE keys the head admits only the listed client keys: a worker with another key is refused by the
// ZAP handler at connect time (the head logs it) and finds nothing.
TEST_F(HeadCommandTest, HeadWithCurveKeysRefusesAStrangerAtConnectTime) {
  for (const char* name : {"server", "worker", "stranger"}) {
    auto k = run({"keygen", "--out-dir", path("keys"), "--name", name}, 30s);
    ASSERT_EQ(k.status, 0) << k.err;
  }
  const auto key = [&](const std::string& f) { return path("keys/" + f); };
  const std::string ep = start_head({"--curve-public-key", key("server.public"), "--curve-secret-key",
                                     key("server.secret"), "--curve-allow", key("worker.public")})
                             .endpoint;
  ASSERT_FALSE(ep.empty());
  auto r = run({"worker", "--head", ep, "--head-timeout-ms", "1500", "--log-level", "warn", "--curve-public-key",
                key("stranger.public"), "--curve-secret-key", key("stranger.secret"), "--curve-server-key",
                key("server.public")},
               30s);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("no averager found through the head"), std::string::npos) << r.err;
  EXPECT_TRUE(job_.wait_for_log("head", "refused a CURVE client", 10s)) << read(path("head.log"));
  // A bad key file is a usage error with one line.
  std::ofstream{path("k.public")} << "x\n";
  std::ofstream{path("k.secret")} << "x\n";
  auto bad = run({"head", "--listen", "tcp://127.0.0.1:*", "--curve-public-key", path("k.public"), "--curve-secret-key",
                  path("k.secret")},
                 30s);
  EXPECT_NE(bad.status, 0) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

TEST_F(HeadCommandTest, HeadRefusesAnAddressInUse) {
  const std::string ep = start_head().endpoint;
  ASSERT_FALSE(ep.empty());
  auto r = run({"head", "--listen", ep}, 30s);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("prsgd head: cannot serve on " + ep), std::string::npos) << r.err;
}

TEST_F(HeadCommandTest, KilledAveragerIsReplacedAndWorkersFindTheNewOne) {
  const std::vector<std::string> live{"--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"};
  // The head notices a dead node late, so the replacement finds the name still held by the dead averager.
  const std::string ep = start_head({"--heartbeat-ms", "100", "--heartbeat-timeout-ms", "4000"}).endpoint;
  ASSERT_FALSE(ep.empty());
  std::vector<std::string> averager_args{"--head", ep, "--rounds", "100000", "--progress", "off"};
  averager_args.insert(averager_args.end(), live.begin(), live.end());
  const auto first = job_.start_listening("averager-1", "averager", averager_args);
  ASSERT_TRUE(first) << read(path("averager-1.log"));
  ASSERT_TRUE(job_.wait_for_log("averager-1", "registered the averager", 30s)) << read(path("averager-1.log"));
  ::kill(first->pid, SIGKILL);  // no goodbye: the head must notice by itself
  ASSERT_EQ(wait_for(first->pid, 5s), 128 + SIGKILL);

  const auto second = job_.start_listening("averager-2", "averager", averager_args);
  ASSERT_TRUE(second) << read(path("averager-2.log"));
  ASSERT_TRUE(job_.wait_for_log("averager-2", "registered the averager", 30s))
      << read(path("averager-2.log")) << read(path("head.log"));
  const std::string second_log = read(path("averager-2.log"));
  EXPECT_NE(second_log.find("held by an averager that does not answer"), std::string::npos) << second_log;
  std::vector<std::string> worker{"worker", "--head", ep, "--head-timeout-ms", "10000", "--progress", "off"};
  worker.insert(worker.end(), live.begin(), live.end());
  const pid_t w = job_.start("worker", worker);
  EXPECT_TRUE(job_.wait_for_log("worker", "says the averager is at " + second->endpoint, 20s))
      << read(path("worker.log"));
  ::kill(w, SIGTERM);
  ::kill(second->pid, SIGKILL);
  static_cast<void>(wait_for(w, 10s));
}

}  // namespace
