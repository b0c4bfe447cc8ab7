// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/endpoint.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <charconv>
#include <cstring>

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

bool endpoint::on_this_host() const {
  if (scheme != kind::tcp) {
    return true;
  }
  std::string host = address;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") {
    return true;
  }
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = inet_pton(AF_INET, host.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) {
    return false;
  }
  if ((is_v4 && (ntohl(v4.s_addr) >> 24) == 127) || (is_v6 && IN6_IS_ADDR_LOOPBACK(&v6))) {
    return true;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return false;
  }
  bool found = false;
  for (const ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) {
      continue;
    }
    if (is_v4 && i->ifa_addr->sa_family == AF_INET) {
      found = std::memcmp(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, &v4, sizeof v4) == 0;
    } else if (is_v6 && i->ifa_addr->sa_family == AF_INET6) {
      found = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6, sizeof v6) == 0;
    }
  }
  freeifaddrs(list);
  return found;
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
