// SPDX-License-Identifier: Apache-2.0
// Two nodes on an inproc network with a fake clock and a deterministic actor system: no sockets,
// no sleeps, no threads.
#include "prsgd/runtime/node.hpp"

#include <gtest/gtest.h>

#include "prsgd/runtime/deterministic_system.hpp"
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

  std::unique_ptr<node> make(const std::string& name) {
    node_config cfg;
    cfg.name = name;
    cfg.request_timeout = 2s;
    cfg.transport.heartbeat_timeout = 10s;
    auto n = node::make(sys_, reg_, cfg, [this](transport_config c, transport_handlers h)
                                             -> expected<std::unique_ptr<transport>> {
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
  auto first = ref->ask(&adder::get);     // deadline t0 + 2 s
  pump();
  sys_.advance(1s);
  auto second = ref->ask(&adder::get);    // deadline t0 + 3 s
  pump();
  sys_.advance(999ms);                    // t0 + 1.999 s: nothing due
  pump();
  EXPECT_FALSE(first.ready());
  sys_.advance(1ms);                      // t0 + 2 s: only the first
  pump();
  EXPECT_TRUE(first.ready());
  EXPECT_FALSE(second.ready());
  EXPECT_EQ(a_->stats().timeouts, 1U);
  sys_.advance(1s);                       // t0 + 3 s: the second
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
