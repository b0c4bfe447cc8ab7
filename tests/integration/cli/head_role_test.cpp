// SPDX-License-Identifier: Apache-2.0
// The head role's pieces in one process over real ZeroMQ on 127.0.0.1: a head_server, the averager's
// registration and the workers' lookup (cli/src/head_role.cpp), plus the endpoint helpers.
#include "head_role.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "prsgd/cli/key_files.hpp"
#include "prsgd/transport/zmq_transport.hpp"
#include "time_scale.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

liveness_options fast() {
  liveness_options l;
  l.heartbeat_ms = 100;
  l.heartbeat_timeout_ms = 1000;
  return l;
}

TEST(HeadRoleTest, AdvertisedEndpointReplacesOnlyWildcardHosts) {
  EXPECT_EQ(advertised_endpoint("tcp://0.0.0.0:7500", "10.77.0.1"), "tcp://10.77.0.1:7500");
  EXPECT_EQ(advertised_endpoint("tcp://*:7500", "10.77.0.1"), "tcp://10.77.0.1:7500");
  EXPECT_EQ(advertised_endpoint("tcp://127.0.0.1:7500", "10.77.0.1"), "tcp://127.0.0.1:7500");
  EXPECT_EQ(advertised_endpoint("tcp://10.0.0.5:7500", "10.77.0.1"), "tcp://10.0.0.5:7500");
  EXPECT_EQ(advertised_endpoint("ipc:///tmp/prsgd.sock", "10.77.0.1"), "ipc:///tmp/prsgd.sock");
}

TEST(HeadRoleTest, LocalAddressTowardsLoopbackHeadIsLoopback) {
  auto a = local_address_towards("tcp://127.0.0.1:7400");
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_EQ(*a, "127.0.0.1");
  auto ipc = local_address_towards("ipc:///tmp/head.sock");
  ASSERT_TRUE(ipc);
  EXPECT_EQ(*ipc, "127.0.0.1");
}

TEST(HeadRoleTest, LocalAddressTowardsRefusesBadEndpointsAndUnknownHosts) {
  auto bad = local_address_towards("http://x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  auto unknown = local_address_towards("tcp://no-such-host.invalid:7400");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, errc::not_found);
}

TEST(HeadRoleTest, WorkerFindsTheRegisteredAveragerAndWildcardHostIsAdvertised) {
  auto head = head_server::start("tcp://127.0.0.1:*", fast(), {});
  ASSERT_TRUE(head) << head.error().message();
  auto reg = register_averager(head->endpoint(), "tcp://0.0.0.0:7517", fast(), {});
  ASSERT_TRUE(reg) << reg.error().message();
  auto found = lookup_averager(head->endpoint(), fast(), {}, 5s);
  ASSERT_TRUE(found) << found.error().message();
  EXPECT_EQ(*found, "tcp://127.0.0.1:7517");
}

// Whether the registration lands before the lookup's first question or between its retries, the lookup
// returns the registered endpoint. (That it retries while nothing is registered: LookupTimesOutWithoutAnAverager.)
TEST(HeadRoleTest, LookupReturnsAnAveragerThatRegistersWhileItRuns) {
  auto head = head_server::start("tcp://127.0.0.1:*", fast(), {});
  ASSERT_TRUE(head) << head.error().message();
  std::atomic<bool> looking{false};
  expected<std::string> found = fail(errc::timeout, "not run");
  std::thread lookup([&] {
    looking = true;
    found = lookup_averager(head->endpoint(), fast(), {}, test::scaled(10s));
  });
  while (!looking) {
    std::this_thread::yield();
  }
  auto reg = register_averager(head->endpoint(), "tcp://127.0.0.1:7518", fast(), {});
  lookup.join();
  ASSERT_TRUE(reg) << reg.error().message();
  ASSERT_TRUE(found) << found.error().message();
  EXPECT_EQ(*found, "tcp://127.0.0.1:7518");
}

TEST(HeadRoleTest, LookupTimesOutWithoutAnAverager) {
  auto head = head_server::start("tcp://127.0.0.1:*", fast(), {});
  ASSERT_TRUE(head) << head.error().message();
  const auto start = std::chrono::steady_clock::now();
  auto found = lookup_averager(head->endpoint(), fast(), {}, 800ms);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().code, errc::timeout);
  EXPECT_NE(found.error().context.find("no averager is registered at the head"), std::string::npos)
      << found.error().context;
  EXPECT_GE(took, 750ms);
  EXPECT_LT(took, test::scaled(5s));
}

