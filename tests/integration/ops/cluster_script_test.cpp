// SPDX-License-Identifier: Apache-2.0
// ops/cluster with local processes: up derives each process's arguments from the job file, gives each
// role its own arguments, waits for each process to have started, status sees them run, scale adds and
// removes workers, stop and down end them all; a process that exits at start fails `up`. The processes
// are a small shell stand-in that records its arguments, behaves like prsgd at start (writes the
// --endpoint-file it is given, logs that a worker joined) and runs until SIGTERM (then exits 3, as
// prsgd does), so the test checks the script's process handling, not training. The same script on
// network-namespace hosts over ssh, with real prsgd processes, is deploy_cluster_ssh.
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
           "trap 'echo stopped; exit 3' TERM\n"
           "prev=; listen=; ef=\n"
           "for a in \"$@\"; do\n"
           "  [ \"$prev\" = --listen ] && listen=$a; [ \"$prev\" = --endpoint-file ] && ef=$a; prev=$a\n"
           "done\n"
           "[ -n \"$ef\" ] && echo \"$listen\" >\"$ef\"\n"
           "[ \"$1\" = worker ] && echo 'worker: joined as member 7 (shard 0 of 2) of averager incarnation 1'\n"
           "while :; do sleep 0.05; done\n";
    ::chmod(fake_.c_str(), 0755);
    run_dir_ = dir_ / "run";
  }

  void TearDown() override {
    // Stop anything a failed assertion left running.
    if (std::filesystem::exists(run_dir_ + "/state")) {
      run({"down", "--run-dir", run_dir_, "--timeout", "2"});
    }
  }

  run_result run(const std::vector<std::string>& args) {
    return test::run(command(script, args), {.out = dir_ / "out.txt"});
  }

  /// Writes a job file: the run dir, no keys (local processes), no metrics port, then `text`.
  std::string job(const std::string& text) {
    const auto p = dir_ / "job.yaml";
    std::ofstream{p} << "run-dir: " << run_dir_ << "\nbin: " << fake_ << "\nkeys: none\nmetrics-port: 0\n" << text;
    return p;
  }

  std::string log(const std::string& name) { return read_file(run_dir_ + "/" + name + ".log"); }

  scratch_dir dir_{"prsgd-cluster"};
  std::string fake_;
  std::string run_dir_;
};

