// SPDX-License-Identifier: Apache-2.0
// zmq_transport's receive path, on the I/O thread: whole messages from the ROUTER (incoming peers, which it
// registers on first contact) and from each DEALER (outgoing peers), handed zero-copy to the handlers.
#include <algorithm>
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

// Receives one whole multipart message without blocking. Keeps at most `max_parts` parts: the rest of a
// longer message is read and freed part by part (too_many_frames), so a peer cannot make us hold more.
zmq_transport::impl::received zmq_transport::impl::receive_parts(zmq::socket_t& sock,
                                                                 std::vector<zmq::message_t>& parts,
                                                                 std::size_t max_parts) {
  parts.clear();
  zmq::message_t m;
  if (!sock.recv(m, zmq::recv_flags::dontwait)) {
    return received::nothing;
  }
  bool more = m.more();
  parts.push_back(std::move(m));
  bool too_long = false;
  while (more) {
    zmq::message_t next;
    // libzmq delivers the rest of a message atomically once its first part is readable.
    (void)sock.recv(next, zmq::recv_flags::none);
    more = next.more();
    if (parts.size() < max_parts) {
      parts.push_back(std::move(next));
    } else {
      too_long = true;  // `next` is freed here
    }
  }
  if (too_long) {
    // Keep the first two parts: on a ROUTER they name the sender (routing id) and carry the connection's
    // metadata (the kind frame came from the wire; see user_id_of).
    parts.resize(std::min<std::size_t>(parts.size(), 2));
    return received::too_many_frames;
  }
  return received::message;
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
  if (trace_) {
    trace_->record("rx", peer, msg);
  }
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

// Forgets the incoming connection known by `lookup` (client key + routing id) and ignores whatever else
// arrives on it. A ROUTER cannot close one client's TCP connection, so the connection stays open but is
// dead to us; the client learns it from the missing heartbeats.
void zmq_transport::impl::drop_connection(const std::string& lookup) {
  constexpr std::size_t max_remembered = 4096;
  if (auto found = by_routing_id_.find(lookup); found != by_routing_id_.end()) {
    remove_incoming(found->second, errc::protocol_error);
  }
  if (dropped_ids_.insert(lookup).second) {
    dropped_order_.push_back(lookup);
    if (dropped_order_.size() > max_remembered) {
      dropped_ids_.erase(dropped_order_.front());
      dropped_order_.pop_front();
    }
  }
  PRSGD_LOG(debug, log_component) << cfg_.node_name << ": dropped a connection that sent a message of more than "
                                  << cfg_.max_frames_per_message << " frames";
}

// Records that peer `id`'s connection holds its routing id now. Another client key's peer that held it
// (the ROUTER handed the routing id over to a connection with another key) goes down: what is sent to it
// would reach the other key. It comes up again when its own connection takes the routing id back.
void zmq_transport::impl::take_routing_id(peer_id id, in_peer& p) {
  auto [it, fresh] = holders_.try_emplace(p.routing_id, id);
  if (fresh || it->second == id) {
    return;
  }
  const peer_id previous = it->second;
  it->second = id;
  auto old = ins_.find(previous);
  if (old == ins_.end() || !old->second.up) {
    return;
  }
  key_conflicts_.fetch_add(1, std::memory_order_relaxed);
  auto& o = old->second;
  o.up = false;
  o.down_since = clock_.now();
  while (!o.pending.empty()) {
    drop(o.pending.front());
    o.pending.pop_front();
  }
  emit(peer_event{previous, false, o.node, {}, false, errc::unauthorized, o.client_key});
}

namespace {

// Returns the "User-Id" the ZAP handler gave the connection a ROUTER message came on (the client key), or
// "". Read from the first part after the routing id: that part came from the wire and always carries the
// connection's metadata, while libzmq builds the routing id part itself and does not attach the metadata
// to it on every path (a message prefetched by ZMQ_EVENTS gets a routing id part without it).
std::string user_id_of(std::vector<zmq::message_t>& parts) {
  const char* value = parts.size() > 1 ? zmq_msg_gets(parts[1].handle(), "User-Id") : nullptr;
  return value == nullptr ? std::string{} : std::string{value};
}

}  // namespace

// Receives up to recv_batch messages; leaves router_ready_ set when more may be waiting.
void zmq_transport::impl::receive_router() {
  auto& parts = rx_parts_;
  // routing id + kind + the application's frames
  const std::size_t max_parts = cfg_.max_frames_per_message + 2;
  for (int n = 0; n < recv_batch; ++n) {
    received got = received::nothing;
    try {
      // The routing id comes first; keep it even when the rest is discarded.
      got = receive_parts(*router_, parts, max_parts);
      if (got == received::nothing) {
        router_dirty_ = false;  // EAGAIN after any sends from handlers: every command processed
        return;
      }
    } catch (const zmq::error_t& e) {
      PRSGD_LOG(warn, log_component) << "router receive: " << e.what();
      router_dirty_ = true;
      return;
    }
    // With CURVE every connection carries its client key (the ZAP handler's User-Id): a peer is one
    // (client key, routing id) pair, so a connection with another key never speaks for an existing peer.
    std::string& lookup = rid_scratch_;
    lookup = cfg_.curve ? user_id_of(parts) : std::string{};
    const std::size_t key_size = lookup.size();
    lookup.append(static_cast<const char*>(parts[0].data()), parts[0].size());
    if (got == received::too_many_frames) {
      too_many_frames_.fetch_add(1, std::memory_order_relaxed);
      drop_connection(lookup);
      continue;
    }
    if (parts.size() < 2 || parts[1].size() < 1) {
      malformed_received_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const char kind = *static_cast<const char*>(parts[1].data());
    if (dropped_ids_.contains(lookup)) {
      if (kind == kind_data) {
        from_dropped_.fetch_add(1, std::memory_order_relaxed);
      }
      continue;
    }
    auto found = by_routing_id_.find(lookup);
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
      p.client_key = lookup.substr(0, key_size);
      p.routing_id = lookup.substr(key_size);
      p.lookup = lookup;
      p.node = p.routing_id.substr(0, p.routing_id.find('\0'));
      // The remote address libzmq attaches to the connection's messages (read, like the key, from the
      // part after the routing id).
      if (const char* a = zmq_msg_gets(parts[1].handle(), "Peer-Address")) {
        p.address = a;
      }
      p.counters = std::make_shared<peer_counters>();
      {
        std::lock_guard lock(mutex_);
        directory_.emplace(id, p.counters);
      }
      ins_.emplace(id, std::move(p));
      by_routing_id_.emplace(lookup, id);
    } else {
      id = found->second;
    }
    auto& p = ins_.at(id);
    p.last_rx = clock_.now();
    take_routing_id(id, p);
    if (!p.up) {
      p.up = true;
      emit(peer_event{id, true, p.node, {}, false, errc::none, p.client_key, p.address});
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
      const auto got = receive_parts(p.sock, parts, cfg_.max_frames_per_message + 1);  // kind + frames
      if (got == received::nothing) {
        p.dirty = false;  // EAGAIN after any sends from handlers: every command processed
        return;
      }
      if (got == received::too_many_frames) {
        too_many_frames_.fetch_add(1, std::memory_order_relaxed);
        PRSGD_LOG(debug, log_component) << cfg_.node_name << ": dropped a message of more than "
                                        << cfg_.max_frames_per_message << " frames from " << p.endpoint;
        continue;
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
        emit(peer_event{id, false, p.remote_node, p.endpoint, true, errc::shutting_down, {}});
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
      emit(peer_event{id, true, p.remote_node, p.endpoint, true, errc::none, {}});
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
