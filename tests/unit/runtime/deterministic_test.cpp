// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/runtime/runtime.hpp"
#include "test_actors.hpp"

namespace prsgd {
namespace {

using namespace std::chrono_literals;
using test::counter;
using log_ptr = std::shared_ptr<std::vector<std::string>>;

template <class T>
expected<T> take(future<T>& f) {
  auto r = f.try_get();
  if (!r) {
    return fail(errc::none, "future not ready");
  }
  return std::move(*r);
}

TEST(DeterministicSystemTest, AskRepliesAfterDispatch) {
  deterministic_system sys;
  auto c = sys.spawn<counter>(named{"counter"}, 0);
  ASSERT_TRUE(c.has_value());
  auto f = c->ask(&counter::add, 5);
  EXPECT_FALSE(f.ready());
  sys.dispatch_all();
  auto r = take(f);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(*r, 5);
}

TEST(DeterministicSystemTest, GetDispatchesUntilReady) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(1);
  c.tell(&counter::add, 2);
  auto v = c.ask(&counter::get).get();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, 3);
}

TEST(DeterministicSystemTest, DispatchOneRunsOneMessageAtATime) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(0);
  auto f1 = c.ask(&counter::add, 1);
  auto f2 = c.ask(&counter::add, 10);
  EXPECT_TRUE(sys.dispatch_one());  // on_start + first message
  EXPECT_TRUE(f1.ready());
  EXPECT_FALSE(f2.ready());
  EXPECT_TRUE(sys.dispatch_one());
  EXPECT_TRUE(f2.ready());
  EXPECT_EQ(*f2.get(), 11);
  EXPECT_FALSE(sys.dispatch_one());
}

TEST(DeterministicSystemTest, TellAcceptsLambdas) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(0);
  c.tell([](counter& self, int d) { self.add(d); }, 7);
  EXPECT_EQ(*c.ask([](counter& self) { return self.get() * 2; }).get(), 14);
}

TEST(DeterministicSystemTest, ExpectedErrorReachesTheAskerWithoutKillingTheActor) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(0);
  auto bad = c.ask(&counter::checked, -1).get();
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_EQ(*c.ask(&counter::checked, 4).get(), 4);
  EXPECT_TRUE(c.alive());
}

TEST(DeterministicSystemTest, LifecycleHooksRunInOrder) {
  deterministic_system sys;
  auto log = std::make_shared<std::vector<std::string>>();
  auto c = *sys.spawn<counter>(0, log);
  sys.dispatch_all();
  EXPECT_EQ(*log, (std::vector<std::string>{"start"}));
  c.tell(&counter::stop_me);
  sys.dispatch_all();
  EXPECT_EQ(*log, (std::vector<std::string>{"start", "stop:none"}));
  EXPECT_FALSE(c.alive());
  EXPECT_EQ(sys.actor_count(), 0U);
}

TEST(DeterministicSystemTest, AskToDeadActorFailsWithActorDead) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(0);
  c.tell(&counter::stop_me);
  auto queued = c.ask(&counter::get);  // behind the stop: bounced when the actor stops
  sys.dispatch_all();
  auto r = take(queued);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::actor_dead);
  auto late = c.ask(&counter::get);  // actor already dead
  auto r2 = take(late);
  ASSERT_FALSE(r2.has_value());
  EXPECT_EQ(r2.error().code, errc::actor_dead);
  EXPECT_FALSE(c.tell(&counter::add, 1));
}

TEST(DeterministicSystemTest, ThrowingHandlerFailsTheAskAndStopsTheActor) {
  deterministic_system sys;
  auto log = std::make_shared<std::vector<std::string>>();
  auto c = *sys.spawn<counter>(0, log);
  auto f = c.ask(&counter::boom, std::string{"kaputt"});
  auto next = c.ask(&counter::get);
  sys.dispatch_all();
  auto r = take(f);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::handler_failed);
  EXPECT_NE(r.error().context.find("kaputt"), std::string::npos);
  auto r2 = take(next);
  ASSERT_FALSE(r2.has_value());
  EXPECT_EQ(r2.error().code, errc::actor_dead);
  EXPECT_FALSE(c.alive());
  EXPECT_EQ(log->back(), "stop:handler_failed");
}