TEST_F(ClusterScriptTest, UpStatusLogsScaleStopDown) {
  const auto j =
      job("# a small job\n"
          "averager: {host: local, args: [--model, fmnist-mlp, --rounds, '3', --epochs, '2', --log-level, debug]}\n"
          "max-workers: 3\n"
          "workers:\n"
          "  - {host: local, args: [--batch, '32']}\n"
          "  - {host: localhost, args: '--slowdown-ms 20 --batch 32'}   # the slow one\n");
  auto up = run({"up", j});
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
                .find("args: averager --listen tcp://127.0.0.1:7500 --min-workers 2 --max-workers 3 "
                      "--endpoint-file " +
                      run_dir_ + "/averager.endpoint --model fmnist-mlp --rounds 3 --epochs 2 --log-level debug"),
            std::string::npos)
      << log("averager");
  EXPECT_NE(log("worker-0").find("args: worker --averager tcp://127.0.0.1:7500 --batch 32"), std::string::npos)
      << log("worker-0");
  EXPECT_NE(log("worker-1").find("args: worker --averager tcp://127.0.0.1:7500 --slowdown-ms 20 --batch 32"),
            std::string::npos)
      << log("worker-1");
  // Each role got only its own arguments.
  EXPECT_EQ(log("worker-0").find("--epochs"), std::string::npos) << log("worker-0");
  EXPECT_EQ(log("averager").find("--batch"), std::string::npos) << log("averager");
  EXPECT_NE(up.out.find("started worker-1"), std::string::npos) << up.out;

  auto logs = run({"logs", "--run-dir", run_dir_, "worker-0"});
  EXPECT_EQ(logs.status, 0);
  EXPECT_NE(logs.out.find("args: worker --averager"), std::string::npos) << logs.out;

  // A second `up` from the same run dir is refused while the first runs.
  EXPECT_EQ(run({"up", j}).status, 2);

  // scale 3 starts one more worker on the first workers entry; scale 1 stops the two newest.
  auto more = run({"scale", "3", "--run-dir", run_dir_});
  ASSERT_EQ(more.status, 0) << more.out;
  EXPECT_NE(more.out.find("started worker-2"), std::string::npos) << more.out;
  wait_until([&] { return !log("worker-2").empty(); }, 10s, 50ms);
  EXPECT_NE(log("worker-2").find("args: worker --averager tcp://127.0.0.1:7500 --batch 32"), std::string::npos)
      << log("worker-2");
  auto fewer = run({"scale", "1", "--run-dir", run_dir_});
  ASSERT_EQ(fewer.status, 0) << fewer.out;
  EXPECT_NE(fewer.out.find("worker-2 left (status 3)"), std::string::npos) << fewer.out;
  EXPECT_NE(fewer.out.find("worker-1 left"), std::string::npos) << fewer.out;
  status = run({"status", "--run-dir", run_dir_});
  EXPECT_NE(status.out.find("exited 3 (stopped on request)"), std::string::npos) << status.out;
  EXPECT_EQ(status.status, 0) << "workers stopped on request are no failure: " << status.out;

  std::vector<pid_t> pids;
  for (const char* name : {"averager", "worker-0"}) {
    pids.push_back(std::stoi(read_file(run_dir_ + "/" + name + ".pid")));
  }
  auto stop = run({"stop", "--run-dir", run_dir_});
  ASSERT_EQ(stop.status, 0) << stop.out;
  for (pid_t p : pids) {
    EXPECT_NE(::kill(p, 0), 0) << "pid " << p << " still runs after stop";
  }
  EXPECT_NE(stop.out.find("averager exited with status 3 (stopped on request)"), std::string::npos) << stop.out;
  EXPECT_LT(stop.out.find("worker-0 exited"), stop.out.find("averager exited")) << "workers leave first: " << stop.out;
  EXPECT_NE(log("averager").find("stopped"), std::string::npos) << "SIGTERM was not delivered";

  auto down = run({"down", "--run-dir", run_dir_});
  ASSERT_EQ(down.status, 0) << down.out;
  EXPECT_EQ(run({"status", "--run-dir", run_dir_}).status, 3);
  EXPECT_TRUE(std::filesystem::exists(run_dir_ + "/averager.log")) << "down keeps the logs";
}

TEST_F(ClusterScriptTest, DownKillsWhatIgnoresSigterm) {
  std::ofstream{fake_, std::ios::trunc}
      << "#!/bin/bash\n"
         "[ \"$1\" = --version ] && exit 0\n"
         "trap '' TERM\n"
         "prev=; for a in \"$@\"; do [ \"$prev\" = --endpoint-file ] && echo x:1 >\"$a\"; prev=$a; done\n"
         "while :; do sleep 0.05; done\n";
  ASSERT_EQ(run({"up", job("averager: {host: local}\n")}).status, 0);
  const pid_t p = std::stoi(read_file(run_dir_ + "/averager.pid"));
  auto down = run({"down", "--run-dir", run_dir_, "--timeout", "1"});
  EXPECT_EQ(down.status, 0) << down.out;
  EXPECT_NE(down.out.find("averager ignored SIGTERM"), std::string::npos) << down.out;
  EXPECT_NE(down.out.find("status 137 (killed by signal 9)"), std::string::npos) << down.out;
  EXPECT_NE(::kill(p, 0), 0);
}

TEST_F(ClusterScriptTest, HeadMakesEveryoneUseTheHead) {
  const auto j =
      job("head: {host: local, args: [--listen, 'tcp://127.0.0.1:7411']}\n"
          "averager: {host: local}\n"
          "workers: [{host: local}]\n");
  ASSERT_EQ(run({"up", j}).status, 0);
  wait_until([&] { return !log("worker-0").empty(); }, 10s, 50ms);
  EXPECT_NE(log("head").find("args: head --endpoint-file " + run_dir_ + "/head.endpoint --listen tcp://127.0.0.1:7411"),
            std::string::npos)
      << log("head");
  EXPECT_NE(log("averager").find("--head tcp://127.0.0.1:7411"), std::string::npos) << log("averager");
  EXPECT_NE(log("worker-0").find("args: worker --head tcp://127.0.0.1:7411"), std::string::npos) << log("worker-0");
}

