// SPDX-License-Identifier: Apache-2.0
#include "prsgd/runtime/node.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include "prsgd/common/log.hpp"
#include "prsgd/common/mutex.hpp"
#include "prsgd/runtime/actor.hpp"

namespace prsgd::wire {
namespace {

constexpr std::string_view component = "wire";
// The route name of requests to the head itself (not a valid node name: it has a control character).
const std::string head_route = "\x01head";
// Remote nodes get actor_id node numbers from this base up, so they never collide with local ones.
constexpr node_id first_remote_node_number = 0x10000;

bool wants_answer(message_type t) {
  return t == message_type::ask || t == message_type::spawn || t == message_type::lookup ||
         t == message_type::register_node || t == message_type::register_name;
}

}  // namespace

/// Forwards the runtime's down message for one local actor to a remote watcher.
/// Not thread-safe; runs on its own strand like every actor.
class monitor_relay final : public actor {
 public:
  monitor_relay(std::weak_ptr<node::impl> owner, peer_id peer, actor_addr target, actor_address target_address,
                actor_address watcher)
      : owner_(std::move(owner)),
        peer_(peer),
        target_(std::move(target)),
        target_address_(std::move(target_address)),
        watcher_(std::move(watcher)) {}

  void on_start() override { monitor(target_); }
  void on_down(const down_msg& msg) override;
  /// Stops relaying (demonitor, or the watcher's node went away).
  void cancel() { quit(); }

