// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/inproc_transport.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace prsgd {
namespace {

using namespace std::chrono_literals;

// Records deliveries; everything runs on the test thread (the one calling poll), except in the driver test.
struct node {
  std::unique_ptr<inproc_transport> t;
  std::vector<std::pair<peer_id, multipart>> messages;
  std::vector<peer_event> events;
  std::mutex mutex;
  std::condition_variable cv;

  std::vector<std::string> texts() {
    std::vector<std::string> out;
    for (auto& [p, m] : messages) {
      out.emplace_back(m.at(0).view());
    }
    return out;
  }
};

transport_config config(std::string name) {
  transport_config cfg;
  cfg.node_name = std::move(name);
  cfg.heartbeat_interval = 100ms;
  cfg.heartbeat_timeout = 1s;
  cfg.reconnect_interval = 50ms;
  return cfg;
}

std::unique_ptr<node> make_node(inproc_network& net, transport_config cfg) {
  auto n = std::make_unique<node>();
  node* raw = n.get();
  auto t = inproc_transport::make(net, std::move(cfg),
                                  transport_handlers{[raw](peer_id p, multipart m) {
                                                       std::lock_guard lock(raw->mutex);
                                                       raw->messages.emplace_back(p, std::move(m));
                                                       raw->cv.notify_all();
                                                     },
                                                     [raw](const peer_event& ev) {
                                                       std::lock_guard lock(raw->mutex);
                                                       raw->events.push_back(ev);
                                                       raw->cv.notify_all();
                                                     }});
  EXPECT_TRUE(t);
  n->t = std::move(*t);
  return n;
}

multipart text(std::string_view s) { return multipart{frame::copy(s)}; }

class InprocTransportTest : public ::testing::Test {
 protected:
  fake_clock clock_;
  fault_injector faults_{fault_injector::seed_from_env()};
  inproc_network net_{clock_, &faults_};
  std::unique_ptr<node> server_ = make_node(net_, config("server"));
  std::unique_ptr<node> client_ = make_node(net_, config("client"));
  std::string ep_;
  peer_id to_server_ = 0;

  void SetUp() override {
    auto ep = server_->t->bind("tcp://127.0.0.1:*");
    ASSERT_TRUE(ep);
    ep_ = *ep;
    auto peer = client_->t->connect(ep_, {});
    ASSERT_TRUE(peer);
    to_server_ = *peer;
    net_.run_until_idle();
  }

