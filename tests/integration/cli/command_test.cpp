// SPDX-License-Identifier: Apache-2.0
// The `prsgd` binary as a user runs it: exit statuses, one-line errors, help, and `prsgd local`.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "ports.hpp"
#include "prsgd_job.hpp"

namespace {

using prsgd::test::run_result;

class CommandTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }

  static std::string read(const std::string& p) { return prsgd::test::read_file(p); }

  // Runs the prsgd binary with `args` in the test directory; returns its status and output.
  run_result run(const std::vector<std::string>& args) {
    return prsgd::test::run(prsgd::test::command(PRSGD_BINARY, args),
                            {.cwd = dir_.path(), .out = path("stdout.txt"), .err = path("stderr.txt")});
  }

  static void expect_one_line_usage_error(const run_result& r, const std::string& needle) {
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }

  prsgd::test::scratch_dir dir_{"prsgd-command"};
};

TEST_F(CommandTest, HelpAndVersionSucceed) {
  auto none = run({});
  EXPECT_EQ(none.status, 0);
  EXPECT_NE(none.out.find("Subcommands"), std::string::npos);
  for (const char* sub : {"local", "averager", "worker", "head", "keygen"}) {
    auto h = run({sub, "--help"});
    EXPECT_EQ(h.status, 0) << sub;
    EXPECT_NE(h.out.find("Usage: prsgd " + std::string{sub}), std::string::npos) << h.out;
  }
  auto v = run({"--version"});
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("prsgd ", 0), 0u);
}

TEST_F(CommandTest, UsageErrorsAreOneLineWithStatusTwo) {
  expect_one_line_usage_error(run({"local", "--workers", "-3"}), "--workers");
  expect_one_line_usage_error(run({"local", "--lr", "0"}), "--lr");
  expect_one_line_usage_error(run({"local", "--no-such-option"}), "--no-such-option");
  expect_one_line_usage_error(run({"local", "--wire-dtype", "fp8"}), "--wire-dtype");
  expect_one_line_usage_error(run({"dance"}), "unknown subcommand");
  expect_one_line_usage_error(run({"local", "--config", "missing.yaml"}), "missing.yaml");
  expect_one_line_usage_error(run({"averager"}), "--listen");
  expect_one_line_usage_error(run({"worker", "--averager", "nowhere"}), "--averager");
  std::ofstream{path("bad.yaml")} << "workers: 2\nspeed: fast\n";
  expect_one_line_usage_error(run({"local", "--config", "bad.yaml"}), "unknown key 'speed'");
}

TEST_F(CommandTest, UnknownModelAndBadPluginAreRefusedBeforeStarting) {
  expect_one_line_usage_error(run({"local", "--model", "no-such-model", "--log-dir", "logs"}),
                              "unknown model 'no-such-model'");
  expect_one_line_usage_error(run({"local", "--plugin", PRSGD_TEST_PLUGIN_WRONG_ABI, "--log-dir", "logs"}),
                              "ABI version");
  EXPECT_FALSE(std::filesystem::exists(path("logs"))) << "nothing may start after a usage error";
}