 private:
  std::weak_ptr<node::impl> owner_;
  peer_id peer_;
  actor_addr target_;
  actor_address target_address_;
  actor_address watcher_;
};

/// The node's state. Thread-safe: `mu_` guards the maps; callbacks run outside the lock.
class node::impl : public std::enable_shared_from_this<node::impl> {
 public:
  impl(actor_system& system, const remote_registry& registry, node_config cfg)
      : system_(system), registry_(registry), cfg_(std::move(cfg)) {}
  ~impl() { stop(); }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  expected<void> start(const transport_factory& make_transport) {
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

  /// Connects to the head, registers, and connects to every node the head lists. Blocks (not on an
  /// actor thread: called from `make`).
  expected<void> join_head() {
    auto peer = transport_->connect(cfg_.head, {});
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

  using node_tuple = std::tuple<std::string, std::string, std::uint64_t>;

  void connect_all(const std::vector<node_tuple>& list) {
    for (const auto& [name, ep, inc] : list) {
      if (name != cfg_.name) {
        if (auto r = connect(name, ep); !r) {
          PRSGD_LOG(warn, component) << "cannot connect to node '" << name << "': " << r.error().message();
        }
      }
    }
  }

  void stop() {
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

  // ---- sending ----

  expected<void> send_to_peer(peer_id peer, const envelope& env) {
    auto frames = encode(env, cfg_.wire_limits);
    PRSGD_TRY(frames);
    return transport_->send(peer, std::move(*frames));
  }

  expected<peer_id> route(const std::string& node_name) {
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

  expected<void> send_oneway(envelope env) {
    if (!env.hdr.from.valid()) {
      env.hdr.from = actor_address{cfg_.name, 0};
    }
    auto peer = route(env.hdr.to.node);
    PRSGD_TRY(peer);
    return send_to_peer(*peer, env);
  }

  void send_request(const std::string& target_node, envelope env, reply_fn done) {
    auto peer = route(target_node);
    if (!peer) {
      done(std::move(peer).error());
      return;
    }
    send_request_to(*peer, target_node, std::move(env), std::move(done));
  }

  void send_request_to(peer_id peer, const std::string& target_node, envelope env, reply_fn done) {
    std::uint64_t cid = 0;
    std::optional<clock::time_point> arm_at;
    {
      const mutex_lock lock{mu_};
      cid = next_cid_++;
      pending_.emplace(cid, pending{std::move(done), target_node});
      // Request deadlines: one FIFO (the timeout is the same for all, so it is ordered) and at most one
      // runtime timer armed at its head, instead of a timer (and a timer-thread wake-up) per request.
      // Answered requests are dropped from the head here, so the queue holds about the requests in flight.
      while (!deadlines_.empty() && !pending_.contains(deadlines_.front().second)) {
        deadlines_.pop_front();
      }
      deadlines_.emplace_back(system_.core()->time().now() + cfg_.request_timeout, cid);
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

  void arm_deadline_timer(clock::time_point when) {
    std::weak_ptr<impl> weak = weak_from_this();
    system_.core()->add_timer(when, [weak] {
      if (auto self = weak.lock()) {
        self->expire_requests();
      }
    });
  }

  /// Fails the requests whose deadline passed with `timeout` and re-arms the timer for the next one.
  void expire_requests() {
    std::vector<std::uint64_t> expired;
    std::optional<clock::time_point> next;
    {
      const mutex_lock lock{mu_};
      const auto now = system_.core()->time().now();
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

  /// Completes pending request `cid`; returns false when it is unknown (already answered).
  bool complete(std::uint64_t cid, expected<std::vector<std::byte>> result) {
    reply_fn done;
    {
      const mutex_lock lock{mu_};
      auto it = pending_.find(cid);
      if (it == pending_.end()) {
        return false;
      }
      done = std::move(it->second.done);
      pending_.erase(it);
    }
    done(std::move(result));
    return true;
  }

  void send_error(peer_id peer, std::uint64_t cid, const actor_address& to, const error& e) {
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

  void send_result(peer_id peer, std::uint64_t cid, const actor_address& from, const actor_address& to,
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

  void send_down(peer_id peer, const actor_address& dead, const actor_address& watcher, const error& reason) {
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

  // ---- receiving (transport delivery thread) ----

  void on_message(peer_id peer, multipart msg) {
    auto env = decode(msg, cfg_.wire_limits);
    if (!env) {
      ++malformed_;
      PRSGD_LOG(warn, component) << "node '" << cfg_.name << "' rejected a malformed message from peer " << peer
                                 << ": " << env.error().message();
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
        if (!complete(e.hdr.correlation_id, std::move(e.hdr.args))) {
          ++stray_replies_;
        }
        break;
      case message_type::error:
        if (!complete(e.hdr.correlation_id, error{e.hdr.error_code, std::move(e.hdr.error_context)})) {
          ++stray_replies_;
        }
        break;
      case message_type::spawn: handle_spawn(peer, e); break;
      case message_type::monitor: handle_monitor(peer, e); break;
      case message_type::demonitor: handle_demonitor(peer, e); break;
      case message_type::down: handle_down(peer, e); break;
      case message_type::heartbeat: break;
      case message_type::node_down:
        node_lost(e.hdr.node, error{errc::peer_unreachable, "node '" + e.hdr.node + "' was lost"});
        break;
      case message_type::leave:
        if (cfg_.head_service) {
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

  void reject(peer_id peer, const envelope& e, const error& why) {
    ++rejected_;
    PRSGD_LOG(warn, component) << "node '" << cfg_.name << "' refused " << to_string(e.hdr.type) << " from '"
                               << e.hdr.from.node << "': " << why.message();
    if (wants_answer(e.hdr.type) && e.hdr.correlation_id != 0) {
      send_error(peer, e.hdr.correlation_id, e.hdr.from, why);
    }
  }

  std::shared_ptr<runtime::detail::cell> local_cell(const actor_address& to, const std::string& to_name,
                                                    error& why) const {
    std::shared_ptr<runtime::detail::cell> c;
    if (!to_name.empty()) {
      c = system_.core()->lookup(to_name);
      if (!c) {
        why = error{errc::not_found, "no actor named '" + to_name + "' on node '" + cfg_.name + "'"};
      }
      return c;
    }
    if (to.node != cfg_.name) {
      why = error{errc::not_found, "actor " + to.node + ":" + std::to_string(to.id) + " is not on node '" +
                                       cfg_.name + "'"};
      return nullptr;
    }
    c = system_.core()->find(to.id);
    if (!c) {
      why = error{errc::not_found, "no live actor " + std::to_string(to.id) + " on node '" + cfg_.name + "'"};
    }
    return c;
  }

  void handle_call(peer_id peer, envelope& e, bool wants_reply) {
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

  void handle_spawn(peer_id peer, envelope& e) {
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
    PRSGD_LOG(debug, component) << "node '" << cfg_.name << "' spawned " << e.hdr.type_name << " as "
                                << addr->id().local;
    send_result(peer, e.hdr.correlation_id, actor_address{cfg_.name, 0}, e.hdr.from,
                pack_value(actor_address{cfg_.name, addr->id().local}));
  }

  void handle_monitor(peer_id peer, const envelope& e) {
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

  void handle_demonitor(peer_id peer, const envelope& e) {
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

  void relay_done(peer_id peer, const actor_address& watcher, const actor_address& target) {
    const mutex_lock lock{mu_};
    relays_.erase(relay_key{peer, watcher.node, watcher.id, target.id});
  }

  void handle_down(peer_id peer, const envelope& e) {
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

  void deliver_down(const std::weak_ptr<runtime::detail::cell>& watcher, const actor_address& source,
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

  void on_peer(const peer_event& ev) {
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

  // ---- head service ----

  /// Forwards `e` to member `target` when this is the head and `target` is another registered node.
  bool forward(peer_id from_peer, const envelope& e, const std::string& target) {
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
        PRSGD_LOG(warn, component) << "cannot forward " << to_string(e.hdr.type) << " to '" << target << "': " << r.error().message();
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

  void handle_head_request(peer_id peer, envelope& e) {
    expected<std::vector<std::byte>> result = std::vector<std::byte>{};
    switch (e.hdr.type) {
      case message_type::register_node: {
        const mutex_lock lock{mu_};
        members_[e.hdr.node] = member{e.hdr.endpoint, e.hdr.incarnation, peer};
        result = pack_value(node_list_locked());
        PRSGD_LOG(info, component) << "head: node '" << e.hdr.node << "' registered at " << e.hdr.endpoint;
        break;
      }
      case message_type::register_name: {
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

  std::vector<node_tuple> node_list_locked() const PRSGD_REQUIRES(mu_) {
    std::vector<node_tuple> out;
    out.emplace_back(cfg_.name, endpoint_, incarnation_);
    for (const auto& [name, m] : members_) {
      out.emplace_back(name, m.endpoint, m.incarnation);
    }
    return out;
  }

  /// Forgets member `name` and its names, and tells every other member (head only).
  void member_lost(const std::string& name, std::string_view how) {
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

  /// Fails every request to `lost` and tells every watcher of an actor on it.
  void node_lost(const std::string& lost, const error& why) {
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

  // ---- public operations ----

  expected<void> connect(const std::string& node_name, const std::string& endpoint) {
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
    auto peer = transport_->connect(endpoint, {});
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

  expected<void> monitor(const actor_addr& watcher, const actor_address& target) {
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

  void demonitor(const actor_addr& watcher, const actor_address& target) {
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

  void head_request(envelope env, reply_fn done) {
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

  node_id node_number(const std::string& name) {
    const mutex_lock lock{mu_};
    auto it = node_numbers_.find(name);
    if (it != node_numbers_.end()) {
      return it->second;
    }
    const node_id n = first_remote_node_number + static_cast<node_id>(node_numbers_.size());
    node_numbers_.emplace(name, n);
    return n;
  }

  std::optional<actor_address> address_of(actor_id id) const {
    const mutex_lock lock{mu_};
    for (const auto& [name, n] : node_numbers_) {
      if (n == id.node) {
        return actor_address{name, id.local};
      }
    }
    return std::nullopt;
  }

  node_stats stats() const {
    node_stats s;
    s.received = received_.load();
    s.malformed = malformed_.load();
    s.rejected = rejected_.load();
    s.errors_sent = errors_sent_.load();
    s.requests_sent = requests_sent_.load();
    s.timeouts = timeouts_.load();
    s.stray_replies = stray_replies_.load();
    return s;
  }

  static bool is_set(const actor_address& a) { return !a.node.empty() || a.id != 0; }

  static expected<void> check_text_field(const std::string& name) {
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

  actor_system& system_;
  const remote_registry& registry_;
  node_config cfg_;
  std::unique_ptr<transport> transport_;
  std::string endpoint_;

 private:
  struct pending {
    reply_fn done;
    std::string node;
  };
  // A remote monitor set by a local watcher: (watcher local id, target node, target id).
  struct watch_key {
    std::uint64_t watcher;
    std::string node;
    std::uint64_t target;
    friend auto operator<=>(const watch_key&, const watch_key&) = default;
  };
  // A relay serving a remote watcher: (peer it came from, watcher node, watcher id, local target id).
  struct relay_key {
    peer_id peer;
    std::string node;
    std::uint64_t watcher;
    std::uint64_t target;
    friend auto operator<=>(const relay_key&, const relay_key&) = default;
  };

  struct member {
    std::string endpoint;
    std::uint64_t incarnation = 0;
    peer_id peer = 0;
  };

  std::uint64_t incarnation_ = 0;  // set by start() before the transport exists; read-only after
  mutable mutex mu_;
  bool stopped_ PRSGD_GUARDED_BY(mu_) = false;
  std::optional<peer_id> head_peer_ PRSGD_GUARDED_BY(mu_);
  std::map<std::string, member> members_ PRSGD_GUARDED_BY(mu_);        // head only
  std::map<std::string, actor_address> names_ PRSGD_GUARDED_BY(mu_);   // head only
  std::uint64_t next_cid_ PRSGD_GUARDED_BY(mu_) = 1;
  std::unordered_map<std::uint64_t, pending> pending_ PRSGD_GUARDED_BY(mu_);
  // (deadline, cid) in send order
  std::deque<std::pair<clock::time_point, std::uint64_t>> deadlines_ PRSGD_GUARDED_BY(mu_);
  bool deadline_timer_armed_ PRSGD_GUARDED_BY(mu_) = false;
  std::unordered_map<std::string, peer_id> routes_ PRSGD_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::string> route_endpoints_ PRSGD_GUARDED_BY(mu_);
  std::unordered_map<peer_id, std::string> route_names_ PRSGD_GUARDED_BY(mu_);
  std::map<watch_key, std::weak_ptr<runtime::detail::cell>> watches_ PRSGD_GUARDED_BY(mu_);
  std::map<relay_key, actor_ref<monitor_relay>> relays_ PRSGD_GUARDED_BY(mu_);
  std::map<std::string, node_id> node_numbers_ PRSGD_GUARDED_BY(mu_);

  std::atomic<std::uint64_t> received_{0};
  std::atomic<std::uint64_t> malformed_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> errors_sent_{0};
  std::atomic<std::uint64_t> requests_sent_{0};
  std::atomic<std::uint64_t> timeouts_{0};
  std::atomic<std::uint64_t> stray_replies_{0};
};

void monitor_relay::on_down(const down_msg& msg) {
  if (auto owner = owner_.lock()) {
    owner->send_down(peer_, target_address_, watcher_, msg.reason);
    owner->relay_done(peer_, watcher_, target_address_);
  }
  quit();
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

expected<void> node::connect(const std::string& node_name, const std::string& endpoint) {
  return impl_->connect(node_name, endpoint);
}

actor_address node::address_of(const actor_addr& local) const {
  return actor_address{impl_->cfg_.name, local.id().local};
}

std::optional<actor_address> node::address_of(actor_id remote) const { return impl_->address_of(remote); }

expected<void> node::monitor(const actor_addr& watcher, const actor_address& target) {
  return impl_->monitor(watcher, target);
}

void node::demonitor(const actor_addr& watcher, const actor_address& target) { impl_->demonitor(watcher, target); }

future<void> node::register_name(const std::string& name, const actor_addr& local) {
  auto st = std::make_shared<runtime::detail::promise_state<void>>(core());
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
  auto st = std::make_shared<runtime::detail::promise_state<actor_address>>(core());
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
  auto st = std::make_shared<runtime::detail::promise_state<std::vector<node_info>>>(core());
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

node_stats node::stats() const { return impl_->stats(); }
void node::stop() { impl_->stop(); }

const remote_registry& node::registry() const noexcept { return impl_->registry_; }
const std::shared_ptr<runtime::detail::system_core>& node::core() const noexcept { return impl_->system_.core(); }

expected<void> node::send_oneway(envelope env) { return impl_->send_oneway(std::move(env)); }

void node::send_request(const std::string& target_node, envelope env, reply_fn done) {
  impl_->send_request(target_node, std::move(env), std::move(done));
}

}  // namespace prsgd::wire
