// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/transport/inproc_transport.hpp"

namespace prsgd::test {

/// Makes the transports of an averager or worker shell on `net` (which must outlive them): node `name`,
/// heartbeats every 50 ms, a peer declared dead after `timeout` of silence.
inline actors::transport_factory inproc_link(inproc_network& net, const std::string& name,
                                             std::chrono::milliseconds timeout) {
  return [&net, name, timeout](transport_handlers h) -> expected<std::unique_ptr<transport>> {
    transport_config cfg;
    cfg.node_name = name;
    cfg.heartbeat_interval = std::chrono::milliseconds{50};
    cfg.heartbeat_timeout = timeout;
    auto t = inproc_transport::make(net, cfg, std::move(h));
    if (!t) {
      return std::move(t).error();
    }
    return std::unique_ptr<transport>(std::move(*t));
  };
}

}  // namespace prsgd::test