TEST(DeterministicSystemTest, ResumePolicyKeepsStateAfterAFailure) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(spawn_options{.name = "", .restart = restart_policy::resume()}, 5);
  auto f = c.ask(&counter::boom, std::string{"x"});
  EXPECT_EQ(*c.ask(&counter::get).get(), 5);
  EXPECT_EQ(take(f).error().code, errc::handler_failed);
  EXPECT_TRUE(c.alive());
}

TEST(DeterministicSystemTest, RestartPolicyRebuildsTheActorWithItsConstructorArguments) {
  deterministic_system sys;
  auto log = std::make_shared<std::vector<std::string>>();
  auto c = *sys.spawn<counter>(spawn_options{.name = "r", .restart = restart_policy::restart(2, 10s)}, 100, log);
  c.tell(&counter::add, 1);
  EXPECT_EQ(*c.ask(&counter::get).get(), 101);
  auto id = c.id();
  auto f = c.ask(&counter::boom, std::string{"once"});
  EXPECT_EQ(*c.ask(&counter::get).get(), 100);  // fresh state, same handle and id
  EXPECT_EQ(take(f).error().code, errc::handler_failed);
  EXPECT_TRUE(c.alive());
  EXPECT_EQ(c.id(), id);
  EXPECT_EQ(*log, (std::vector<std::string>{"start", "stop:handler_failed", "start"}));
  EXPECT_TRUE(sys.lookup<counter>("r").has_value());
}

TEST(DeterministicSystemTest, RestartLimitWithinWindowStopsTheActor) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(spawn_options{.name = "", .restart = restart_policy::restart(2, 10s)}, 0);
  (void)c.ask(&counter::boom, std::string{"1"}).get();
  EXPECT_TRUE(c.alive());
  (void)c.ask(&counter::boom, std::string{"2"}).get();
  EXPECT_TRUE(c.alive());
  (void)c.ask(&counter::boom, std::string{"3"}).get();
  sys.dispatch_all();
  EXPECT_FALSE(c.alive());
}

TEST(DeterministicSystemTest, FailuresOutsideTheWindowDoNotCount) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(spawn_options{.name = "", .restart = restart_policy::restart(1, 10s)}, 0);
  for (int i = 0; i < 5; ++i) {
    (void)c.ask(&counter::boom, std::string{"x"}).get();
    sys.dispatch_all();
    EXPECT_TRUE(c.alive()) << "failure " << i;
    sys.advance(11s);
  }
}

TEST(DeterministicSystemTest, RestartBackoffWaitsForTheClock) {
  deterministic_system sys;
  auto policy = restart_policy::restart(5, 60s, 100ms);
  auto c = *sys.spawn<counter>(spawn_options{.name = "", .restart = policy}, 1);
  (void)c.ask(&counter::boom, std::string{"x"}).get();
  auto f = c.ask(&counter::get);
  sys.dispatch_all();
  EXPECT_FALSE(f.ready());  // waiting for the backoff
  sys.advance(99ms);
  sys.dispatch_all();
  EXPECT_FALSE(f.ready());
  sys.advance_and_dispatch(1ms);
  EXPECT_EQ(*take(f), 1);
  // Second failure: the backoff doubles to 200 ms.
  (void)c.ask(&counter::boom, std::string{"y"}).get();
  auto g = c.ask(&counter::get);
  sys.advance_and_dispatch(150ms);
  EXPECT_FALSE(g.ready());
  sys.advance_and_dispatch(50ms);
  EXPECT_TRUE(g.ready());
}

class greeter final : public actor {
 public:
  std::string hello(const std::string& who) { return "hello " + who; }
};

TEST(DeterministicSystemTest, NamedRegistryLooksUpByNameAndType) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(named{"c"}, 3);
  auto found = sys.lookup<counter>("c");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id(), c.id());
  EXPECT_EQ(sys.lookup<counter>("nope").error().code, errc::not_found);
  EXPECT_EQ(sys.lookup<greeter>("c").error().code, errc::invalid_argument);
  auto dup = sys.spawn<greeter>(named{"c"});
  ASSERT_FALSE(dup.has_value());
  EXPECT_EQ(dup.error().code, errc::already_exists);
  c.tell(&counter::stop_me);
  sys.dispatch_all();
  EXPECT_EQ(sys.lookup_addr("c").error().code, errc::not_found);
  EXPECT_TRUE(sys.spawn<greeter>(named{"c"}).has_value());  // the name is free again
}

