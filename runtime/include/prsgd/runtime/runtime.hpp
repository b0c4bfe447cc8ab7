// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Includes the whole public runtime API.

#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_id.hpp"
#include "prsgd/runtime/actor_ref.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/deterministic_system.hpp"
#include "prsgd/runtime/future.hpp"
#include "prsgd/runtime/method_registry.hpp"
#include "prsgd/runtime/policy.hpp"
#include "prsgd/runtime/threads.hpp"
