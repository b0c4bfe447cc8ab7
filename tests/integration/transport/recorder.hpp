// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "prsgd/transport/transport.hpp"
#include "time_scale.hpp"

namespace prsgd::test {

/// Records what a transport delivers, so a test can wait for a condition with a deadline.
/// Thread-safe: handlers run on the transport's thread, waits on the test thread.
class recorder {
 public:
  /// Describes one received message.
  struct received {
    peer_id peer;
    multipart msg;
  };

  /// Returns handlers that record into this recorder (and optionally echo through `echo_via`).
  transport_handlers handlers() {
    return transport_handlers{[this](peer_id peer, multipart msg) {
                                std::lock_guard lock(mutex_);
                                messages_.push_back(received{peer, std::move(msg)});
                                cv_.notify_all();
                              },
                              [this](const peer_event& ev) {
                                std::lock_guard lock(mutex_);
                                events_.push_back(ev);
                                cv_.notify_all();
                              }};
  }

  /// Waits until `pred` (called under the lock) holds or scaled(`deadline`) passes; returns the last result.
  bool wait_for(std::chrono::milliseconds deadline, const std::function<bool()>& pred) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, scaled(deadline), pred);
  }

  /// Waits until some received message satisfies `pred`.
  bool wait_message(const std::function<bool(const received&)>& pred,
                    std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
    return wait_for(deadline, [&] {
      for (const auto& m : messages_) {
        if (pred(m)) {
          return true;
        }
      }
      return false;
    });
  }

  /// Waits until more than `n` messages arrived; returns false at the deadline.
  bool wait_more_than(std::size_t n, std::chrono::milliseconds deadline) {
    return wait_for(deadline, [&] { return messages_.size() > n; });
  }

  /// Waits for at least `n` messages.
  bool wait_messages(std::size_t n, std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
    return wait_for(deadline, [&] { return messages_.size() >= n; });
  }

  /// Waits for an event about `peer` (any peer when 0) with state `up`; returns it through `out` if found.
  bool wait_event(bool up, peer_id peer = 0, std::chrono::milliseconds deadline = std::chrono::seconds(10),
                  peer_event* out = nullptr) {
    std::size_t seen = 0;
    return wait_for(deadline, [&] {
      for (; seen < events_.size(); ++seen) {
        const auto& ev = events_[seen];
        if (ev.up == up && (peer == 0 || ev.peer == peer)) {
          if (out != nullptr) {
            *out = ev;
          }
          ++seen;
          return true;
        }
      }
      return false;
    });
  }

  /// Returns a copy of the messages so far.
  std::vector<received> messages() {
    std::lock_guard lock(mutex_);
    return messages_;
  }
  /// Returns a copy of the events so far.
  std::vector<peer_event> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  /// Forgets everything recorded.
  void clear() {
    std::lock_guard lock(mutex_);
    messages_.clear();
    events_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<received> messages_;
  std::vector<peer_event> events_;
};

}  // namespace prsgd::test
