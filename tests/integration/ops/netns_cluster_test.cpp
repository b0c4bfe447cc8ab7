// SPDX-License-Identifier: Apache-2.0
// ops/netns-cluster: 3 namespace hosts on a bridge, reachability, a cut cable, and a teardown that leaves
// nothing behind, also after a failing job and after Ctrl-C. Needs root; skips otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>

#include "child_process.hpp"

namespace {

using namespace prsgd::test;
namespace test = prsgd::test;
using namespace std::chrono_literals;

const std::string script = std::string{PRSGD_SOURCE_DIR} + "/ops/netns-cluster";

class NetnsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "needs root for network namespaces";
    }
    // A prefix of our own, so parallel runs never touch each other's hosts.
    prefix_ = "pt" + std::to_string(::getpid() % 100000);
    const auto probe = "ip netns add " + prefix_ + "-probe && ip netns del " + prefix_ + "-probe";
    if (run_quiet(shell(probe)) != 0) {
      GTEST_SKIP() << "cannot create network namespaces here";
    }
    active_ = true;
  }

  void TearDown() override {
    if (!active_) {
      return;
    }
    // Always tear down, also when an assertion failed midway, then prove nothing is left.
    run({"down"});
    EXPECT_EQ(leftovers(), "") << "teardown left namespaces or links behind";
  }

  run_result run(const std::vector<std::string>& args) {
    return test::run(command(script, args), {.out = dir_ / "out.txt", .env = env()});
  }

  /// Returns the stdout of a shell command (for `ip netns list` and friends).
  std::string shell_output(const std::string& cmd) const {
    return test::run(shell(cmd), {.out = dir_ / "shell.txt"}).out;
  }

  std::vector<std::string> env() const {
    return {"PRSGD_NETNS_PREFIX=" + prefix_, "PRSGD_NETNS_LOG_DIR=" + dir_ / "logs"};
  }

  // Names of namespaces and root-namespace links carrying our prefix ("" when clean).
  std::string leftovers() const {
    return shell_output("{ ip netns list; ip -o link show; } | grep -o '" + prefix_ + "-[a-z0-9]*' | sort -u");
  }

  std::string prefix_;
  scratch_dir dir_{"prsgd-netns", /*keep_on_failure=*/true};
  bool active_ = false;
};

TEST_F(NetnsClusterTest, ThreeHostsReachEachOtherUntilTheCableIsCut) {
  auto up = run({"up", "3", "--rate", "100mbit"});
  ASSERT_EQ(up.status, 0) << up.out;
  EXPECT_NE(leftovers().find(prefix_ + "-h3"), std::string::npos);
  EXPECT_EQ(shell_output("ip -o link show | grep -c '" + prefix_ + "' || true"), "0\n")
      << "nothing may be added to the root namespace";

  auto addr = run({"exec", "2", "ip", "-o", "-4", "addr", "show", "dev", "eth0"});
  ASSERT_EQ(addr.status, 0) << addr.out;
  EXPECT_NE(addr.out.find("10.77.0.2/24"), std::string::npos) << addr.out;
  auto qdisc = run({"exec", "2", "tc", "qdisc", "show", "dev", "eth0"});
  EXPECT_NE(qdisc.out.find("tbf"), std::string::npos) << qdisc.out;
  EXPECT_NE(qdisc.out.find("100Mbit"), std::string::npos) << qdisc.out;

  auto reach = run({"check", "2", "1"});
  EXPECT_EQ(reach.status, 0) << "host 2 cannot reach host 1: " << reach.out;

  ASSERT_EQ(run({"link", "1", "down"}).status, 0);
  auto cut = run({"check", "2", "1"});
  EXPECT_NE(cut.status, 0) << "host 2 still reaches host 1 with the cable cut";
  EXPECT_EQ(run({"check", "2", "3"}).status, 0) << "cutting host 1 must not affect host 3";

  ASSERT_EQ(run({"link", "1", "up"}).status, 0);
  EXPECT_EQ(run({"check", "2", "1"}).status, 0) << "reachability did not come back";

  auto status = run({"status"});
  EXPECT_NE(status.out.find(prefix_ + "-h1"), std::string::npos) << status.out;

  auto down = run({"down"});
  ASSERT_EQ(down.status, 0) << down.out;
  EXPECT_EQ(leftovers(), "");
}

