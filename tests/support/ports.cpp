// SPDX-License-Identifier: Apache-2.0
#include "ports.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace prsgd::test {

namespace {

sockaddr_in loopback_any_port() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

}  // namespace

int reserved_tcp_port() {
  const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  if (server >= 0 && client >= 0) {
    const int on = 1;
    ::setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in addr = loopback_any_port();
    socklen_t len = sizeof addr;
    auto* sa = reinterpret_cast<sockaddr*>(&addr);  // NOLINT: sockets API
    if (::bind(server, sa, sizeof addr) == 0 && ::listen(server, 1) == 0 && ::getsockname(server, sa, &len) == 0 &&
        ::connect(client, sa, sizeof addr) == 0) {
      // The accepted end closes first, so the TIME_WAIT that holds the port is on the server's side.
      const int accepted = ::accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
      if (accepted >= 0) {
        port = ntohs(addr.sin_port);
        ::close(accepted);
      }
    }
  }
  if (client >= 0) {
    ::close(client);
  }
  if (server >= 0) {
    ::close(server);
  }
  return port;
}

held_tcp_port::held_tcp_port(bool listen) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  sockaddr_in addr = loopback_any_port();
  socklen_t len = sizeof addr;
  auto* sa = reinterpret_cast<sockaddr*>(&addr);  // NOLINT: sockets API
  if (fd_ >= 0 && ::bind(fd_, sa, sizeof addr) == 0 && (!listen || ::listen(fd_, 4) == 0) &&
      ::getsockname(fd_, sa, &len) == 0) {
    port_ = ntohs(addr.sin_port);
  }
}

held_tcp_port::~held_tcp_port() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

}  // namespace prsgd::test
