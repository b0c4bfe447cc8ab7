// SPDX-License-Identifier: Apache-2.0
// wire::node's request table: each request sent (ask, spawn, head requests) waits under a correlation id
// until its reply, an error, its node's loss or its deadline completes it, exactly once.
#include <optional>
#include <string>
#include <vector>

#include "node_impl.hpp"

namespace prsgd::wire {

inline void node::impl::send_request(const std::string& target_node, envelope env, reply_fn done) {
  auto peer = route(target_node);
  if (!peer) {
    done(std::move(peer).error());
    return;
  }
  send_request_to(*peer, target_node, std::move(env), std::move(done));
}
void node::impl::send_request_to(peer_id peer, const std::string& target_node, envelope env, reply_fn done) {
  std::uint64_t cid = 0;
  std::optional<clock_source::time_point> arm_at;
  {
    const mutex_lock lock{mu_};
    cid = new_correlation_id();
    pending_.emplace(cid, pending{std::move(done), target_node, peer});
    // Request deadlines: one FIFO (the timeout is the same for all, so it is ordered) and at most one
    // runtime timer armed at its head, instead of a timer (and a timer-thread wake-up) per request.
    // Answered requests are dropped from the head here, so the queue holds about the requests in flight.
    while (!deadlines_.empty() && !pending_.contains(deadlines_.front().second)) {
      deadlines_.pop_front();
    }
    deadlines_.emplace_back(system_.engine()->time().now() + cfg_.request_timeout, cid);
    if (!deadline_timer_armed_) {
      deadline_timer_armed_ = true;
      arm_at = deadlines_.front().first;
    }
  }
  env.hdr.correlation_id = cid;
  if (!is_set(env.hdr.from)) {
    env.hdr.from = actor_address{cfg_.name, 0};
  }
  ++requests_sent_;
  if (arm_at) {
    arm_deadline_timer(*arm_at);
  }
  if (auto sent = send_to_peer(peer, env); !sent) {
    complete(cid, std::move(sent).error());
  }
}
void node::impl::arm_deadline_timer(clock_source::time_point when) {
  std::weak_ptr<impl> weak = weak_from_this();
  system_.engine()->add_timer(when, [weak] {
    if (auto self = weak.lock()) {
      self->expire_requests();
    }
  });
}
/// Fails the requests whose deadline passed with `timeout` and re-arms the timer for the next one.
void node::impl::expire_requests() {
  std::vector<std::uint64_t> expired;
  std::optional<clock_source::time_point> next;
  {
    const mutex_lock lock{mu_};
    const auto now = system_.engine()->time().now();
    while (!deadlines_.empty()) {
      const auto [when, cid] = deadlines_.front();
      if (pending_.contains(cid)) {
        if (when > now) {
          break;
        }
        expired.push_back(cid);
      }
      deadlines_.pop_front();
    }
    if (deadlines_.empty()) {
      deadline_timer_armed_ = false;
    } else {
      next = deadlines_.front().first;
    }
  }
  for (const std::uint64_t cid : expired) {
    if (complete(cid, fail(errc::timeout, "no answer within the request timeout"))) {
      ++timeouts_;
    }
  }
  if (next) {
    arm_deadline_timer(*next);
  }
}
/// Returns a fresh random correlation id, never 0 and never one in flight.
std::uint64_t node::impl::new_correlation_id() {
  for (;;) {
    const std::uint64_t cid = cid_rng_();
    if (cid != 0 && !pending_.contains(cid)) {
      return cid;
    }
  }
}
/// Completes pending request `cid`; returns false when it is unknown (already answered) or when `from` is
/// set and is not the connection the request was sent on (an answer from anyone else is not an answer).
bool node::impl::complete(std::uint64_t cid, expected<std::vector<std::byte>> result, std::optional<peer_id> from) {
  reply_fn done;
  {
    const mutex_lock lock{mu_};
    auto it = pending_.find(cid);
    if (it == pending_.end() || (from && it->second.peer != *from)) {
      return false;
    }
    done = std::move(it->second.done);
    pending_.erase(it);
  }
  done(std::move(result));
  return true;
}
void node::send_request(const std::string& target_node, envelope env, reply_fn done) {
  impl_->send_request(target_node, std::move(env), std::move(done));
}

}  // namespace prsgd::wire
