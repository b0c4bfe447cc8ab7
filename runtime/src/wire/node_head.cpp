// SPDX-License-Identifier: Apache-2.0
// The head service of wire::node (with cfg.head_service): the member list, cluster-wide names, forwarding
// between members, and telling members when one is lost; and a member's side: joining the head and the
// requests it sends there (register_name, lookup, cluster_nodes).
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "node_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd::wire {

using detail::component;
using detail::head_route;
using detail::wants_answer;

/// Connects to the head, registers, and connects to every node the head lists. Blocks (not on an
/// actor thread: called from `make`).
expected<void> node::impl::join_head() {
  auto peer = transport_->connect(cfg_.head, outgoing_options());
  PRSGD_TRY(peer);
  {
    const mutex_lock lock{mu_};
    head_peer_ = *peer;
  }
  envelope env;
  env.hdr.type = message_type::register_node;
  env.hdr.node = cfg_.name;
  env.hdr.endpoint = endpoint_;
  env.hdr.incarnation = incarnation_;
  std::mutex m;
  std::condition_variable cv;
  std::optional<expected<std::vector<std::byte>>> answer;
  send_request_to(*peer, head_route, std::move(env), [&](expected<std::vector<std::byte>> r) {
    std::lock_guard lock{m};
    answer.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock lock{m};
  cv.wait(lock, [&] { return answer.has_value(); });
  if (!*answer) {
    return fail(answer->error().code, "registering with the head: " + answer->error().context);
  }
  auto list = unpack_value<std::vector<node_tuple>>(**answer);
  PRSGD_TRY(list);
  connect_all(*list);
  return {};
}
void node::impl::connect_all(const std::vector<node_tuple>& list) {
  for (const auto& [name, ep, inc] : list) {
    if (name != cfg_.name) {
      if (auto r = connect(name, ep); !r) {
        PRSGD_LOG(warn, component) << "cannot connect to node '" << name << "': " << r.error().message();
      }
    }
  }
}
/// Forwards `e` to member `target` when this is the head and `target` is another registered node.
bool node::impl::forward(peer_id from_peer, const envelope& e, const std::string& target) {
  if (!cfg_.head_service || target.empty() || target == cfg_.name) {
    return false;
  }
  std::optional<peer_id> to_peer;
  {
    const mutex_lock lock{mu_};
    if (auto it = members_.find(target); it != members_.end()) {
      to_peer = it->second.peer;
    }
  }
  if (!to_peer) {
    return false;
  }
  if (!wants_answer(e.hdr.type)) {
    if (auto r = send_to_peer(*to_peer, e); !r) {
      PRSGD_LOG(warn, component) << "cannot forward " << to_string(e.hdr.type) << " to '" << target
                                 << "': " << r.error().message();
    }
    return true;
  }
  std::weak_ptr<impl> weak = weak_from_this();
  const std::uint64_t cid = e.hdr.correlation_id;
  const actor_address origin = e.hdr.from;
  send_request_to(*to_peer, target, e, [weak, from_peer, cid, origin](expected<std::vector<std::byte>> r) {
    if (auto self = weak.lock()) {
      self->send_result(from_peer, cid, actor_address{self->cfg_.name, 0}, origin, std::move(r));
    }
  });
  return true;
}
void node::impl::handle_head_request(peer_id peer, envelope& e) {
  expected<std::vector<std::byte>> result = std::vector<std::byte>{};
  switch (e.hdr.type) {
    case message_type::register_node: {
      bool taken = false;
      {
        const mutex_lock lock{mu_};
        // A name belongs to the connection that registered it until that connection is lost or leaves.
        auto it = members_.find(e.hdr.node);
        taken = (it != members_.end() && it->second.peer != peer) || e.hdr.node == cfg_.name;
        if (!taken) {
          members_[e.hdr.node] = member{e.hdr.endpoint, e.hdr.incarnation, peer};
          result = pack_value(node_list_locked());
        }
      }
      if (taken) {
        refuse_unauthorised(peer, e, "node name '" + e.hdr.node + "' is registered by another connection");
        return;
      }
      PRSGD_LOG(info, component) << "head: node '" << e.hdr.node << "' registered at " << e.hdr.endpoint;
      break;
    }
    case message_type::register_name: {
      bool own = false;
      {
        const mutex_lock lock{mu_};
        auto m = members_.find(e.hdr.from.node);
        own = m != members_.end() && m->second.peer == peer;
      }
      if (!own) {
        refuse_unauthorised(peer, e,
                            "register_name for an actor of node '" + e.hdr.from.node +
                                "', which is not the node registered by this connection");
        return;
      }
      const mutex_lock lock{mu_};
      auto it = names_.find(e.hdr.name);
      if (it != names_.end() && !(it->second == e.hdr.from)) {
        result = fail(errc::already_exists, "name '" + e.hdr.name + "' is taken");
      } else {
        names_[e.hdr.name] = e.hdr.from;
        result = pack_value(msgpack::type::nil_t{});
      }
      break;
    }
    case message_type::lookup: {
      const mutex_lock lock{mu_};
      if (e.hdr.name.empty()) {
        result = pack_value(node_list_locked());
      } else if (auto it = names_.find(e.hdr.name); it != names_.end()) {
        result = pack_value(it->second);
      } else {
        result = fail(errc::not_found, "no actor named '" + e.hdr.name + "'");
      }
      break;
    }
    default: return;
  }
  if (!result) {
    ++rejected_;
  }
  send_result(peer, e.hdr.correlation_id, actor_address{cfg_.name, 0}, e.hdr.from, std::move(result));
}
inline std::vector<node::impl::node_tuple> node::impl::node_list_locked() const {
  std::vector<node_tuple> out;
  out.emplace_back(cfg_.name, endpoint_, incarnation_);
  for (const auto& [name, m] : members_) {
    out.emplace_back(name, m.endpoint, m.incarnation);
  }
  return out;
}
/// Forgets member `name` and its names, and tells every other member (head only).
void node::impl::member_lost(const std::string& name, std::string_view how) {
  std::vector<peer_id> others;
  std::uint64_t inc = 0;
  {
    const mutex_lock lock{mu_};
    auto it = members_.find(name);
    if (it == members_.end()) {
      return;
    }
    inc = it->second.incarnation;
    members_.erase(it);
    for (auto n = names_.begin(); n != names_.end();) {
      n = n->second.node == name ? names_.erase(n) : std::next(n);
    }
    for (const auto& [other, m] : members_) {
      others.push_back(m.peer);
    }
  }
  PRSGD_LOG(info, component) << "head: node '" << name << "' " << how;
  envelope env;
  env.hdr.type = message_type::node_down;
  env.hdr.from = actor_address{cfg_.name, 0};
  env.hdr.node = name;
  env.hdr.incarnation = inc;
  for (const peer_id p : others) {
    static_cast<void>(send_to_peer(p, env));
  }
  node_lost(name, error{errc::peer_unreachable, "node '" + name + "' " + std::string{how}});
}
void node::impl::head_request(envelope env, reply_fn done) {
  std::optional<peer_id> head;
  {
    const mutex_lock lock{mu_};
    head = head_peer_;
  }
  if (!head) {
    done(fail(errc::not_found, "this node has no head"));
    return;
  }
  send_request_to(*head, head_route, std::move(env), std::move(done));
}
future<void> node::register_name(const std::string& name, const actor_addr& local) {
  auto st = std::make_shared<runtime::detail::promise_state<void>>(engine());
  envelope env;
  env.hdr.type = message_type::register_name;
  env.hdr.name = name;
  env.hdr.from = address_of(local);
  impl_->head_request(std::move(env), [st](expected<std::vector<std::byte>> r) {
    if (!r) {
      st->complete(std::move(r).error());
    } else {
      st->complete(expected<void>{});
    }
  });
  return future<void>{st};
}
future<actor_address> node::lookup(const std::string& name) {
  auto st = std::make_shared<runtime::detail::promise_state<actor_address>>(engine());
  if (name.empty()) {
    st->complete(fail(errc::invalid_argument, "lookup needs a name"));
    return future<actor_address>{st};
  }
  envelope env;
  env.hdr.type = message_type::lookup;
  env.hdr.name = name;
  impl_->head_request(std::move(env), [st](expected<std::vector<std::byte>> r) {
    if (!r) {
      st->complete(std::move(r).error());
    } else {
      st->complete(unpack_value<actor_address>(*r));
    }
  });
  return future<actor_address>{st};
}
future<std::vector<node_info>> node::cluster_nodes() {
  auto st = std::make_shared<runtime::detail::promise_state<std::vector<node_info>>>(engine());
  envelope env;
  env.hdr.type = message_type::lookup;
  std::weak_ptr<impl> weak = impl_;
  impl_->head_request(std::move(env), [st, weak](expected<std::vector<std::byte>> r) {
    if (!r) {
      st->complete(std::move(r).error());
      return;
    }
    auto list = unpack_value<std::vector<impl::node_tuple>>(*r);
    if (!list) {
      st->complete(std::move(list).error());
      return;
    }
    if (auto self = weak.lock()) {
      self->connect_all(*list);
    }
    std::vector<node_info> out;
    for (auto& [name, ep, inc] : *list) {
      out.push_back(node_info{name, ep, inc});
    }
    st->complete(std::move(out));
  });
  return future<std::vector<node_info>>{st};
}

}  // namespace prsgd::wire
