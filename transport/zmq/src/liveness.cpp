// SPDX-License-Identifier: Apache-2.0
// zmq_transport's liveness, on the I/O thread: heartbeats both ways, peers that went silent (down, and
// for incoming peers forgotten after a while). Reconnecting is libzmq's (configure_common() sets it up).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "zmq_transport_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd {

using transport_detail::kind_heartbeat;
using transport_detail::log_component;

void zmq_transport::impl::send_heartbeat_in(in_peer& p) {
  router_dirty_ = true;
  std::string head(1, kind_heartbeat);
  head += cfg_.node_name;
  try {
    zmq::message_t rid(p.routing_id.data(), p.routing_id.size());
    if (!router_->send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return;
    }
    zmq::message_t h(head.data(), head.size());
    (void)router_->send(h, zmq::send_flags::dontwait);
    heartbeats_sent_.fetch_add(1, std::memory_order_relaxed);
  } catch (const zmq::error_t&) {
    // EHOSTUNREACH: not connected right now; the timeout logic handles it.
  }
  p.last_tx = clock_.now();
}

inline void zmq_transport::impl::send_heartbeat_out(out_peer& p) {
  p.dirty = true;
  try {
    zmq::message_t h(&kind_heartbeat, 1);
    if (p.sock.send(h, zmq::send_flags::dontwait)) {
      heartbeats_sent_.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (const zmq::error_t& e) {
    PRSGD_LOG(warn, log_component) << "heartbeat: " << e.what();
  }
  p.last_tx = clock_.now();
}

void zmq_transport::impl::tick() {
  const auto now = clock_.now();
  const auto ivl = std::chrono::duration_cast<clock_source::duration>(cfg_.heartbeat_interval);
  const auto timeout = std::chrono::duration_cast<clock_source::duration>(cfg_.heartbeat_timeout);
  for (auto& [id, p] : outs_) {
    if (now - p.last_tx >= ivl && p.pending.empty()) {
      send_heartbeat_out(p);
    }
    if (p.up && now - p.last_rx > timeout) {
      p.up = false;
      emit(peer_event{id, false, p.remote_node, p.endpoint, true, errc::peer_unreachable, {}});
    }
  }
  std::vector<peer_id> forget;
  const auto forget_after = std::max<clock_source::duration>(timeout * 10, std::chrono::seconds(60));
  for (auto& [id, p] : ins_) {
    if (now - p.last_tx >= ivl && p.pending.empty()) {
      send_heartbeat_in(p);
    }
    if (p.up && now - p.last_rx > timeout) {
      p.up = false;
      p.down_since = now;
      while (!p.pending.empty()) {
        drop(p.pending.front());
        p.pending.pop_front();
      }
      emit(peer_event{id, false, p.node, {}, false, errc::peer_unreachable, p.client_key});
    } else if (!p.up && now - p.down_since > forget_after) {
      forget.push_back(id);
    }
  }
  for (const peer_id id : forget) {
    remove_incoming(id, errc::none);
  }
}

void zmq_transport::impl::remove_incoming(peer_id id, errc reason) {
  auto it = ins_.find(id);
  if (it == ins_.end()) {
    return;
  }
  auto& p = it->second;
  for (auto& pm : p.pending) {
    drop(pm);
  }
  const bool was_up = p.up;
  const std::string node = p.node;
  const std::string key = p.client_key;
  by_routing_id_.erase(p.lookup);
  if (auto h = holders_.find(p.routing_id); h != holders_.end() && h->second == id) {
    holders_.erase(h);
  }
  ins_.erase(it);
  {
    std::lock_guard lock(mutex_);
    directory_.erase(id);
  }
  if (was_up && reason != errc::none) {
    emit(peer_event{id, false, node, {}, false, reason, key});
  }
}

}  // namespace prsgd
