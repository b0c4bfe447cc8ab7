// SPDX-License-Identifier: Apache-2.0
// The real thread pool: cross-thread asks, strand exclusivity, compute pool, real timers, shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "prsgd/runtime/runtime.hpp"
#include "test_actors.hpp"

namespace prsgd {
namespace {

using namespace std::chrono_literals;
using test::counter;

config two_threads() {
  config cfg;
  cfg.threads = 2;
  cfg.compute_threads = 1;
  return cfg;
}

TEST(ActorSystemTest, AskFromMainReturnsTheValue) {
  actor_system sys{two_threads()};
  auto c = sys.spawn<counter>(named{"counter"}, 0);
  ASSERT_TRUE(c.has_value());
  auto f = c->ask(&counter::add, 5);
  auto v = f.get(10s);
  ASSERT_TRUE(v.has_value()) << v.error().message();
  EXPECT_EQ(*v, 5);
}

class silent final : public actor {
 public:
  response_promise<int> never() {
    held_ = make_response_promise<int>();
    return held_;
  }

 private:
  response_promise<int> held_;
};

TEST(ActorSystemTest, GetTimesOutWhenNoReplyArrives) {
  actor_system sys{two_threads()};
  auto s = *sys.spawn<silent>();
  auto r = s.ask(&silent::never).get(20ms);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::timeout);
}

TEST(ActorSystemTest, WithinTimesOutOnTheRealClock) {
  actor_system sys{two_threads()};
  auto s = *sys.spawn<silent>();
  auto r = s.ask(&silent::never).within(10ms).get(10s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::timeout);
}

/// Detects overlapping handlers of one actor (must never happen).
class exclusive final : public actor {
 public:
  void bump() {
    if (inside_.fetch_add(1) != 0) {
      overlaps_.fetch_add(1);
    }
    ++count_;  // plain int: TSan reports a race if two handlers ever overlap
    inside_.fetch_sub(1);
  }
  [[nodiscard]] long count() const { return count_; }
  [[nodiscard]] int overlaps() const { return overlaps_.load(); }

 private:
  std::atomic<int> inside_{0};
  std::atomic<int> overlaps_{0};
  long count_ = 0;
};

TEST(ActorSystemTest, HandlersOfOneActorNeverOverlap) {
  actor_system sys{two_threads()};
  auto e = *sys.spawn<exclusive>();
  constexpr int per_thread = 20'000;
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        e.tell(&exclusive::bump);
      }
    });
  }
  for (auto& t : senders) {
    t.join();
  }
  EXPECT_EQ(*e.ask(&exclusive::count).get(10s), 4L * per_thread);
  EXPECT_EQ(*e.ask(&exclusive::overlaps).get(10s), 0);
}

/// Offloads work and checks where each part ran.
class offloader final : public actor {
 public:
  response_promise<bool> check() {
    auto p = make_response_promise<bool>();
    run_compute(
        [] {
          // On the compute pool: no actor strand here.
          return runtime::detail::current_cell() == nullptr;
        },
        [this, p](expected<bool> off_strand) mutable {
          const bool on_strand =
              runtime::detail::current_cell() != nullptr && runtime::detail::current_cell()->id() == id();
          p.deliver(off_strand.has_value() && *off_strand && on_strand);
        });
    return p;
  }
};

TEST(ActorSystemTest, RunComputeRunsOffStrandAndContinuesOnStrand) {
  actor_system sys{two_threads()};
  auto o = *sys.spawn<offloader>();
  auto r = o.ask(&offloader::check).get(10s);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_TRUE(*r);
}

/// Replies once its periodic timer has fired `n` times.
class ticker final : public actor {
 public:
  response_promise<int> count_to(int n) {
    target_ = n;
    done_ = make_response_promise<int>();
    timer_ = schedule_periodic(1ms, [this] {
      if (++ticks_ == target_) {
        cancel_timer(timer_);
        done_.deliver(ticks_);
      }
    });
    return done_;
  }

 private:
  int ticks_ = 0;
  int target_ = 0;
  timer_id timer_;
  response_promise<int> done_;
};

TEST(ActorSystemTest, PeriodicTimerFiresOnTheRealClock) {
  actor_system sys{two_threads()};
  auto t = *sys.spawn<ticker>();
  auto r = t.ask(&ticker::count_to, 3).get(10s);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(*r, 3);
}

TEST(ActorSystemTest, ThenFromNonActorCodeRunsOnAnActorThread) {
  actor_system sys{two_threads()};
  auto c = *sys.spawn<counter>(1);
  std::mutex mu;
  std::condition_variable cv;
  std::optional<int> got;
  std::thread::id ran_on;
  c.ask(&counter::add, 1).then([&](expected<int> v) {
    std::lock_guard lock{mu};
    got = v ? *v : -1;
    ran_on = std::this_thread::get_id();
    cv.notify_all();
  });
  std::unique_lock lock{mu};
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return got.has_value(); }));
  EXPECT_EQ(*got, 2);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(ActorSystemTest, ThrowingHandlerDoesNotTakeTheProcessDown) {
  actor_system sys{two_threads()};
  auto c = *sys.spawn<counter>(0);
  auto r = c.ask(&counter::boom, std::string{"oops"}).get(10s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::handler_failed);
  EXPECT_TRUE(sys.await_all_stopped(10s));
  EXPECT_EQ(c.ask(&counter::get).get(10s).error().code, errc::actor_dead);
}

