// SPDX-License-Identifier: Apache-2.0
// Two network namespaces joined by a veth pair (10.77.<n>.1 <-> 10.77.<n>.2); a helper process in each.
// The link is cut (ip link set down) and restored: the client must report the server down within the
// heartbeat timeout and up again after the restore. Needs root; skips otherwise. Every namespace (and with
// it the veth pair) is deleted at the end, also when the test fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "child_process.hpp"

namespace prsgd {
namespace {

using namespace std::chrono_literals;

/// Runs a shell command with its output discarded; returns its exit status.
int run(const std::string& cmd) { return test::run_quiet(test::shell(cmd)); }

// Owns the namespaces; the destructor removes them whatever happened.
struct netns_pair {
  std::string a;
  std::string b;
  std::string veth_a;
  std::string veth_b;
  std::string subnet;
  ~netns_pair() {
    run("ip netns del " + a);
    run("ip netns del " + b);
    run("ip link del " + veth_a);  // only exists if a step failed before moving it into a namespace
  }
};

TEST(NetnsTransportTest, ReportsPeerDownOnLinkCutAndUpAfterRestore) {
  if (::geteuid() != 0 || run("ip netns list") != 0) {
    GTEST_SKIP() << "needs root and iproute2 (ip netns)";
  }
  const int id = static_cast<int>(::getpid() % 200) + 20;
  netns_pair ns{"prsgd-ta-" + std::to_string(::getpid()), "prsgd-tb-" + std::to_string(::getpid()),
                "pva" + std::to_string(::getpid() % 100000), "pvb" + std::to_string(::getpid() % 100000),
                "10.77." + std::to_string(id)};
  if (run("ip netns add " + ns.a) != 0) {
    GTEST_SKIP() << "cannot create network namespaces here";
  }
  ASSERT_EQ(run("ip netns add " + ns.b), 0);
  ASSERT_EQ(run("ip link add " + ns.veth_a + " type veth peer name " + ns.veth_b), 0);
  ASSERT_EQ(run("ip link set " + ns.veth_a + " netns " + ns.a), 0);
  ASSERT_EQ(run("ip link set " + ns.veth_b + " netns " + ns.b), 0);
  ASSERT_EQ(run("ip -n " + ns.a + " addr add " + ns.subnet + ".1/24 dev " + ns.veth_a), 0);
  ASSERT_EQ(run("ip -n " + ns.b + " addr add " + ns.subnet + ".2/24 dev " + ns.veth_b), 0);
  for (const auto& [n, dev] : {std::pair{ns.a, ns.veth_a}, std::pair{ns.b, ns.veth_b}}) {
    ASSERT_EQ(run("ip -n " + n + " link set lo up"), 0);
    ASSERT_EQ(run("ip -n " + n + " link set " + dev + " up"), 0);
  }

  auto server = test::child_process::start({"/usr/sbin/ip", "netns", "exec", ns.b, PRSGD_PEER_HELPER,
                                            "tcp://" + ns.subnet + ".2:*", "server-b", "50", "400"});
  ASSERT_TRUE(server);
  const auto ep = server->read_endpoint(10s);
  ASSERT_TRUE(ep) << "no endpoint";

  auto client = test::child_process::start(
      {"/usr/sbin/ip", "netns", "exec", ns.a, PRSGD_PEER_HELPER, "--connect", *ep, "client-a", "50", "400"});
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->wait_line("UP server-b", 10s)) << "client never saw the server over the veth link";

  const auto cut_at = std::chrono::steady_clock::now();
  ASSERT_EQ(run("ip -n " + ns.a + " link set " + ns.veth_a + " down"), 0);
  ASSERT_TRUE(client->wait_line("DOWN server-b", 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - cut_at, 400ms + test::scaled(1000ms));

  ASSERT_EQ(run("ip -n " + ns.a + " link set " + ns.veth_a + " up"), 0);
  EXPECT_TRUE(client->wait_line("UP server-b", 20s)) << "no reconnect after the link came back";
  client->kill();
  server->kill();
}

}  // namespace
}  // namespace prsgd
