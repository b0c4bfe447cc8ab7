// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "prsgd/common/expected.hpp"
#include "prsgd/transport/fwd.hpp"

namespace prsgd {

/// Describes a parsed endpoint: `tcp://host:port`, `ipc://path` or `inproc://name`.
///
/// For tcp, `port` is "*" (or "0") when the OS picks the port at bind time. A value type.
struct endpoint {
  /// Lists the supported transports of an endpoint.
  enum class kind { tcp, ipc, inproc };
  /// The scheme.
  kind scheme = kind::tcp;
  /// For tcp: the host or address (e.g. "127.0.0.1", "*", "10.77.0.2"); for ipc: the path; for inproc: the name.
  std::string address;
  /// For tcp: the port text ("7400", "*" or "0"); empty otherwise.
  std::string port;

  /// Parses `text`; fails with errc::invalid_argument on an unknown scheme, empty address or bad port.
  [[nodiscard]] static expected<endpoint> parse(std::string_view text);
  /// Returns the canonical text form, e.g. "tcp://127.0.0.1:7400".
  [[nodiscard]] std::string str() const;
  /// Returns true when the port is chosen by the OS at bind time (tcp with port "*" or "0").
  [[nodiscard]] bool wildcard_port() const noexcept { return scheme == kind::tcp && (port == "*" || port == "0"); }
  /// Returns true when a connection to this endpoint stays on this host (in this network namespace): ipc
  /// and inproc, and tcp to `localhost`, a loopback address or an address of one of this host's
  /// interfaces. Host names other than `localhost` are not resolved and count as another host.
  [[nodiscard]] bool on_this_host() const;
};

}  // namespace prsgd
