// SPDX-License-Identifier: Apache-2.0
// A raw ZeroMQ client sends garbage, truncated, oversized and wrong-version messages and payloads whose
// sizes disagree with the header to a node over tcp://127.0.0.1; the node answers with errors where the
// sender waits, counts everything, and keeps serving valid calls.
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <zmq.hpp>

#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/node.hpp"
#include "wire_test_actors.hpp"

namespace prsgd::wire {
namespace {

using namespace std::chrono_literals;

/// Speaks the zmq transport's framing ("D" kind frame, then the message) without any prsgd code.
class raw_client {
 public:
  explicit raw_client(const std::string& endpoint) : sock_(ctx_, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::rcvtimeo, 10000);
    sock_.set(zmq::sockopt::linger, 0);
    sock_.connect(endpoint);
  }
  void send(const std::vector<std::string>& frames) {
    sock_.send(zmq::buffer(std::string_view("D")), frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      sock_.send(zmq::buffer(frames[i]), more);
    }
  }
  /// Returns the next data message's frames (without the kind frame), skipping heartbeats.
  std::optional<std::vector<frame>> receive() {
    while (true) {
      std::vector<zmq::message_t> parts;
      do {
        zmq::message_t m;
        if (!sock_.recv(m)) {
          return std::nullopt;
        }
        parts.push_back(std::move(m));
      } while (parts.back().more());
      if (parts.empty() || parts[0].size() < 1 || *static_cast<const char*>(parts[0].data()) != 'D') {
        continue;
      }
      std::vector<frame> out;
      for (std::size_t i = 1; i < parts.size(); ++i) {
        out.push_back(frame::copy(parts[i].data(), parts[i].size()));
      }
      return out;
    }
  }

