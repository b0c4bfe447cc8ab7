// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace prsgd {

/// Lists every expected failure that crosses a prsgd API boundary.
enum class errc : std::uint8_t {
  /// Never returned; the zero value of a default-constructed error.
  none = 0,
  /// A deadline passed before the operation completed (ask timeout, connect timeout).
  timeout,
  /// The target actor has stopped, or stops before it replies.
  actor_dead,
  /// No actor, node or method is registered under the given name or id.
  not_found,
  /// A name is already taken (named actor, registered type).
  already_exists,
  /// A message handler threw; the context carries the exception text.
  handler_failed,
  /// The actor system or transport is shutting down and accepts no new work.
  shutting_down,
  /// A peer did not answer heartbeats within the timeout or its connection was cut.
  peer_unreachable,
  /// Bytes from the network or a file could not be decoded (msgpack, IDX, WAV, checkpoint).
  decode_failed,
  /// A message violated the wire protocol (version, type, sizes, bounds).
  protocol_error,
  /// A caller passed a value outside its documented range.
  invalid_argument,
  /// Reserved, never raised: the averager counts a submission for a closed round as late instead.
  stale_round,
  /// Reserved, never raised: the averager counts a non-member's submission as rejected instead.
  not_a_member,
  /// Reserved, never raised: the averager counts a repeated submission as duplicate instead.
  duplicate,
  /// A file could not be opened, read, written or renamed.
  io_error,
  /// A checksum did not match the data it covers.
  checksum_mismatch,
  /// A message or model exceeded a configured size limit.
  too_large,
  /// Reserved, never raised: a peer that CURVE/ZAP rejects never connects, so nothing reports it.
  unauthorized,
  /// A queue or high-water mark is full; the message was not accepted.
  overloaded,
  /// The requested operation is not supported by this component.
  unsupported,
};

/// Returns a stable lower-case name for `code` ("timeout", "actor_dead", ...).
[[nodiscard]] constexpr std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::none: return "none";
    case errc::timeout: return "timeout";
    case errc::actor_dead: return "actor_dead";
    case errc::not_found: return "not_found";
    case errc::already_exists: return "already_exists";
    case errc::handler_failed: return "handler_failed";
    case errc::shutting_down: return "shutting_down";
    case errc::peer_unreachable: return "peer_unreachable";
    case errc::decode_failed: return "decode_failed";
    case errc::protocol_error: return "protocol_error";
    case errc::invalid_argument: return "invalid_argument";
    case errc::stale_round: return "stale_round";
    case errc::not_a_member: return "not_a_member";
    case errc::duplicate: return "duplicate";
    case errc::io_error: return "io_error";
    case errc::checksum_mismatch: return "checksum_mismatch";
    case errc::too_large: return "too_large";
    case errc::unauthorized: return "unauthorized";
    case errc::overloaded: return "overloaded";
    case errc::unsupported: return "unsupported";
  }
  return "unknown";
}

/// Describes an expected failure: a code and a human-readable context.
struct error {
  errc code = errc::none;
  std::string context;

  /// Returns "code: context" for logs and exception messages.
  [[nodiscard]] std::string message() const {
    std::string out{to_string(code)};
    if (!context.empty()) {
      out += ": ";
      out += context;
    }
    return out;
  }
  friend bool operator==(const error& a, const error& b) { return a.code == b.code; }
};

/// Holds an error to construct an `expected` from, like `std::unexpected`.
struct unexpected {
  error err;
  explicit unexpected(error e) : err(std::move(e)) {}
  unexpected(errc code, std::string context) : err{code, std::move(context)} {}
};

/// Holds a `T` or an `error`; a subset of C++23 `std::expected<T, error>`.
template <class T>
class [[nodiscard]] expected {
 public:
  using value_type = T;

  expected() requires std::is_default_constructible_v<T> : v_(std::in_place_index<0>) {}
  expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}       // NOLINT(google-explicit-constructor)
  expected(unexpected u) : v_(std::in_place_index<1>, std::move(u.err)) {}  // NOLINT
  expected(::prsgd::error e) : v_(std::in_place_index<1>, std::move(e)) {}  // NOLINT

  [[nodiscard]] bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  /// Returns the value. @pre has_value()
  [[nodiscard]] T& value() & { return std::get<0>(v_); }
  [[nodiscard]] const T& value() const& { return std::get<0>(v_); }
  [[nodiscard]] T&& value() && { return std::get<0>(std::move(v_)); }
  /// Returns the error. @pre !has_value()
  [[nodiscard]] const ::prsgd::error& error() const& { return std::get<1>(v_); }
  [[nodiscard]] ::prsgd::error&& error() && { return std::get<1>(std::move(v_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  /// Returns the value, or `fallback` when this holds an error.
  template <class U>
  [[nodiscard]] T value_or(U&& fallback) const& {
    return has_value() ? value() : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<T, ::prsgd::error> v_;
};

/// Holds nothing or an `error`; `expected<void>`.
template <>
class [[nodiscard]] expected<void> {
 public:
  using value_type = void;
  expected() = default;
  expected(unexpected u) : err_(std::move(u.err)), ok_(false) {}  // NOLINT
  expected(::prsgd::error e) : err_(std::move(e)), ok_(false) {}  // NOLINT

  [[nodiscard]] bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  void value() const {}
  [[nodiscard]] const ::prsgd::error& error() const& { return err_; }
  [[nodiscard]] ::prsgd::error&& error() && { return std::move(err_); }

 private:
  ::prsgd::error err_;
  bool ok_ = true;
};

/// Returns an `unexpected` with `code` and `context`, for `return prsgd::fail(...)`.
[[nodiscard]] inline unexpected fail(errc code, std::string context = {}) {
  return unexpected{code, std::move(context)};
}

}  // namespace prsgd

/// Evaluates an `expected` expression and returns its error from the enclosing function if it has one.
#define PRSGD_TRY(expr)                                      \
  do {                                                       \
    auto&& prsgd_try_result_ = (expr);                       \
    if (!prsgd_try_result_) {                                \
      return ::prsgd::unexpected{prsgd_try_result_.error()}; \
    }                                                        \
  } while (false)
