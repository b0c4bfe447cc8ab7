// SPDX-License-Identifier: Apache-2.0
// Two nodes on an inproc network with a fake clock and a deterministic actor system: no sockets,
// no sleeps, no threads.
#include "prsgd/runtime/node.hpp"

#include <gtest/gtest.h>

#include "prsgd/runtime/deterministic_system.hpp"
#include "prsgd/runtime/envelope.hpp"
#include "prsgd/transport/inproc_transport.hpp"

namespace prsgd::wire {
namespace {

using namespace std::chrono_literals;

class adder final : public actor {
 public:
  explicit adder(int start) : value_(start) {}
  int add(int n) { return value_ += n; }
  std::string name_of(actor_address a) const { return a.node + "/" + std::to_string(a.id); }
  void set(int v) { value_ = v; }
  int get() const { return value_; }

 private:
  int value_;
};

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reg_.add<adder>("adder")
        .constructor<int>()
        .method("add", &adder::add)
        .method("name_of", &adder::name_of)
        .method("set", &adder::set)
        .method("get", &adder::get);
    a_ = make("a");
    b_ = make("b");
    ASSERT_TRUE(a_ && b_);
    ASSERT_TRUE(a_->connect("b", b_->endpoint()));
    pump();
  }
  void TearDown() override {
    a_.reset();
    b_.reset();
  }

  std::unique_ptr<node> make(const std::string& name, bool head_service = false) {
    node_config cfg;
    cfg.name = name;
    cfg.head_service = head_service;
    cfg.request_timeout = 2s;
    cfg.transport.heartbeat_timeout = 10s;
    auto n = node::make(sys_, reg_, cfg,
                        [this](transport_config c, transport_handlers h) -> expected<std::unique_ptr<transport>> {
                          auto t = inproc_transport::make(net_, std::move(c), std::move(h));
                          if (!t) {
                            return std::move(t).error();
                          }
                          return std::unique_ptr<transport>(std::move(*t));
                        });
    EXPECT_TRUE(n) << n.error().message();
    return n ? std::move(*n) : nullptr;
  }

  /// Moves messages and runs actors until both are idle.
  void pump() {
    for (int i = 0; i < 100; ++i) {
      const std::size_t moved = net_.run_until_idle();
      const std::size_t ran = sys_.dispatch_all();
      if (moved == 0 && ran == 0) {
        return;
      }
    }
  }

  template <class T>
  expected<T> result(future<T>& f) {
    pump();
    auto r = f.try_get();
    if (!r) {
      return fail(errc::timeout, "not ready");
    }
    return std::move(*r);
  }

  deterministic_system sys_;
  inproc_network net_{sys_.clock()};
  remote_registry reg_;
  std::unique_ptr<node> a_;
  std::unique_ptr<node> b_;
};

TEST_F(NodeTest, SpawnsAndCallsAcrossNodes) {
  auto spawned = a_->spawn<adder>(on_node{"b", "acc"}, 5);
  auto ref = result(spawned);
  ASSERT_TRUE(ref) << ref.error().message();
  EXPECT_EQ(ref->address().node, "b");
  auto sum = ref->ask(&adder::add, 3);
  auto v = result(sum);
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, 8);
  ASSERT_TRUE(ref->tell(&adder::set, 40));
  auto got = ref->ask(&adder::get);
  EXPECT_EQ(*result(got), 40);
  // Addresses are data: pass one as an argument.
  auto named = ref->ask(&adder::name_of, ref->address());
  EXPECT_EQ(*result(named), "b/" + std::to_string(ref->address().id));
  EXPECT_EQ(b_->stats().malformed, 0U);
  EXPECT_GE(b_->stats().received, 4U);
}

TEST_F(NodeTest, ReachesLocalActorsThroughTheSameHandle) {
  auto local = sys_.spawn<adder>(10);
  ASSERT_TRUE(local);
  auto ref = a_->ref(*local);
  EXPECT_EQ(ref.address().node, "a");
  auto f = ref.ask(&adder::add, 1);
  auto v = result(f);
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, 11);
}

TEST_F(NodeTest, RequestTimesOutWhenTheLinkIsCut) {
  auto spawned = a_->spawn<adder>(on_node{"b", {}}, 1);
  auto ref = result(spawned);
  ASSERT_TRUE(ref);
  net_.cut("a", "b");
  auto f = ref->ask(&adder::get);
  pump();
  EXPECT_FALSE(f.ready());
  sys_.advance(3s);
  auto r = result(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::timeout);
  EXPECT_EQ(a_->stats().timeouts, 1U);
}

