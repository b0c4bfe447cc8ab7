// SPDX-License-Identifier: Apache-2.0
// TCP ports on 127.0.0.1 for tests that cannot let the listening process choose one and read it back.
#pragma once

namespace prsgd::test {

/// Returns a TCP port on 127.0.0.1 that no other socket is given automatically for about a minute, for a
/// program that can only be told a port number (`prsgd averager --metrics-port`). The port is left in
/// TIME_WAIT: bind() to port 0 and connect() skip such ports, while a server that sets SO_REUSEADDR (as
/// civetweb does) binds it at once. Returns 0 when the sockets API fails.
[[nodiscard]] int reserved_tcp_port();

/// Holds a TCP port on 127.0.0.1 that the system chose, bound for as long as this object lives, so no
/// other socket gets it. With `listen`, it listens (a server told this port finds it in use, a client's
/// connection waits in its backlog); without, it never listens and connecting to it is refused.
/// Not thread-safe.
class held_tcp_port {
 public:
  explicit held_tcp_port(bool listen);
  ~held_tcp_port();
  held_tcp_port(const held_tcp_port&) = delete;
  held_tcp_port& operator=(const held_tcp_port&) = delete;

  /// Returns the port (0 when the sockets API failed).
  [[nodiscard]] int port() const noexcept { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace prsgd::test
