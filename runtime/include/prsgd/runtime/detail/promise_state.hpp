// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "prsgd/common/check.hpp"
#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/detail/system_engine.hpp"
#include "prsgd/runtime/detail/unique_function.hpp"

namespace prsgd::runtime::detail {

/// Says where a future's continuation runs.
struct continuation_target {
  /// The actor whose strand runs it (empty: an actor thread, no strand).
  std::weak_ptr<cell> owner;
  /// True when `owner` was set (a dead owner then drops the continuation).
  bool has_owner = false;
  /// Owner incarnation at registration; a restarted owner drops the continuation.
  std::uint64_t incarnation = 0;
  /// True: run on the completing thread (internal chaining only).
  bool run_inline = false;
};

/// Returns the target for a continuation registered on this thread (the current actor, if any).
[[nodiscard]] continuation_target current_target();
/// Runs `job` as `target` says: on the owner's strand, on an actor thread, or inline.
void dispatch_continuation(system_engine& engine, const continuation_target& target, unique_function<void()> job);
/// Blocks until `ready()` or `timeout`; in manual mode dispatches queued work instead of sleeping.
/// First polls `ready_flag` (set, under `mu`, when `ready()` becomes true) for up to
/// `engine.wait_spin()`, then sleeps on `cv` (notified under `mu`). Returns true when ready.
bool wait_for(system_engine& engine, std::mutex& mu, std::condition_variable& cv, clock_source::duration timeout,
              const std::atomic<bool>& ready_flag, const std::function<bool()>& ready);
/// Polls `flag` (acquire) for up to `budget`, with a CPU pause between reads and a sched_yield() every
/// 16 reads; returns its last value.
bool spin_until_set(const std::atomic<bool>& flag, clock_source::duration budget);

/// Is the shared state of one future/promise pair. Thread-safe; completed at most once.
template <class T>
class promise_state {
 public:
  explicit promise_state(std::shared_ptr<system_engine> engine) : engine_(std::move(engine)) {}

  /// Stores `v` unless already completed; runs or posts the continuation. Returns true if stored.
  bool complete(expected<T> v) {
    unique_function<void(expected<T>)> cont;
    continuation_target target;
    {
      std::lock_guard lock{mu_};
      if (done_) {
        return false;
      }
      done_ = true;
      if (!cont_) {
        result_.emplace(std::move(v));
        stored_.store(true, std::memory_order_release);  // ends a polling take(); see wait_for
        cv_.notify_all();                                // wakes a sleeping take()
        return true;
      }
      cont = std::move(cont_);
      target = std::move(target_);
    }
    fire(std::move(cont), target, std::move(v));
    return true;
  }

  /// Registers the continuation (at most once); fires it at once if already completed.
  void set_continuation(unique_function<void(expected<T>)> fn, continuation_target target) {
    std::optional<expected<T>> ready;
    {
      std::lock_guard lock{mu_};
      PRSGD_CHECK(!consumed_) << "future consumed twice (then/get)";
      consumed_ = true;
      if (!result_) {
        cont_ = std::move(fn);
        target_ = std::move(target);
        return;
      }
      ready = std::move(result_);
      result_.reset();
    }
    fire(std::move(fn), target, std::move(*ready));
  }

  /// Returns true once completed.
  [[nodiscard]] bool ready() {
    std::lock_guard lock{mu_};
    return done_;
  }

  /// Moves the result out if completed (at most once).
  std::optional<expected<T>> try_take() {
    std::lock_guard lock{mu_};
    if (!result_) {
      return std::nullopt;
    }
    PRSGD_CHECK(!consumed_) << "future consumed twice (then/get)";
    consumed_ = true;
    std::optional<expected<T>> out = std::move(result_);
    result_.reset();
    return out;
  }

  /// Blocks up to `timeout` and moves the result out; errc::timeout when it did not arrive.
  expected<T> take(clock_source::duration timeout) {
    PRSGD_CHECK(engine_->manual() || !engine_->on_actor_thread())
        << "future::get() called on an actor thread; use then()";
    bool ok = wait_for(*engine_, mu_, cv_, timeout, stored_, [this] { return result_.has_value(); });
    if (!ok) {
      return fail(errc::timeout, "no reply within the get() timeout");
    }
    auto r = try_take();
    PRSGD_CHECK(r.has_value()) << "future consumed twice (then/get)";
    return std::move(*r);
  }

  /// Returns the system engine.
  [[nodiscard]] system_engine& engine() const noexcept { return *engine_; }
  /// Returns a shared pointer to the engine.
  [[nodiscard]] const std::shared_ptr<system_engine>& core_ptr() const noexcept { return engine_; }

 private:
  void fire(unique_function<void(expected<T>)> cont, const continuation_target& target, expected<T> v) {
    if (target.run_inline) {
      cont(std::move(v));
      return;
    }
    dispatch_continuation(*engine_, target, [c = std::move(cont), val = std::move(v)]() mutable { c(std::move(val)); });
  }

  std::shared_ptr<system_engine> engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool consumed_ = false;
  std::optional<expected<T>> result_;
  std::atomic<bool> stored_{false};  // result_ was stored (never reset): the hint a polling take() reads
  unique_function<void(expected<T>)> cont_;
  continuation_target target_;
};

}  // namespace prsgd::runtime::detail
