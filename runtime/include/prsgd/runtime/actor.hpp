// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "prsgd/common/check.hpp"
#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/actor_id.hpp"
#include "prsgd/runtime/actor_ref.hpp"
#include "prsgd/runtime/detail/cell.hpp"
#include "prsgd/runtime/future.hpp"
#include "prsgd/runtime/policy.hpp"

namespace prsgd {

namespace runtime::detail {
/// Calls `f()` and turns a throw into errc::handler_failed; flattens `expected<X>` results.
template <class F>
auto invoke_catching(F& f) {
  using raw = std::invoke_result_t<F&>;
  using R = typename ask_result<std::conditional_t<std::is_void_v<raw>, void, std::decay_t<raw>>>::type;
  try {
    if constexpr (std::is_void_v<raw>) {
      f();
      return expected<void>{};
    } else {
      return expected<R>{f()};
    }
  } catch (const std::exception& e) {
    return expected<R>{fail(errc::handler_failed, e.what())};
  } catch (...) {
    return expected<R>{fail(errc::handler_failed, "unknown exception")};
  }
}
}  // namespace runtime::detail

/// Is the base class of every actor. Derive from it, give the derived class any constructor, and
/// spawn it with `actor_system::spawn<T>(args...)`; the system calls the hooks and your methods.
/// Thread contract: every member function of an actor (hooks, handlers, timer callbacks,
/// continuations) runs on the actor's strand, one at a time, so actor state needs no locks.
/// Construct only through `spawn` (the base constructor binds to the cell being spawned).
class actor {
 public:
  /// Binds to the cell being spawned or restarted. @pre called inside `actor_system::spawn`.
  actor();
  actor(const actor&) = delete;
  actor& operator=(const actor&) = delete;
  /// Destroys the actor (after `on_stop`).
  virtual ~actor();

  /// Runs first on the strand after spawn and after every restart.
  virtual void on_start() {}
  /// Runs last on the strand: `reason` is errc::none after `quit()`, handler_failed after a failure
  /// (also before a restart), shutting_down on system shutdown. Timers are already cancelled.
  virtual void on_stop(const error& reason) { static_cast<void>(reason); }
  /// Receives a down message for every actor this one `monitor`s.
  virtual void on_down(const down_msg& msg) { static_cast<void>(msg); }

  /// Returns this actor's id.
  [[nodiscard]] actor_id id() const noexcept;

 protected:
  /// Returns the system that runs this actor.
  [[nodiscard]] actor_system& system() const noexcept;
  /// Returns the system clock's current time (fake in a deterministic_system).
  [[nodiscard]] clock_source::time_point now() const noexcept;
  /// Stops this actor after the current handler; queued messages bounce (asks get actor_dead).
  void quit(error reason = {});
  /// Runs `fn()` on this strand once after `delay`. Cancelled when the actor stops or restarts.
  timer_id schedule_once(clock_source::duration delay, runtime::detail::unique_function<void()> fn);
  /// Runs `fn()` on this strand every `period` until cancelled, stopped or restarted.
  timer_id schedule_periodic(clock_source::duration period, runtime::detail::unique_function<void()> fn);
  /// Cancels a timer; returns false if unknown or already fired.
  bool cancel_timer(timer_id id);
  /// Replaces the one-shot timer held in `slot`: cancels it, then, if `at` is set, runs `fn()` on this
  /// strand at `at` (at once if it has passed). `slot` holds the new timer and is empty again when `fn`
  /// runs. @pre `slot` is a member of this actor (it outlives every timer of the actor).
  void rearm_once(std::optional<timer_id>& slot, std::optional<clock_source::time_point> at,
                  runtime::detail::unique_function<void()> fn);
  /// Watches `other`: `on_down` gets a down_msg when it stops (at once if it is already dead).
  void monitor(const actor_addr& other);
  /// Stops watching `other`.
  void demonitor(const actor_addr& other);
  /// Returns an untyped handle to this actor.
  [[nodiscard]] actor_addr self_addr() const;

  /// Returns a typed handle to this actor. @pre `T` is the type this actor was spawned as.
  template <class T>
  [[nodiscard]] actor_ref<T> self_ref() const {
    PRSGD_CHECK(cell_->type() == typeid(T)) << "self_ref<T>: wrong actor type";
    return actor_ref<T>{cell_->shared_from_this()};
  }

  /// Returns a promise to return from a handler and `deliver` later (see response_promise).
  template <class T>
  [[nodiscard]] response_promise<T> make_response_promise() const {
    return response_promise<T>{cell_->engine().shared_from_this()};
  }

  /// Runs `fn()` on the compute pool (blocking / CPU-heavy work); then `cont(expected<R>)` on this
  /// strand, with errc::handler_failed if `fn` threw. Dropped if the actor stopped or restarted.
  template <class F, class C>
  void run_compute(F&& fn, C&& cont) {
    std::weak_ptr<runtime::detail::cell> weak = cell_->shared_from_this();
    const auto inc = cell_->incarnation();
    cell_->engine().post_compute(
        [weak, inc, f = std::decay_t<F>(std::forward<F>(fn)), c = std::decay_t<C>(std::forward<C>(cont))]() mutable {
          auto result = runtime::detail::invoke_catching(f);
          auto target = weak.lock();
          if (!target) {
            return;
          }
          target->enqueue(runtime::detail::make_message(
              [inc, c = std::move(c), r = std::move(result)](runtime::detail::cell& self) mutable {
                if (self.incarnation() == inc && self.instance() != nullptr) {
                  c(std::move(r));
                }
              }));
        });
  }

 private:
  runtime::detail::cell* cell_;
};

}  // namespace prsgd
