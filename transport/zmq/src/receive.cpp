// SPDX-License-Identifier: Apache-2.0
// zmq_transport's receive path, on the I/O thread: whole messages from the ROUTER (incoming peers, which it
// registers on first contact) and from each DEALER (outgoing peers), handed zero-copy to the handlers.
#include <string>
#include <vector>

#include "zmq_transport_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd {

using transport_detail::kind_bye;
using transport_detail::kind_data;
using transport_detail::kind_heartbeat;
using transport_detail::log_component;
using transport_detail::recv_batch;

// Receives one whole multipart message without blocking; returns false when none is waiting.
bool zmq_transport::impl::receive_parts(zmq::socket_t& sock, std::vector<zmq::message_t>& parts) {
  parts.clear();
  zmq::message_t m;
  if (!sock.recv(m, zmq::recv_flags::dontwait)) {
    return false;
  }
  bool more = m.more();
  parts.push_back(std::move(m));
  while (more) {
    zmq::message_t next;
    // libzmq delivers the rest of a message atomically once its first part is readable.
    (void)sock.recv(next, zmq::recv_flags::none);
    more = next.more();
    parts.push_back(std::move(next));
  }
  return true;
}

multipart zmq_transport::impl::to_frames(std::vector<zmq::message_t>& parts, std::size_t first) {
  multipart out;
  out.reserve(parts.size() - first);
  for (std::size_t i = first; i < parts.size(); ++i) {
    auto owner = std::make_shared<zmq::message_t>(std::move(parts[i]));
    const void* data = owner->data();
    const std::size_t size = owner->size();
    out.push_back(frame::share(std::shared_ptr<const void>(std::move(owner)), data, size));
  }
  return out;
}

inline void zmq_transport::impl::deliver(peer_id peer, multipart msg) {
  messages_received_.fetch_add(1, std::memory_order_relaxed);
  bytes_received_.fetch_add(total_size(msg), std::memory_order_relaxed);
  if (handlers_.on_message) {
    handlers_.on_message(peer, std::move(msg));
  }
}

void zmq_transport::impl::emit(peer_event ev) {
  PRSGD_LOG(debug, log_component) << cfg_.node_name << ": peer " << ev.peer << " (" << ev.node << ") "
                                  << (ev.up ? "up" : "down");
  if (handlers_.on_peer) {
    handlers_.on_peer(ev);
  }
}

// Receives up to recv_batch messages; leaves router_ready_ set when more may be waiting.
void zmq_transport::impl::receive_router() {
  auto& parts = rx_parts_;
  for (int n = 0; n < recv_batch; ++n) {
    try {
      if (!receive_parts(*router_, parts)) {
        router_dirty_ = false;  // EAGAIN after any sends from handlers: every command processed
        return;
      }
    } catch (const zmq::error_t& e) {
      PRSGD_LOG(warn, log_component) << "router receive: " << e.what();
      router_dirty_ = true;
      return;
    }
    if (parts.size() < 2 || parts[1].size() < 1) {
      malformed_received_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    std::string& rid = rid_scratch_;
    rid.assign(static_cast<const char*>(parts[0].data()), parts[0].size());
    const char kind = *static_cast<const char*>(parts[1].data());
    auto found = by_routing_id_.find(rid);
    if (kind == kind_bye) {
      if (found != by_routing_id_.end()) {
        remove_incoming(found->second, errc::shutting_down);
      }
      continue;
    }
    if (kind != kind_data && kind != kind_heartbeat) {
      malformed_received_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    peer_id id = 0;
    if (found == by_routing_id_.end()) {
      id = next_id_.fetch_add(1);
      in_peer p;
      p.routing_id = rid;
      p.node = rid.substr(0, rid.find('\0'));
      p.counters = std::make_shared<peer_counters>();
      {
        std::lock_guard lock(mutex_);
        directory_.emplace(id, p.counters);
      }
      ins_.emplace(id, std::move(p));
      by_routing_id_.emplace(rid, id);
    } else {
      id = found->second;
    }
    auto& p = ins_.at(id);
    p.last_rx = clock_.now();
    if (!p.up) {
      p.up = true;
      emit(peer_event{id, true, p.node, {}, false, errc::none});
      send_heartbeat_in(p);  // so the client learns our name and goes up without waiting a full interval
    }
    if (kind == kind_data) {
      deliver(id, to_frames(parts, 2));
    }
  }
  router_ready_ = true;  // batch used up: continue next turn without waiting
}

// Receives up to recv_batch messages; leaves the peer's `ready` set when more may be waiting.
void zmq_transport::impl::receive_dealer(peer_id id) {
  auto& parts = rx_parts_;
  for (int n = 0; n < recv_batch; ++n) {
    auto it = outs_.find(id);
    if (it == outs_.end()) {
      return;  // a handler disconnected it
    }
    auto& p = it->second;
    try {
      if (!receive_parts(p.sock, parts)) {
        p.dirty = false;  // EAGAIN after any sends from handlers: every command processed
        return;
      }
    } catch (const zmq::error_t& e) {
      PRSGD_LOG(warn, log_component) << "dealer receive: " << e.what();
      p.dirty = true;
      return;
    }
    if (parts.empty() || parts[0].size() < 1) {
      malformed_received_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const auto* head = static_cast<const char*>(parts[0].data());
    const char kind = head[0];
    if (kind == kind_bye) {
      if (p.up) {
        p.up = false;
        emit(peer_event{id, false, p.remote_node, p.endpoint, true, errc::shutting_down});
      }
      continue;
    }
    if (kind != kind_data && kind != kind_heartbeat) {
      malformed_received_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (kind == kind_heartbeat && parts[0].size() > 1) {
      p.remote_node.assign(head + 1, parts[0].size() - 1);
    }
    p.last_rx = clock_.now();
    if (!p.up) {
      p.up = true;
      emit(peer_event{id, true, p.remote_node, p.endpoint, true, errc::none});
    }
    if (kind == kind_data) {
      deliver(id, to_frames(parts, 1));
    }
  }
  if (auto it = outs_.find(id); it != outs_.end()) {
    it->second.ready = true;  // batch used up
  }
}

}  // namespace prsgd