TEST_F(ClusterScriptTest, AveragerListeningOnAnyPortIsReachedThroughItsEndpoint) {
  const auto j = job("averager: {host: local, args: [--listen, 'tcp://127.0.0.1:*']}\nworkers: [{host: local}]\n");
  ASSERT_EQ(run({"up", j}).status, 0);
  // The stand-in announces what it was asked to listen on; the workers get the averager's announcement.
  EXPECT_NE(log("worker-0").find("args: worker --averager tcp://127.0.0.1:*"), std::string::npos) << log("worker-0");
}

TEST_F(ClusterScriptTest, AProcessThatExitsAtStartFailsUp) {
  const auto j = job("averager: {host: local}\nworkers: [{host: local, count: 2}]\n");
  ::setenv("FAKE_FAIL", "worker", 1);
  auto up = run({"up", j});
  ::unsetenv("FAKE_FAIL");
  EXPECT_EQ(up.status, 1) << up.out;
  EXPECT_NE(up.out.find("worker-0 on local exited during its start (status 3)"), std::string::npos) << up.out;
  EXPECT_NE(up.out.find("cannot start"), std::string::npos) << "no log tail: " << up.out;
  EXPECT_EQ(up.out.find("started worker-0"), std::string::npos) << up.out;
  EXPECT_EQ(up.out.find("cluster: up"), std::string::npos) << up.out;
  // What had started (the averager) was stopped again.
  EXPECT_NE(log("averager").find("stopped"), std::string::npos) << log("averager");
  auto status = run({"status", "--run-dir", run_dir_});
  EXPECT_NE(status.status, 0) << status.out;
}

TEST_F(ClusterScriptTest, MissingFilesOnAHostAreListedBeforeAnythingStarts) {
  const auto j =
      job("averager: {host: local, args: [--data-dir, /nonexistent/fmnist]}\n"
          "workers: [{host: local, args: [--curve-server-key, /nonexistent/averager.public]}]\n");
  auto up = run({"up", j});
  EXPECT_EQ(up.status, 1) << up.out;
  EXPECT_NE(up.out.find("/nonexistent/fmnist (for the averager) does not exist"), std::string::npos) << up.out;
  EXPECT_NE(up.out.find("/nonexistent/averager.public (for the worker)"), std::string::npos) << up.out;
  EXPECT_FALSE(std::filesystem::exists(run_dir_ + "/averager.log"));
  const auto nobin = dir_ / "nobin.yaml";
  std::ofstream{nobin} << "run-dir: " << run_dir_ << "\nbin: " << dir_ / "no-such-prsgd"
                       << "\nkeys: none\naverager: {host: local}\n";
  auto r = run({"up", nobin});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("does not run there"), std::string::npos) << r.out;
}

TEST_F(ClusterScriptTest, BadJobFilesAreRefusedInOneLine) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"averager: {host: local}\nworker: {host: local}\n", "unknown key 'worker'"},
      {"workers: [{host: local}]\n", "needs averager:"},
      {"averager: {args: [--rounds, '3']}\n", "averager needs host:"},
      {"averager: {host: node9}\n", "host 'node9' is not under hosts:"},
      {"averager: {host: local}\nworkers: [{host: local, count: -1}]\n", "count must be a whole number"},
      {"averager: {host: local, args: ['--x y']}\n", "contains white space"},
      {"averager: [oops\n", "not valid YAML"},
  };
  for (const auto& [text, why] : bad) {
    auto r = run({"up", job(text)});
    EXPECT_EQ(r.status, 2) << text << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << text << r.out;
  }
  EXPECT_EQ(run({"up", dir_ / "missing.yaml"}).status, 2);
  EXPECT_EQ(run({"frobnicate"}).status, 2);
  EXPECT_EQ(run({"scale", "many", "--run-dir", run_dir_}).status, 2);
  EXPECT_EQ(run({"status", "--run-dir", run_dir_}).status, 3) << "nothing started";
}

}  // namespace
