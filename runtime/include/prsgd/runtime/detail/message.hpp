// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <utility>

#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/fwd.hpp"

namespace prsgd::runtime::detail {

/// Is one mailbox entry: runs on the target actor's strand, or is bounced when the target is dead.
/// Not thread-safe; owned by exactly one mailbox (or sender) at a time.
class message {
 public:
  message() = default;
  message(const message&) = delete;
  message& operator=(const message&) = delete;
  virtual ~message() = default;
  /// Runs the message on `target`'s strand. May throw; the cell turns that into an actor failure.
  virtual void run(cell& target) = 0;
  /// Tells the sender that the message was not delivered (e.g. completes an ask with `why`).
  virtual void bounce(const error& why) noexcept { static_cast<void>(why); }
  /// Returns true for runtime-internal messages that must run even while a handler failure is pending.
  [[nodiscard]] virtual bool is_system() const noexcept { return false; }

  /// Links messages in the lock-free mailbox.
  message* next_ = nullptr;
};

/// Owns a message.
using message_ptr = std::unique_ptr<message>;

/// Runs a callable `void(cell&)` as a message.
template <class F>
class fn_message final : public message {
 public:
  explicit fn_message(F f) : f_(std::move(f)) {}
  void run(cell& target) override { f_(target); }

 private:
  F f_;
};

/// Returns a message that calls `f(cell&)` on the target's strand.
template <class F>
[[nodiscard]] message_ptr make_message(F&& f) {
  return std::make_unique<fn_message<std::decay_t<F>>>(std::forward<F>(f));
}

}  // namespace prsgd::runtime::detail
