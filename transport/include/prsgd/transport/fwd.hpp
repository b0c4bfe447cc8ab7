// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <vector>

namespace prsgd {

class frame;
/// Holds one multipart message: an ordered list of frames delivered all together or not at all.
using multipart = std::vector<frame>;
/// Names one connection of a transport; unique within that transport instance, never reused.
using peer_id = std::uint64_t;

struct endpoint;
struct peer_event;
struct transport_config;
struct transport_handlers;
struct transport_stats;
struct connect_options;
struct curve_options;
struct curve_keypair;
class transport;
class inproc_network;
class inproc_transport;
class zmq_transport;
class fault_injector;
struct fault_rule;
struct fault_context;

}  // namespace prsgd