TEST(DeterministicSystemTest, ActorIdsCarryTheNodeId) {
  deterministic_system sys{7};
  auto a = *sys.spawn<greeter>();
  auto b = *sys.spawn<greeter>();
  EXPECT_EQ(a.id().node, 7U);
  EXPECT_NE(a.id(), b.id());
  EXPECT_TRUE(a.id().valid());
  EXPECT_EQ(to_string(actor_id{7, 3}), "7:3");
}

class throwing_ctor final : public actor {
 public:
  explicit throwing_ctor(int x) {
    if (x < 0) {
      throw std::invalid_argument("negative");
    }
  }
};

TEST(DeterministicSystemTest, ConstructorThatThrowsFailsTheSpawn) {
  deterministic_system sys;
  auto a = sys.spawn<throwing_ctor>(named{"t"}, -1);
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, errc::handler_failed);
  EXPECT_EQ(sys.actor_count(), 0U);
  EXPECT_TRUE(sys.spawn<throwing_ctor>(named{"t"}, 1).has_value());
}

/// Records timer firings; tests timers and their cancellation.
class deterministic_ticker final : public actor {
 public:
  void on_start() override {
    once_ = schedule_once(50ms, [this] { events.push_back("once"); });
    periodic_ = schedule_periodic(20ms, [this] {
      events.push_back("tick");
      if (++ticks_ == 3) {
        cancel_timer(periodic_);
      }
    });
  }
  bool cancel_once() { return cancel_timer(once_); }
  std::vector<std::string> get_events() const { return events; }
  void stop_in(clock_source::duration d) {
    schedule_once(d, [this] { quit(); });
  }
  std::vector<std::string> events;

 private:
  timer_id once_;
  timer_id periodic_;
  int ticks_ = 0;
};

TEST(DeterministicSystemTest, OneShotAndPeriodicTimersFireOnTheFakeClock) {
  deterministic_system sys;
  auto t = *sys.spawn<deterministic_ticker>();
  sys.dispatch_all();
  sys.advance_and_dispatch(19ms);
  EXPECT_TRUE(t.ask(&deterministic_ticker::get_events).get()->empty());
  sys.advance_and_dispatch(1ms);
  EXPECT_EQ(*t.ask(&deterministic_ticker::get_events).get(), (std::vector<std::string>{"tick"}));
  sys.advance_and_dispatch(40ms);  // t = 60 ms: ticks at 40, 60 and the one-shot at 50
  EXPECT_EQ(*t.ask(&deterministic_ticker::get_events).get(),
            (std::vector<std::string>{"tick", "tick", "once", "tick"}));
  sys.advance_and_dispatch(1s);  // the periodic timer cancelled itself after 3 ticks
  EXPECT_EQ(t.ask(&deterministic_ticker::get_events).get()->size(), 4U);
}

TEST(DeterministicSystemTest, CancelledTimerDoesNotFire) {
  deterministic_system sys;
  auto t = *sys.spawn<deterministic_ticker>();
  sys.dispatch_all();
  EXPECT_TRUE(*t.ask(&deterministic_ticker::cancel_once).get());
  EXPECT_FALSE(*t.ask(&deterministic_ticker::cancel_once).get());
  sys.advance_and_dispatch(200ms);
  auto ev = *t.ask(&deterministic_ticker::get_events).get();
  EXPECT_EQ(std::count(ev.begin(), ev.end(), "once"), 0);
}

TEST(DeterministicSystemTest, TimersAreCancelledWhenTheActorStops) {
  deterministic_system sys;
  auto t = *sys.spawn<deterministic_ticker>();
  t.tell(&deterministic_ticker::stop_in, 10ms);
  sys.dispatch_all();
  sys.advance_and_dispatch(10ms);
  EXPECT_FALSE(t.alive());
  sys.advance_and_dispatch(1s);
  EXPECT_EQ(sys.timer_count(), 0U);
  EXPECT_EQ(sys.pending(), 0U);
}

