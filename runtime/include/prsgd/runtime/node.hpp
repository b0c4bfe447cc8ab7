// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/actor_ref.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/envelope.hpp"
#include "prsgd/runtime/future.hpp"
#include "prsgd/runtime/remote.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::wire {

class node;

/// Picks the node a remote spawn runs on: `node.spawn<counter>(on_node{"node-2"}, 0)`.
struct on_node {
  /// Returns the target node's name.
  std::string node;
  /// Returns the name to register the new actor under on that node ("" = anonymous).
  std::string name;
};

/// Configures a `node`.
struct node_config {
  /// Returns this node's unique name in the cluster (at most 64 bytes, no control characters).
  std::string name;
  /// Returns the endpoint to bind; "tcp://127.0.0.1:*" lets the OS pick the port.
  std::string bind = "tcp://127.0.0.1:*";
  /// Returns how long a request (ask, spawn) waits for its answer before failing with `timeout`.
  std::chrono::milliseconds request_timeout{10000};
  /// Returns the envelope limits applied to every received message.
  limits wire_limits;
  /// Returns the transport settings (its node_name is replaced by `name`). With `transport.curve` set, this
  /// node serves as a CURVE server with that key pair and authenticates to the nodes it connects to.
  transport_config transport;
  /// Returns the CURVE public key (Z85) of the nodes this node connects to, the head included; "" = this
  /// node's own public key (every node of the cluster serves with one shared cluster key pair). Used only
  /// with `transport.curve`.
  std::string server_public_key;
  /// Returns true when this node is the head (a small Ray GCS): it keeps the node list and the
  /// named-actor directory, forwards requests for other nodes, and tells every node when one is lost.
  bool head_service = false;
  /// Returns the head's endpoint; when set, `make` registers this node there (waiting up to
  /// `request_timeout`) and requests for nodes without a direct route go through the head.
  std::string head;
};

/// Describes one member of the cluster as the head knows it.
struct node_info {
  /// Returns the node name.
  std::string name;
  /// Returns the endpoint it serves at.
  std::string endpoint;
  /// Returns its incarnation (changes when the node process restarts).
  std::uint64_t incarnation = 0;
  friend bool operator==(const node_info&, const node_info&) = default;
};

/// Makes the transport a node runs on (zmq in production, inproc in tests); called once by `node::make`.
using transport_factory =
    std::function<expected<std::unique_ptr<transport>>(transport_config config, transport_handlers handlers)>;

/// Counts what a node received and refused; a snapshot.
struct node_stats {
  /// Returns the messages that decoded and validated.
  std::uint64_t received = 0;
  /// Returns the messages rejected by `decode` (garbage, truncated, oversize, wrong version, bad sizes).
  std::uint64_t malformed = 0;
  /// Returns the valid messages refused (unknown actor, type or method, bad arguments, wrong node).
  std::uint64_t rejected = 0;
  /// Returns the `error` answers sent.
  std::uint64_t errors_sent = 0;
  /// Returns the requests (ask, spawn) sent.
  std::uint64_t requests_sent = 0;
  /// Returns the requests that failed with `timeout`.
  std::uint64_t timeouts = 0;
  /// Returns the replies that matched no pending request (late, duplicate, or from another connection
  /// than the one the request went to).
  std::uint64_t stray_replies = 0;
  /// Returns the membership messages refused because they came from a connection other than the one they
  /// concern (a register_node for a name held by another connection, a leave or register_name for another
  /// node, a node_down not from the head).
  std::uint64_t unauthorised = 0;
};

/// Is a typed handle to an actor on any node, addressed by (node, id). Copyable; the address can be
/// sent inside messages (`wire::actor_address` is msgpack-convertible) and used from any node.
/// Thread-safe. @pre the `node` it was made by outlives it.
template <class T>
class remote_ref {
 public:
  /// Creates an invalid handle.
  remote_ref() = default;
  /// Wraps `address`, reached through `via`.
  remote_ref(node* via, actor_address address) : node_(via), address_(std::move(address)) {}