TEST(ActorSystemTest, GracefulShutdownAnswersEveryPendingAsk) {
  actor_system sys{two_threads()};
  std::vector<actor_ref<counter>> cs;
  for (int i = 0; i < 8; ++i) {
    cs.push_back(*sys.spawn<counter>(0));
  }
  std::vector<future<int>> fs;
  for (int i = 0; i < 2000; ++i) {
    fs.push_back(cs[static_cast<std::size_t>(i) % cs.size()].ask(&counter::add, 1));
  }
  EXPECT_TRUE(sys.shutdown(10s));
  int ok = 0;
  for (auto& f : fs) {
    auto r = f.try_get();
    ASSERT_TRUE(r.has_value()) << "an ask was left pending";
    if (r->has_value()) {
      ++ok;
    } else {
      EXPECT_EQ(r->error().code, errc::shutting_down);
    }
  }
  EXPECT_EQ(ok, 2000);  // everything was queued before shutdown, so everything was drained
  EXPECT_EQ(cs[0].ask(&counter::get).get(1s).error().code, errc::shutting_down);
  EXPECT_EQ(sys.spawn<counter>(0).error().code, errc::shutting_down);
}

/// Works in one handler (a computation, not a sleep): says it began (`*started`), waits for `*go`, then
/// goes on for `d`.
class slow final : public actor {
 public:
  int work(std::chrono::milliseconds d, std::atomic<bool>* started, const std::atomic<bool>* go) {
    started->store(true, std::memory_order_release);
    while (!go->load(std::memory_order_acquire)) {
      std::this_thread::yield();
    }
    const auto end = std::chrono::steady_clock::now() + d;
    long spins = 0;
    while (std::chrono::steady_clock::now() < end) {
      ++spins;
    }
    return spins > 0 ? 1 : 0;
  }
  int quick() { return 2; }
};

TEST(ActorSystemTest, ShutdownDeadlineStopsHardAndFailsQueuedAsks) {
  actor_system sys{two_threads()};
  auto s = *sys.spawn<slow>();
  std::atomic<bool> started{false};
  std::atomic<bool> go{false};
  auto busy = s.ask(&slow::work, std::chrono::milliseconds{300}, &started, &go);
  auto queued = s.ask(&slow::quick);
  // Shut down only once the long handler runs (`quick` waits behind it in the mailbox), and let its 300 ms
  // start only now, so a loaded machine cannot end it before the 1 ms deadline. The wait has no bound of its
  // own: ctest's timeout ends a run in which the handler never starts.
  while (!started.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
  go.store(true, std::memory_order_release);
  EXPECT_FALSE(sys.shutdown(1ms));
  auto b = busy.try_get();
  auto q = queued.try_get();
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(q.has_value());
  EXPECT_TRUE(b->has_value());  // a running handler is never interrupted
  ASSERT_FALSE(q->has_value());
  EXPECT_EQ(q->error().code, errc::shutting_down);
}

TEST(ActorSystemTest, DestructorShutsDownAndCompletesFutures) {
  future<int> f;
  actor_ref<silent> s;
  {
    actor_system sys{two_threads()};
    s = *sys.spawn<silent>();
    f = s.ask(&silent::never);
  }
  auto r = f.try_get();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->error().code, errc::actor_dead);
  EXPECT_FALSE(s.alive());
  EXPECT_FALSE(s.tell(&silent::never));
}

/// Bounces a ball with its peer until `left` reaches zero.
class player final : public actor {
 public:
  void set_peer(actor_ref<player> p) { peer_ = std::move(p); }
  response_promise<int> serve(int rounds) {
    done_ = make_response_promise<int>();
    peer_.tell(&player::ball, rounds, self_ref<player>());
    return done_;
  }
  void ball(int left, actor_ref<player> from) {
    ++hits_;
    if (left == 0) {
      from.tell(&player::finish);
      return;
    }
    from.tell(&player::ball, left - 1, self_ref<player>());
  }
  void finish() { done_.deliver(hits_); }

 private:
  actor_ref<player> peer_;
  response_promise<int> done_;
  int hits_ = 0;
};

TEST(ActorSystemTest, PingPongBetweenTwoActors) {
  actor_system sys{two_threads()};
  auto a = *sys.spawn<player>();
  auto b = *sys.spawn<player>();
  a.tell(&player::set_peer, b);
  auto r = a.ask(&player::serve, 10'000).get(30s);
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(*r, 5'000);  // a hits every second ball of 10'001
}

}  // namespace
}  // namespace prsgd
