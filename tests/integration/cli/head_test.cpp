// SPDX-License-Identifier: Apache-2.0
// `prsgd head` and `--head` as a user runs them: a whole local job found through a head, a worker that gives
// up when no averager registers, the head's exit on signals, a refused CURVE option, and an averager that
// is killed and replaced while the head keeps running.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "prsgd/cli/launcher.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

using test::lines_of;
using test::run_result;

/// Returns a TCP port on 127.0.0.1 that was free a moment ago.
int free_port() {
  auto port = prsgd::cli::pick_free_tcp_port();
  EXPECT_TRUE(port) << port.error().message();
  return port.value_or(0);
}

class HeadCommandTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }

  static std::string read(const std::string& p) { return test::read_file(p); }

  // Starts the prsgd binary with `args` in the test directory, stdout+stderr to `log`; returns its pid.
  pid_t start(const std::vector<std::string>& args, const std::string& log) {
    return children_.start(test::command(PRSGD_BINARY, args), {.cwd = dir_.path(), .out = path(log)});
  }

  // Waits up to `limit` for `pid`; returns its exit status (128+N for signal N) or -1 on timeout.
  int wait_for(pid_t pid, std::chrono::milliseconds limit) { return children_.wait_exit(pid, limit).value_or(-1); }

  // Runs the prsgd binary to completion (at most `limit`) with separate stdout and stderr.
  run_result run(const std::vector<std::string>& args, std::chrono::milliseconds limit = 120s) {
    return children_.run(test::command(PRSGD_BINARY, args),
                         {.cwd = dir_.path(), .out = path("stdout.txt"), .err = path("stderr.txt")}, limit);
  }

  // Waits until `log` contains `needle` (or `limit` passes).
  bool wait_for_log(const std::string& log, const std::string& needle, std::chrono::milliseconds limit) {
    return test::wait_until([&] { return read(path(log)).find(needle) != std::string::npos; }, limit, 50ms);
  }

  // Starts `prsgd head` on a free port and waits until it serves; returns its endpoint.
  std::string start_head(pid_t* pid, const std::vector<std::string>& extra = {}) {
    const std::string ep = "tcp://127.0.0.1:" + std::to_string(free_port());
    std::vector<std::string> args{"head", "--listen", ep};
    args.insert(args.end(), extra.begin(), extra.end());
    *pid = start(args, "head.log");
    EXPECT_TRUE(wait_for_log("head.log", "serving at " + ep, 10s)) << read(path("head.log"));
    return ep;
  }

  test::scratch_dir dir_{"prsgd-head"};
  test::process_group children_;  // declared after dir_: killed before the directory goes
};

TEST_F(HeadCommandTest, LocalWithHeadRunsTheWholeJob) {
  auto r = run({"local", "--with-head", "--workers", "2", "--rounds", "6", "--interval", "4", "--model",
                "fmnist-mlp", "--metrics-jsonl", "m.jsonl", "--progress", "off"});
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
  pid_t head = 0;
  const std::string ep = start_head(&head);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run({"worker", "--head", ep, "--head-timeout-ms", "1500", "--log-level", "warn"}, 30s);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("prsgd worker: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no averager found through the head " + ep + " within 1500 ms"), std::string::npos) << r.err;
  EXPECT_GE(took, 1400ms);
  EXPECT_LT(took, 15s);
}

TEST_F(HeadCommandTest, WorkerRefusesANonPositiveHeadTimeout) {
  auto r = run({"worker", "--head", "tcp://127.0.0.1:7400", "--head-timeout-ms", "0"}, 30s);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--head-timeout-ms"), std::string::npos) << r.err;
}

TEST_F(HeadCommandTest, HeadExitsZeroOnSigterm) {
  pid_t head = 0;
  start_head(&head);
  ASSERT_EQ(wait_for(head, 300ms), -1) << "the head exited by itself:\n" << read(path("head.log"));
  ::kill(head, SIGTERM);
  EXPECT_EQ(wait_for(head, 10s), 0) << read(path("head.log"));
}

TEST_F(HeadCommandTest, HeadExitsZeroOnSigint) {
  pid_t head = 0;
  start_head(&head);
  ::kill(head, SIGINT);
  EXPECT_EQ(wait_for(head, 10s), 0) << read(path("head.log"));
}

TEST_F(HeadCommandTest, HeadRefusesCurveOptionsWithOneLine) {
  std::ofstream{path("k.public")} << "x\n";
  std::ofstream{path("k.secret")} << "x\n";
  auto r = run({"head", "--listen", "tcp://127.0.0.1:7499", "--curve-public-key", path("k.public"),
                "--curve-secret-key", path("k.secret")},
               30s);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("prsgd head: --curve-* options are not supported"), std::string::npos) << r.err;
}

TEST_F(HeadCommandTest, HeadRefusesAnAddressInUse) {
  pid_t head = 0;
  const std::string ep = start_head(&head);
  auto r = run({"head", "--listen", ep}, 30s);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("prsgd head: cannot serve on " + ep), std::string::npos) << r.err;
}

TEST_F(HeadCommandTest, KilledAveragerIsReplacedAndWorkersFindTheNewOne) {
  const std::vector<std::string> live{"--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"};
  // The head notices a dead node late, so the replacement finds the name still held by the dead averager.
  pid_t head = 0;
  const std::string ep = start_head(&head, {"--heartbeat-ms", "100", "--heartbeat-timeout-ms", "4000"});
  auto averager_args = [&](int port) {
    std::vector<std::string> a{"averager", "--listen", "tcp://127.0.0.1:" + std::to_string(port), "--head", ep,
                               "--rounds", "100000", "--progress", "off"};
    a.insert(a.end(), live.begin(), live.end());
    return a;
  };
  const int first_port = free_port();
  const pid_t first = start(averager_args(first_port), "averager-1.log");
  ASSERT_TRUE(wait_for_log("averager-1.log", "registered the averager", 30s)) << read(path("averager-1.log"));
  ::kill(first, SIGKILL);  // no goodbye: the head must notice by itself
  ASSERT_EQ(wait_for(first, 5s), 128 + SIGKILL);

  const int second_port = free_port();
  const pid_t second = start(averager_args(second_port), "averager-2.log");
  ASSERT_TRUE(wait_for_log("averager-2.log", "registered the averager", 30s)) << read(path("averager-2.log"))
                                                                              << read(path("head.log"));
  const std::string second_log = read(path("averager-2.log"));
  EXPECT_NE(second_log.find("held by an averager that does not answer"), std::string::npos) << second_log;
  std::vector<std::string> worker{"worker", "--head", ep, "--head-timeout-ms", "10000", "--progress", "off"};
  worker.insert(worker.end(), live.begin(), live.end());
  const pid_t w = start(worker, "worker.log");
  EXPECT_TRUE(wait_for_log("worker.log", "says the averager is at tcp://127.0.0.1:" + std::to_string(second_port), 20s))
      << read(path("worker.log"));
  ::kill(w, SIGTERM);
  ::kill(second, SIGKILL);
  static_cast<void>(wait_for(w, 10s));
}

}  // namespace
