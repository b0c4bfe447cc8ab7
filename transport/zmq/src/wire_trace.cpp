// SPDX-License-Identifier: Apache-2.0
#include "wire_trace.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "prsgd/common/log.hpp"

namespace prsgd::transport_detail {

std::unique_ptr<wire_trace> wire_trace::from_environment(std::string_view node) {
  const char* path = std::getenv("PRSGD_WIRE_TRACE");
  if (path == nullptr || *path == '\0') {
    return nullptr;
  }
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    PRSGD_LOG(warn, "transport") << "PRSGD_WIRE_TRACE: cannot open " << path << ": " << std::strerror(errno)
                                 << "; no wire trace";
    return nullptr;
  }
  return std::make_unique<wire_trace>(fd, std::string{node});
}

wire_trace::wire_trace(int fd, std::string node) : fd_(fd), node_(std::move(node)), pid_(::getpid()) {
  // The node name is one word in the line: spaces would shift the columns.
  for (char& c : node_) {
    if (c == ' ' || c == '\t' || c == '\n') {
      c = '_';
    }
  }
}

wire_trace::~wire_trace() { ::close(fd_); }

std::string wire_trace::line(std::string_view direction, std::uint64_t peer, const multipart& msg) const {
  std::size_t bytes = 0;
  for (const auto& f : msg) {
    bytes += f.size();
  }
  char head[2 * head_bytes + 2] = "-";
  if (!msg.empty() && msg[0].size() > 0) {
    const std::size_t n = std::min(msg[0].size(), head_bytes);
    for (std::size_t i = 0; i < n; ++i) {
      std::snprintf(head + 2 * i, 3, "%02x", static_cast<unsigned>(msg[0].data()[i]));
    }
  }
  const auto now =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  // time pid node direction peer bytes frames head
  char text[512];
  const int len = std::snprintf(text, sizeof text, "%lld.%06lld %ld %s %.*s %llu %zu %zu %s\n",
                                static_cast<long long>(now / 1000000), static_cast<long long>(now % 1000000), pid_,
                                node_.c_str(), static_cast<int>(direction.size()), direction.data(),
                                static_cast<unsigned long long>(peer), bytes, msg.size(), head);
  return len > 0 ? std::string(text, static_cast<std::size_t>(std::min(len, static_cast<int>(sizeof text) - 1)))
                 : std::string{};
}

void wire_trace::write(const std::string& line) const {
  if (!line.empty()) {
    // One write per line: with O_APPEND the lines of all threads and processes stay whole.
    (void)!::write(fd_, line.data(), line.size());
  }
}

}  // namespace prsgd::transport_detail