TEST_F(NetnsClusterTest, UpRefusesToOverwriteAndBadArgumentsFail) {
  ASSERT_EQ(run({"up", "2"}).status, 0);
  EXPECT_NE(run({"up", "2"}).status, 0);
  EXPECT_NE(run({"exec", "9", "true"}).status, 0);
  EXPECT_NE(run({"link", "1", "sideways"}).status, 0);
  EXPECT_NE(run({"frobnicate"}).status, 0);
}

TEST_F(NetnsClusterTest, TheBucketGrowsWithTheRateAndBadRatesCreateNothing) {
  // 0.32 ms of the rate: 40,000 bytes at 1gbit (a fixed 4 KB bucket let such a link carry about 380 Mbit/s),
  // and the 4 KB bucket a 100mbit link always had.
  auto up = run({"up", "2", "--rate", "1gbit"});
  ASSERT_EQ(up.status, 0) << up.out;
  auto fast = run({"exec", "1", "tc", "qdisc", "show", "dev", "eth0"});
  std::smatch burst;
  ASSERT_TRUE(std::regex_search(fast.out, burst, std::regex{"rate 1Gbit burst ([0-9]+)b"})) << fast.out;
  EXPECT_GE(std::stoul(burst[1].str()), 39000u) << fast.out;  // tc shows the kernel's rounding of 40,000
  ASSERT_EQ(run({"rate", "2", "100mbit"}).status, 0);
  auto slow = run({"exec", "2", "tc", "qdisc", "show", "dev", "eth0"});
  EXPECT_NE(slow.out.find("rate 100Mbit burst 4Kb"), std::string::npos) << slow.out;
  auto status = run({"status"});
  EXPECT_NE(status.out.find("tbf 100Mbit burst 4Kb"), std::string::npos) << status.out;

  auto bad_rate = run({"rate", "1", "fast"});
  EXPECT_EQ(bad_rate.status, 2) << bad_rate.out;
  auto kept = run({"exec", "1", "tc", "qdisc", "show", "dev", "eth0"});
  EXPECT_NE(kept.out.find("rate 1Gbit"), std::string::npos)
      << "a refused rate must leave the link as it was: " << kept.out;
  ASSERT_EQ(run({"down"}).status, 0);
  auto bad_up = run({"up", "2", "--rate", "10furlongs"});
  EXPECT_EQ(bad_up.status, 2) << bad_up.out;
  EXPECT_NE(bad_up.out.find("rate must look like 100mbit or 1gbit (got '10furlongs')"), std::string::npos)
      << bad_up.out;
  EXPECT_EQ(leftovers(), "") << "a refused rate must create no host";
}

TEST_F(NetnsClusterTest, RunSubstitutesAddressesAndTearsDown) {
  auto r = run({"run", "3", "--grace", "5", "--", "/bin/sh", "-c", "echo averager on {addr} host {host}", "--",
                "/bin/sh", "-c", "echo worker {worker} of {workers} on {addr} to {averager}"});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(read_file(dir_ / "logs/h1.log"), "averager on 10.77.0.1 host 1\n");
  EXPECT_EQ(read_file(dir_ / "logs/h3.log"), "worker 1 of 2 on 10.77.0.3 to 10.77.0.1\n");
  EXPECT_EQ(leftovers(), "");
}

TEST_F(NetnsClusterTest, FailingJobStillTearsDownAndReportsItsStatus) {
  auto r = run({"run", "2", "--", "/bin/sh", "-c", "exit 5", "--", "sleep", "30"});
  EXPECT_EQ(r.status, 5) << r.out;
  EXPECT_EQ(leftovers(), "");
}

TEST_F(NetnsClusterTest, InterruptedJobTearsDown) {
  const pid_t pid =
      spawn({script, "run", "2", "--", "sleep", "60", "--", "sleep", "60"}, {.out = dir_ / "run.txt", .env = env()});
  // Wait (with a deadline) until host 2 exists, i.e. the job is running.
  wait_until([&] { return leftovers().find(prefix_ + "-h2") != std::string::npos; }, 60s, 50ms);
  ASSERT_NE(leftovers().find(prefix_ + "-h2"), std::string::npos) << read_file(dir_ / "run.txt");
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_status(pid), 130) << read_file(dir_ / "run.txt");
  EXPECT_EQ(leftovers(), "");
}

}  // namespace
