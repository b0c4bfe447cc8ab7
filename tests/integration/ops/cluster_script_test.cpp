// SPDX-License-Identifier: Apache-2.0
// ops/cluster with local processes: up derives each process's arguments from the hosts file, status sees
// them run, down stops them all. The processes are a small shell stand-in that records its arguments and
// runs until SIGTERM, so the test checks the script's process handling, not training.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "child_process.hpp"

namespace {

using namespace prsgd::test;
using namespace std::chrono_literals;
namespace test = prsgd::test;

const std::string script = std::string{PRSGD_SOURCE_DIR} + "/ops/cluster";

class ClusterScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = dir_ / "fake-prsgd";
    std::ofstream{fake_} << "#!/bin/sh\necho \"args: $*\"\ntrap 'echo stopped; exit 0' TERM\n"
                            "while :; do sleep 0.05; done\n";
    ::chmod(fake_.c_str(), 0755);
    run_dir_ = dir_ / "run";
  }

  void TearDown() override {
    // Stop anything a failed assertion left running.
    run({"down", "--run-dir", run_dir_, "--timeout", "2"});
  }

  run_result run(const std::vector<std::string>& args) { return test::run(command(script, args), {.out = dir_ / "out.txt"}); }

  std::string hosts(const std::string& text) {
    const auto p = dir_ / "hosts";
    std::ofstream{p} << text;
    return p;
  }

  std::string log(const std::string& name) { return read_file(run_dir_ + "/" + name + ".log"); }

  scratch_dir dir_{"prsgd-cluster"};
  std::string fake_;
  std::string run_dir_;
};

TEST_F(ClusterScriptTest, UpStatusLogsDown) {
  const auto h = hosts(
      "# a small job\n"
      "averager 127.0.0.1 --model fmnist-mlp --rounds 3\n"
      "worker   127.0.0.1\n"
      "worker   localhost --slowdown-ms 20   # the slow one\n");
  auto up = run({"up", h, "--run-dir", run_dir_, "--bin", fake_, "--", "--log-level", "debug"});
  ASSERT_EQ(up.status, 0) << up.out;

  auto status = run({"status", "--run-dir", run_dir_});
  EXPECT_EQ(status.status, 0) << status.out;
  for (const char* name : {"averager", "worker-0", "worker-1"}) {
    EXPECT_NE(status.out.find(std::string{name} + " "), std::string::npos) << status.out;
  }
  EXPECT_EQ(status.out.find("exited"), std::string::npos) << status.out;

  // The stand-in writes its arguments first thing; wait for them with a deadline.
  wait_until([&] { return !log("worker-1").empty(); }, 10s, 50ms);
  EXPECT_NE(log("averager").find("args: averager --min-workers 2 --listen tcp://127.0.0.1:7500 --model fmnist-mlp "
                                 "--rounds 3 --log-level debug"),
            std::string::npos)
      << log("averager");
  EXPECT_NE(log("worker-0").find("args: worker --averager tcp://127.0.0.1:7500 --log-level debug"),
            std::string::npos)
      << log("worker-0");
  EXPECT_NE(log("worker-1").find("args: worker --averager tcp://127.0.0.1:7500 --slowdown-ms 20 --log-level debug"),
            std::string::npos)
      << log("worker-1");

  auto logs = run({"logs", "--run-dir", run_dir_, "worker-0"});
  EXPECT_EQ(logs.status, 0);
  EXPECT_NE(logs.out.find("args: worker --averager"), std::string::npos) << logs.out;

  // A second `up` from the same run dir is refused while the first runs.
  EXPECT_EQ(run({"up", h, "--run-dir", run_dir_, "--bin", fake_}).status, 2);

  std::vector<pid_t> pids;
  for (const char* name : {"averager", "worker-0", "worker-1"}) {
    pids.push_back(std::stoi(read_file(run_dir_ + "/" + name + ".pid")));
  }
  auto down = run({"down", "--run-dir", run_dir_});
  ASSERT_EQ(down.status, 0) << down.out;
  for (pid_t p : pids) {
    EXPECT_NE(::kill(p, 0), 0) << "pid " << p << " still runs after down";
  }
  EXPECT_NE(log("averager").find("stopped"), std::string::npos) << "SIGTERM was not delivered";
  EXPECT_NE(run({"status", "--run-dir", run_dir_}).status, 0);
}

TEST_F(ClusterScriptTest, HeadLineMakesEveryoneUseTheHead) {
  const auto h = hosts("head 127.0.0.1 --listen tcp://127.0.0.1:7411\naverager 127.0.0.1\nworker 127.0.0.1\n");
  ASSERT_EQ(run({"up", h, "--run-dir", run_dir_, "--bin", fake_}).status, 0);
  wait_until([&] { return !log("worker-0").empty(); }, 10s, 50ms);
  EXPECT_NE(log("head").find("args: head --listen tcp://127.0.0.1:7411"), std::string::npos) << log("head");
  EXPECT_NE(log("averager").find("--head tcp://127.0.0.1:7411"), std::string::npos) << log("averager");
  EXPECT_NE(log("worker-0").find("args: worker --head tcp://127.0.0.1:7411"), std::string::npos) << log("worker-0");
}

TEST_F(ClusterScriptTest, BadHostsFilesAreRefused) {
  EXPECT_EQ(run({"up", hosts("trainer 127.0.0.1\n"), "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"up", hosts("worker 127.0.0.1\n"), "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"up", hosts("averager\n"), "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"up", dir_ / "missing", "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"frobnicate"}).status, 2);
}

}  // namespace