TEST_F(CommandTest, PluginModelIsKnownToTheRegistry) {
  // The plugin's model passes the registry check; the run then proceeds to start the cluster.
  auto r = run({"local", "--plugin", PRSGD_TEST_PLUGIN_REGISTERS_MODEL, "--model", "plugin-mlp", "--workers", "1",
                "--rounds", "1", "--log-dir", "logs", "--progress", "off", "--grace-s", "1"});
  EXPECT_EQ(r.err.find("unknown model"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(path("logs/averager.log"))) << r.err;
}

TEST_F(CommandTest, LocalStartsAveragerAndWorkersAndReportsEachExit) {
  auto r =
      run({"local", "--workers", "2", "--rounds", "1", "--log-dir", "logs", "--progress", "off", "--grace-s", "1"});
  EXPECT_EQ(r.status, 0) << r.err << read(path("logs/averager.log"));
  for (const char* name : {"averager", "worker-0", "worker-1"}) {
    EXPECT_TRUE(std::filesystem::exists(path(std::string{"logs/"} + name + ".log"))) << name;
    EXPECT_NE(r.err.find(std::string{name} + " "), std::string::npos) << "no exit report for " << name << ":\n"
                                                                      << r.err;
  }
  EXPECT_NE(r.err.find("averager   exited with status 0"), std::string::npos) << r.err;
  // The averager bound a port the system chose and announced it; the workers were given that endpoint.
  const auto endpoint = read(path("logs/averager.endpoint"));
  ASSERT_EQ(endpoint.rfind("tcp://127.0.0.1:", 0), 0U) << endpoint;
  EXPECT_NE(endpoint, "tcp://127.0.0.1:0\n");
  EXPECT_NE(r.err.find("averager listens on " + endpoint.substr(0, endpoint.size() - 1)), std::string::npos) << r.err;
}

// Directories named by --log-dir and --metrics-jsonl are created; a job run again on its --checkpoint-dir keeps
// the rounds its metrics file already holds (here the job had finished, so the second run only says so).
TEST_F(CommandTest, LocalCreatesItsDirectoriesAndKeepsTheRoundsOfAResumedJob) {
  const std::vector<std::string> args{"local",
                                      "--workers",
                                      "1",
                                      "--rounds",
                                      "3",
                                      "--interval",
                                      "2",
                                      "--batch",
                                      "16",
                                      "--log-dir",
                                      "logs/a/b",
                                      "--metrics-jsonl",
                                      "runs/x/m.jsonl",
                                      "--checkpoint-dir",
                                      "ckpt",
                                      "--checkpoint-every",
                                      "1",
                                      "--progress",
                                      "off",
                                      "--grace-s",
                                      "1"};
  const auto rounds_in = [&] {
    int n = 0;
    for (const auto& l : prsgd::test::lines_of(read(path("runs/x/m.jsonl")))) {
      n += l.rfind(R"({"round":)", 0) == 0 ? 1 : 0;
    }
    return n;
  };
  auto first = run(args);
  ASSERT_EQ(first.status, 0) << first.err << read(path("logs/a/b/averager.log"));
  EXPECT_EQ(rounds_in(), 3);
  auto again = run(args);
  ASSERT_EQ(again.status, 0) << again.err << read(path("logs/a/b/averager.log"));
  EXPECT_NE(read(path("logs/a/b/averager.log")).find("already finished"), std::string::npos)
      << read(path("logs/a/b/averager.log"));
  EXPECT_EQ(rounds_in(), 3) << "the earlier rounds were lost:\n" << read(path("runs/x/m.jsonl"));
}

// A real job (averager and two worker processes) with every wire dtype: it finishes, trains, and the
// lossy dtypes move fewer payload bytes per round than f32 (bf16 and f16 about half, int8 about a quarter).
TEST_F(CommandTest, LocalJobFinishesWithEveryWireDtype) {
  std::map<std::string, double> bytes_per_round;
  for (const std::string dtype : {"f32", "bf16", "f16", "int8"}) {
    SCOPED_TRACE(dtype);
    const std::string metrics = "m-" + dtype + ".jsonl";
    auto r = run({"local", "--workers", "2", "--rounds", "4", "--interval", "2", "--batch", "16", "--wire-dtype", dtype,
                  "--metrics-jsonl", metrics, "--log-dir", "logs-" + dtype, "--progress", "off", "--grace-s", "1"});
    ASSERT_EQ(r.status, 0) << r.err << read(path("logs-" + dtype + "/averager.log"));
    double bytes = 0;
    int rounds = 0;
    for (const auto& l : prsgd::test::lines_of(read(path(metrics)))) {
      if (l.rfind(R"({"round":)", 0) != 0) {
        continue;
      }
      ++rounds;
      for (const char* key : {R"("bytes_in":)", R"("bytes_out":)"}) {
        const auto at = l.find(key);
        ASSERT_NE(at, std::string::npos) << l;
        bytes += std::stod(l.substr(at + std::string{key}.size()));
      }
      const auto loss = l.find(R"("train_loss":)");
      ASSERT_NE(loss, std::string::npos) << l;
      EXPECT_NE(l.substr(loss + 13, 4), "null") << "round trained: " << l;
    }
    ASSERT_EQ(rounds, 4);
    bytes_per_round[dtype] = bytes / rounds;
  }
  // Round 0's RESTARTs are whole f32 models in every dtype; the MODELs and later RESTARTs shrink.
  EXPECT_LT(bytes_per_round["bf16"], 0.7 * bytes_per_round["f32"]);
  EXPECT_LT(bytes_per_round["f16"], 0.7 * bytes_per_round["f32"]);
  EXPECT_LT(bytes_per_round["int8"], 0.45 * bytes_per_round["f32"]);
}

TEST_F(CommandTest, LocalReportsAnAveragerThatExitsBeforeListeningAndStartsNoWorker) {
  // The test holds a port the system chose; `prsgd local --port` that port cannot bind it.
  const prsgd::test::held_tcp_port taken{/*listen=*/true};
  ASSERT_GT(taken.port(), 0);
  const std::string port = std::to_string(taken.port());
  auto r = run({"local", "--workers", "2", "--rounds", "1", "--port", port, "--log-dir", "logs", "--progress", "off"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("prsgd local: averager exited with status 1 before it listened; the end of "), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("  prsgd averager: cannot start on tcp://127.0.0.1:" + port), std::string::npos)
      << "the averager's own error is shown from its log:\n"
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("logs/worker-0.log"))) << "no worker starts before the averager listens";
  EXPECT_FALSE(std::filesystem::exists(path("logs/averager.endpoint")));
}

