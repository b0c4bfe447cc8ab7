// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/fault_injector.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd {

namespace transport_detail {
struct network_state;
}

/// Connects `inproc_transport`s in one process: a simulated network with a clock and optional faults.
///
/// Nothing moves by itself. `poll()` delivers every message and event that is due at the clock's current
/// time, running the receivers' handlers on the calling thread; with a `fake_clock` a test decides exactly
/// when time passes (`advance`) and when delivery happens (`poll`), so runs are deterministic. Alternatively
/// `start_driver()` runs a thread that polls whenever something becomes due (use with a real clock).
///
/// Endpoints: any of tcp/ipc/inproc is accepted; "tcp://host:*" binds to a fresh simulated port.
/// Liveness is modelled, not measured: when a link is cut (fault or `cut`) or a transport stops without a
/// goodbye (`kill`), each side gets `up=false` once its `heartbeat_timeout` has passed on the clock; after
/// `restore` (or when a killed node's endpoint is bound again) outgoing peers come `up` again on the next poll.
///
/// Thread-safe: every member may be called from any thread; handlers never run concurrently with each other.
class inproc_network {
 public:
  /// Makes a network that reads time from `time_source` and consults `faults` (may be null) on every
  /// connect, send and receive. Both must outlive the network.
  explicit inproc_network(const clock_source& time_source, fault_injector* faults = nullptr);
  ~inproc_network();
  inproc_network(const inproc_network&) = delete;
  inproc_network& operator=(const inproc_network&) = delete;

  /// Delivers everything due now and returns how many messages and events were delivered.
  std::size_t poll();
  /// Calls `poll` until it delivers nothing; returns the total. Does not advance the clock.
  std::size_t run_until_idle();
  /// Returns the earliest time at which something (delayed message, timeout) becomes due, if any.
  [[nodiscard]] std::optional<clock_source::time_point> next_due() const;
  /// Returns the number of messages accepted but not yet delivered or dropped.
  [[nodiscard]] std::size_t in_flight() const;

  /// Cuts the link between nodes `a` and `b` (names) in both directions until `restore`.
  void cut(std::string_view a, std::string_view b);
  /// Restores the link between `a` and `b`.
  void restore(std::string_view a, std::string_view b);

  /// Starts a thread that polls whenever something is due (for use with a real clock). Idempotent.
  void start_driver();
  /// Stops the driver thread. Idempotent; also done by the destructor.
  void stop_driver();

  /// Returns the fault injector (may be null).
  [[nodiscard]] fault_injector* faults() const noexcept;

 private:
  friend class inproc_transport;
  std::shared_ptr<transport_detail::network_state> state_;
};

/// Implements `transport` on an `inproc_network`: the fake for deterministic tests of the layers above.
///
/// Behaves like `zmq_transport` (ordering, peer events, size limits, back-pressure, CURVE allow-list)
/// but moves frames by reference. Handlers run on the thread that calls `inproc_network::poll` (or on the
/// network's driver thread). Thread-safe like every `transport`.
class inproc_transport final : public transport {
 public:
  /// Makes a transport attached to `network` (which must outlive it).
  [[nodiscard]] static expected<std::unique_ptr<inproc_transport>> make(inproc_network& network,
                                                                        transport_config config,
                                                                        transport_handlers handlers);
  ~inproc_transport() override;

  [[nodiscard]] const std::string& node_name() const noexcept override;
  [[nodiscard]] expected<std::string> bind(std::string_view endpoint) override;
  [[nodiscard]] expected<peer_id> connect(std::string_view endpoint, connect_options options) override;
  expected<void> disconnect(peer_id peer) override;
  [[nodiscard]] expected<void> send(peer_id peer, multipart msg) override;
  void stop() override;
  [[nodiscard]] transport_stats stats() const override;

  /// Simulates a crash: stops without telling the peers, so they see `up=false` only after their timeout.
  void kill();

 private:
  inproc_transport(std::shared_ptr<transport_detail::network_state> net, std::size_t node);
  std::shared_ptr<transport_detail::network_state> net_;
  std::size_t node_;
  std::string name_;
};

}  // namespace prsgd