/// Holds one re-armable one-shot timer (actor::rearm_once) and records which arming fired.
class waker final : public actor {
 public:
  void arm(std::string name, clock_source::duration from_now) {
    rearm_once(slot_, now() + from_now, [this, name] { events.push_back(name + (slot_ ? " armed" : " empty")); });
  }
  void disarm() {
    rearm_once(slot_, std::nullopt, [] {});
  }
  bool armed() const { return slot_.has_value(); }
  std::vector<std::string> get_events() const { return events; }
  std::vector<std::string> events;

 private:
  std::optional<timer_id> slot_;
};

TEST(DeterministicSystemTest, RearmOnceReplacesTheTimerAndEmptiesTheSlotBeforeItFires) {
  deterministic_system sys;
  auto w = *sys.spawn<waker>();
  w.tell(&waker::arm, std::string{"a"}, 50ms);
  sys.dispatch_all();
  sys.advance_and_dispatch(30ms);
  w.tell(&waker::arm, std::string{"b"}, 50ms);  // a (due at 50 ms) is cancelled; b is due at 80 ms
  sys.dispatch_all();
  EXPECT_TRUE(*w.ask(&waker::armed).get());
  sys.advance_and_dispatch(49ms);
  EXPECT_TRUE(w.ask(&waker::get_events).get()->empty());
  sys.advance_and_dispatch(1ms);
  EXPECT_EQ(*w.ask(&waker::get_events).get(), (std::vector<std::string>{"b empty"}));
  EXPECT_FALSE(*w.ask(&waker::armed).get());
  EXPECT_EQ(sys.timer_count(), 0U);
}

TEST(DeterministicSystemTest, RearmOnceWithoutATimeOnlyCancelsAndAPastTimeFiresAtOnce) {
  deterministic_system sys;
  auto w = *sys.spawn<waker>();
  w.tell(&waker::arm, std::string{"c"}, 10ms);
  w.tell(&waker::disarm);
  sys.dispatch_all();
  EXPECT_FALSE(*w.ask(&waker::armed).get());
  sys.advance_and_dispatch(1s);
  EXPECT_TRUE(w.ask(&waker::get_events).get()->empty());
  EXPECT_EQ(sys.timer_count(), 0U);
  w.tell(&waker::arm, std::string{"d"}, -5ms);
  sys.dispatch_all();
  sys.advance_and_dispatch(0ms);
  EXPECT_EQ(*w.ask(&waker::get_events).get(), (std::vector<std::string>{"d empty"}));
}

/// Watches other actors and records their down messages.
class watcher final : public actor {
 public:
  void watch(actor_addr a) { monitor(a); }
  void unwatch(actor_addr a) { demonitor(a); }
  void on_down(const down_msg& m) override { downs.push_back(m); }
  std::vector<down_msg> get_downs() const { return downs; }
  std::vector<down_msg> downs;
};

TEST(DeterministicSystemTest, MonitorGetsDownMessageWithReason) {
  deterministic_system sys;
  auto w = *sys.spawn<watcher>();
  auto a = *sys.spawn<counter>(0);
  auto b = *sys.spawn<counter>(0);
  w.tell(&watcher::watch, actor_addr{a});
  w.tell(&watcher::watch, actor_addr{b});
  sys.dispatch_all();
  a.tell(&counter::stop_me);
  b.tell(&counter::boom, std::string{"bad"});
  sys.dispatch_all();
  auto downs = *w.ask(&watcher::get_downs).get();
  ASSERT_EQ(downs.size(), 2U);
  EXPECT_EQ(downs[0].source, a.id());
  EXPECT_EQ(downs[0].reason.code, errc::none);
  EXPECT_EQ(downs[1].source, b.id());
  EXPECT_EQ(downs[1].reason.code, errc::handler_failed);
}

TEST(DeterministicSystemTest, MonitoringADeadActorDeliversDownAtOnce) {
  deterministic_system sys;
  auto w = *sys.spawn<watcher>();
  auto a = *sys.spawn<counter>(0);
  a.tell(&counter::stop_me);
  sys.dispatch_all();
  w.tell(&watcher::watch, actor_addr{a});
  sys.dispatch_all();  // the down message is queued while `watch` runs
  auto downs = *w.ask(&watcher::get_downs).get();
  ASSERT_EQ(downs.size(), 1U);
  EXPECT_EQ(downs[0].source, a.id());
}

