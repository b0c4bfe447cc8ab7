// SPDX-License-Identifier: Apache-2.0
// Remote actors across OS processes over tcp://127.0.0.1 (zmq): spawn, ask, tell order, errors,
// monitors (normal stop, kill -9 of the node), node restart and reconnect.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/node.hpp"
#include "wire_test_actors.hpp"

namespace prsgd::wire {
namespace {

using namespace std::chrono_literals;
using testing::counter;

/// Runs one prsgd_wire_test_node process; kills it on destruction.
class node_process {
 public:
  explicit node_process(const std::string& name, std::vector<std::string> extra = {})
      : proc_(prsgd::test::child_process::start(prsgd::test::command(PRSGD_WIRE_NODE_EXE, with(name, extra)))) {
    if (proc_) {
      endpoint_ = proc_->read_endpoint(20s).value_or("");
    }
  }

  [[nodiscard]] const std::string& endpoint() const { return endpoint_; }

  /// Kills the process with SIGKILL and reaps it.
  void kill9() {
    if (proc_) {
      proc_->kill();
    }
  }

 private:
  static std::vector<std::string> with(const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> args{name, "100"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::optional<prsgd::test::child_process> proc_;
  std::string endpoint_;
};

/// Collects down messages delivered to a watcher actor. Thread-safe.
struct down_log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<down_msg> downs;

  bool wait_for(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock{mu};
    return cv.wait_for(lock, prsgd::test::scaled(timeout), [&] { return downs.size() >= n; });
  }
};

/// Records every down message it receives.
class watcher final : public actor {
 public:
  explicit watcher(std::shared_ptr<down_log> log) : log_(std::move(log)) {}
  void on_down(const down_msg& msg) override {
    std::lock_guard lock{log_->mu};
    log_->downs.push_back(msg);
    log_->cv.notify_all();
  }
  void noop() {}

 private:
  std::shared_ptr<down_log> log_;
};

class WireRemoteTest : public ::testing::Test {
 protected:
  void SetUp() override { start(""); }

  void start(const std::string& head) {
    testing::register_test_types(reg_);
    config cfg;
    cfg.threads = 2;
    cfg.compute_threads = 1;
    system_ = std::make_unique<actor_system>(cfg);
    node_config ncfg;
    ncfg.name = "driver";
    ncfg.request_timeout = 5s;
    ncfg.transport.heartbeat_interval = 100ms;
    ncfg.transport.heartbeat_timeout = 1000ms;
    ncfg.head = head;
    auto n = node::make(*system_, reg_, ncfg, testing::zmq_factory());
    ASSERT_TRUE(n) << n.error().message();
    node_ = std::move(*n);
  }
  void TearDown() override { finish(); }

  void finish() {
    node_.reset();
    if (system_) {
      system_->shutdown(2s);
    }
  }

  remote_ref<counter> spawn_counter(const std::string& on, int start) {
    auto r = node_->spawn<counter>(on_node{on, {}}, start).get(prsgd::test::scaled(10s));
    EXPECT_TRUE(r) << r.error().message();
    return r ? *r : remote_ref<counter>{};
  }

  remote_registry reg_;
  std::unique_ptr<actor_system> system_;
  std::unique_ptr<node> node_;
};

TEST_F(WireRemoteTest, RemoteSpawnAskAndTellInOrder) {
  node_process remote{"node-2"};
  ASSERT_FALSE(remote.endpoint().empty());
  ASSERT_TRUE(node_->connect("node-2", remote.endpoint()));
  auto c = spawn_counter("node-2", 5);
  ASSERT_TRUE(c.valid());
  EXPECT_EQ(c.address().node, "node-2");

  auto sum = c.ask(&counter::add, 3).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(sum) << sum.error().message();
  EXPECT_EQ(*sum, 8);
  auto text = c.ask(&counter::echo, std::string("ab"), std::string("cd")).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_EQ(*text, "abcd");

  constexpr int n = 500;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(c.tell(&counter::append, i));
  }
  auto seen = c.ask(&counter::seen).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(seen) << seen.error().message();
  std::vector<int> expected(n);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(*seen, expected);
  auto value = c.ask(&counter::get).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(value);
  EXPECT_EQ(*value, 8);

