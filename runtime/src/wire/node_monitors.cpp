// SPDX-License-Identifier: Apache-2.0
// wire::node's remote monitors: watches of local actors on remote actors, monitor_relay actors serving
// remote watchers of local actors, down messages both ways, and the actor_id node numbers of remote nodes.
#include <memory>
#include <optional>
#include <string>

#include "node_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd::wire {

using detail::component;
using detail::first_remote_node_number;

void monitor_relay::on_down(const down_msg& msg) {
  if (auto owner = owner_.lock()) {
    owner->send_down(peer_, target_address_, watcher_, msg.reason);
    owner->relay_done(peer_, watcher_, target_address_);
  }
  quit();
}
expected<void> node::impl::monitor(const actor_addr& watcher, const actor_address& target) {
  if (!watcher.valid() || !target.valid()) {
    return fail(errc::invalid_argument, "monitor needs a valid watcher and target");
  }
  auto peer = route(target.node);
  PRSGD_TRY(peer);
  {
    const mutex_lock lock{mu_};
    watches_[watch_key{watcher.id().local, target.node, target.id}] = watcher.cell();
  }
  envelope env;
  env.hdr.type = message_type::monitor;
  env.hdr.from = actor_address{cfg_.name, watcher.id().local};
  env.hdr.to = target;
  return send_to_peer(*peer, env);
}
void node::impl::demonitor(const actor_addr& watcher, const actor_address& target) {
  {
    const mutex_lock lock{mu_};
    watches_.erase(watch_key{watcher.id().local, target.node, target.id});
  }
  auto peer = route(target.node);
  if (!peer) {
    return;
  }
  envelope env;
  env.hdr.type = message_type::demonitor;
  env.hdr.from = actor_address{cfg_.name, watcher.id().local};
  env.hdr.to = target;
  static_cast<void>(send_to_peer(*peer, env));
}
void node::impl::handle_monitor(peer_id peer, const envelope& e) {
  if (forward(peer, e, e.hdr.to.node)) {
    return;
  }
  error why;
  auto target = local_cell(e.hdr.to, {}, why);
  if (!target) {
    ++rejected_;
    send_down(peer, e.hdr.to, e.hdr.from, why);
    return;
  }
  auto relay = system_.spawn<monitor_relay>(weak_from_this(), peer, actor_addr{target}, e.hdr.to, e.hdr.from);
  if (!relay) {
    send_down(peer, e.hdr.to, e.hdr.from, relay.error());
    return;
  }
  const mutex_lock lock{mu_};
  relays_.emplace(relay_key{peer, e.hdr.from.node, e.hdr.from.id, e.hdr.to.id}, *relay);
}
void node::impl::handle_demonitor(peer_id peer, const envelope& e) {
  if (forward(peer, e, e.hdr.to.node)) {
    return;
  }
  actor_ref<monitor_relay> relay;
  {
    const mutex_lock lock{mu_};
    auto it = relays_.find(relay_key{peer, e.hdr.from.node, e.hdr.from.id, e.hdr.to.id});
    if (it == relays_.end()) {
      return;
    }
    relay = it->second;
    relays_.erase(it);
  }
  static_cast<void>(relay.tell(&monitor_relay::cancel));
}
inline void node::impl::relay_done(peer_id peer, const actor_address& watcher, const actor_address& target) {
  const mutex_lock lock{mu_};
  relays_.erase(relay_key{peer, watcher.node, watcher.id, target.id});
}
void node::impl::handle_down(peer_id peer, const envelope& e) {
  if (forward(peer, e, e.hdr.to.node)) {
    return;
  }
  std::weak_ptr<runtime::detail::cell> watcher;
  {
    const mutex_lock lock{mu_};
    auto it = watches_.find(watch_key{e.hdr.to.id, e.hdr.from.node, e.hdr.from.id});
    if (it == watches_.end()) {
      return;  // demonitored meanwhile, or already reported (node loss)
    }
    watcher = it->second;
    watches_.erase(it);
  }
  deliver_down(watcher, e.hdr.from, error{e.hdr.error_code, e.hdr.error_context});
}
void node::impl::deliver_down(const std::weak_ptr<runtime::detail::cell>& watcher, const actor_address& source,
                              error reason) {
  auto c = watcher.lock();
  if (!c) {
    return;
  }
  down_msg msg{actor_id{node_number(source.node), source.id}, std::move(reason)};
  c->enqueue(runtime::detail::make_message([msg = std::move(msg)](runtime::detail::cell& self) {
    if (actor* a = self.instance(); a != nullptr) {
      a->on_down(msg);
    }
  }));
}
void node::impl::send_down(peer_id peer, const actor_address& dead, const actor_address& watcher, const error& reason) {
  envelope env;
  env.hdr.type = message_type::down;
  env.hdr.from = dead;
  env.hdr.to = watcher;
  env.hdr.error_code = reason.code;
  env.hdr.error_context = reason.context.substr(0, cfg_.wire_limits.max_context_bytes);
  if (auto r = send_to_peer(peer, env); !r) {
    PRSGD_LOG(debug, component) << "cannot send down: " << r.error().message();
  }
}
inline node_id node::impl::node_number(const std::string& name) {
  const mutex_lock lock{mu_};
  auto it = node_numbers_.find(name);
  if (it != node_numbers_.end()) {
    return it->second;
  }
  const node_id n = first_remote_node_number + static_cast<node_id>(node_numbers_.size());
  node_numbers_.emplace(name, n);
  return n;
}
inline std::optional<actor_address> node::impl::address_of(actor_id id) const {
  const mutex_lock lock{mu_};
  for (const auto& [name, n] : node_numbers_) {
    if (n == id.node) {
      return actor_address{name, id.local};
    }
  }
  return std::nullopt;
}
std::optional<actor_address> node::address_of(actor_id remote) const { return impl_->address_of(remote); }
expected<void> node::monitor(const actor_addr& watcher, const actor_address& target) {
  return impl_->monitor(watcher, target);
}
void node::demonitor(const actor_addr& watcher, const actor_address& target) { impl_->demonitor(watcher, target); }

}  // namespace prsgd::wire