  /// Returns the actor's cluster-wide address.
  [[nodiscard]] const actor_address& address() const noexcept { return address_; }
  /// Returns true when this refers to an actor.
  [[nodiscard]] bool valid() const noexcept { return node_ != nullptr && address_.valid(); }

  /// Sends `m(args...)` to the actor without waiting. Tells from one sender to one actor arrive in order.
  /// Fails locally with not_found (method not registered, node not connected) or a transport error;
  /// errors at the receiver are logged and counted there.
  template <class M, class... A>
  expected<void> tell(M m, A&&... args) const;

  /// Calls `m(args...)` on the actor and returns a future for its result. Errors arrive in the future:
  /// not_found (unknown actor, method or node), decode_failed (arguments), handler_failed,
  /// actor_dead, peer_unreachable (node lost), timeout, shutting_down.
  template <class M, class... A>
  auto ask(M m, A&&... args) const;

 private:
  node* node_ = nullptr;
  actor_address address_;
};

/// Connects an `actor_system` to other nodes: serves remote calls, spawns and monitors for the local
/// actors, and sends them for `remote_ref`s (the remote-actor layer; runtime/PROTOCOL.md).
///
/// Thread contract: every member is thread-safe. Received messages are decoded on the transport's
/// delivery thread, which only enqueues into actor mailboxes; results travel back from actor threads.
/// Malformed input never reaches an actor: it is logged, counted (`stats().malformed`) and, where the
/// sender waits, answered with an `error`.
class node {
 public:
  /// Binds the transport made by `make_transport` to `cfg.bind` and starts serving.
  /// Fails with invalid_argument (bad name) or the transport's error. @pre `system` and `registry`
  /// outlive the node.
  [[nodiscard]] static expected<std::unique_ptr<node>> make(actor_system& system, const remote_registry& registry,
                                                            node_config cfg, const transport_factory& make_transport);
  /// Calls `stop`.
  ~node();
  node(const node&) = delete;
  node& operator=(const node&) = delete;

  /// Returns this node's name.
  [[nodiscard]] const std::string& name() const noexcept;
  /// Returns the endpoint the node is bound to (with the OS-chosen port).
  [[nodiscard]] const std::string& endpoint() const noexcept;

  /// Adds a route to node `node_name` at `endpoint` (the transport reconnects by itself after a loss).
  /// Reconnecting an existing name to the same endpoint is a no-op.
  expected<void> connect(const std::string& node_name, const std::string& endpoint);

  /// Returns the cluster-wide address of the local actor `local`.
  [[nodiscard]] actor_address address_of(const actor_addr& local) const;
  /// Returns the address behind the `actor_id` of a remote actor (e.g. `down_msg::source`), if known.
  [[nodiscard]] std::optional<actor_address> address_of(actor_id remote) const;
  /// Returns a handle to the actor at `address` (local or remote).
  template <class T>
  [[nodiscard]] remote_ref<T> ref(actor_address address) {
    return remote_ref<T>{this, std::move(address)};
  }
  /// Returns a location-transparent handle to the local actor `local`.
  template <class T>
  [[nodiscard]] remote_ref<T> ref(const actor_ref<T>& local) {
    return remote_ref<T>{this, address_of(local.addr())};
  }

  /// Spawns a `T` (registered with a `constructor`) on node `where.node` with `args`.
  /// Errors: not_found (type or node unknown), decode_failed, handler_failed, timeout, peer_unreachable.
  template <class T, class... A>
  future<remote_ref<T>> spawn(const on_node& where, A&&... args);

  /// Watches the remote actor `target`: `watcher->on_down` gets a down_msg when it stops (reason from its
  /// node), when it does not exist (not_found), or when its node is lost (peer_unreachable). Use
  /// `address_of(msg.source)` to map the source back. Fails with not_found when no route to its node exists.
  expected<void> monitor(const actor_addr& watcher, const actor_address& target);
  /// Stops watching `target`.
  void demonitor(const actor_addr& watcher, const actor_address& target);

  /// Registers the local actor `local` under the cluster-wide `name` at the head.
  /// Errors: already_exists (taken by another actor), not_found (no head), timeout.
  future<void> register_name(const std::string& name, const actor_addr& local);
  /// Returns the address registered under `name` at the head; not_found when none.
  future<actor_address> lookup(const std::string& name);
  /// Returns the nodes registered at the head, and connects to each of them.
  future<std::vector<node_info>> cluster_nodes();