  // The address travels as data: a handle rebuilt from it reaches the same actor.
  const auto bytes = pack_value(c.address());
  auto back = unpack_value<actor_address>(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(*node_->ref<counter>(*back).ask(&counter::get).get(prsgd::test::scaled(10s)), 8);
}

TEST_F(WireRemoteTest, ErrorsComeBackInTheFuture) {
  node_process remote{"node-2"};
  ASSERT_TRUE(node_->connect("node-2", remote.endpoint()));
  auto c = spawn_counter("node-2", 1);
  ASSERT_TRUE(c.valid());

  // Unknown actor.
  auto r = node_->ref<counter>(actor_address{"node-2", 987654}).ask(&counter::get).get(prsgd::test::scaled(10s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::not_found) << r.error().message();
  // Unknown node.
  r = node_->ref<counter>(actor_address{"node-9", 1}).ask(&counter::get).get(prsgd::test::scaled(10s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::not_found);
  // Unknown method and undecodable arguments, sent as raw envelopes.
  const auto raw_ask = [&](std::string method, std::vector<std::byte> args) {
    auto st = std::make_shared<runtime::detail::promise_state<std::vector<std::byte>>>(node_->engine());
    envelope env;
    env.hdr.type = message_type::ask;
    env.hdr.to = c.address();
    env.hdr.method = std::move(method);
    env.hdr.args = std::move(args);
    node_->send_request("node-2", std::move(env), [st](expected<std::vector<std::byte>> v) { st->complete(v); });
    return future<std::vector<std::byte>>{st}.get(prsgd::test::scaled(10s));
  };
  auto raw = raw_ask("nope", pack_tuple(std::tuple<>{}));
  ASSERT_FALSE(raw);
  EXPECT_EQ(raw.error().code, errc::not_found) << raw.error().message();
  raw = raw_ask("add", pack_tuple(std::tuple<std::string>{"not a number"}));
  ASSERT_FALSE(raw);
  EXPECT_EQ(raw.error().code, errc::decode_failed) << raw.error().message();
  raw = raw_ask("add", pack_tuple(std::tuple<int, int>{1, 2}));
  ASSERT_FALSE(raw);
  EXPECT_EQ(raw.error().code, errc::decode_failed) << raw.error().message();
  // Unknown actor type.
  {
    auto st = std::make_shared<runtime::detail::promise_state<std::vector<std::byte>>>(node_->engine());
    envelope env;
    env.hdr.type = message_type::spawn;
    env.hdr.type_name = "no_such_type";
    env.hdr.node = "node-2";
    node_->send_request("node-2", std::move(env), [st](expected<std::vector<std::byte>> v) { st->complete(v); });
    auto s = future<std::vector<std::byte>>{st}.get(prsgd::test::scaled(10s));
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().code, errc::not_found);
  }
  // The method throws: handler_failed; the actor is then gone.
  auto crash = c.ask(&counter::crash).get(prsgd::test::scaled(10s));
  ASSERT_FALSE(crash);
  EXPECT_EQ(crash.error().code, errc::handler_failed) << crash.error().message();
  auto after = c.ask(&counter::get).get(prsgd::test::scaled(10s));
  ASSERT_FALSE(after);
  EXPECT_TRUE(after.error().code == errc::not_found || after.error().code == errc::actor_dead)
      << after.error().message();
  // The remote node still serves.
  auto d = spawn_counter("node-2", 40);
  EXPECT_EQ(*d.ask(&counter::add, 2).get(prsgd::test::scaled(10s)), 42);
}

TEST_F(WireRemoteTest, MonitorSeesRemoteStopAndNodeLoss) {
  node_process remote{"node-2"};
  ASSERT_TRUE(node_->connect("node-2", remote.endpoint()));
  auto log = std::make_shared<down_log>();
  auto w = system_->spawn<watcher>(log);
  ASSERT_TRUE(w);
  auto a = spawn_counter("node-2", 0);
  auto b = spawn_counter("node-2", 0);
  ASSERT_TRUE(node_->monitor(w->addr(), a.address()));
  ASSERT_TRUE(node_->monitor(w->addr(), b.address()));
  // Make sure both monitors are installed before stopping a (same connection, so ordered).
  ASSERT_TRUE(a.ask(&counter::get).get(prsgd::test::scaled(10s)));

  ASSERT_TRUE(a.tell(&counter::stop));
  ASSERT_TRUE(log->wait_for(1, 10s));
  {
    std::lock_guard lock{log->mu};
    EXPECT_EQ(log->downs[0].reason.code, errc::none) << log->downs[0].reason.message();
    EXPECT_EQ(node_->address_of(log->downs[0].source), std::optional<actor_address>{a.address()});
  }

  // A node that dies takes its actors with it: kill -9, the watcher hears peer_unreachable.
  auto pending = b.ask(&counter::get);  // may or may not be answered before the kill
  remote.kill9();
  ASSERT_TRUE(log->wait_for(2, 10s));
  {
    std::lock_guard lock{log->mu};
    EXPECT_EQ(log->downs[1].reason.code, errc::peer_unreachable) << log->downs[1].reason.message();
    EXPECT_EQ(node_->address_of(log->downs[1].source), std::optional<actor_address>{b.address()});
  }
  static_cast<void>(pending.get(prsgd::test::scaled(10s)));
  auto late = b.ask(&counter::get).get(prsgd::test::scaled(10s));
  ASSERT_FALSE(late);
  EXPECT_TRUE(late.error().code == errc::timeout || late.error().code == errc::peer_unreachable)
      << late.error().message();

  // Monitoring an actor that does not exist reports not_found at once.
  node_process again{"node-3"};
  ASSERT_TRUE(node_->connect("node-3", again.endpoint()));
  ASSERT_TRUE(node_->monitor(w->addr(), actor_address{"node-3", 424242}));
  ASSERT_TRUE(log->wait_for(3, 10s));
  std::lock_guard lock{log->mu};
  EXPECT_EQ(log->downs[2].reason.code, errc::not_found);
}

TEST_F(WireRemoteTest, NodeRestartAndReconnect) {
  auto remote = std::make_unique<node_process>("node-2");
  ASSERT_TRUE(node_->connect("node-2", remote->endpoint()));
  auto c = spawn_counter("node-2", 1);
  ASSERT_EQ(*c.ask(&counter::add, 1).get(prsgd::test::scaled(10s)), 2);
  remote->kill9();
  remote = std::make_unique<node_process>("node-2");  // a new incarnation on a new port
  ASSERT_FALSE(remote->endpoint().empty());
  ASSERT_TRUE(node_->connect("node-2", remote->endpoint()));
  auto d = spawn_counter("node-2", 10);
  ASSERT_TRUE(d.valid());
  auto v = d.ask(&counter::add, 5).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, 15);
}

TEST_F(WireRemoteTest, HeadKeepsDirectoryForwardsAndReportsLostNodes) {
  node_process head{"head", {"--head"}};
  ASSERT_FALSE(head.endpoint().empty());
  node_process two{"node-2", {"--join", head.endpoint()}};
  ASSERT_FALSE(two.endpoint().empty());
  finish();
  start(head.endpoint());  // the driver joins the head and connects to node-2 directly
  ASSERT_TRUE(node_);

  // The named-actor directory: node-2 registered its counter at start.
  auto addr = node_->lookup("counter@node-2").get(prsgd::test::scaled(10s));
  ASSERT_TRUE(addr) << addr.error().message();
  EXPECT_EQ(addr->node, "node-2");
  auto v = node_->ref<counter>(*addr).ask(&counter::get).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(*v, 100);
  auto missing = node_->lookup("nobody").get(prsgd::test::scaled(10s));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);

