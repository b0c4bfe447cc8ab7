// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/endpoint.hpp"

#include <gtest/gtest.h>

namespace prsgd {
namespace {

TEST(EndpointTest, ParsesTcpIpcAndInproc) {
  auto tcp = endpoint::parse("tcp://127.0.0.1:7400");
  ASSERT_TRUE(tcp);
  EXPECT_EQ(tcp->scheme, endpoint::kind::tcp);
  EXPECT_EQ(tcp->address, "127.0.0.1");
  EXPECT_EQ(tcp->port, "7400");
  EXPECT_FALSE(tcp->wildcard_port());
  EXPECT_EQ(tcp->str(), "tcp://127.0.0.1:7400");

  auto wild = endpoint::parse("tcp://*:*");
  ASSERT_TRUE(wild);
  EXPECT_TRUE(wild->wildcard_port());
  EXPECT_TRUE(endpoint::parse("tcp://10.77.0.2:0")->wildcard_port());

  auto ipc = endpoint::parse("ipc:///tmp/x.sock");
  ASSERT_TRUE(ipc);
  EXPECT_EQ(ipc->scheme, endpoint::kind::ipc);
  EXPECT_EQ(ipc->address, "/tmp/x.sock");
  auto inproc = endpoint::parse("inproc://averager");
  ASSERT_TRUE(inproc);
  EXPECT_EQ(inproc->str(), "inproc://averager");
}

TEST(EndpointTest, TellsEndpointsOnThisHostFromOthers) {
  for (const char* here : {"tcp://127.0.0.1:7400", "tcp://127.8.9.1:1", "tcp://localhost:7400", "tcp://[::1]:7400",
                           "ipc:///tmp/x.sock", "inproc://averager"}) {
    EXPECT_TRUE(endpoint::parse(here)->on_this_host()) << here;
  }
  // 192.0.2.0/24 is reserved for documentation: no host has it. Names are not resolved.
  for (const char* there : {"tcp://192.0.2.7:7400", "tcp://[2001:db8::1]:7400", "tcp://example.invalid:7400"}) {
    EXPECT_FALSE(endpoint::parse(there)->on_this_host()) << there;
  }
}

TEST(EndpointTest, RejectsMalformedEndpoints) {
  for (const char* bad : {"", "127.0.0.1:80", "udp://x:1", "tcp://host", "tcp://:80", "tcp://h:", "tcp://h:70000",
                          "tcp://h:8x", "ipc://", "inproc://"}) {
    auto e = endpoint::parse(bad);
    ASSERT_FALSE(e) << bad;
    EXPECT_EQ(e.error().code, errc::invalid_argument) << bad;
  }
}

}  // namespace
}  // namespace prsgd
