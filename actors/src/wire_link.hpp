// SPDX-License-Identifier: Apache-2.0
// Spawns an actor that only receives protocol messages (the worker, a shard owner) with its transport: every
// message goes to the actor's on_wire, peer events to its on_peer_event if it has one. Not installed.
#pragma once

#include "prsgd/actors/averager_actor.hpp"

#include <memory>
#include <utility>

namespace prsgd::actors {

/// Holds an actor spawned with its transport open.
template <class Actor>
struct wired_actor {
  actor_ref<Actor> handle;
  std::shared_ptr<transport> link;
};

/// Spawns an `Actor` from `config` and opens its transport with `make_link`.
template <class Actor, class Config>
expected<wired_actor<Actor>> spawn_wired(actor_system& system, Config config, const transport_factory& make_link) {
  auto ref = system.spawn<Actor>(std::move(config));
  if (!ref) {
    return std::move(ref).error();
  }
  auto handle = *ref;
  transport_handlers handlers;
  handlers.on_message = [handle](peer_id peer, multipart msg) { handle.tell(&Actor::on_wire, peer, std::move(msg)); };
  if constexpr (requires(Actor & a, const peer_event& e) { a.on_peer_event(e); }) {
    handlers.on_peer = [handle](const peer_event& e) { handle.tell(&Actor::on_peer_event, e); };
  } else {
    handlers.on_peer = [](const peer_event&) {};
  }
  auto link = make_link(std::move(handlers));
  if (!link) {
    return std::move(link).error();
  }
  return wired_actor<Actor>{handle, std::shared_ptr<transport>{std::move(*link)}};
}

}  // namespace prsgd::actors