  peer_id incoming() const { return server_->events.at(0).peer; }
};

TEST_F(InprocTransportTest, DeliversOnlyWhenPolledWithPeerEvents) {
  SCOPED_TRACE(faults_.describe());
  EXPECT_NE(ep_, "tcp://127.0.0.1:*");
  ASSERT_EQ(client_->events.size(), 1U);
  EXPECT_TRUE(client_->events[0].up);
  EXPECT_EQ(client_->events[0].node, "server");
  EXPECT_EQ(client_->events[0].endpoint, ep_);
  EXPECT_TRUE(client_->events[0].outgoing);
  ASSERT_EQ(server_->events.size(), 1U);
  EXPECT_EQ(server_->events[0].node, "client");
  EXPECT_FALSE(server_->events[0].outgoing);

  ASSERT_TRUE(client_->t->send(to_server_, multipart{frame::copy("a"), frame::copy("b")}));
  EXPECT_TRUE(server_->messages.empty());  // nothing moves before poll
  EXPECT_EQ(net_.in_flight(), 1U);
  EXPECT_EQ(net_.poll(), 1U);
  ASSERT_EQ(server_->messages.size(), 1U);
  EXPECT_EQ(server_->messages[0].first, incoming());
  EXPECT_EQ(server_->messages[0].second.at(1).view(), "b");

  ASSERT_TRUE(server_->t->send(incoming(), text("reply")));
  net_.run_until_idle();
  EXPECT_EQ(client_->texts(), std::vector<std::string>{"reply"});
  EXPECT_EQ(client_->t->stats().messages_sent, 1U);
  EXPECT_EQ(server_->t->stats().messages_received, 1U);
}

TEST_F(InprocTransportTest, SharesFramesWithoutCopying) {
  auto model = std::make_shared<const std::vector<float>>(1 << 20, 2.0F);
  ASSERT_TRUE(client_->t->send(to_server_, multipart{frame::share(model)}));
  net_.run_until_idle();
  ASSERT_EQ(server_->messages.size(), 1U);
  EXPECT_EQ(static_cast<const void*>(server_->messages[0].second[0].data()), static_cast<const void*>(model->data()));
}

TEST_F(InprocTransportTest, CutLinkGivesDownAfterTimeoutAndUpAfterRestore) {
  SCOPED_TRACE(faults_.describe());
  net_.cut("client", "server");
  ASSERT_TRUE(client_->t->send(to_server_, text("lost")));  // accepted, then lost on the cut link
  clock_.advance(1s - 1ns);
  net_.run_until_idle();
  EXPECT_EQ(client_->events.size(), 1U);  // not yet: the timeout has not passed
  ASSERT_TRUE(net_.next_due());
  clock_.advance(1ns);
  net_.run_until_idle();
  ASSERT_EQ(client_->events.size(), 2U);
  EXPECT_FALSE(client_->events[1].up);
  EXPECT_EQ(client_->events[1].reason, errc::peer_unreachable);
  ASSERT_EQ(server_->events.size(), 2U);
  EXPECT_FALSE(server_->events[1].up);
  EXPECT_TRUE(server_->messages.empty());

  net_.restore("client", "server");
  net_.run_until_idle();
  ASSERT_EQ(client_->events.size(), 3U);
  EXPECT_TRUE(client_->events[2].up);
  ASSERT_EQ(server_->events.size(), 3U);
  EXPECT_EQ(server_->events[2].peer, incoming());  // the same incoming peer returns
  ASSERT_TRUE(client_->t->send(to_server_, text("after")));
  net_.run_until_idle();
  EXPECT_EQ(server_->texts(), std::vector<std::string>{"after"});
}

TEST_F(InprocTransportTest, ShortCutHealsWithoutEvents) {
  net_.cut("server", "client");
  clock_.advance(500ms);
  net_.run_until_idle();
  net_.restore("server", "client");
  clock_.advance(5s);
  net_.run_until_idle();
  EXPECT_EQ(client_->events.size(), 1U);
  EXPECT_EQ(server_->events.size(), 1U);
}

TEST_F(InprocTransportTest, KilledServerIsDownAfterTimeoutAndReplacementComesUp) {
  server_->t->kill();
  clock_.advance(999ms);
  net_.run_until_idle();
  EXPECT_EQ(client_->events.size(), 1U);
  clock_.advance(1ms);
  net_.run_until_idle();
  ASSERT_EQ(client_->events.size(), 2U);
  EXPECT_FALSE(client_->events[1].up);

  auto replacement = make_node(net_, config("server-2"));
  ASSERT_TRUE(replacement->t->bind(ep_));  // the endpoint is free again
  clock_.advance(50ms);
  net_.run_until_idle();
  ASSERT_EQ(client_->events.size(), 3U);
  EXPECT_TRUE(client_->events[2].up);
  EXPECT_EQ(client_->events[2].peer, to_server_);  // outgoing peer id kept across the restart
  EXPECT_EQ(client_->events[2].node, "server-2");
  ASSERT_TRUE(client_->t->send(to_server_, text("hi")));
  net_.run_until_idle();
  EXPECT_EQ(replacement->texts(), std::vector<std::string>{"hi"});
}

TEST_F(InprocTransportTest, GracefulStopAndDisconnectAreSeenAtOnce) {
  client_->t->stop();
  net_.run_until_idle();
  ASSERT_EQ(server_->events.size(), 2U);
  EXPECT_FALSE(server_->events[1].up);
  EXPECT_EQ(server_->events[1].reason, errc::shutting_down);
  auto r = server_->t->send(incoming(), text("x"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::not_found);
  auto s = client_->t->send(to_server_, text("x"));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, errc::shutting_down);
}

TEST_F(InprocTransportTest, DisconnectOfOutgoingPeerForgetsIt) {
  ASSERT_TRUE(client_->t->disconnect(to_server_));
  net_.run_until_idle();
  ASSERT_EQ(server_->events.size(), 2U);
  EXPECT_EQ(server_->events[1].reason, errc::shutting_down);
  EXPECT_EQ(client_->events.size(), 1U);  // no local event for a local disconnect
  EXPECT_EQ(client_->t->send(to_server_, text("x")).error().code, errc::not_found);
  EXPECT_EQ(client_->t->disconnect(to_server_).error().code, errc::not_found);
}

TEST_F(InprocTransportTest, FaultsDropDelayDuplicateAndReorder) {
  SCOPED_TRACE(faults_.describe());
  auto first_is = [](std::string s) {
    return [s](const fault_context& c) { return c.message != nullptr && c.message->at(0).view() == s; };
  };
  faults_.add(fault_rule{.stage = fault_stage::send, .action = fault_action::drop, .match = first_is("1")});
  faults_.add(
      fault_rule{.stage = fault_stage::send, .action = fault_action::delay, .match = first_is("2"), .duration = 10ms});
  faults_.add(fault_rule{.stage = fault_stage::receive, .action = fault_action::duplicate, .match = first_is("3")});
  faults_.add(fault_rule{.stage = fault_stage::send, .action = fault_action::reorder, .match = first_is("4")});
  for (const char* m : {"0", "1", "2", "3", "4", "5"}) {
    ASSERT_TRUE(client_->t->send(to_server_, text(m)));
  }
  net_.run_until_idle();
  EXPECT_EQ(server_->texts(), (std::vector<std::string>{"0", "3", "3", "5", "4"}));
  clock_.advance(10ms);
  net_.run_until_idle();
  EXPECT_EQ(server_->texts(), (std::vector<std::string>{"0", "3", "3", "5", "4", "2"}));
  EXPECT_EQ(client_->t->stats().messages_dropped, 1U);
}

TEST_F(InprocTransportTest, DisconnectFaultAfterNMessagesCutsLinkForAWhile) {
  SCOPED_TRACE(faults_.describe());
  faults_.add(fault_rule{.stage = fault_stage::send,
                         .action = fault_action::disconnect,
                         .from = "client",
                         .after = 3,
                         .times = 1,
                         .duration = 2s});
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(client_->t->send(to_server_, text(std::to_string(i))));
  }
  net_.run_until_idle();
  EXPECT_EQ(server_->texts(), (std::vector<std::string>{"0", "1", "2"}));
  clock_.advance(1s);
  net_.run_until_idle();
  ASSERT_EQ(client_->events.size(), 2U);
  EXPECT_FALSE(client_->events[1].up);
  clock_.advance(1s);  // the cut ends
  net_.run_until_idle();
  ASSERT_EQ(client_->events.size(), 3U);
  EXPECT_TRUE(client_->events[2].up);
  ASSERT_TRUE(client_->t->send(to_server_, text("back")));
  net_.run_until_idle();
  EXPECT_EQ(server_->texts().back(), "back");
}

