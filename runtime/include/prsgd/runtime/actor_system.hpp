// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_ref.hpp"
#include "prsgd/runtime/detail/system_engine.hpp"
#include "prsgd/runtime/policy.hpp"

namespace prsgd {

/// Configures an `actor_system`.
struct config {
  /// Actor threads (Asio pool); 0 = std::thread::hardware_concurrency().
  std::size_t threads = 0;
  /// Compute-pool threads for `actor::run_compute`; 0 = hardware_concurrency().
  std::size_t compute_threads = 0;
  /// Node id stamped into every actor id (0 for a single process).
  node_id node = 0;
  /// Messages one actor handles before it yields its thread to other actors.
  std::size_t max_throughput = 64;
  /// Deadline the destructor gives `shutdown`.
  clock_source::duration shutdown_deadline = std::chrono::seconds(5);
  /// How long a blocking `future::get()` polls for the result before it sleeps on its condition
  /// variable (0 = sleep at once). A reply that arrives within it costs the caller no sleep and the
  /// completing thread no wake-up of a sleeping thread; the poll runs only inside `get()`, so an idle
  /// process uses no CPU. The environment variable PRSGD_WAIT_SPIN_US (microseconds), when set,
  /// overrides this value.
  clock_source::duration wait_spin = std::chrono::microseconds(200);

  /// Returns the single-process defaults.
  [[nodiscard]] static config local() { return {}; }
};

/// Runs actors: spawns them, schedules their handlers on a Boost.Asio thread pool (one handler at a
/// time per actor), runs timers and a compute pool, and shuts everything down. See threads.hpp.
/// Thread-safe: every member may be called from any thread, except that the destructor and
/// `shutdown` must not run on an actor thread.
class actor_system {
 public:
  /// Starts the thread pools and the timer thread.
  explicit actor_system(config cfg = config::local());
  actor_system(const actor_system&) = delete;
  actor_system& operator=(const actor_system&) = delete;
  /// Calls `shutdown(cfg.shutdown_deadline)` unless already shut down.
  virtual ~actor_system();

  /// Spawns a `T` constructed from `args` (copied, so a restart can construct it again).
  /// The first argument may be `named{"x"}` or `spawn_options{...}`.
  /// Fails with already_exists (name taken), shutting_down, or handler_failed (constructor threw).
  template <class T, class... A>
  expected<actor_ref<T>> spawn(A&&... args) {
    static_assert(std::is_base_of_v<actor, T>, "spawn<T>: T must derive from prsgd::actor");
    return spawn_split<T>(std::forward<A>(args)...);
  }

  /// Returns the live actor named `name`; not_found if none, invalid_argument if it is not a `T`.
  template <class T>
  [[nodiscard]] expected<actor_ref<T>> lookup(std::string_view name) const {
    auto c = engine_->lookup(name);
    if (!c) {
      return fail(errc::not_found, "no actor named '" + std::string{name} + "'");
    }
    if (c->type() != typeid(T)) {
      return fail(errc::invalid_argument, "actor '" + std::string{name} + "' has another type");
    }
    return actor_ref<T>{std::move(c)};
  }
  /// Returns the untyped handle of the live actor named `name`, or not_found.
  [[nodiscard]] expected<actor_addr> lookup_addr(std::string_view name) const;

  /// Returns the number of live actors.
  [[nodiscard]] std::size_t actor_count() const;
  /// Returns this system's node id.
  [[nodiscard]] node_id node() const noexcept;
  /// Returns the system clock's current time.
  [[nodiscard]] clock_source::time_point now() const noexcept;
  /// Blocks until every actor stopped or `timeout` passed; returns true if none is left.
  /// In a deterministic_system it dispatches instead of sleeping.
  bool await_all_stopped(clock_source::duration timeout);

  /// Stops the system: refuses new spawns, lets every actor drain the mail already queued, then
  /// stops it (on_stop with errc::shutting_down). Actors still alive at `deadline` are stopped hard:
  /// their queued mail bounces with shutting_down. Pending asks complete with shutting_down or
  /// actor_dead. Returns true when everything drained in time. Idempotent. @pre not on an actor thread.
  bool shutdown(clock_source::duration deadline);
  /// Stops at once: like `shutdown` with a zero deadline (running handlers still finish).
  void stop_now();

  /// Returns the engine (runtime-internal).
  [[nodiscard]] const std::shared_ptr<runtime::detail::system_engine>& engine() const noexcept { return engine_; }

 protected:
  /// Wraps an engine (used by deterministic_system).
  actor_system(std::shared_ptr<runtime::detail::system_engine> engine, clock_source::duration deadline);

 private:
  template <class T, class First, class... A>
  expected<actor_ref<T>> spawn_split(First&& first, A&&... args) {
    if constexpr (std::is_same_v<std::decay_t<First>, named>) {
      spawn_options o;
      o.name = first.name;
      return spawn_with<T>(std::move(o), std::forward<A>(args)...);
    } else if constexpr (std::is_same_v<std::decay_t<First>, spawn_options>) {
      return spawn_with<T>(spawn_options{first}, std::forward<A>(args)...);
    } else {
      return spawn_with<T>(spawn_options{}, std::forward<First>(first), std::forward<A>(args)...);
    }
  }
  template <class T>
  expected<actor_ref<T>> spawn_split() {
    return spawn_with<T>(spawn_options{});
  }
  template <class T, class... A>
  expected<actor_ref<T>> spawn_with(spawn_options opts, A&&... args) {
    runtime::detail::actor_factory factory =
        [tup = std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)]() -> std::unique_ptr<actor> {
      return std::apply([](const auto&... a) -> std::unique_ptr<actor> { return std::make_unique<T>(a...); }, tup);
    };
    auto c = engine_->spawn_cell(std::move(factory), std::move(opts), typeid(T));
    if (!c) {
      return std::move(c).error();
    }
    return actor_ref<T>{std::move(*c)};
  }

  std::shared_ptr<runtime::detail::system_engine> engine_;
  clock_source::duration default_deadline_ = std::chrono::seconds(5);
};

}  // namespace prsgd
