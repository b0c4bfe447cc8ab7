// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <utility>

#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/node.hpp"

namespace prsgd::wire {

/// Starts a head node: a `node` with `head_service` on, i.e. a very small Ray GCS. It keeps the node
/// list (`register_node`) and the named-actor directory (`register_name`, `lookup`), forwards
/// requests and one-way messages for other registered nodes, and broadcasts `node_down` when a
/// registered node's connection is lost or it leaves. Other nodes join with `node_config::head`.
/// It is an ordinary node too: it can host and serve actors.
[[nodiscard]] inline expected<std::unique_ptr<node>> make_head(actor_system& system, const remote_registry& registry,
                                                               node_config cfg,
                                                               const transport_factory& make_transport) {
  cfg.head_service = true;
  return node::make(system, registry, std::move(cfg), make_transport);
}

}  // namespace prsgd::wire