// Request deadlines share one timer armed at the oldest pending request: each request still times out
// at its own deadline, answered requests never count, and later requests keep being timed out.
TEST_F(NodeTest, EachRequestTimesOutAtItsOwnDeadline) {
  auto spawned = a_->spawn<adder>(on_node{"b", {}}, 1);
  auto ref = result(spawned);
  ASSERT_TRUE(ref);
  auto answered = ref->ask(&adder::get);  // answered at once: never a timeout
  ASSERT_TRUE(result(answered));
  net_.cut("a", "b");
  auto first = ref->ask(&adder::get);  // deadline t0 + 2 s
  pump();
  sys_.advance(1s);
  auto second = ref->ask(&adder::get);  // deadline t0 + 3 s
  pump();
  sys_.advance(999ms);  // t0 + 1.999 s: nothing due
  pump();
  EXPECT_FALSE(first.ready());
  sys_.advance(1ms);  // t0 + 2 s: only the first
  pump();
  EXPECT_TRUE(first.ready());
  EXPECT_FALSE(second.ready());
  EXPECT_EQ(a_->stats().timeouts, 1U);
  sys_.advance(1s);  // t0 + 3 s: the second
  auto r2 = result(second);
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().code, errc::timeout);
  EXPECT_EQ(a_->stats().timeouts, 2U);
  // The timer re-arms for requests sent after the queue ran empty.
  auto third = ref->ask(&adder::get);
  pump();
  sys_.advance(2s);
  auto r3 = result(third);
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error().code, errc::timeout);
  EXPECT_EQ(a_->stats().timeouts, 3U);
  auto r1 = result(first);
  ASSERT_FALSE(r1);
  EXPECT_EQ(r1.error().code, errc::timeout);
}

TEST_F(NodeTest, FailsLocallyWithoutARoute) {
  auto f = a_->ref<adder>(actor_address{"nowhere", 1}).ask(&adder::get);
  auto r = result(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::not_found);
  EXPECT_FALSE(a_->ref<adder>(actor_address{"nowhere", 1}).tell(&adder::set, 1));
  auto s = a_->spawn<adder>(on_node{"nowhere", {}}, 1);
  EXPECT_EQ(result(s).error().code, errc::not_found);
}

TEST_F(NodeTest, StopFailsPendingRequests) {
  auto spawned = a_->spawn<adder>(on_node{"b", {}}, 1);
  auto ref = result(spawned);
  ASSERT_TRUE(ref);
  net_.cut("a", "b");
  auto f = ref->ask(&adder::get);
  a_->stop();
  auto r = result(f);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::shutting_down);
}

/// A raw transport that speaks the envelope protocol directly, as a hostile peer would, and keeps what it
/// receives.
struct raw_peer {
  std::unique_ptr<inproc_transport> t;
  std::vector<envelope> got;
  peer_id last_from = 0;

  raw_peer(inproc_network& net, const std::string& name) {
    transport_config c;
    c.node_name = name;
    c.heartbeat_timeout = 10s;
    transport_handlers h;
    h.on_message = [this](peer_id from, multipart m) {
      last_from = from;
      auto e = decode(m);
      if (e) {
        got.push_back(std::move(*e));
      }
    };
    h.on_peer = [](const peer_event&) {};
    auto made = inproc_transport::make(net, c, std::move(h));
    EXPECT_TRUE(made);
    t = std::move(*made);
  }
  /// Sends `e` to `peer`.
  void send(peer_id peer, const envelope& e) {
    auto frames = encode(e);
    ASSERT_TRUE(frames) << frames.error().message();
    ASSERT_TRUE(t->send(peer, std::move(*frames)));
  }
};

envelope head_request(message_type type, std::uint64_t cid, const std::string& node_name) {
  envelope e;
  e.hdr.type = type;
  e.hdr.correlation_id = cid;
  e.hdr.from = actor_address{node_name, 0};
  e.hdr.node = node_name;
  e.hdr.endpoint = "tcp://10.0.0.1:1";
  e.hdr.incarnation = 7;
  return e;
}

// A node name, its names and its leave belong to the connection that registered it: another peer can
// neither take the name over, nor remove the node, nor register a name for one of its actors.
TEST_F(NodeTest, TheHeadAcceptsANodesClaimsOnlyFromItsOwnConnection) {
  auto head = make("h", true);
  ASSERT_TRUE(head);
  raw_peer alice{net_, "alice"};
  raw_peer mallory{net_, "mallory"};
  auto to_head_a = alice.t->connect(head->endpoint(), {});
  auto to_head_m = mallory.t->connect(head->endpoint(), {});
  ASSERT_TRUE(to_head_a && to_head_m);
  pump();

  alice.send(*to_head_a, head_request(message_type::register_node, 11, "a"));
  pump();
  ASSERT_EQ(alice.got.size(), 1U);
  EXPECT_EQ(alice.got[0].hdr.type, message_type::reply);

  mallory.send(*to_head_m, head_request(message_type::register_node, 21, "a"));
  auto own = head_request(message_type::register_name, 22, "a");
  own.hdr.name = "prsgd/averager";
  own.hdr.from = actor_address{"a", 5};
  mallory.send(*to_head_m, own);
  mallory.send(*to_head_m, head_request(message_type::leave, 0, "a"));
  pump();
  ASSERT_EQ(mallory.got.size(), 2U);
  for (const auto& answer : mallory.got) {
    EXPECT_EQ(answer.hdr.type, message_type::error);
    EXPECT_EQ(answer.hdr.error_code, errc::unauthorized);
  }
  EXPECT_EQ(head->stats().unauthorised, 3U);

  // "a" is still alice's: the name is hers to register, and the node list still has her endpoint.
  own.hdr.correlation_id = 12;
  alice.send(*to_head_a, own);
  alice.send(*to_head_a, head_request(message_type::lookup, 13, ""));
  pump();
  ASSERT_EQ(alice.got.size(), 3U);
  EXPECT_EQ(alice.got[1].hdr.type, message_type::reply);
  using node_tuple = std::tuple<std::string, std::string, std::uint64_t>;
  auto list = unpack_value<std::vector<node_tuple>>(alice.got[2].hdr.args);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 2U);
  EXPECT_EQ(std::get<1>((*list)[1]), "tcp://10.0.0.1:1");

  // Her own leave is accepted.
  alice.send(*to_head_a, head_request(message_type::leave, 0, "a"));
  alice.send(*to_head_a, head_request(message_type::lookup, 14, ""));
  pump();
  ASSERT_EQ(alice.got.size(), 4U);
  list = unpack_value<std::vector<node_tuple>>(alice.got[3].hdr.args);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), 1U);
  EXPECT_EQ(head->stats().unauthorised, 3U);
}