TEST_F(CommandTest, EndpointFileNamesTheBoundEndpoint) {
  prsgd::test::prsgd_job job{PRSGD_BINARY, "prsgd-endpoint-file"};
  const auto head = job.start_listening("head", "head", {});
  ASSERT_TRUE(head) << job.log("head");
  const auto averager = job.start_averager({"--head", head->endpoint, "--rounds", "1", "--progress", "off"});
  ASSERT_TRUE(averager) << job.log("averager");
  for (const auto& ep : {head->endpoint, averager->endpoint}) {
    ASSERT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0U) << ep;
    const int port = std::stoi(ep.substr(std::string{"tcp://127.0.0.1:"}.size()));
    EXPECT_GT(port, 0) << ep;
  }
  EXPECT_NE(head->endpoint, averager->endpoint);
  EXPECT_NE(job.log("averager").find("listening on " + averager->endpoint), std::string::npos) << job.log("averager");
  EXPECT_FALSE(std::filesystem::exists(job.path("averager.endpoint.tmp")));
  EXPECT_FALSE(std::filesystem::exists(job.path("head.endpoint.tmp")));
}

// --join-timeout-ms: a worker (or an evaluator) that no averager answers, or whose averager is gone for good, ends
// with status 1 and one line instead of asking for ever. Port 1 on loopback: nothing listens there.
TEST_F(CommandTest, WorkersAndEvaluatorsGiveUpWhenNoAveragerAnswersInTime) {
  prsgd::test::prsgd_job job{PRSGD_BINARY, "prsgd-join-timeout"};
  // A worker, and an evaluator asking for the job's spec, give up under the same limit.
  for (const std::string role : {"worker", "evaluator"}) {
    const auto nobody = job.run({role, "--averager", "tcp://127.0.0.1:1", "--join-timeout-ms", "1000", "--data-dir",
                                 prsgd::test::fmnist_dir(), "--progress", "off"},
                                std::chrono::seconds{60});
    EXPECT_EQ(nobody.status, 1) << nobody.err;
    EXPECT_NE(
        nobody.err.find("prsgd " + role +
                        ": no averager answered at tcp://127.0.0.1:1 within 1 s (--join-timeout-ms); giving up\n"),
        std::string::npos)
        << nobody.err;
    EXPECT_EQ(
        job.run({role, "--averager", "tcp://127.0.0.1:1", "--join-timeout-ms", "-1"}, std::chrono::seconds{60}).status,
        2)
        << role;
  }

  // A member whose averager dies rejoins, and gives up when nothing welcomes it within the limit.
  const auto averager = job.start_averager({"--model", "fmnist-mlp", "--min-workers", "1", "--rounds", "100000",
                                            "--interval", "4", "--heartbeat-ms", "100", "--progress", "off"});
  ASSERT_TRUE(averager) << job.log("averager");
  const pid_t worker =
      job.start_worker(1, {"--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000", "--slowest-link-mbit", "10000",
                           "--join-timeout-ms", "2000", "--data-dir", prsgd::test::fmnist_dir(), "--progress", "off"});
  ASSERT_TRUE(job.wait_for_log("worker-1", "joined as member", std::chrono::seconds{120})) << job.log("worker-1");
  ASSERT_EQ(::kill(averager->pid, SIGKILL), 0);
  EXPECT_EQ(job.wait_exit(worker, std::chrono::seconds{120}), 1) << job.log("worker-1");
  const std::string log = job.log("worker-1");
  EXPECT_NE(log.find("prsgd worker: no averager welcomed this worker within 2 s at " + averager->endpoint +
                     " (--join-timeout-ms); giving up"),
            std::string::npos)
      << log;
}

TEST_F(CommandTest, UnwritableEndpointFileIsAOneLineErrorAndExitOne) {
  for (const char* role : {"averager", "head"}) {
    auto r =
        run({role, "--listen", "tcp://127.0.0.1:*", "--endpoint-file", path("no-such-dir/ep"), "--log-level", "warn"});
    EXPECT_EQ(r.status, 1) << role << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind(std::string{"prsgd "} + role + ": ", 0), 0U) << r.err;
    EXPECT_NE(r.err.find("cannot write the endpoint file '" + path("no-such-dir/ep.tmp") + "'"), std::string::npos)
        << r.err;
  }
}

TEST_F(CommandTest, KeygenWritesAKeyPairOrSaysItCannot) {
  auto r = run({"keygen", "--out-dir", "keys", "--name", "avg"});
#ifdef PRSGD_TEST_HAVE_KEYGEN
  ASSERT_EQ(r.status, 0) << r.err;
  const auto pub = read(path("keys/avg.public"));
  const auto sec = read(path("keys/avg.secret"));
  EXPECT_EQ(pub.size(), 41u) << pub;  // 40 Z85 characters and a newline
  EXPECT_EQ(sec.size(), 41u);
  EXPECT_NE(pub, sec);
  EXPECT_EQ(std::filesystem::status(path("keys/avg.secret")).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto again = run({"keygen", "--out-dir", "keys", "--name", "avg"});
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  EXPECT_EQ(read(path("keys/avg.public")), pub) << "an existing key was overwritten";
#else
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no CURVE key generator"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("keys/avg.secret")));
#endif
}

}  // namespace
