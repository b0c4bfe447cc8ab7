// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

namespace prsgd {

class actor;
class actor_system;
class deterministic_system;
class actor_addr;
template <class T>
class actor_ref;
template <class T>
class future;
template <class T>
class response_promise;
template <class T>
class method_registry;
struct actor_id;
struct config;
struct down_msg;
struct named;
struct restart_policy;
struct spawn_options;

namespace runtime::detail {
class cell;
class message;
class system_engine;
template <class T>
class promise_state;
}  // namespace runtime::detail

}  // namespace prsgd
