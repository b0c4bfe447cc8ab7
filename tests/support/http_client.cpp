// SPDX-License-Identifier: Apache-2.0
#include "http_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "time_scale.hpp"

namespace prsgd::test {

http_response http_exchange(int port, const std::string& request) {
  using namespace std::chrono_literals;
  http_response out;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return out;
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(scaled(10s)).count());
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {  // NOLINT
    ::close(fd);
    return out;
  }
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return out;
  }
  std::string raw;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      break;
    }
    raw.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // "HTTP/1.x 200 OK\r\n...\r\n\r\nbody"
  const auto sp = raw.find(' ');
  const auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || sp == std::string::npos || head_end == std::string::npos) {
    return out;
  }
  out.status = std::atoi(raw.c_str() + sp + 1);
  out.body = raw.substr(head_end + 4);
  return out;
}

http_response http_get(int port, const std::string& path) {
  return http_exchange(port, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
}

}  // namespace prsgd::test