TEST_F(InprocTransportTest, ConnectFaultDelaysConnection) {
  faults_.add(fault_rule{.stage = fault_stage::connect, .action = fault_action::drop, .times = 2});
  auto late = make_node(net_, config("late"));
  auto peer = late->t->connect(ep_, {});
  ASSERT_TRUE(peer);
  net_.run_until_idle();
  EXPECT_TRUE(late->events.empty());
  clock_.advance(50ms);
  net_.run_until_idle();
  EXPECT_TRUE(late->events.empty());
  clock_.advance(50ms);
  net_.run_until_idle();
  ASSERT_EQ(late->events.size(), 1U);
  EXPECT_TRUE(late->events[0].up);
  EXPECT_EQ(faults_.triggered(0), 2U);
}

TEST_F(InprocTransportTest, SameSeedSameOutcome) {
  auto run = [](std::uint64_t seed) {
    fake_clock clk;
    fault_injector f(seed);
    f.add(fault_rule{.stage = fault_stage::send, .action = fault_action::drop, .probability = 0.25});
    f.add(fault_rule{.stage = fault_stage::receive, .action = fault_action::duplicate, .probability = 0.25});
    inproc_network net(clk, &f);
    auto a = make_node(net, config("a"));
    auto b = make_node(net, config("b"));
    auto ep = b->t->bind("inproc://b");
    auto p = a->t->connect(*ep, {});
    net.run_until_idle();
    for (int i = 0; i < 50; ++i) {
      EXPECT_TRUE(a->t->send(*p, text(std::to_string(i))));
    }
    net.run_until_idle();
    return b->texts();
  };
  const auto first = run(99);
  EXPECT_EQ(first, run(99));
  EXPECT_NE(first, run(100));
  EXPECT_LT(first.size(), 60U);
  EXPECT_GT(first.size(), 25U);
}

