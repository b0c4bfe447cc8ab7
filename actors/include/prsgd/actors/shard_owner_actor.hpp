// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/shard_owner_core.hpp"
#include "prsgd/common/rate_limiter.hpp"
#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::actors {

/// Configures a shard_owner_actor.
struct shard_owner_actor_config {
  /// The owner's protocol settings (its endpoint is set by attach, once the listening socket is bound).
  shard_owner_config core;
  /// Limits for decoding messages.
  codec_limits limits;
  /// Called once on the actor's strand when the owner ends: empty after STOP from the coordinator,
  /// else the reason it cannot go on.
  std::function<void(const std::optional<std::string>& failure)> on_finished;
  /// Ring gather: how to reach the next owner (with CURVE, the job's server key), and the client key a
  /// SHARD_RELAY must come with (with CURVE, the job's server key, which only the owners and the
  /// coordinator hold; empty: from any connection, as without CURVE).
  connect_options next_connect;
  std::string relay_key;
  /// Ring gather: the owner ends (with a line saying why) when the connection to the next owner is not up
  /// this long after it was made (a wrong address, or with CURVE an allow list without the server key).
  std::chrono::nanoseconds next_timeout{std::chrono::seconds(10)};
};

/// Runs a shard_owner_core as an actor: decodes what the coordinator and the workers send, feeds the
/// core, sends what it asks for and arms its timer. Thread contract: all members run on the actor's
/// strand; the transport is shared with the process that made it.
class shard_owner_actor : public actor {
 public:
  explicit shard_owner_actor(shard_owner_actor_config config);

  void on_start() override;
  /// Takes the transport, the coordinator's connection on it and the endpoint workers reach this owner
  /// at (called once, right after spawn); starts registering.
  void attach(std::shared_ptr<transport> link, peer_id coordinator, std::string endpoint);
  /// Handles one message from the coordinator, a worker or the previous owner of the ring.
  void on_wire(peer_id peer, multipart msg);
  /// Notes which incoming connections proved `relay_key` (the only ones a SHARD_RELAY is taken from).
  void on_peer_event(const peer_event& e);
  /// Returns the round of the slice of x̄ the owner holds (tests).
  [[nodiscard]] round_t round() const;

 private:
  void apply(owner_actions a);
  void rearm(std::optional<clock_source::time_point> wakeup);

  shard_owner_actor_config config_;
  std::optional<shard_owner_core> core_;
  std::shared_ptr<transport> link_;
  peer_id coordinator_ = 0;
  /// Ring gather: the connection to the next owner and its endpoint; the incoming connections with the
  /// relay key.
  std::optional<peer_id> next_;
  std::string next_endpoint_;
  /// The next owner's endpoint is on this host (its relays then travel uncompressed).
  bool next_on_this_host_ = false;
  bool next_up_ = false;
  std::optional<timer_id> next_timer_;
  std::set<peer_id> relay_peers_;
  /// While the core handles a SHARD_RELAY: its decoded values and the message as it came, which goes on to the
  /// next owner as it is (no second encoding or compression of the same chunk).
  std::optional<std::pair<flat_buffer, multipart>> incoming_relay_;
  std::optional<timer_id> timer_;
  bool finished_ = false;
  rate_limiter malformed_warnings_;
};

/// Spawns a shard_owner_actor, binds `listen` for workers, connects to the coordinator at
/// `coordinator` and returns the actor and the bound endpoint (which the owner announces to workers).
[[nodiscard]] expected<std::pair<actor_ref<shard_owner_actor>, std::string>> start_shard_owner(
    actor_system& system, shard_owner_actor_config config, const transport_factory& make_link,
    const std::string& listen, const std::string& coordinator, std::shared_ptr<transport>* link_out = nullptr,
    const connect_options& connect = {});

}  // namespace prsgd::actors
