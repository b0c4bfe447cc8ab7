// SPDX-License-Identifier: Apache-2.0
// ops/cluster with local processes: up derives each process's arguments from the hosts file, gives each
// role its own extra arguments, waits for each process to have started, status sees them run, down stops
// them all; a process that exits at start fails `up`. The processes are a small shell stand-in that
// records its arguments, behaves like prsgd at start (writes the --endpoint-file it is given, logs that a
// worker was welcomed) and runs until SIGTERM, so the test checks the script's process handling, not
// training.
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
    std::ofstream{fake_}
        << "#!/bin/bash\n"
           "[ \"$1\" = --version ] && { echo 'prsgd 0.0 (stand-in)'; exit 0; }\n"
           "echo \"args: $*\"\n"
           "[ -n \"$FAKE_FAIL\" ] && [ \"$1\" = \"$FAKE_FAIL\" ] && { echo 'cannot start'; exit 3; }\n"
           "trap 'echo stopped; exit 0' TERM\n"
           "prev=; listen=; ef=\n"
           "for a in \"$@\"; do\n"
           "  [ \"$prev\" = --listen ] && listen=$a; [ \"$prev\" = --endpoint-file ] && ef=$a; prev=$a\n"
           "done\n"
           "[ -n \"$ef\" ] && echo \"$listen\" >\"$ef\"\n"
           "[ \"$1\" = worker ] && echo 'worker 7 welcomed by averager incarnation 1'\n"
           "while :; do sleep 0.05; done\n";
    ::chmod(fake_.c_str(), 0755);
    run_dir_ = dir_ / "run";
  }

  void TearDown() override {
    // Stop anything a failed assertion left running.
    run({"down", "--run-dir", run_dir_, "--timeout", "2"});
  }

  run_result run(const std::vector<std::string>& args) {
    return test::run(command(script, args), {.out = dir_ / "out.txt"});
  }

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
  auto up = run({"up", h, "--run-dir", run_dir_, "--bin", fake_, "--", "all:", "--log-level", "debug",
                 "averager:", "--epochs", "2", "worker:", "--batch", "32"});
  ASSERT_EQ(up.status, 0) << up.out;

  auto status = run({"status", "--run-dir", run_dir_});
  EXPECT_EQ(status.status, 0) << status.out;
  for (const char* name : {"averager", "worker-0", "worker-1"}) {
    EXPECT_NE(status.out.find(std::string{name} + " "), std::string::npos) << status.out;
  }
  EXPECT_EQ(status.out.find("exited"), std::string::npos) << status.out;

  // The stand-in writes its arguments first thing; wait for them with a deadline.
  wait_until([&] { return !log("worker-1").empty(); }, 10s, 50ms);
  EXPECT_NE(log("averager")
                .find("args: averager --min-workers 2 --endpoint-file " + run_dir_ +
                      "/averager.endpoint --listen tcp://127.0.0.1:7500 --model fmnist-mlp --rounds 3 "
                      "--epochs 2 --log-level debug"),
            std::string::npos)
      << log("averager");
  EXPECT_NE(log("worker-0").find("args: worker --averager tcp://127.0.0.1:7500 --batch 32 --log-level debug"),
            std::string::npos)
      << log("worker-0");
  EXPECT_NE(log("worker-1").find("args: worker --averager tcp://127.0.0.1:7500 --slowdown-ms 20 --batch 32 --log-level debug"),
            std::string::npos)
      << log("worker-1");
  // Each role got only its own extra arguments.
  EXPECT_EQ(log("worker-0").find("--epochs"), std::string::npos) << log("worker-0");
  EXPECT_EQ(log("averager").find("--batch"), std::string::npos) << log("averager");
  EXPECT_NE(up.out.find("started worker-1"), std::string::npos) << up.out;

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
  EXPECT_NE(log("head").find("args: head --endpoint-file " + run_dir_ + "/head.endpoint --listen tcp://127.0.0.1:7411"),
            std::string::npos)
      << log("head");
  EXPECT_NE(log("averager").find("--head tcp://127.0.0.1:7411"), std::string::npos) << log("averager");
  EXPECT_NE(log("worker-0").find("args: worker --head tcp://127.0.0.1:7411"), std::string::npos) << log("worker-0");
}