TEST(DeterministicSystemTest, DemonitorStopsDownMessages) {
  deterministic_system sys;
  auto w = *sys.spawn<watcher>();
  auto a = *sys.spawn<counter>(0);
  w.tell(&watcher::watch, actor_addr{a});
  w.tell(&watcher::unwatch, actor_addr{a});
  sys.dispatch_all();
  a.tell(&counter::stop_me);
  EXPECT_TRUE(w.ask(&watcher::get_downs).get()->empty());
}

/// Holds replies until `release` is called (a barrier in miniature).
class barrier final : public actor {
 public:
  response_promise<int> wait() {
    waiting_.push_back(make_response_promise<int>());
    return waiting_.back();
  }
  void release(int v) {
    for (auto& p : waiting_) {
      p.deliver(v);
    }
    waiting_.clear();
  }
  void drop() { waiting_.clear(); }
  std::size_t waiting() const { return waiting_.size(); }

 private:
  std::vector<response_promise<int>> waiting_;
};

TEST(DeterministicSystemTest, ResponsePromiseRepliesLater) {
  deterministic_system sys;
  auto b = *sys.spawn<barrier>();
  auto f1 = b.ask(&barrier::wait);
  auto f2 = b.ask(&barrier::wait);
  sys.dispatch_all();
  EXPECT_FALSE(f1.ready());
  EXPECT_EQ(*b.ask(&barrier::waiting).get(), 2U);
  b.tell(&barrier::release, 42);
  sys.dispatch_all();
  EXPECT_EQ(*take(f1), 42);
  EXPECT_EQ(*take(f2), 42);
}

TEST(DeterministicSystemTest, DroppedResponsePromiseFailsTheAsk) {
  deterministic_system sys;
  auto b = *sys.spawn<barrier>();
  auto f = b.ask(&barrier::wait);
  b.tell(&barrier::drop);
  sys.dispatch_all();
  EXPECT_EQ(take(f).error().code, errc::actor_dead);
}

TEST(DeterministicSystemTest, AskWithinTimesOutOnTheFakeClock) {
  deterministic_system sys;
  auto b = *sys.spawn<barrier>();
  auto f = b.ask(&barrier::wait).within(100ms);
  sys.dispatch_all();
  sys.advance_and_dispatch(99ms);
  EXPECT_FALSE(f.ready());
  sys.advance_and_dispatch(1ms);
  EXPECT_EQ(take(f).error().code, errc::timeout);
  b.tell(&barrier::release, 1);  // the late reply is dropped
  sys.dispatch_all();
}

/// Asks another actor and stores the answer from the continuation (runs on this strand).
class asker final : public actor {
 public:
  explicit asker(actor_ref<counter> target) : target_(std::move(target)) {}
  void go(int d) {
    target_.ask(&counter::add, d).then([this](expected<int> r) {
      on_own_strand = runtime::detail::current_cell() != nullptr && runtime::detail::current_cell()->id() == id();
      result = r ? *r : -1;
      code = r ? errc::none : r.error().code;
    });
  }
  void boom() { throw std::runtime_error("asker failed"); }
  std::optional<int> get_result() const { return result; }
  bool strand_ok() const { return on_own_strand; }
  errc get_code() const { return code; }

  std::optional<int> result;
  bool on_own_strand = false;
  errc code = errc::none;

 private:
  actor_ref<counter> target_;
};

TEST(DeterministicSystemTest, ThenRunsOnTheCallersStrand) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(10);
  auto a = *sys.spawn<asker>(c);
  a.tell(&asker::go, 5);
  sys.dispatch_all();
  EXPECT_EQ(*a.ask(&asker::get_result).get(), std::optional<int>{15});
  EXPECT_TRUE(*a.ask(&asker::strand_ok).get());
}

TEST(DeterministicSystemTest, ThenReceivesActorDeadFromADeadTarget) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(10);
  c.tell(&counter::stop_me);
  sys.dispatch_all();
  auto a = *sys.spawn<asker>(c);
  a.tell(&asker::go, 5);
  sys.dispatch_all();
  EXPECT_EQ(*a.ask(&asker::get_code).get(), errc::actor_dead);
}

