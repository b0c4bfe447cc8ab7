// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace prsgd {

/// Identifies a node (process) in a prsgd cluster; 0 is the local node of a single-process system.
using node_id = std::uint32_t;

/// Identifies an actor cluster-wide: the node that hosts it plus a node-local number (never reused).
struct actor_id {
  /// Node that hosts the actor.
  node_id node = 0;
  /// Node-local number; 0 means "no actor".
  std::uint64_t local = 0;

  /// Returns true when this refers to an actor (local != 0).
  [[nodiscard]] constexpr bool valid() const noexcept { return local != 0; }
  friend constexpr auto operator<=>(const actor_id&, const actor_id&) = default;
};

/// Returns "node:local", e.g. "0:17".
[[nodiscard]] inline std::string to_string(actor_id id) {
  return std::to_string(id.node) + ":" + std::to_string(id.local);
}

/// Writes `to_string(id)`.
inline std::ostream& operator<<(std::ostream& os, actor_id id) { return os << to_string(id); }

}  // namespace prsgd

/// Hashes an actor id so it can key unordered containers.
template <>
struct std::hash<prsgd::actor_id> {
  std::size_t operator()(const prsgd::actor_id& id) const noexcept {
    return std::hash<std::uint64_t>{}(id.local * 0x9E3779B97F4A7C15ULL ^ id.node);
  }
};
