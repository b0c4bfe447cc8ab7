// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "prsgd/common/expected.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd {

/// Implements `transport` over ZeroMQ (cppzmq): tcp://, ipc:// and inproc:// endpoints.
///
/// One I/O thread, started by `make`, owns every socket: a ROUTER for all `bind`s, one DEALER per
/// `connect`, the ZAP handler when CURVE is on, and an eventfd wake-up. Other threads hand it work through
/// a queue plus the eventfd. Received messages and peer events are delivered to the handlers ON THE I/O
/// THREAD (see `transport_handlers`): a slow handler stalls all receiving and heartbeats.
///
/// Frames of at least `zero_copy_threshold` bytes are sent zero-copy (`zmq_msg_init_data`, the frame
/// owner is released when libzmq frees the bytes); received frames are wrapped zero-copy too.
/// Heartbeats are transport messages; ZMTP heartbeats additionally close dead TCP connections so the
/// DEALER reconnects. See transport/README.md for the framing, back-pressure and memory behaviour.
class zmq_transport final : public transport {
 public:
  /// Creates the context, sockets and I/O thread. Fails with invalid_argument (bad config or keys) or
  /// io_error (libzmq failure).
  [[nodiscard]] static expected<std::unique_ptr<zmq_transport>> make(transport_config config,
                                                                     transport_handlers handlers);
  ~zmq_transport() override;

  [[nodiscard]] const std::string& node_name() const noexcept override;
  [[nodiscard]] expected<std::string> bind(std::string_view endpoint) override;
  [[nodiscard]] expected<peer_id> connect(std::string_view endpoint, connect_options options) override;
  expected<void> disconnect(peer_id peer) override;
  [[nodiscard]] expected<void> send(peer_id peer, multipart msg) override;
  void stop() override;
  [[nodiscard]] transport_stats stats() const override;

  /// Implementation; declared in src/zmq_transport_impl.hpp.
  class impl;

 private:
  explicit zmq_transport(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Generates a fresh CURVE key pair (libsodium via libzmq). Fails with unsupported when libzmq lacks CURVE.
[[nodiscard]] expected<curve_keypair> generate_curve_keypair();

/// Derives the public key from a Z85 secret key. Fails with invalid_argument on a malformed key.
[[nodiscard]] expected<std::string> curve_public_key(std::string_view secret_key);

/// Makes large freed heap blocks stay in the process (glibc mallopt: one arena, no mmap for malloc, 1 GiB
/// trim threshold), so that large receive buffers reuse already-touched memory. Process-wide and
/// idempotent; call it early (before threads allocate); `zmq_transport::make` calls it when
/// `transport_config::reuse_receive_memory` is set.
void retain_freed_memory_for_large_frames();

/// Makes a transport by name: "zmq" -> `zmq_transport`; "inproc" -> `inproc_transport` on a process-wide
/// `inproc_network` driven by a real-clock thread. Fails with invalid_argument for any other name.
[[nodiscard]] expected<std::unique_ptr<transport>> make_transport(std::string_view kind, transport_config config,
                                                                  transport_handlers handlers);

}  // namespace prsgd
