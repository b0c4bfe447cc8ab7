// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"

/// The head's part in a job: the averager registers its worker endpoint there, and workers started with
/// `--head` look it up, so only the head's address has to be configured on every host.
///
/// Built on the runtime's remote-node layer (prsgd/runtime/node.hpp): the head is a `wire::node` with
/// `head_service` on (node list + cluster-wide names). The averager's process runs a small node attached to
/// the head with one actor that answers `endpoint()` with the worker-facing endpoint, registered under
/// `averager_name`. A worker runs a node for the lookup only, asks that actor, and stops the node again.
/// When the averager's node is lost (its heartbeats stop, or it closes), the head drops the node and the
/// names it held, so workers are not sent to a dead averager; a worker also asks the registered actor before
/// it trusts the answer.
namespace prsgd::cli {

/// The cluster-wide name of the averager's endpoint actor at the head.
inline constexpr std::string_view averager_name = "prsgd/averager";

/// Keeps the averager registered at the head while it lives; destroying it unregisters (best effort).
class head_registration {
 public:
  head_registration() = default;
  explicit head_registration(std::shared_ptr<void> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<void> state_;
};

/// Registers `averager_endpoint` (what workers connect to) as this job's averager at `head`. Returns
/// peer_unreachable / timeout when the head does not answer within `liveness.heartbeat_timeout_ms`.
/// A wildcard host in `averager_endpoint` (tcp://0.0.0.0:P, tcp://*:P) is replaced by this host's address
/// towards the head. When the name is held by an averager that does not answer (a dead predecessor whose
/// loss the head has not noticed yet), waits up to max(3 x heartbeat timeout, 10 s) for the head to drop
/// it; a holder that answers is a live averager: already_exists.
[[nodiscard]] expected<head_registration> register_averager(const std::string& head,
                                                            const std::string& averager_endpoint,
                                                            const liveness_options& liveness,
                                                            const security_options& security);

/// Asks `head` for the averager's endpoint, retrying until one is registered or `timeout` passes.
[[nodiscard]] expected<std::string> lookup_averager(const std::string& head, const liveness_options& liveness,
                                                    const security_options& security,
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// A running head node: the cluster's node list and name service. Stops when destroyed.
class head_server {
 public:
  /// Binds `listen` and serves. Fails with invalid_argument (bad endpoint) or io_error (address in use).
  /// With CURVE keys in `security` the head serves as a CURVE server and admits only the listed clients.
  [[nodiscard]] static expected<head_server> start(const std::string& listen, const liveness_options& liveness,
                                                   const security_options& security);

  /// Returns the bound endpoint (with the OS-chosen port for tcp://HOST:*).
  [[nodiscard]] const std::string& endpoint() const;
  /// Stops serving (nodes attached to it see it go down). Idempotent.
  void stop();

 private:
  explicit head_server(std::shared_ptr<void> state, std::string endpoint)
      : state_(std::move(state)), endpoint_(std::move(endpoint)) {}
  std::shared_ptr<void> state_;
  std::string endpoint_;
};

/// Returns `bound` with a wildcard tcp host (`0.0.0.0`, `*`, `::`, `[::]`) replaced by `host`; any other
/// endpoint unchanged. E.g. ("tcp://0.0.0.0:7500", "10.77.0.1") -> "tcp://10.77.0.1:7500".
[[nodiscard]] std::string advertised_endpoint(const std::string& bound, const std::string& host);

/// Returns the local IPv4 address this host uses to reach the host of `head` (tcp://HOST:PORT); for ipc and
/// inproc heads, 127.0.0.1. Fails with invalid_argument (bad endpoint) or not_found (host does not resolve or
/// is not routable).
[[nodiscard]] expected<std::string> local_address_towards(const std::string& head);

}  // namespace prsgd::cli
