// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "prsgd/actors/metrics.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::cli {

/// Serves the averager's per-round metrics as Prometheus text on http://127.0.0.1:PORT/metrics
/// (`prsgd averager --metrics-port PORT`): the same counters as the metrics JSON lines, names prefixed
/// `prsgd_` (list and meanings: docs/cli.md, "Prometheus"). The HTTP server is prometheus-cpp's Exposer
/// (civetweb), which runs on its own threads from bind() until destruction.
///
/// Thread-safe: record() (the averager's actor thread) and a scrape (an HTTP thread) take the same lock,
/// so a scrape sees every metric of a round or none of them.
class prometheus_metrics {
 public:
  /// Starts serving on `host`:`port` (an IPv4 address; 127.0.0.1 unless the user chose another with
  /// --metrics-bind). Returns io_error naming the address and `option` when it cannot be bound (in use, no
  /// permission, not an address of this host), invalid_argument when `port` is not in 0..65535 (0: any free
  /// port, which port() then names).
  [[nodiscard]] static expected<std::unique_ptr<prometheus_metrics>> bind(int port,
                                                                          const std::string& host = "127.0.0.1",
                                                                          const std::string& option = "--metrics-port");

  prometheus_metrics(const prometheus_metrics&) = delete;
  prometheus_metrics& operator=(const prometheus_metrics&) = delete;
  /// Stops the HTTP server (joins its threads).
  ~prometheus_metrics();

  /// Adds one closed round: counters grow by its values, gauges take them.
  void record(const actors::round_metrics& m);

  /// Counts `count` messages the averager dropped for `reason`: "malformed", "send_failed" or "inbox_full"
  /// (others are ignored).
  void record_drop(std::string_view reason, std::uint64_t count);

  /// Takes a snapshot of the transport's counters: the drop counters grow by what changed since the last one.
  void record_transport(const transport_stats& stats);

  /// Returns the port the server listens on.
  [[nodiscard]] int port() const noexcept;

 private:
  struct impl;
  explicit prometheus_metrics(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace prsgd::cli
