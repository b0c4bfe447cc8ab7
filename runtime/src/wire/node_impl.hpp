// SPDX-License-Identifier: Apache-2.0
// node::impl and monitor_relay, shared by the node sources of prsgd::wire (private: never installed).
// Which file holds what:
//   node.cpp           make/start/stop, peer events and losing a node, the counters
//   node_routes.cpp    routes to other nodes (connect, route), sending an envelope to a peer
//   node_requests.cpp  the request table: correlation ids, deadlines, completing requests
//   node_dispatch.cpp  received messages: decoding, calls and spawns on local actors, replies and errors
//   node_monitors.cpp  remote monitors: watches, relays (monitor_relay), down messages, node numbers
//   node_head.cpp      the head service (members, names, forwarding) and the requests a node sends it
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prsgd/runtime/node.hpp"

#include "prsgd/common/mutex.hpp"
#include "prsgd/common/rate_limiter.hpp"

#include "prsgd/runtime/actor.hpp"

namespace prsgd::wire {
namespace detail {

inline constexpr std::string_view component = "wire";
// The route name of requests to the head itself (not a valid node name: it has a control character).
inline const std::string head_route = "\x01head";
// Remote nodes get actor_id node numbers from this base up, so they never collide with local ones.
inline constexpr node_id first_remote_node_number = 0x10000;

// Returns whether a message of type `t` waits for an answer (reply or error).
inline bool wants_answer(message_type t) {
  return t == message_type::ask || t == message_type::spawn || t == message_type::lookup ||
         t == message_type::register_node || t == message_type::register_name;
}

}  // namespace detail

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
/// Functions declared `inline` here are defined in the one source file that calls them.
class node::impl : public std::enable_shared_from_this<node::impl> {
 public:
  impl(actor_system& system, const remote_registry& registry, node_config cfg)
      : system_(system), registry_(registry), cfg_(std::move(cfg)) {}
  ~impl() { stop(); }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  using node_tuple = std::tuple<std::string, std::string, std::uint64_t>;

  // ---- lifecycle, peer events, losing a node (node.cpp) ----
  expected<void> start(const transport_factory& make_transport);
  void stop();
  void on_peer(const peer_event& ev);
  void node_lost(const std::string& lost, const error& why);
  inline node_stats stats() const;
  static expected<void> check_text_field(const std::string& name);

  // ---- routes and sending (node_routes.cpp) ----
  expected<void> connect(const std::string& node_name, const std::string& endpoint);
  expected<peer_id> route(const std::string& node_name);
  connect_options outgoing_options() const;
  expected<void> send_to_peer(peer_id peer, const envelope& env);
  inline expected<void> send_oneway(envelope env);

  // ---- the request table (node_requests.cpp) ----
  inline void send_request(const std::string& target_node, envelope env, reply_fn done);
  void send_request_to(peer_id peer, const std::string& target_node, envelope env, reply_fn done);
  void arm_deadline_timer(clock_source::time_point when);
  void expire_requests();
  bool complete(std::uint64_t cid, expected<std::vector<std::byte>> result, std::optional<peer_id> from = std::nullopt);
  std::uint64_t new_correlation_id() PRSGD_REQUIRES(mu_);
  void refuse_unauthorised(peer_id peer, const envelope& e, const std::string& why);
  static bool is_set(const actor_address& a) { return !a.node.empty() || a.id != 0; }

  // ---- dispatch of received messages (node_dispatch.cpp) ----
  void on_message(peer_id peer, multipart msg);
  void reject(peer_id peer, const envelope& e, const error& why);
  std::shared_ptr<runtime::detail::cell> local_cell(const actor_address& to, const std::string& to_name,
                                                    error& why) const;
  void handle_call(peer_id peer, envelope& e, bool wants_reply);
  void handle_spawn(peer_id peer, envelope& e);
  void send_error(peer_id peer, std::uint64_t cid, const actor_address& to, const error& e);
  void send_result(peer_id peer, std::uint64_t cid, const actor_address& from, const actor_address& to,
                   expected<std::vector<std::byte>> result);

  // ---- remote monitors (node_monitors.cpp) ----
  expected<void> monitor(const actor_addr& watcher, const actor_address& target);
  void demonitor(const actor_addr& watcher, const actor_address& target);
  void handle_monitor(peer_id peer, const envelope& e);
  void handle_demonitor(peer_id peer, const envelope& e);
  inline void relay_done(peer_id peer, const actor_address& watcher, const actor_address& target);
  void handle_down(peer_id peer, const envelope& e);
  void deliver_down(const std::weak_ptr<runtime::detail::cell>& watcher, const actor_address& source, error reason);
  void send_down(peer_id peer, const actor_address& dead, const actor_address& watcher, const error& reason);
  inline node_id node_number(const std::string& name);
  inline std::optional<actor_address> address_of(actor_id id) const;

  // ---- head service (node_head.cpp) ----
  expected<void> join_head();
  void connect_all(const std::vector<node_tuple>& list);
  bool forward(peer_id from_peer, const envelope& e, const std::string& target);
  void handle_head_request(peer_id peer, envelope& e);
  inline std::vector<node_tuple> node_list_locked() const PRSGD_REQUIRES(mu_);
  void member_lost(const std::string& name, std::string_view how);
  void head_request(envelope env, reply_fn done);

  actor_system& system_;
  const remote_registry& registry_;
  node_config cfg_;
  std::unique_ptr<transport> transport_;
  std::string endpoint_;

 private:
  struct pending {
    reply_fn done;
    std::string node;
    peer_id peer = 0;  // the connection the request went out on: only it may answer
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
  std::map<std::string, member> members_ PRSGD_GUARDED_BY(mu_);       // head only
  std::map<std::string, actor_address> names_ PRSGD_GUARDED_BY(mu_);  // head only
  // Correlation ids are random, so a peer cannot guess the id of another peer's request.
  std::mt19937_64 cid_rng_ PRSGD_GUARDED_BY(mu_){std::random_device{}()};
  std::unordered_map<std::uint64_t, pending> pending_ PRSGD_GUARDED_BY(mu_);
  // (deadline, cid) in send order
  std::deque<std::pair<clock_source::time_point, std::uint64_t>> deadlines_ PRSGD_GUARDED_BY(mu_);
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
  std::atomic<std::uint64_t> unauthorised_{0};
  // Warnings caused by remote input, one limiter per family.
  rate_limiter malformed_warnings_;
  rate_limiter rejected_warnings_;
  rate_limiter unauthorised_warnings_;
};

}  // namespace prsgd::wire
