// SPDX-License-Identifier: Apache-2.0
// wire::node's lifecycle (make, start, stop), peer events from the transport and what losing a node
// means for requests and watchers, the counters. The other concerns of node::impl are in the files listed
// in node_impl.hpp.
#include "prsgd/runtime/node.hpp"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "node_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd::wire {

using detail::component;

expected<void> node::impl::start(const transport_factory& make_transport) {
  PRSGD_TRY(check_text_field(cfg_.name));
  // Before the transport exists: its handlers read incarnation_ without the lock.
  incarnation_ = static_cast<std::uint64_t>(system_.now().time_since_epoch().count()) | 1U;
  transport_config tc = cfg_.transport;
  tc.node_name = cfg_.name;
  transport_handlers handlers;
  // The transport stops (and so stops calling these) before `this` is destroyed.
  handlers.on_message = [this](peer_id peer, multipart msg) { on_message(peer, std::move(msg)); };
  handlers.on_peer = [this](const peer_event& ev) { on_peer(ev); };
  auto t = make_transport(std::move(tc), std::move(handlers));
  PRSGD_TRY(t);
  transport_ = std::move(*t);
  auto ep = transport_->bind(cfg_.bind);
  if (!ep) {
    transport_->stop();
    return std::move(ep).error();
  }
  endpoint_ = std::move(*ep);
  PRSGD_LOG(info, component) << "node '" << cfg_.name << "' serving at " << endpoint_
                             << (cfg_.head_service ? " (head)" : "");
  // A route to ourselves keeps handles location-transparent: a remote_ref to a local actor works too.
  if (auto self = connect(cfg_.name, endpoint_); !self) {
    PRSGD_LOG(warn, component) << "no loopback route: " << self.error().message();
  }
  if (!cfg_.head.empty()) {
    PRSGD_TRY(join_head());
  }
  return {};
}
void node::impl::stop() {
  std::unordered_map<std::uint64_t, pending> left;
  {
    const mutex_lock lock{mu_};
    if (stopped_) {
      return;
    }
    stopped_ = true;
    left.swap(pending_);
  }
  if (transport_) {
    transport_->stop();
  }
  for (auto& [cid, p] : left) {
    p.done(fail(errc::shutting_down, "node stopped"));
  }
}
void node::impl::on_peer(const peer_event& ev) {
  std::string lost;
  std::vector<actor_ref<monitor_relay>> orphaned;
  {
    const mutex_lock lock{mu_};
    auto it = route_names_.find(ev.peer);
    if (it != route_names_.end()) {
      lost = it->second;
    }
    if (!ev.up && !ev.outgoing) {
      // The watchers behind this connection are gone; stop relaying to them.
      for (auto r = relays_.begin(); r != relays_.end();) {
        if (r->first.peer == ev.peer) {
          orphaned.push_back(r->second);
          r = relays_.erase(r);
        } else {
          ++r;
        }
      }
    }
  }
  for (auto& r : orphaned) {
    static_cast<void>(r.tell(&monitor_relay::cancel));
  }
  PRSGD_LOG(info, component) << "node '" << cfg_.name << "': peer " << ev.peer << " ('" << ev.node << "') "
                             << (ev.up ? "up" : "down");
  if (!ev.up && !lost.empty()) {
    node_lost(lost, error{errc::peer_unreachable, "node '" + lost + "' is unreachable"});
  }
  if (!ev.up && !ev.outgoing && cfg_.head_service) {
    std::string lost_member;
    {
      const mutex_lock lock{mu_};
      for (const auto& [name, m] : members_) {
        if (m.peer == ev.peer) {
          lost_member = name;
        }
      }
    }
    if (!lost_member.empty()) {
      member_lost(lost_member, "unreachable");
    }
  }
}
/// Fails every request to `lost` and tells every watcher of an actor on it.
void node::impl::node_lost(const std::string& lost, const error& why) {
  std::vector<reply_fn> failed;
  std::vector<std::pair<std::weak_ptr<runtime::detail::cell>, actor_address>> downs;
  {
    const mutex_lock lock{mu_};
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.node == lost) {
        failed.push_back(std::move(it->second.done));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = watches_.begin(); it != watches_.end();) {
      if (it->first.node == lost) {
        downs.emplace_back(it->second, actor_address{it->first.node, it->first.target});
        it = watches_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& f : failed) {
    f(why);
  }
  for (auto& [w, src] : downs) {
    deliver_down(w, src, why);
  }
}
inline node_stats node::impl::stats() const {
  node_stats s;
  s.received = received_.load();
  s.malformed = malformed_.load();
  s.rejected = rejected_.load();
  s.errors_sent = errors_sent_.load();
  s.requests_sent = requests_sent_.load();
  s.timeouts = timeouts_.load();
  s.stray_replies = stray_replies_.load();
  s.unauthorised = unauthorised_.load();
  return s;
}
expected<void> node::impl::check_text_field(const std::string& name) {
  if (name.empty() || name.size() > 64) {
    return fail(errc::invalid_argument, "node names have 1 to 64 bytes");
  }
  for (const char ch : name) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      return fail(errc::invalid_argument, "node names must not contain control characters");
    }
  }
  return {};
}
expected<std::unique_ptr<node>> node::make(actor_system& system, const remote_registry& registry, node_config cfg,
                                           const transport_factory& make_transport) {
  auto p = std::make_shared<impl>(system, registry, std::move(cfg));
  PRSGD_TRY(p->start(make_transport));
  return std::unique_ptr<node>(new node(std::move(p)));
}
node::node(std::shared_ptr<impl> p) : impl_(std::move(p)) {}
node::~node() { stop(); }
const std::string& node::name() const noexcept { return impl_->cfg_.name; }
const std::string& node::endpoint() const noexcept { return impl_->endpoint_; }
actor_address node::address_of(const actor_addr& local) const {
  return actor_address{impl_->cfg_.name, local.id().local};
}
node_stats node::stats() const { return impl_->stats(); }
void node::stop() { impl_->stop(); }
const remote_registry& node::registry() const noexcept { return impl_->registry_; }
const std::shared_ptr<runtime::detail::system_engine>& node::engine() const noexcept { return impl_->system_.engine(); }

}  // namespace prsgd::wire