// A reply counts only from the connection the request went to; correlation ids are not guessable.
TEST_F(NodeTest, AcceptsARepliesOnlyFromTheConnectionTheRequestWentTo) {
  raw_peer server{net_, "x"};
  auto x_endpoint = server.t->bind("tcp://x:*");
  ASSERT_TRUE(x_endpoint);
  raw_peer mallory{net_, "mallory"};
  auto to_a = mallory.t->connect(a_->endpoint(), {});
  ASSERT_TRUE(to_a);
  ASSERT_TRUE(a_->connect("x", *x_endpoint));
  pump();

  remote_ref<adder> far{a_.get(), actor_address{"x", 1}};
  auto first = far.ask(&adder::get);
  auto second = far.ask(&adder::get);
  pump();
  ASSERT_EQ(server.got.size(), 2U);
  const std::uint64_t cid1 = server.got[0].hdr.correlation_id;
  const std::uint64_t cid2 = server.got[1].hdr.correlation_id;
  EXPECT_NE(cid1, 0U);
  EXPECT_NE(cid2 - cid1, 1U) << "correlation ids must not be sequential";

  envelope forged;
  forged.hdr.type = message_type::reply;
  forged.hdr.correlation_id = cid1;
  forged.hdr.from = actor_address{"x", 1};
  forged.hdr.to = actor_address{"a", 0};
  forged.hdr.args = pack_value(666);
  mallory.send(*to_a, forged);
  pump();
  EXPECT_FALSE(first.ready()) << "a reply from another connection completed the request";
  EXPECT_EQ(a_->stats().stray_replies, 1U);

  // The real answer, on the connection the request went out on (x's side of it).
  server.send(server.last_from, forged);
  pump();
  auto v = result(first);
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, 666);
  static_cast<void>(second);
}

// node_down is the head's to send: from anyone else it is refused and nothing is failed.
TEST_F(NodeTest, RefusesNodeDownFromAPeerThatIsNotTheHead) {
  raw_peer mallory{net_, "mallory"};
  auto to_a = mallory.t->connect(a_->endpoint(), {});
  ASSERT_TRUE(to_a);
  auto spawned = a_->spawn<adder>(on_node{"b", {}}, 1);
  auto ref = result(spawned);
  ASSERT_TRUE(ref);
  auto pending = ref->ask(&adder::get);
  envelope down;
  down.hdr.type = message_type::node_down;
  down.hdr.from = actor_address{"h", 0};
  down.hdr.node = "b";
  down.hdr.incarnation = 1;
  mallory.send(*to_a, down);
  auto v = result(pending);
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, 1);
  EXPECT_EQ(a_->stats().unauthorised, 1U);
}

TEST(RemoteRegistryTest, PacksAndRejectsArguments) {
  auto bytes = pack_tuple(std::tuple<int, std::string>{7, "x"});
  auto ok = unpack_tuple<std::tuple<int, std::string>>(bytes);
  ASSERT_TRUE(ok);
  EXPECT_EQ(std::get<0>(*ok), 7);
  EXPECT_EQ(unpack_tuple<std::tuple<int>>(bytes).error().code, errc::decode_failed);  // wrong count
  EXPECT_EQ((unpack_tuple<std::tuple<std::string, int>>(bytes).error().code), errc::decode_failed);
  EXPECT_EQ(unpack_tuple<std::tuple<int>>({}).error().code, errc::decode_failed);
  const std::vector<std::byte> huge{std::byte{0xdd}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                                    std::byte{0xff}};
  EXPECT_EQ(unpack_tuple<std::tuple<int>>(huge).error().code, errc::decode_failed);
  auto addr = unpack_value<actor_address>(pack_value(actor_address{"n", 3}));
  ASSERT_TRUE(addr);
  EXPECT_EQ(*addr, (actor_address{"n", 3}));
  EXPECT_EQ(unpack_value<actor_address>(pack_value(5)).error().code, errc::decode_failed);
}

}  // namespace
}  // namespace prsgd::wire