 private:
  zmq::context_t ctx_;
  zmq::socket_t sock_;
};

std::string header_bytes(const envelope& env) {
  auto h = encode_header(env);
  EXPECT_TRUE(h) << h.error().message();
  return h ? std::string{h->view()} : std::string{};
}

envelope ask_counter(std::uint64_t cid, std::vector<std::byte> args) {
  envelope env;
  env.hdr.type = message_type::ask;
  env.hdr.from = actor_address{"raw", 0};
  env.hdr.to_name = "counter";
  env.hdr.method = "add";
  env.hdr.correlation_id = cid;
  env.hdr.args = std::move(args);
  return env;
}

TEST(WireBadInputTest, NodeRejectsCountsAndKeepsServing) {
  remote_registry reg;
  testing::register_test_types(reg);
  config cfg;
  cfg.threads = 2;
  cfg.compute_threads = 1;
  actor_system system{cfg};
  ASSERT_TRUE(system.spawn<testing::counter>(named{"counter"}, 100));
  node_config ncfg;
  ncfg.name = "target";
  auto n = node::make(system, reg, ncfg, testing::zmq_factory());
  ASSERT_TRUE(n) << n.error().message();
  node& target = **n;
  raw_client client{target.endpoint()};

  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uint64_t expected_malformed = 0;

  // 1. Random garbage headers, with and without extra frames.
  for (int i = 0; i < 50; ++i) {
    std::string junk(1 + rng() % 200, '\0');
    for (auto& ch : junk) {
      ch = static_cast<char>(rng());
    }
    std::vector<std::string> frames{junk};
    if (i % 2 == 0) {
      frames.emplace_back("payload");
    }
    client.send(frames);
    ++expected_malformed;
  }
  // 2. Every truncation of a valid ask header (no correlation id can be read from most of them).
  const std::string valid = header_bytes(ask_counter(1, pack_tuple(std::tuple<int>{1})));
  for (std::size_t cut = 1; cut < valid.size(); cut += 3) {
    client.send({valid.substr(0, cut)});
    ++expected_malformed;
  }
  // 3. An oversized header (above the 64 KiB limit).
  client.send({std::string(70 * 1024, 'x')});
  ++expected_malformed;
  // 4. An empty message (kind frame only) and an empty header frame.
  client.send({});
  ++expected_malformed;
  client.send({std::string{}});
  ++expected_malformed;

  // 5. Wrong protocol version on an ask: answered with protocol_error.
  {
    msgpack::sbuffer sb;
    msgpack::packer<msgpack::sbuffer> pk(sb);
    pk.pack_map(5);
    pk.pack(std::string("v"));
    pk.pack(99);
    pk.pack(std::string("t"));
    pk.pack(static_cast<int>(message_type::ask));
    pk.pack(std::string("c"));
    pk.pack(501);
    pk.pack(std::string("tn"));
    pk.pack(std::string("counter"));
    pk.pack(std::string("m"));
    pk.pack(std::string("add"));
    client.send({std::string(sb.data(), sb.size())});
    ++expected_malformed;
  }
  // 6. Payload frames that disagree with the header: too short, missing, and one too many.
  {
    envelope env = ask_counter(502, pack_tuple(std::tuple<int>{1}));
    env.payloads.push_back(payload{frame::copy("12345678"), dtype::f32, {2}, std::nullopt});
    const std::string h = header_bytes(env);
    client.send({h, "1234"});
    client.send({h});
    client.send({h, "12345678", "extra"});
    expected_malformed += 3;
  }

  // Errors come back for the waiting asks (5 and 6), in order.
  const auto expect_error = [&](std::uint64_t cid, errc code) {
    auto reply = client.receive();
    ASSERT_TRUE(reply) << "no answer for correlation id " << cid;
    auto env = decode(*reply);
    ASSERT_TRUE(env) << env.error().message();
    EXPECT_EQ(env->hdr.type, message_type::error);
    EXPECT_EQ(env->hdr.correlation_id, cid);
    EXPECT_EQ(env->hdr.error_code, code) << env->hdr.error_context;
  };
  expect_error(501, errc::protocol_error);
  expect_error(502, errc::protocol_error);
  expect_error(502, errc::protocol_error);
  expect_error(502, errc::protocol_error);

  // 7. Valid envelopes the node refuses: bad argument types, unknown method, unknown actor.
  client.send({header_bytes(ask_counter(601, pack_tuple(std::tuple<std::string>{"x"})))});
  expect_error(601, errc::decode_failed);
  {
    envelope env = ask_counter(602, pack_tuple(std::tuple<int>{1}));
    env.hdr.method = "no_such_method";
    client.send({header_bytes(env)});
    expect_error(602, errc::not_found);
    env = ask_counter(603, pack_tuple(std::tuple<int>{1}));
    env.hdr.to_name.clear();
    env.hdr.to = actor_address{"target", 99999};
    client.send({header_bytes(env)});
    expect_error(603, errc::not_found);
  }
  // Arguments that are not msgpack at all.
  {
    envelope env = ask_counter(604, {});
    env.hdr.args = {std::byte{0xc1}, std::byte{0xff}};
    client.send({header_bytes(env)});
    expect_error(604, errc::decode_failed);
  }

  // 8. The next valid call succeeds.
  client.send({header_bytes(ask_counter(700, pack_tuple(std::tuple<int>{5})))});
  auto reply = client.receive();
  ASSERT_TRUE(reply);
  auto env = decode(*reply);
  ASSERT_TRUE(env) << env.error().message();
  ASSERT_EQ(env->hdr.type, message_type::reply) << env->hdr.error_context;
  EXPECT_EQ(env->hdr.correlation_id, 700U);
  auto value = unpack_value<int>(env->hdr.args);
  ASSERT_TRUE(value);
  EXPECT_EQ(*value, 105);

  const node_stats s = target.stats();
  EXPECT_EQ(s.malformed, expected_malformed);
  EXPECT_EQ(s.rejected, 4U);
  EXPECT_EQ(s.errors_sent, 8U);
  target.stop();
  system.shutdown(2s);
}

}  // namespace
}  // namespace prsgd::wire
