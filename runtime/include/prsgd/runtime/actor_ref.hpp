// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/actor_id.hpp"
#include "prsgd/runtime/detail/cell.hpp"
#include "prsgd/runtime/detail/message.hpp"
#include "prsgd/runtime/detail/promise_state.hpp"
#include "prsgd/runtime/future.hpp"

namespace prsgd {

/// Is an untyped, copyable handle to an actor (for monitors, registries and logs).
/// Thread-safe. Keeps only the actor's shell alive, never the actor's state.
class actor_addr {
 public:
  /// Creates an invalid handle.
  actor_addr() = default;
  /// Wraps a cell (runtime-internal).
  explicit actor_addr(std::shared_ptr<runtime::detail::cell> c) : cell_(std::move(c)) {}
  /// Returns the actor's id (invalid id for an invalid handle).
  [[nodiscard]] actor_id id() const noexcept { return cell_ ? cell_->id() : actor_id{}; }
  /// Returns true when this refers to an actor.
  [[nodiscard]] bool valid() const noexcept { return cell_ != nullptr; }
  /// Returns true while the actor runs (a hint: it may stop right after).
  [[nodiscard]] bool alive() const noexcept { return cell_ && cell_->alive(); }
  /// Returns the cell (runtime-internal).
  [[nodiscard]] const std::shared_ptr<runtime::detail::cell>& cell() const noexcept { return cell_; }
  friend bool operator==(const actor_addr& a, const actor_addr& b) noexcept { return a.id() == b.id(); }

 private:
  std::shared_ptr<runtime::detail::cell> cell_;
};

namespace runtime::detail {

/// Calls `m(self, args...)` with the stored arguments moved in.
template <class T, class M, class Tuple>
decltype(auto) invoke_stored(M& m, T& self, Tuple& args) {
  return std::apply([&](auto&... a) -> decltype(auto) { return std::invoke(m, self, std::move(a)...); }, args);
}

/// Carries a fire-and-forget call to `T`.
template <class T, class M, class Tuple>
class tell_message final : public message {
 public:
  tell_message(M m, Tuple args) : m_(std::move(m)), args_(std::move(args)) {}
  void run(cell& target) override {
    auto& self = static_cast<T&>(*target.instance());
    static_cast<void>(invoke_stored(m_, self, args_));
  }

 private:
  M m_;
  Tuple args_;
};

/// Carries a call to `T` whose result completes a promise state.
template <class T, class M, class Tuple, class R>
class ask_message final : public message {
 public:
  ask_message(M m, Tuple args, std::shared_ptr<promise_state<R>> st)
      : m_(std::move(m)), args_(std::move(args)), st_(std::move(st)) {}
  void run(cell& target) override {
    auto& self = static_cast<T&>(*target.instance());
    try {
      using raw = decltype(invoke_stored(m_, self, args_));
      if constexpr (std::is_void_v<raw>) {
        invoke_stored(m_, self, args_);
        st_->complete(expected<void>{});
      } else {
        complete_with(st_, invoke_stored(m_, self, args_));
      }
    } catch (const std::exception& e) {
      st_->complete(fail(errc::handler_failed, e.what()));
      throw;
    } catch (...) {
      st_->complete(fail(errc::handler_failed, "unknown exception"));
      throw;
    }
  }
  void bounce(const error& why) noexcept override { st_->complete(why); }

 private:
  M m_;
  Tuple args_;
  std::shared_ptr<promise_state<R>> st_;
};

/// Returns the value type of `ask(m, args...)` on a `T`.
template <class T, class M, class... A>
using ask_result_t = typename ask_result<std::decay_t<std::invoke_result_t<M&, T&, std::decay_t<A>&&...>>>::type;

}  // namespace runtime::detail

/// Is a typed, copyable handle to an actor of type `T`: the only way to talk to it.
/// `tell` and `ask` take a member function pointer (`&Counter::add`) or a callable `f(T&, args...)`;
/// arguments are copied/moved into the message. Location-transparent by design: every call is a
/// message object handed to the target's cell, so a remote proxy cell can encode it.
/// Thread-safe: use from any thread or actor.
template <class T>
class actor_ref {
 public:
  /// Creates an invalid handle.
  actor_ref() = default;
  /// Wraps a cell that runs a `T` (runtime-internal).
  explicit actor_ref(std::shared_ptr<runtime::detail::cell> c) : cell_(std::move(c)) {}

  /// Returns the actor's id.
  [[nodiscard]] actor_id id() const noexcept { return cell_ ? cell_->id() : actor_id{}; }
  /// Returns true when this refers to an actor.
  [[nodiscard]] bool valid() const noexcept { return cell_ != nullptr; }
  /// Returns true while the actor runs (a hint: it may stop right after).
  [[nodiscard]] bool alive() const noexcept { return cell_ && cell_->alive(); }
  /// Returns the untyped handle.
  [[nodiscard]] actor_addr addr() const { return actor_addr{cell_}; }
  /// Converts to the untyped handle.
  operator actor_addr() const { return addr(); }  // NOLINT(google-explicit-constructor)
  friend bool operator==(const actor_ref& a, const actor_ref& b) noexcept { return a.id() == b.id(); }

  /// Sends `m(args...)` without waiting for a result. Returns false when the actor is dead (the
  /// message is dropped). A throw inside the handler is an actor failure (see restart_policy).
  template <class M, class... A>
  bool tell(M m, A&&... args) const {
    using tuple = std::tuple<std::decay_t<A>...>;
    static_assert(std::is_invocable_v<M&, T&, std::decay_t<A>&&...>, "tell: not callable on T with these args");
    return cell_->enqueue(
        std::make_unique<runtime::detail::tell_message<T, M, tuple>>(std::move(m), tuple{std::forward<A>(args)...}));
  }

  /// Calls `m(args...)` on the actor and returns a future for its result. A handler returning
  /// `expected<R>`, `future<R>` or `response_promise<R>` yields `future<R>`. Errors arrive in the
  /// future: actor_dead (dead now or before replying), handler_failed (the handler threw),
  /// shutting_down, or timeout (with `.within(d)` / `get(d)`).
  template <class M, class... A>
  future<runtime::detail::ask_result_t<T, M, A...>> ask(M m, A&&... args) const {
    using R = runtime::detail::ask_result_t<T, M, A...>;
    using tuple = std::tuple<std::decay_t<A>...>;
    auto st = std::make_shared<runtime::detail::promise_state<R>>(cell_->engine().shared_from_this());
    cell_->enqueue(std::make_unique<runtime::detail::ask_message<T, M, tuple, R>>(std::move(m),
                                                                                  tuple{std::forward<A>(args)...}, st));
    return future<R>{std::move(st)};
  }

  /// Returns the cell (runtime-internal).
  [[nodiscard]] const std::shared_ptr<runtime::detail::cell>& cell() const noexcept { return cell_; }

 private:
  std::shared_ptr<runtime::detail::cell> cell_;
};

}  // namespace prsgd