/// Writes a fresh key pair NAME.public / NAME.secret into `dir`.
key_file_paths make_keys(const std::string& dir, const std::string& name) {
  auto pair = generate_curve_keypair();
  EXPECT_TRUE(pair);
  keygen_options k;
  k.out_dir = dir;
  k.name = name;
  k.force = true;
  auto paths = write_key_files(k, pair->public_key, pair->secret_key);
  EXPECT_TRUE(paths) << paths.error().message();
  return *paths;
}

// With CURVE, the head admits the averager (the server key pair) and listed workers; a process with an
// unknown key or none finds nothing, because its connection never completes the handshake.
TEST(HeadRoleTest, HeadWithCurveKeysAdmitsOnlyListedKeys) {
  const auto dir =
      (std::filesystem::temp_directory_path() / ("prsgd-head-curve-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const auto server = make_keys(dir, "server");
  const auto worker = make_keys(dir, "worker");
  const auto stranger = make_keys(dir, "stranger");
  security_options head_keys;
  head_keys.curve_public_key = server.public_path;
  head_keys.curve_secret_key = server.secret_path;
  head_keys.curve_allow = {server.public_path, worker.public_path};
  security_options averager_keys;
  averager_keys.curve_public_key = server.public_path;
  averager_keys.curve_secret_key = server.secret_path;
  security_options worker_keys;
  worker_keys.curve_public_key = worker.public_path;
  worker_keys.curve_secret_key = worker.secret_path;
  worker_keys.curve_server_key = server.public_path;
  security_options stranger_keys = worker_keys;
  stranger_keys.curve_public_key = stranger.public_path;
  stranger_keys.curve_secret_key = stranger.secret_path;

  auto head = head_server::start("tcp://127.0.0.1:*", fast(), head_keys);
  ASSERT_TRUE(head) << head.error().message();
  auto reg = register_averager(head->endpoint(), "tcp://127.0.0.1:7524", fast(), averager_keys);
  ASSERT_TRUE(reg) << reg.error().message();
  auto found = lookup_averager(head->endpoint(), fast(), worker_keys, test::scaled(10s));
  ASSERT_TRUE(found) << found.error().message();
  EXPECT_EQ(*found, "tcp://127.0.0.1:7524");

  auto refused = lookup_averager(head->endpoint(), fast(), stranger_keys, 1500ms);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, errc::timeout);
  auto plain = lookup_averager(head->endpoint(), fast(), {}, 1500ms);
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().code, errc::timeout);
  std::filesystem::remove_all(dir);
}

TEST(HeadRoleTest, LookupTimesOutWhenTheHeadIsNotThere) {
  auto found = lookup_averager("tcp://127.0.0.1:1", fast(), {}, 600ms);
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().code, errc::timeout);
  EXPECT_NE(found.error().context.find("the head does not answer"), std::string::npos) << found.error().context;
}

TEST(HeadRoleTest, RegistrationFailsWhenTheHeadDoesNotAnswer) {
  auto reg = register_averager("tcp://127.0.0.1:1", "tcp://127.0.0.1:7519", fast(), {});
  ASSERT_FALSE(reg);
  EXPECT_EQ(reg.error().code, errc::timeout) << reg.error().message();
}

TEST(HeadRoleTest, SecondLiveAveragerIsRefused) {
  auto head = head_server::start("tcp://127.0.0.1:*", fast(), {});
  ASSERT_TRUE(head) << head.error().message();
  auto first = register_averager(head->endpoint(), "tcp://127.0.0.1:7520", fast(), {});
  ASSERT_TRUE(first) << first.error().message();
  auto second = register_averager(head->endpoint(), "tcp://127.0.0.1:7521", fast(), {});
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, errc::already_exists);
  EXPECT_NE(second.error().context.find("tcp://127.0.0.1:7520"), std::string::npos) << second.error().context;
}

TEST(HeadRoleTest, DestroyedRegistrationIsDroppedAndAReplacementRegisters) {
  auto head = head_server::start("tcp://127.0.0.1:*", fast(), {});
  ASSERT_TRUE(head) << head.error().message();
  {
    auto first = register_averager(head->endpoint(), "tcp://127.0.0.1:7522", fast(), {});
    ASSERT_TRUE(first) << first.error().message();
  }
  // The old averager's node said goodbye: no worker is sent to it any more.
  auto none = lookup_averager(head->endpoint(), fast(), {}, 600ms);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().context.find("no averager is registered"), std::string::npos) << none.error().context;
  auto second = register_averager(head->endpoint(), "tcp://127.0.0.1:7523", fast(), {});
  ASSERT_TRUE(second) << second.error().message();
  auto found = lookup_averager(head->endpoint(), fast(), {}, 5s);
  ASSERT_TRUE(found) << found.error().message();
  EXPECT_EQ(*found, "tcp://127.0.0.1:7523");
}

}  // namespace
}  // namespace prsgd::cli