  /// Returns the counters.
  [[nodiscard]] node_stats stats() const;
  /// Stops the transport and fails pending requests with shutting_down. Idempotent.
  void stop();

  // --- used by remote_ref and spawn (public so the templates can reach them) ---
  /// Returns the type registry.
  [[nodiscard]] const remote_registry& registry() const noexcept;
  /// Returns the actor system's engine (futures are bound to it).
  [[nodiscard]] const std::shared_ptr<runtime::detail::system_engine>& engine() const noexcept;
  /// Sends a one-way `env` to the node of `env.hdr.to`.
  expected<void> send_oneway(envelope env);
  /// Sends a request `env` (ask, spawn) to node `target_node`; `done` gets the answer exactly once:
  /// the reply's `args`, the error, timeout, peer_unreachable or shutting_down.
  void send_request(const std::string& target_node, envelope env, reply_fn done);

  /// Implementation (declared in src/wire/node_impl.hpp).
  class impl;

 private:
  explicit node(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;
};

template <class T>
template <class M, class... A>
expected<void> remote_ref<T>::tell(M m, A&&... args) const {
  if (node_ == nullptr) {
    return fail(errc::invalid_argument, "tell on an invalid remote_ref");
  }
  auto method = node_->registry().template method_name<T>(m);
  if (!method) {
    return fail(errc::not_found, "method not registered for this type");
  }
  using args_t = typename detail::member_traits<M>::args;
  envelope env;
  env.hdr.type = message_type::tell;
  env.hdr.to = address_;
  env.hdr.method = std::move(*method);
  env.hdr.args = pack_tuple(args_t{std::forward<A>(args)...});
  return node_->send_oneway(std::move(env));
}

template <class T>
template <class M, class... A>
auto remote_ref<T>::ask(M m, A&&... args) const {
  using traits = detail::member_traits<M>;
  using R = typename runtime::detail::ask_result<std::decay_t<typename traits::result>>::type;
  PRSGD_CHECK(node_ != nullptr) << "ask on an invalid remote_ref";
  auto st = std::make_shared<runtime::detail::promise_state<R>>(node_->engine());
  future<R> out{st};
  auto method = node_->registry().template method_name<T>(m);
  if (!method) {
    st->complete(fail(errc::not_found, "method not registered for this type"));
    return out;
  }
  envelope env;
  env.hdr.type = message_type::ask;
  env.hdr.to = address_;
  env.hdr.method = std::move(*method);
  env.hdr.args = pack_tuple(typename traits::args{std::forward<A>(args)...});
  node_->send_request(address_.node, std::move(env), [st](expected<std::vector<std::byte>> r) {
    if (!r) {
      st->complete(std::move(r).error());
      return;
    }
    st->complete(unpack_value<R>(*r));
  });
  return out;
}

template <class T, class... A>
future<remote_ref<T>> node::spawn(const on_node& where, A&&... args) {
  auto st = std::make_shared<runtime::detail::promise_state<remote_ref<T>>>(engine());
  future<remote_ref<T>> out{st};
  auto type = registry().template type_name<T>();
  if (!type) {
    st->complete(fail(errc::not_found, "actor type not registered"));
    return out;
  }
  envelope env;
  env.hdr.type = message_type::spawn;
  env.hdr.type_name = std::move(*type);
  env.hdr.node = where.node;
  env.hdr.name = where.name;
  env.hdr.args = pack_tuple(std::tuple<std::decay_t<A>...>{std::forward<A>(args)...});
  send_request(where.node, std::move(env), [st, self = this](expected<std::vector<std::byte>> r) {
    if (!r) {
      st->complete(std::move(r).error());
      return;
    }
    auto addr = unpack_value<actor_address>(*r);
    if (!addr) {
      st->complete(std::move(addr).error());
      return;
    }
    st->complete(remote_ref<T>{self, std::move(*addr)});
  });
  return out;
}

}  // namespace prsgd::wire
