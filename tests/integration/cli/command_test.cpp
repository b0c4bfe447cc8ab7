// SPDX-License-Identifier: Apache-2.0
// The `prsgd` binary as a user runs it: exit statuses, one-line errors, help, and `prsgd local`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "child_process.hpp"

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
  auto r = run({"local", "--workers", "2", "--rounds", "1", "--log-dir", "logs", "--progress", "off",
                "--grace-s", "1"});
  for (const char* name : {"averager", "worker-0", "worker-1"}) {
    EXPECT_TRUE(std::filesystem::exists(path(std::string{"logs/"} + name + ".log"))) << name;
    EXPECT_NE(r.err.find(std::string{name} + " "), std::string::npos) << "no exit report for " << name << ":\n"
                                                                      << r.err;
  }
  // The status is the averager's: whatever it was, `local` must agree with what its log says.
  const auto avg_log = read(path("logs/averager.log"));
  if (r.status == 0) {
    EXPECT_NE(r.err.find("averager   exited with status 0"), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.err.find("failed (status"), std::string::npos) << r.err;
    EXPECT_FALSE(avg_log.empty()) << "a failing averager must say why in its log";
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
