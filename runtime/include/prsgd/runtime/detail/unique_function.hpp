// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace prsgd::runtime::detail {

template <class Signature>
class unique_function;

/// Holds a move-only callable (std::move_only_function is C++23). Not thread-safe.
template <class R, class... A>
class unique_function<R(A...)> {
 public:
  /// Creates an empty function.
  unique_function() = default;
  /// Wraps `f`.
  template <class F>
  requires(!std::same_as<std::decay_t<F>, unique_function> && std::invocable<std::decay_t<F>&, A...>)
      unique_function(F&& f)  // NOLINT(google-explicit-constructor,bugprone-forwarding-reference-overload): constrained
      : impl_(std::make_unique<impl<std::decay_t<F>>>(std::forward<F>(f))) {}

  /// Calls the wrapped callable. @pre bool(*this)
  R operator()(A... args) { return impl_->call(std::forward<A>(args)...); }
  /// Returns true when a callable is held.
  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  struct base {
    virtual ~base() = default;
    virtual R call(A... args) = 0;
  };
  template <class F>
  struct impl final : base {
    explicit impl(F&& fn) : f(std::move(fn)) {}
    explicit impl(const F& fn) : f(fn) {}
    R call(A... args) override { return std::invoke(f, std::forward<A>(args)...); }
    F f;
  };
  std::unique_ptr<base> impl_;
};

}  // namespace prsgd::runtime::detail
