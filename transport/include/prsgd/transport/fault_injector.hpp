// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/mutex.hpp"
#include "prsgd/transport/frame.hpp"
#include "prsgd/transport/fwd.hpp"

namespace prsgd {

/// Lists the points at which a fault can be injected.
enum class fault_stage {
  /// An outgoing connection attempt (drop = the connection does not come up on this attempt).
  connect,
  /// A message leaving the sender (before the link).
  send,
  /// A message arriving at the receiver (after the link, before the handler).
  receive,
};

/// Lists what an injected fault does.
enum class fault_action {
  /// Loses the message (or the connection attempt).
  drop,
  /// Delivers the message `fault_rule::duration` later (following messages on the link may overtake it).
  delay,
  /// Delivers the message twice.
  duplicate,
  /// Holds the message back and delivers it right after the next message on the same link.
  reorder,
  /// Cuts the link between the two nodes (both directions; the message is lost); the link comes back after
  /// `fault_rule::duration`, or stays cut until `inproc_network::restore` when the duration is zero.
  disconnect,
};

/// Describes the event a rule is matched against.
struct fault_context {
  /// Where the event happens.
  fault_stage stage = fault_stage::send;
  /// The sending (or connecting) node's name.
  std::string_view from;
  /// The receiving (or accepting) node's name.
  std::string_view to;
  /// The message (null for connect events).
  const multipart* message = nullptr;
};

/// Describes one fault: where it applies, what it does, and when it triggers.
struct fault_rule {
  /// The stage it applies to.
  fault_stage stage = fault_stage::send;
  /// What it does.
  fault_action action = fault_action::drop;
  /// Sender node name to match; empty matches any (a direction is a from/to pair).
  std::string from{};
  /// Receiver node name to match; empty matches any.
  std::string to{};
  /// Extra predicate on the event (e.g. on the first frame's content); empty matches any.
  std::function<bool(const fault_context&)> match{};
  /// Probability that a matching, armed event triggers (drawn from the seeded RNG).
  double probability = 1.0;
  /// Number of matching events to let through before the rule is armed ("after N messages").
  std::uint64_t after = 0;
  /// Maximum number of times the rule triggers.
  std::uint64_t times = std::numeric_limits<std::uint64_t>::max();
  /// Delay for `delay`; how long the link stays cut for `disconnect` (zero: until restored).
  clock_source::duration duration{};
};

/// Decides, deterministically from a seed, which faults hit which message.
///
/// Rules are checked in the order they were added; the first that triggers wins. With the same seed, rules
/// and sequence of events the decisions are identical on every run and platform (the RNG is
/// `std::mt19937_64` and probabilities use its raw bits). Print `describe()` when a test fails
/// (`SCOPED_TRACE(injector.describe())`) so the run can be repeated with `PRSGD_FAULT_SEED`.
///
/// Thread-safe: `decide` may be called from any thread (a mutex serialises it).
class fault_injector {
 public:
  /// Holds the outcome for one event.
  struct decision {
    /// True when some rule triggered.
    bool triggered = false;
    /// The action of the rule that triggered (meaningless when !triggered).
    fault_action action = fault_action::drop;
    /// That rule's duration.
    clock_source::duration duration{};
    /// Index of the rule that triggered.
    std::size_t rule = 0;
  };

  /// Makes an injector seeded with `seed`.
  explicit fault_injector(std::uint64_t seed);
  /// Makes an injector seeded from PRSGD_FAULT_SEED if set, else from std::random_device.
  fault_injector();

  /// Returns the seed.
  [[nodiscard]] std::uint64_t seed() const noexcept { return seed_; }
  /// Returns "fault_injector seed=N (repeat with PRSGD_FAULT_SEED=N)".
  [[nodiscard]] std::string describe() const;
  /// Appends a rule; returns its index.
  std::size_t add(fault_rule rule);
  /// Removes every rule (the RNG state and counters are kept).
  void clear();
  /// Returns how often rule `index` has triggered.
  [[nodiscard]] std::uint64_t triggered(std::size_t index) const;
  /// Decides what happens to one event.
  [[nodiscard]] decision decide(const fault_context& ctx);

  /// Returns PRSGD_FAULT_SEED parsed as a number, or a fresh random seed when unset or unparsable.
  [[nodiscard]] static std::uint64_t seed_from_env();

 private:
  struct armed_rule {
    fault_rule rule;
    std::uint64_t seen = 0;
    std::uint64_t fired = 0;
  };
  mutable mutex mutex_;
  std::uint64_t seed_;
  std::mt19937_64 rng_ PRSGD_GUARDED_BY(mutex_);
  std::vector<armed_rule> rules_ PRSGD_GUARDED_BY(mutex_);
};

}  // namespace prsgd