  // node-3 joins after the driver: no direct route, so spawn, ask and monitor go through the head.
  node_process three{"node-3", {"--join", head.endpoint()}};
  ASSERT_FALSE(three.endpoint().empty());
  auto c = node_->spawn<counter>(on_node{"node-3", {}}, 7).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->address().node, "node-3");
  auto sum = c->ask(&counter::add, 1).get(prsgd::test::scaled(10s));
  ASSERT_TRUE(sum) << sum.error().message();
  EXPECT_EQ(*sum, 8);
  auto log = std::make_shared<down_log>();
  auto w = system_->spawn<watcher>(log);
  ASSERT_TRUE(w);
  ASSERT_TRUE(node_->monitor(w->addr(), c->address()));
  ASSERT_TRUE(c->ask(&counter::get).get(prsgd::test::scaled(10s)));  // the monitor is installed (same path, in order)

  // The head notices node-3's death and tells the driver, whose watcher hears peer_unreachable.
  three.kill9();
  ASSERT_TRUE(log->wait_for(1, 15s));
  {
    std::lock_guard lock{log->mu};
    EXPECT_EQ(log->downs[0].reason.code, errc::peer_unreachable) << log->downs[0].reason.message();
  }
  auto nodes = node_->cluster_nodes().get(prsgd::test::scaled(10s));
  ASSERT_TRUE(nodes) << nodes.error().message();
  ASSERT_EQ(nodes->size(), 3U);  // head, node-2, driver: node-3 is gone
  for (const auto& n : *nodes) {
    EXPECT_NE(n.name, "node-3");
  }
}

}  // namespace
}  // namespace prsgd::wire
