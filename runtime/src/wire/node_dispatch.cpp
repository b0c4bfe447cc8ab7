// SPDX-License-Identifier: Apache-2.0
// wire::node's dispatch, on the transport's delivery thread: decodes each message, completes requests
// with replies and errors, runs calls and spawns on local actors, and answers (result or error).
#include <memory>
#include <string>
#include <vector>

#include "node_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd::wire {

using detail::component;
using detail::wants_answer;

void node::impl::on_message(peer_id peer, multipart msg) {
  auto env = decode(msg, cfg_.wire_limits);
  if (!env) {
    ++malformed_;
    if (malformed_warnings_.allow(system_.engine()->time().now())) {
      PRSGD_LOG(warn, component) << "node '" << cfg_.name << "' rejected a malformed message from peer " << peer << ": "
                                 << env.error().message() << malformed_warnings_.suffix();
    }
    if (!msg.empty()) {
      if (auto req = peek_request(msg.front(), cfg_.wire_limits); req && wants_answer(req->first)) {
        send_error(peer, req->second, actor_address{}, env.error());
      }
    }
    return;
  }
  ++received_;
  envelope& e = *env;
  switch (e.hdr.type) {
    case message_type::tell: handle_call(peer, e, false); break;
    case message_type::ask: handle_call(peer, e, true); break;
    case message_type::reply:
      if (!complete(e.hdr.correlation_id, std::move(e.hdr.args), peer)) {
        ++stray_replies_;
      }
      break;
    case message_type::error:
      if (!complete(e.hdr.correlation_id, error{e.hdr.error_code, std::move(e.hdr.error_context)}, peer)) {
        ++stray_replies_;
      }
      break;
    case message_type::spawn: handle_spawn(peer, e); break;
    case message_type::monitor: handle_monitor(peer, e); break;
    case message_type::demonitor: handle_demonitor(peer, e); break;
    case message_type::down: handle_down(peer, e); break;
    case message_type::heartbeat: break;
    case message_type::node_down: {
      bool from_head = false;
      {
        const mutex_lock lock{mu_};
        from_head = head_peer_ && *head_peer_ == peer;
      }
      if (!from_head) {
        refuse_unauthorised(peer, e, "node_down is accepted only from the head");
        break;
      }
      node_lost(e.hdr.node, error{errc::peer_unreachable, "node '" + e.hdr.node + "' was lost"});
      break;
    }
    case message_type::leave:
      if (cfg_.head_service) {
        bool own = false;
        {
          const mutex_lock lock{mu_};
          auto it = members_.find(e.hdr.node);
          own = it != members_.end() && it->second.peer == peer;
        }
        if (!own) {
          refuse_unauthorised(peer, e, "leave for node '" + e.hdr.node + "' from another connection");
          break;
        }
        member_lost(e.hdr.node, "left");
      }
      break;
    case message_type::register_node:
    case message_type::register_name:
    case message_type::lookup:
      if (cfg_.head_service) {
        handle_head_request(peer, e);
      } else {
        reject(peer, e, error{errc::unsupported, std::string{to_string(e.hdr.type)} + " is served by a head node"});
      }
      break;
  }
}
void node::impl::refuse_unauthorised(peer_id peer, const envelope& e, const std::string& why) {
  ++unauthorised_;
  if (unauthorised_warnings_.allow(system_.engine()->time().now())) {
    PRSGD_LOG(warn, component) << "node '" << cfg_.name << "' refused " << to_string(e.hdr.type) << " from peer "
                               << peer << ": " << why << unauthorised_warnings_.suffix();
  }
  if (wants_answer(e.hdr.type) && e.hdr.correlation_id != 0) {
    send_error(peer, e.hdr.correlation_id, e.hdr.from, error{errc::unauthorized, why});
  }
}
void node::impl::reject(peer_id peer, const envelope& e, const error& why) {
  ++rejected_;
  if (rejected_warnings_.allow(system_.engine()->time().now())) {
    PRSGD_LOG(warn, component) << "node '" << cfg_.name << "' refused " << to_string(e.hdr.type) << " from '"
                               << e.hdr.from.node << "': " << why.message() << rejected_warnings_.suffix();
  }
  if (wants_answer(e.hdr.type) && e.hdr.correlation_id != 0) {
    send_error(peer, e.hdr.correlation_id, e.hdr.from, why);
  }
}
std::shared_ptr<runtime::detail::cell> node::impl::local_cell(const actor_address& to, const std::string& to_name,
                                                              error& why) const {
  std::shared_ptr<runtime::detail::cell> c;
  if (!to_name.empty()) {
    c = system_.engine()->lookup(to_name);
    if (!c) {
      why = error{errc::not_found, "no actor named '" + to_name + "' on node '" + cfg_.name + "'"};
    }
    return c;
  }
  if (to.node != cfg_.name) {
    why = error{errc::not_found,
                "actor " + to.node + ":" + std::to_string(to.id) + " is not on node '" + cfg_.name + "'"};
    return nullptr;
  }
  c = system_.engine()->find(to.id);
  if (!c) {
    why = error{errc::not_found, "no live actor " + std::to_string(to.id) + " on node '" + cfg_.name + "'"};
  }
  return c;
}
void node::impl::handle_call(peer_id peer, envelope& e, bool wants_reply) {
  if (forward(peer, e, e.hdr.to_name.empty() ? e.hdr.to.node : std::string{})) {
    return;
  }
  error why;
  auto target = local_cell(e.hdr.to, e.hdr.to_name, why);
  if (!target) {
    reject(peer, e, why);
    return;
  }
  const remote_type_info* type = registry_.find(target->type());
  if (type == nullptr) {
    reject(peer, e, error{errc::not_found, "the actor's type is not registered for remote calls"});
    return;
  }
  auto method = type->methods.find(e.hdr.method);
  if (method == type->methods.end()) {
    reject(peer, e, error{errc::not_found, "unknown method '" + e.hdr.method + "' of " + type->name});
    return;
  }
  reply_fn done;
  if (wants_reply) {
    std::weak_ptr<impl> weak = weak_from_this();
    done = [weak, peer, cid = e.hdr.correlation_id, from = actor_address{cfg_.name, target->id().local},
            to = e.hdr.from](expected<std::vector<std::byte>> r) {
      if (auto self = weak.lock()) {
        self->send_result(peer, cid, from, to, std::move(r));
      }
    };
  }
  if (auto r = method->second(target, e.hdr.args, std::move(done)); !r) {
    reject(peer, e, r.error());
  }
}
void node::impl::handle_spawn(peer_id peer, envelope& e) {
  if (forward(peer, e, e.hdr.node)) {
    return;
  }
  if (e.hdr.node != cfg_.name) {
    reject(peer, e, error{errc::not_found, "spawn for node '" + e.hdr.node + "' reached '" + cfg_.name + "'"});
    return;
  }
  const remote_type_info* type = registry_.find(e.hdr.type_name);
  if (type == nullptr) {
    reject(peer, e, error{errc::not_found, "unknown actor type '" + e.hdr.type_name + "'"});
    return;
  }
  if (!type->make) {
    reject(peer, e, error{errc::unsupported, "type '" + e.hdr.type_name + "' has no remote constructor"});
    return;
  }
  auto addr = type->make(system_, e.hdr.args, e.hdr.name);
  if (!addr) {
    reject(peer, e, addr.error());
    return;
  }
  PRSGD_LOG(debug, component) << "node '" << cfg_.name << "' spawned " << e.hdr.type_name << " as " << addr->id().local;
  send_result(peer, e.hdr.correlation_id, actor_address{cfg_.name, 0}, e.hdr.from,
              pack_value(actor_address{cfg_.name, addr->id().local}));
}
void node::impl::send_error(peer_id peer, std::uint64_t cid, const actor_address& to, const error& e) {
  envelope env;
  env.hdr.type = message_type::error;
  env.hdr.correlation_id = cid;
  env.hdr.from = actor_address{cfg_.name, 0};
  env.hdr.to = to;
  env.hdr.error_code = e.code == errc::none ? errc::protocol_error : e.code;
  env.hdr.error_context = e.context.substr(0, cfg_.wire_limits.max_context_bytes);
  ++errors_sent_;
  if (auto r = send_to_peer(peer, env); !r) {
    PRSGD_LOG(warn, component) << "cannot send error reply: " << r.error().message();
  }
}
void node::impl::send_result(peer_id peer, std::uint64_t cid, const actor_address& from, const actor_address& to,
                             expected<std::vector<std::byte>> result) {
  if (!result) {
    send_error(peer, cid, to, result.error());
    return;
  }
  envelope env;
  env.hdr.type = message_type::reply;
  env.hdr.correlation_id = cid;
  env.hdr.from = from;
  env.hdr.to = to;
  env.hdr.args = std::move(*result);
  if (auto r = send_to_peer(peer, env); !r) {
    // A result too large for the header still gets an answer.
    send_error(peer, cid, to, r.error());
  }
}

}  // namespace prsgd::wire
