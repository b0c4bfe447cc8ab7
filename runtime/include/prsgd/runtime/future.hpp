// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "prsgd/common/check.hpp"
#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/detail/promise_state.hpp"

namespace prsgd {

/// Is the eventual result of an `ask`: a value or an error (actor_dead, timeout, handler_failed,
/// shutting_down, ...), never an exception. Consume it once, with `then` (from actors) or `get`
/// (from non-actor code). Thread-safe to hand between threads; not to consume from two at once.
template <class T>
class [[nodiscard]] future {
 public:
  /// Creates an invalid future (no state).
  future() = default;
  /// Wraps a shared state (runtime-internal).
  explicit future(std::shared_ptr<runtime::detail::promise_state<T>> st) : st_(std::move(st)) {}

  /// Returns true when this future has a state.
  [[nodiscard]] bool valid() const noexcept { return st_ != nullptr; }
  /// Returns true once the result arrived.
  [[nodiscard]] bool ready() const { return st_ && st_->ready(); }

  /// Blocks up to `timeout` for the result. Never call from an actor handler (checked).
  /// In a `deterministic_system` it dispatches queued messages instead of sleeping.
  /// @pre valid() and not yet consumed.
  expected<T> get(clock_source::duration timeout = std::chrono::seconds(30)) {
    PRSGD_CHECK(st_) << "get() on an invalid future";
    return st_->take(timeout);
  }

  /// Returns the result if it already arrived (consuming it), else nullopt. Never blocks.
  std::optional<expected<T>> try_get() {
    PRSGD_CHECK(st_) << "try_get() on an invalid future";
    return st_->try_take();
  }

  /// Runs `fn(expected<T>)` exactly once when the result arrives. Called from an actor handler, `fn`
  /// runs on that actor's strand (dropped if the actor stopped or restarted meanwhile); otherwise on
  /// an actor thread. Never inline in the caller. @pre valid() and not yet consumed.
  template <class F>
  requires std::invocable<F&, expected<T>>
  void then(F&& fn) {
    PRSGD_CHECK(st_) << "then() on an invalid future";
    st_->set_continuation(runtime::detail::unique_function<void(expected<T>)>{std::forward<F>(fn)},
                          runtime::detail::current_target());
  }

  /// Arms a deadline: unless a result arrived within `timeout`, the future completes with
  /// errc::timeout (a late reply is then dropped). Returns the same future.
  future within(clock_source::duration timeout) && {
    PRSGD_CHECK(st_) << "within() on an invalid future";
    auto& engine = st_->engine();
    std::weak_ptr<runtime::detail::promise_state<T>> weak = st_;
    engine.add_timer(engine.time().now() + timeout, [weak] {
      if (auto s = weak.lock()) {
        s->complete(fail(errc::timeout, "no reply within the ask deadline"));
      }
    });
    return std::move(*this);
  }

  /// Returns the shared state (runtime-internal).
  [[nodiscard]] const std::shared_ptr<runtime::detail::promise_state<T>>& state() const noexcept { return st_; }

 private:
  std::shared_ptr<runtime::detail::promise_state<T>> st_;
};

/// Is a reply an actor promises and delivers later, e.g. when a barrier closes. Return it from a
/// handler called by `ask`: the asker's future completes when `deliver` is called. If every copy is
/// destroyed without delivering (e.g. the actor stops), the asker gets errc::actor_dead.
/// Thread contract: use on the owning actor's strand; copies share one state.
template <class T>
class response_promise {
 public:
  /// Creates an unbound promise (use `actor::make_response_promise<T>()`).
  response_promise() = default;
  /// Binds to a new state on `engine` (runtime-internal).
  explicit response_promise(std::shared_ptr<runtime::detail::system_engine> engine)
      : guard_(std::make_shared<guard>(std::make_shared<runtime::detail::promise_state<T>>(std::move(engine)))) {}

  /// Delivers a value or an error; later deliveries are ignored. Returns true if this one counted.
  bool deliver(expected<T> v) {
    PRSGD_CHECK(guard_) << "deliver() on an unbound response_promise";
    return guard_->st->complete(std::move(v));
  }
  /// Delivers success for a `response_promise<void>`.
  bool deliver() requires std::is_void_v<T> { return deliver(expected<void>{}); }
  /// Returns true while bound and not yet delivered.
  [[nodiscard]] bool pending() const { return guard_ && !guard_->st->ready(); }
  /// Returns a future on the same state (runtime-internal: used to chain the ask).
  [[nodiscard]] std::shared_ptr<runtime::detail::promise_state<T>> state() const {
    return guard_ ? guard_->st : nullptr;
  }

 private:
  struct guard {
    explicit guard(std::shared_ptr<runtime::detail::promise_state<T>> s) : st(std::move(s)) {}
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    ~guard() { st->complete(fail(errc::actor_dead, "response promise dropped without a reply")); }
    std::shared_ptr<runtime::detail::promise_state<T>> st;
  };
  std::shared_ptr<guard> guard_;
};

namespace runtime::detail {

/// Maps a handler's return type to the type its `ask` future carries.
template <class R>
struct ask_result {
  using type = R;
};
template <class T>
struct ask_result<expected<T>> {
  using type = T;
};
template <class T>
struct ask_result<future<T>> {
  using type = T;
};
template <class T>
struct ask_result<response_promise<T>> {
  using type = T;
};

/// Completes `st` with handler result `r` (value, expected, future or response_promise; chained inline).
template <class T, class R>
void complete_with(const std::shared_ptr<promise_state<T>>& st, R&& r) {
  using D = std::decay_t<R>;
  if constexpr (std::is_same_v<D, future<T>> || std::is_same_v<D, response_promise<T>>) {
    auto src = r.state();
    if (!src) {
      st->complete(fail(errc::handler_failed, "handler returned an invalid future/promise"));
      return;
    }
    continuation_target inline_target;
    inline_target.run_inline = true;
    src->set_continuation([st](expected<T> v) { st->complete(std::move(v)); }, inline_target);
  } else {
    st->complete(expected<T>{std::forward<R>(r)});
  }
}

}  // namespace runtime::detail
}  // namespace prsgd
