// SPDX-License-Identifier: Apache-2.0
// wire::node's routes: one outgoing transport connection per known node (by name), the head as the
// fallback route of a member, and sending an encoded envelope to a peer.
#include <optional>
#include <string>

#include "node_impl.hpp"

namespace prsgd::wire {

expected<void> node::impl::connect(const std::string& node_name, const std::string& endpoint) {
  PRSGD_TRY(check_text_field(node_name));
  {
    const mutex_lock lock{mu_};
    if (stopped_) {
      return fail(errc::shutting_down, "node stopped");
    }
    auto it = routes_.find(node_name);
    if (it != routes_.end()) {
      if (route_endpoints_[node_name] == endpoint) {
        return {};
      }
    }
  }
  auto peer = transport_->connect(endpoint, outgoing_options());
  PRSGD_TRY(peer);
  std::optional<peer_id> old;
  {
    const mutex_lock lock{mu_};
    if (auto it = routes_.find(node_name); it != routes_.end()) {
      old = it->second;
      route_names_.erase(it->second);
    }
    routes_[node_name] = *peer;
    route_names_[*peer] = node_name;
    route_endpoints_[node_name] = endpoint;
  }
  if (old) {
    static_cast<void>(transport_->disconnect(*old));
  }
  return {};
}
connect_options node::impl::outgoing_options() const {
  connect_options o;
  if (cfg_.transport.curve) {
    o.server_public_key = cfg_.server_public_key.empty() ? cfg_.transport.curve->public_key : cfg_.server_public_key;
  }
  return o;
}
expected<peer_id> node::impl::route(const std::string& node_name) {
  const mutex_lock lock{mu_};
  if (stopped_) {
    return fail(errc::shutting_down, "node stopped");
  }
  auto it = routes_.find(node_name);
  if (it == routes_.end()) {
    if (head_peer_ && node_name != cfg_.name) {
      return *head_peer_;  // the head forwards
    }
    return fail(errc::not_found, "no route to node '" + node_name + "'");
  }
  return it->second;
}
expected<void> node::impl::send_to_peer(peer_id peer, const envelope& env) {
  auto frames = encode(env, cfg_.wire_limits);
  PRSGD_TRY(frames);
  return transport_->send(peer, std::move(*frames));
}
inline expected<void> node::impl::send_oneway(envelope env) {
  if (!env.hdr.from.valid()) {
    env.hdr.from = actor_address{cfg_.name, 0};
  }
  auto peer = route(env.hdr.to.node);
  PRSGD_TRY(peer);
  return send_to_peer(*peer, env);
}
expected<void> node::connect(const std::string& node_name, const std::string& endpoint) {
  return impl_->connect(node_name, endpoint);
}
expected<void> node::send_oneway(envelope env) { return impl_->send_oneway(std::move(env)); }

}  // namespace prsgd::wire
