// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <string>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/actor_id.hpp"

namespace prsgd {

/// Says what happens when one of an actor's handlers throws.
enum class restart_mode {
  /// The actor stops with errc::handler_failed; monitors get a down message.
  never,
  /// The actor instance is destroyed and rebuilt from its constructor arguments (same id, same
  /// mailbox), at most `max_restarts` times within `window`; then it stops like `never`.
  on_failure,
  /// The actor keeps its state and goes on with the next message (only the failed ask sees the error).
  resume,
};

/// Configures supervision of one actor (Erlang/OTP-style intensity + period, with exponential backoff).
struct restart_policy {
  /// What to do when a handler throws.
  restart_mode mode = restart_mode::never;
  /// Restarts allowed within `window`; one more failure inside the window stops the actor.
  int max_restarts = 3;
  /// Sliding window over which restarts are counted.
  clock_source::duration window = std::chrono::seconds(60);
  /// Delay before the first restart; doubled for each further restart in the window (0 = immediately).
  clock_source::duration backoff = clock_source::duration::zero();
  /// Upper bound of the doubled backoff.
  clock_source::duration max_backoff = std::chrono::seconds(10);

  /// Returns the default policy: never restart.
  [[nodiscard]] static restart_policy stop() { return {}; }
  /// Returns a policy that restarts up to `max` times per `window`, waiting `backoff` (doubling) first.
  [[nodiscard]] static restart_policy restart(int max, clock_source::duration window,
                                              clock_source::duration backoff = clock_source::duration::zero()) {
    restart_policy p;
    p.mode = restart_mode::on_failure;
    p.max_restarts = max;
    p.window = window;
    p.backoff = backoff;
    return p;
  }
  /// Returns a policy that ignores handler failures (the actor keeps running).
  [[nodiscard]] static restart_policy resume() {
    restart_policy p;
    p.mode = restart_mode::resume;
    return p;
  }
};

/// Names an actor at spawn time so others can `lookup` it: `system.spawn<T>(prsgd::named{"x"}, ...)`.
struct named {
  /// Registry name; must be unique within the system.
  std::string name;
};

/// Collects every spawn option: `system.spawn<T>(prsgd::spawn_options{.name = "x"}, ...)`.
struct spawn_options {
  /// Registry name; empty for an anonymous actor.
  std::string name;
  /// Supervision policy.
  restart_policy restart;
};

/// Tells a monitoring actor that a watched actor stopped (delivered to `actor::on_down`).
struct down_msg {
  /// The actor that stopped.
  actor_id source;
  /// Why it stopped: errc::none for a normal `quit()`, handler_failed, shutting_down, ...
  error reason;
};

/// Identifies a timer of one actor; returned by `actor::schedule_once` / `schedule_periodic`.
struct timer_id {
  /// Actor-local number; 0 is never issued.
  std::uint64_t value = 0;
  friend constexpr bool operator==(const timer_id&, const timer_id&) = default;
};

}  // namespace prsgd