TEST(DeterministicSystemTest, ContinuationOfARestartedActorIsDropped) {
  deterministic_system sys;
  auto c = *sys.spawn<counter>(10);
  auto a = *sys.spawn<asker>(spawn_options{.name = "", .restart = restart_policy::restart(3, 10s)}, c);
  sys.dispatch_all();
  a.tell(&asker::go, 5);            // queues the ask to c
  a.tell(&asker::boom);             // a restarts before c replies
  EXPECT_TRUE(sys.dispatch_one());  // a: go
  EXPECT_TRUE(sys.dispatch_one());  // a: boom -> restart
  sys.dispatch_all();               // c replies; the old incarnation's continuation is dropped
  EXPECT_EQ(*a.ask(&asker::get_result).get(), std::nullopt);
}

/// Offloads work to the compute pool.
class deterministic_offloader final : public actor {
 public:
  void square(int x) {
    run_compute([x] { return x * x; }, [this](expected<int> r) { result = r ? *r : -1; });
  }
  void fail_compute() {
    run_compute([]() -> int { throw std::runtime_error("no"); },
                [this](expected<int> r) { failed = !r && r.error().code == errc::handler_failed; });
  }
  std::optional<int> get() const { return result; }
  bool get_failed() const { return failed; }
  std::optional<int> result;
  bool failed = false;
};

TEST(DeterministicSystemTest, RunComputeReturnsTheResultAsAMessage) {
  deterministic_system sys;
  auto o = *sys.spawn<deterministic_offloader>();
  o.tell(&deterministic_offloader::square, 12);
  o.tell(&deterministic_offloader::fail_compute);
  sys.dispatch_all();
  EXPECT_EQ(*o.ask(&deterministic_offloader::get).get(), std::optional<int>{144});
  EXPECT_TRUE(*o.ask(&deterministic_offloader::get_failed).get());
}

TEST(DeterministicSystemTest, GracefulShutdownDrainsQueuedMail) {
  deterministic_system sys;
  auto log = std::make_shared<std::vector<std::string>>();
  auto c = *sys.spawn<counter>(0, log);
  auto f = c.ask(&counter::add, 3);
  EXPECT_TRUE(sys.shutdown(1s));
  EXPECT_EQ(*take(f), 3);
  EXPECT_EQ(log->back(), "stop:shutting_down");
  EXPECT_EQ(sys.spawn<counter>(0).error().code, errc::shutting_down);
  EXPECT_EQ(c.ask(&counter::get).get().error().code, errc::shutting_down);
}

TEST(DeterministicSystemTest, HardStopFailsPendingAsksWithShuttingDown) {
  deterministic_system sys;
  auto b = *sys.spawn<barrier>();
  auto c = *sys.spawn<counter>(0);
  auto held = b.ask(&barrier::wait);
  sys.dispatch_all();
  auto queued = c.ask(&counter::add, 1);
  sys.stop_now();
  EXPECT_EQ(take(queued).error().code, errc::shutting_down);
  EXPECT_EQ(take(held).error().code, errc::actor_dead);
  EXPECT_EQ(sys.actor_count(), 0U);
}

TEST(DeterministicSystemTest, MethodRegistryMapsNamesToMethods) {
  auto reg = method_registry<counter>{"counter"}.method("add", &counter::add).method("get", &counter::get);
  EXPECT_EQ(reg.size(), 2U);
  EXPECT_EQ(reg.type_name(), "counter");
  EXPECT_EQ(reg.name_of(&counter::add), std::optional<std::string_view>{"add"});
  EXPECT_EQ(reg.name_of(&counter::boom), std::nullopt);
  auto m = reg.find<int (counter::*)(int)>("add");
  ASSERT_TRUE(m.has_value());
  deterministic_system sys;
  auto c = *sys.spawn<counter>(1);
  EXPECT_EQ(*c.ask(*m, 2).get(), 3);
  EXPECT_EQ(reg.find<int (counter::*)(int)>("get"), std::nullopt);  // wrong signature
}

}  // namespace
}  // namespace prsgd
