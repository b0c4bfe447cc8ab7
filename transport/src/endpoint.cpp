// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/endpoint.hpp"

#include <charconv>

namespace prsgd {

expected<endpoint> endpoint::parse(std::string_view text) {
  const auto sep = text.find("://");
  if (sep == std::string_view::npos) {
    return fail(errc::invalid_argument, "endpoint without scheme: '" + std::string(text) + "'");
  }
  const std::string_view scheme = text.substr(0, sep);
  const std::string_view rest = text.substr(sep + 3);
  endpoint ep;
  if (scheme == "ipc" || scheme == "inproc") {
    if (rest.empty()) {
      return fail(errc::invalid_argument, "empty address in '" + std::string(text) + "'");
    }
    ep.scheme = scheme == "ipc" ? kind::ipc : kind::inproc;
    ep.address = std::string(rest);
    return ep;
  }
  if (scheme != "tcp") {
    return fail(errc::invalid_argument, "unknown scheme '" + std::string(scheme) + "' (tcp, ipc, inproc)");
  }
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size()) {
    return fail(errc::invalid_argument, "tcp endpoint needs host:port: '" + std::string(text) + "'");
  }
  ep.scheme = kind::tcp;
  ep.address = std::string(rest.substr(0, colon));
  ep.port = std::string(rest.substr(colon + 1));
  if (ep.port != "*") {
    unsigned value = 0;
    const auto* first = ep.port.data();
    const auto* last = first + ep.port.size();
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec != std::errc{} || ptr != last || value > 65535) {
      return fail(errc::invalid_argument, "bad tcp port '" + ep.port + "'");
    }
  }
  return ep;
}

std::string endpoint::str() const {
  switch (scheme) {
    case kind::tcp: return "tcp://" + address + ":" + port;
    case kind::ipc: return "ipc://" + address;
    case kind::inproc: return "inproc://" + address;
  }
  return {};
}

}  // namespace prsgd
