// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <memory>

#include "prsgd/common/clock.hpp"
#include "prsgd/runtime/actor_system.hpp"

namespace prsgd {

/// Is an `actor_system` for protocol tests: no threads at all. Messages, continuations and compute
/// jobs queue up until the test dispatches them; time is a `fake_clock` that moves only on `advance`.
/// Each dispatch step handles exactly one message of one actor, in FIFO order of readiness, so a test
/// can inject a message, run one step, and assert the state in between. `future::get()` dispatches
/// until its result is ready (or nothing is left to run) instead of blocking.
///
///   prsgd::deterministic_system sys;
///   auto c = *sys.spawn<counter>(0);
///   auto f = c.ask(&counter::add, 5);
///   sys.dispatch_all();                 // on_start, then add(5)
///   EXPECT_EQ(*f.try_get()->value(), 5);
///   sys.advance(std::chrono::seconds(1));  // fires due timers (their messages are then queued)
///
/// Thread contract: not thread-safe; use from the test thread only (actors run on it too).
class deterministic_system : public actor_system {
 public:
  /// Creates a system on node `node` with its own fake clock.
  explicit deterministic_system(node_id node = 0);
  ~deterministic_system() override;

  /// Runs one queued job (one message of one actor, a continuation or a compute job).
  /// Returns false when nothing is queued.
  bool dispatch_one();
  /// Runs jobs until none is queued or `limit` jobs ran; returns how many ran.
  std::size_t dispatch_all(std::size_t limit = 10'000'000);
  /// Moves the fake clock by `d` and fires due timers (their messages are queued, not yet run).
  /// Returns how many timers fired.
  std::size_t advance(clock_source::duration d);
  /// Advances by `d`, then `dispatch_all()`; returns the jobs run.
  std::size_t advance_and_dispatch(clock_source::duration d);
  /// Returns the number of queued jobs (runnable actors, continuations, compute jobs).
  [[nodiscard]] std::size_t pending() const;
  /// Returns the number of armed timers (runtime timers, actor timers and ask deadlines).
  [[nodiscard]] std::size_t timer_count() const;
  /// Returns the fake clock.
  [[nodiscard]] fake_clock& clock() noexcept;
};

}  // namespace prsgd