TEST_F(ClusterScriptTest, AveragerListeningOnAnyPortIsReachedThroughItsEndpoint) {
  const auto h = hosts("averager 127.0.0.1 --listen tcp://127.0.0.1:*\nworker 127.0.0.1\n");
  ASSERT_EQ(run({"up", h, "--run-dir", run_dir_, "--bin", fake_}).status, 0);
  // The stand-in announces what it was asked to listen on; the workers get the averager's announcement.
  EXPECT_NE(log("worker-0").find("args: worker --averager tcp://127.0.0.1:*"), std::string::npos) << log("worker-0");
}

TEST_F(ClusterScriptTest, AProcessThatExitsAtStartFailsUp) {
  const auto h = hosts("averager 127.0.0.1\nworker 127.0.0.1\nworker 127.0.0.1\n");
  ::setenv("FAKE_FAIL", "worker", 1);
  auto up = run({"up", h, "--run-dir", run_dir_, "--bin", fake_});
  ::unsetenv("FAKE_FAIL");
  EXPECT_EQ(up.status, 1) << up.out;
  EXPECT_NE(up.out.find("worker-0 on 127.0.0.1 exited during its start"), std::string::npos) << up.out;
  EXPECT_NE(up.out.find("cannot start"), std::string::npos) << "no log tail: " << up.out;
  EXPECT_EQ(up.out.find("started worker-0"), std::string::npos) << up.out;
  EXPECT_EQ(up.out.find("cluster: up"), std::string::npos) << up.out;
  // What had started (the averager) was stopped again.
  EXPECT_NE(log("averager").find("stopped"), std::string::npos) << log("averager");
  auto status = run({"status", "--run-dir", run_dir_});
  EXPECT_NE(status.status, 0) << status.out;
}

TEST_F(ClusterScriptTest, ArgumentsAfterDashDashNeedARole) {
  const auto h = hosts("averager 127.0.0.1\nworker 127.0.0.1\n");
  auto up = run({"up", h, "--run-dir", run_dir_, "--bin", fake_, "--", "--epochs", "5"});
  EXPECT_EQ(up.status, 2);
  EXPECT_NE(up.out.find("need a role first"), std::string::npos) << up.out;
}

TEST_F(ClusterScriptTest, MissingFilesOnAHostAreListedBeforeAnythingStarts) {
  const auto h = hosts(
      "averager 127.0.0.1 --data-dir /nonexistent/fmnist\n"
      "worker 127.0.0.1 --curve-server-key /nonexistent/averager.public\n");
  auto up = run({"up", h, "--run-dir", run_dir_, "--bin", fake_});
  EXPECT_EQ(up.status, 1) << up.out;
  EXPECT_NE(up.out.find("/nonexistent/fmnist (for the averager line) does not exist"), std::string::npos) << up.out;
  EXPECT_NE(up.out.find("/nonexistent/averager.public (for the worker line)"), std::string::npos) << up.out;
  EXPECT_FALSE(std::filesystem::exists(run_dir_ + "/averager.log"));
  auto nobin = run({"up", h, "--run-dir", run_dir_, "--bin", dir_ / "no-such-prsgd"});
  EXPECT_EQ(nobin.status, 1);
  EXPECT_NE(nobin.out.find("does not run there"), std::string::npos) << nobin.out;
}

TEST_F(ClusterScriptTest, BadHostsFilesAreRefused) {
  EXPECT_EQ(run({"up", hosts("trainer 127.0.0.1\n"), "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"up", hosts("worker 127.0.0.1\n"), "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"up", hosts("averager\n"), "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"up", dir_ / "missing", "--run-dir", run_dir_, "--bin", fake_}).status, 2);
  EXPECT_EQ(run({"frobnicate"}).status, 2);
}

}  // namespace
