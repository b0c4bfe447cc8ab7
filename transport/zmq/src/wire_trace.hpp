// SPDX-License-Identifier: Apache-2.0
// The wire trace: with PRSGD_WIRE_TRACE=FILE in its environment, a zmq_transport appends one line per
// message it sends or delivers to FILE, so the timing of a job's messages can be read afterwards across
// processes and hosts (every line carries the wall clock). The transport does not interpret the bytes: it
// records the start of the first frame, and tools that know the protocol decode the message type from it.
// Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "prsgd/transport/frame.hpp"

namespace prsgd::transport_detail {

/// Appends trace lines to one file; shared by the threads of one transport (each line is one write(2)).
class wire_trace {
 public:
  /// Returns a trace writing to $PRSGD_WIRE_TRACE, or null when the variable is unset or empty. A file that
  /// cannot be opened gives one warning and no trace.
  [[nodiscard]] static std::unique_ptr<wire_trace> from_environment(std::string_view node);
  wire_trace(int fd, std::string node);
  ~wire_trace();
  wire_trace(const wire_trace&) = delete;
  wire_trace& operator=(const wire_trace&) = delete;

  /// Records a message accepted for sending to `peer` ("tx") or delivered from it ("rx").
  void record(std::string_view direction, std::uint64_t peer, const multipart& msg) const {
    write(line(direction, peer, msg));
  }
  /// Returns the line record() writes, stamped now; for a caller that writes it after releasing a lock.
  [[nodiscard]] std::string line(std::string_view direction, std::uint64_t peer, const multipart& msg) const;
  /// Appends one line made by line().
  void write(const std::string& line) const;

  /// How many bytes of the first frame a line shows, in hex.
  static constexpr std::size_t head_bytes = 16;

 private:
  int fd_;
  std::string node_;
  long pid_;
};

}  // namespace prsgd::transport_detail