TEST_F(InprocTransportTest, EnforcesSizeLimitsAndBackPressure) {
  auto cfg = config("small");
  cfg.max_frame_bytes = 100;
  cfg.max_queued_bytes_per_peer = 250;
  auto small = make_node(net_, cfg);
  auto peer = small->t->connect(ep_, {});
  ASSERT_TRUE(peer);
  net_.run_until_idle();
  EXPECT_EQ(small->t->send(*peer, multipart{frame::take(std::string(101, 'x'))}).error().code, errc::too_large);
  ASSERT_TRUE(small->t->send(*peer, multipart{frame::take(std::string(100, 'x'))}));
  ASSERT_TRUE(small->t->send(*peer, multipart{frame::take(std::string(100, 'x'))}));
  auto r = small->t->send(*peer, multipart{frame::take(std::string(100, 'x'))});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::overloaded);
  net_.run_until_idle();  // delivery releases the queue
  EXPECT_TRUE(small->t->send(*peer, multipart{frame::take(std::string(100, 'x'))}));

  // The receiver drops frames above its own limit.
  auto sink_cfg = config("sink");
  sink_cfg.max_frame_bytes = 10;
  auto sink = make_node(net_, sink_cfg);
  auto sink_ep = sink->t->bind("ipc:///tmp/sink");
  ASSERT_TRUE(sink_ep);
  auto to_sink = client_->t->connect(*sink_ep, {});
  net_.run_until_idle();
  ASSERT_TRUE(client_->t->send(*to_sink, multipart{frame::take(std::string(11, 'x'))}));
  ASSERT_TRUE(client_->t->send(*to_sink, text("ok")));
  net_.run_until_idle();
  EXPECT_EQ(sink->texts(), std::vector<std::string>{"ok"});
  EXPECT_EQ(sink->t->stats().malformed_received, 1U);
}

TEST_F(InprocTransportTest, CurveAllowListKeepsOutUnknownClients) {
  const std::string server_pub(40, 'S');
  const std::string good_pub(40, 'G');
  const std::string bad_pub(40, 'B');
  auto scfg = config("secure");
  scfg.curve = curve_options{server_pub, std::string(40, 's'), {good_pub}};
  auto secure = make_node(net_, scfg);
  auto ep = secure->t->bind("tcp://10.77.0.1:*");
  ASSERT_TRUE(ep);
  auto gcfg = config("good");
  gcfg.curve = curve_options{good_pub, std::string(40, 'g'), {}};
  auto bcfg = config("bad");
  bcfg.curve = curve_options{bad_pub, std::string(40, 'b'), {}};
  auto good = make_node(net_, gcfg);
  auto bad = make_node(net_, bcfg);
  auto gp = good->t->connect(*ep, connect_options{server_pub});
  auto bp = bad->t->connect(*ep, connect_options{server_pub});
  ASSERT_TRUE(gp && bp);
  net_.run_until_idle();
  ASSERT_TRUE(good->t->send(*gp, text("good")));
  ASSERT_TRUE(bad->t->send(*bp, text("bad")));
  clock_.advance(1s);
  net_.run_until_idle();
  EXPECT_EQ(secure->texts(), std::vector<std::string>{"good"});
  EXPECT_TRUE(bad->events.empty());
  ASSERT_EQ(secure->events.size(), 1U);
  EXPECT_EQ(secure->events[0].node, "good");
}

TEST(InprocNetworkTest, DriverThreadDeliversWithRealClock) {
  inproc_network net(steady_clock_source::instance());
  auto server = make_node(net, config("server"));
  auto client = make_node(net, config("client"));
  net.start_driver();
  auto ep = server->t->bind("inproc://srv");
  ASSERT_TRUE(ep);
  auto peer = client->t->connect(*ep, {});
  ASSERT_TRUE(peer);
  ASSERT_TRUE(client->t->send(*peer, text("early")));  // may be dropped: sent before the connection is up
  {
    std::unique_lock lock(client->mutex);
    ASSERT_TRUE(client->cv.wait_for(lock, 5s, [&] { return !client->events.empty(); }));
  }
  ASSERT_TRUE(client->t->send(*peer, text("threaded")));
  {
    std::unique_lock lock(server->mutex);
    ASSERT_TRUE(server->cv.wait_for(lock, 5s, [&] {
      return !server->messages.empty() && server->messages.back().second.at(0).view() == "threaded";
    }));
  }
  client->t->stop();
  server->t->stop();
  net.stop_driver();
}

}  // namespace
}  // namespace prsgd
