// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <typeindex>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/actor_id.hpp"
#include "prsgd/runtime/detail/unique_function.hpp"
#include "prsgd/runtime/fwd.hpp"
#include "prsgd/runtime/policy.hpp"

namespace prsgd::runtime::detail {

/// Builds a fresh actor instance (called at spawn and at every restart, on the actor's strand or the
/// spawning thread).
using actor_factory = unique_function<std::unique_ptr<actor>()>;

/// Is the shared engine behind an `actor_system`: executor, timers, actor table and name registry.
/// Thread-safe. Kept alive by every cell and promise that may still need it, so it can outlive the
/// `actor_system` facade (after shutdown it runs posted jobs inline).
class system_engine : public std::enable_shared_from_this<system_engine> {
 public:
  system_engine() = default;
  system_engine(const system_engine&) = delete;
  system_engine& operator=(const system_engine&) = delete;
  virtual ~system_engine() = default;

  /// Returns the node id stamped into every actor id.
  [[nodiscard]] virtual node_id node() const noexcept = 0;
  /// Returns the injected clock (steady or fake).
  [[nodiscard]] virtual const clock_source& time() const noexcept = 0;
  /// Returns the owning facade (valid until the facade is destroyed).
  [[nodiscard]] virtual actor_system& facade() noexcept = 0;

  /// Makes `c` runnable: `c->run()` will be called on an actor thread. `fair` = put it at the back
  /// of the global queue (a cell that used up its throughput budget) instead of the thread's LIFO slot.
  virtual void schedule(std::shared_ptr<cell> c, bool fair) = 0;
  /// Runs `job` on an actor thread (not on any strand). After shutdown, runs it inline.
  virtual void post(unique_function<void()> job) = 0;
  /// Runs `job` on the compute pool. Dropped after shutdown.
  virtual void post_compute(unique_function<void()> job) = 0;
  /// Calls `fn` on the timer thread (or from `deterministic_system::advance`) at `when`.
  virtual void add_timer(clock_source::time_point when, unique_function<void()> fn) = 0;

  /// Returns true in deterministic (manual dispatch) mode.
  [[nodiscard]] virtual bool manual() const noexcept = 0;
  /// Manual mode: runs one queued job and returns true, or returns false when idle.
  virtual bool run_one() = 0;
  /// Returns true once shutdown started: spawns fail and bounced mail reports errc::shutting_down.
  [[nodiscard]] virtual bool shutting_down() const noexcept = 0;
  /// Returns true once the shutdown deadline passed: actors stop taking messages (hard stop).
  [[nodiscard]] virtual bool halted() const noexcept = 0;
  /// Returns true when `this` thread is an actor thread of this system.
  [[nodiscard]] virtual bool on_actor_thread() const noexcept = 0;

  /// Creates, registers and starts a cell. Fails with already_exists, shutting_down or handler_failed.
  [[nodiscard]] virtual expected<std::shared_ptr<cell>> spawn_cell(actor_factory factory, spawn_options opts,
                                                                   std::type_index type) = 0;
  /// Returns the live actor registered under `name`, or nullptr.
  [[nodiscard]] virtual std::shared_ptr<cell> lookup(std::string_view name) const = 0;
  /// Returns the live actor with local number `local`, or nullptr.
  [[nodiscard]] virtual std::shared_ptr<cell> find(std::uint64_t local) const = 0;
  /// Returns the number of live actors.
  [[nodiscard]] virtual std::size_t actor_count() const = 0;
  /// Unregisters a terminated cell (called once by the cell, on its strand).
  virtual void on_terminated(cell& c) = 0;
  /// Runs the graceful-then-hard shutdown (see actor_system::shutdown). Idempotent.
  virtual bool shutdown(clock_source::duration deadline) = 0;
  /// Blocks until no actor is alive or `timeout` passed; returns true if none is left.
  virtual bool await_all_stopped(clock_source::duration timeout) = 0;
  /// Binds the facade (called by actor_system's constructor).
  virtual void bind_facade(actor_system* facade) noexcept = 0;
  /// Returns the maximum number of messages one actor handles before yielding its thread.
  [[nodiscard]] virtual std::size_t max_throughput() const noexcept = 0;
  /// Returns how long a blocking wait polls for its result before it sleeps (0: never polls).
  [[nodiscard]] virtual clock_source::duration wait_spin() const noexcept { return clock_source::duration::zero(); }
};

/// Returns the cell whose handler runs on this thread, or nullptr (not on a strand).
[[nodiscard]] cell* current_cell() noexcept;
/// Returns the cell whose actor is being constructed on this thread, or nullptr.
[[nodiscard]] cell* constructing_cell() noexcept;

}  // namespace prsgd::runtime::detail
