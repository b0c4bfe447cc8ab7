// SPDX-License-Identifier: Apache-2.0
// Opens the transport of an actor that only receives protocol messages (the worker, a shard owner): every
// message goes to the actor's on_wire, peer events are not used. Not installed.
#pragma once

#include "prsgd/actors/averager_actor.hpp"

#include <memory>
#include <utility>

namespace prsgd::actors {

template <class Actor>
expected<std::shared_ptr<transport>> open_wire_link(const transport_factory& make_link, actor_ref<Actor> handle) {
  transport_handlers handlers;
  handlers.on_message = [handle](peer_id peer, multipart msg) { handle.tell(&Actor::on_wire, peer, std::move(msg)); };
  handlers.on_peer = [](const peer_event&) {};
  auto link = make_link(std::move(handlers));
  if (!link) {
    return std::move(link).error();
  }
  return std::shared_ptr<transport>{std::move(*link)};
}

}  // namespace prsgd::actors
