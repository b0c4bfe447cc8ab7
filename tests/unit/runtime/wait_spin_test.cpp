// SPDX-License-Identifier: Apache-2.0
// future::get()'s bounded poll before it sleeps (config::wait_spin): the hand-over from a completing
// thread to a waiter that is polling, about to sleep, or asleep must never lose the wake-up.
//
// Real threads on the wall clock (label integration). Where a completer sleeps before it completes, the
// sleep only makes the scene the test names likely (the waiter already polling or asleep); the assertions
// hold in whatever order the threads run. Upper bounds on waits are scaled by test::time_scale().
#include <gtest/gtest.h>

#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "prsgd/runtime/detail/promise_state.hpp"
#include "prsgd/runtime/runtime.hpp"
#include "time_scale.hpp"

namespace prsgd {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using state = runtime::detail::promise_state<int>;

class WaitSpinTest : public ::testing::Test {
 protected:
  // The environment variable overrides config::wait_spin; these tests set the budget themselves.
  void SetUp() override { ::unsetenv("PRSGD_WAIT_SPIN_US"); }

  static config with_spin(clock_source::duration spin) {
    config cfg;
    cfg.threads = 2;
    cfg.compute_threads = 1;
    cfg.wait_spin = spin;
    return cfg;
  }
};

class echo final : public actor {
 public:
  int id(int x) { return x; }
};

void busy_wait(std::chrono::nanoseconds d) {
  const auto until = steady::now() + d;
  while (steady::now() < until) {
  }
}

TEST_F(WaitSpinTest, TheConfiguredBudgetReachesTheEngine) {
  actor_system sys{with_spin(123us)};
  EXPECT_EQ(sys.engine()->wait_spin(), clock_source::duration{123us});
  actor_system off{with_spin(0us)};
  EXPECT_EQ(off.engine()->wait_spin(), clock_source::duration::zero());
}

TEST_F(WaitSpinTest, EnvironmentVariableOverridesTheBudget) {
  ::setenv("PRSGD_WAIT_SPIN_US", "7", 1);
  actor_system sys{with_spin(123us)};
  ::unsetenv("PRSGD_WAIT_SPIN_US");
  EXPECT_EQ(sys.engine()->wait_spin(), clock_source::duration{7us});
}

// The waiter sleeps at once (no poll); only the notify can wake it before its 5 s timeout.
TEST_F(WaitSpinTest, SleepingWaiterIsWokenByCompletion) {
  actor_system sys{with_spin(0us)};
  auto st = std::make_shared<state>(sys.engine());
  std::thread completer([st] {
    std::this_thread::sleep_for(20ms);
    st->complete(7);
  });
  const auto t0 = steady::now();
  auto v = st->take(5s);
  const auto waited = steady::now() - t0;
  completer.join();
  ASSERT_TRUE(v.has_value()) << v.error().message();
  EXPECT_EQ(*v, 7);
  EXPECT_LT(waited, test::scaled(2s)) << "the waiter was not woken by the completion";
}

// The result arrives long after the poll budget: the waiter has gone to sleep and must be notified.
TEST_F(WaitSpinTest, WaiterPastItsPollBudgetIsWokenByCompletion) {
  actor_system sys{with_spin(100us)};
  auto st = std::make_shared<state>(sys.engine());
  std::thread completer([st] {
    std::this_thread::sleep_for(20ms);
    st->complete(8);
  });
  const auto t0 = steady::now();
  auto v = st->take(5s);
  const auto waited = steady::now() - t0;
  completer.join();
  ASSERT_TRUE(v.has_value()) << v.error().message();
  EXPECT_EQ(*v, 8);
  EXPECT_LT(waited, test::scaled(2s)) << "the waiter was not woken by the completion";
}

// The result arrives while the waiter polls (budget 5 s): the poll must see it, not run out its budget.
TEST_F(WaitSpinTest, PollingWaiterSeesTheResultWithoutSleeping) {
  actor_system sys{with_spin(5s)};
  auto st = std::make_shared<state>(sys.engine());
  std::thread completer([st] {
    std::this_thread::sleep_for(5ms);
    st->complete(9);
  });
  const auto t0 = steady::now();
  auto v = st->take(10s);
  const auto waited = steady::now() - t0;
  completer.join();
  ASSERT_TRUE(v.has_value()) << v.error().message();
  EXPECT_EQ(*v, 9);
  EXPECT_LT(waited, test::scaled(2s)) << "the poll did not see the stored result";
}

TEST_F(WaitSpinTest, PollEndsAtItsBudgetWhenNothingArrives) {
  actor_system sys{with_spin(1ms)};
  auto st = std::make_shared<state>(sys.engine());
  const auto t0 = steady::now();
  auto v = st->take(30ms);
  const auto waited = steady::now() - t0;
  ASSERT_FALSE(v.has_value());
  EXPECT_EQ(v.error().code, errc::timeout);
  EXPECT_GE(waited, 30ms);
  EXPECT_TRUE(st->complete(1));  // a late completion is still accepted, just never taken
}

// After its budget the waiter sleeps: a long get() costs about the budget in CPU time, not its wait.
TEST_F(WaitSpinTest, LongWaitSleepsAfterTheBudget) {
  actor_system sys{with_spin(2ms)};
  auto st = std::make_shared<state>(sys.engine());
  timespec cpu0{};
  timespec cpu1{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
  auto v = st->take(300ms);
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
  ASSERT_FALSE(v.has_value());
  const double cpu_ms = (cpu1.tv_sec - cpu0.tv_sec) * 1e3 + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e6;
  EXPECT_LT(cpu_ms, 100.0) << "the waiter kept polling after its budget";
}

// Many waiter/completer pairs, each over thousands of fresh promises. Each completion lands at a
// random point: before the waiter starts, while it polls, around the end of its budget, or after it
// went to sleep. Every take must return its own value well before its timeout (a lost wake-up shows as
// errc::timeout; a torn hand-over as a wrong value; ThreadSanitizer checks the orderings).
void run_handoff_race(clock_source::duration spin, int pairs, int iterations) {
  actor_system sys{config{.threads = 1, .compute_threads = 1, .wait_spin = spin}};
  std::atomic<int> failures{0};
  std::atomic<std::int64_t> slowest_ns{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < pairs; ++p) {
    auto states = std::make_shared<std::vector<std::shared_ptr<state>>>();
    states->reserve(static_cast<std::size_t>(iterations));
    for (int i = 0; i < iterations; ++i) {
      states->push_back(std::make_shared<state>(sys.engine()));
    }
    auto announced = std::make_shared<std::atomic<int>>(-1);  // index the waiter is about to take
    threads.emplace_back([states, announced, iterations, spin, seed = p] {
      std::mt19937 rng(static_cast<unsigned>(seed) * 7919U + 1U);
      const auto budget_ns = std::max<std::int64_t>(std::chrono::nanoseconds(spin).count(), 1000);
      std::uniform_int_distribution<std::int64_t> delay(0, 3 * budget_ns);
      std::uniform_int_distribution<int> mode(0, 9);
      for (int i = 0; i < iterations; ++i) {
        if (mode(rng) != 0) {  // mostly: complete after the waiter started waiting
          while (announced->load(std::memory_order_acquire) < i) {
            std::this_thread::yield();
          }
          busy_wait(std::chrono::nanoseconds(delay(rng)));
        }
        (*states)[static_cast<std::size_t>(i)]->complete(i);
      }
    });
    threads.emplace_back([states, announced, iterations, &failures, &slowest_ns] {
      for (int i = 0; i < iterations; ++i) {
        announced->store(i, std::memory_order_release);
        const auto t0 = steady::now();
        auto v = (*states)[static_cast<std::size_t>(i)]->take(10s);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now() - t0).count();
        std::int64_t prev = slowest_ns.load();
        while (ns > prev && !slowest_ns.compare_exchange_weak(prev, ns)) {
        }
        if (!v.has_value() || *v != i) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(slowest_ns.load(), std::chrono::nanoseconds(test::scaled(5s)).count()) << "a take waited for its timeout";
}

TEST_F(WaitSpinTest, HandOffRaceWithPollingNeverLosesAWakeUp) { run_handoff_race(20us, 3, 4000); }

TEST_F(WaitSpinTest, HandOffRaceWithoutPollingNeverLosesAWakeUp) { run_handoff_race(0us, 3, 4000); }

// Through the public API: asks answered by an actor while the caller polls or sleeps.
TEST_F(WaitSpinTest, AskGetReturnsEveryReplyWithAndWithoutPolling) {
  for (const clock_source::duration spin :
       {clock_source::duration::zero(), clock_source::duration{30us}, clock_source::duration{1ms}}) {
    actor_system sys{with_spin(spin)};
    auto a = sys.spawn<echo>();
    ASSERT_TRUE(a.has_value());
    for (int i = 0; i < 2000; ++i) {
      auto v = a->ask(&echo::id, i).get(10s);
      ASSERT_TRUE(v.has_value()) << v.error().message();
      ASSERT_EQ(*v, i);
    }
  }
}

}  // namespace
}  // namespace prsgd
