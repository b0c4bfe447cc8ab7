// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/endpoint.hpp"
#include "prsgd/transport/frame.hpp"
#include "prsgd/transport/fwd.hpp"

namespace prsgd {

/// Reports that a connection to a peer came up or went down.
///
/// Outgoing peers (made by `connect`) keep their id across reconnects: after the remote process restarts
/// or the network returns, the same id goes `up` again. Incoming peers are identified by the remote
/// transport instance: a restarted remote process connects as a new incoming peer with a new id, and the
/// old id stays down for good.
struct peer_event {
  /// The connection the event is about.
  peer_id peer = 0;
  /// True when the peer became reachable, false when it became unreachable.
  bool up = false;
  /// The remote transport's `node_name` ("" if not known yet).
  std::string node;
  /// For outgoing peers: the endpoint passed to `connect`; for incoming peers: "".
  std::string endpoint;
  /// True for a peer made by `connect`, false for one that connected to our `bind`.
  bool outgoing = false;
  /// For down events: why (errc::peer_unreachable on heartbeat timeout, errc::shutting_down on a graceful
  /// close by the remote side, errc::unauthorized when a connection with another client key took over this
  /// peer's routing id; denied peers produce no events at all).
  errc reason = errc::none;
  /// For incoming peers on a CURVE server: the client's public key (Z85, 40 characters), as the handshake
  /// proved it. An incoming peer id stands for one client key for its whole life: a connection with another
  /// key is another peer, even when it presents the same transport identity. Empty without CURVE.
  std::string client_key;
  /// For an incoming peer's up event (ZeroMQ): the remote address of its connection ("Peer-Address",
  /// e.g. "127.0.0.1"; empty when unknown).
  std::string address{};
};

/// Holds the callbacks through which a transport hands received data and peer events up.
///
/// Thread contract: both callbacks run on the transport's delivery thread (the I/O thread for
/// `zmq_transport`; whoever calls `inproc_network::poll` for `inproc_transport`), one at a time, in
/// arrival order per peer. They must return quickly and must not block: post the work elsewhere (e.g. to an
/// Asio strand). They may call `send`, `connect`, `bind` and `disconnect` on the same transport.
struct transport_handlers {
  /// Receives one complete multipart message from `peer`.
  std::function<void(peer_id peer, multipart msg)> on_message;
  /// Receives up/down events.
  std::function<void(const peer_event& event)> on_peer;
};

/// Configures CURVE authentication and encryption (ZeroMQ; libsodium keys in Z85 text, 40 characters).
struct curve_options {
  /// This node's long-term public key (server key for `bind`, client key for `connect`).
  std::string public_key;
  /// This node's secret key.
  std::string secret_key;
  /// Client public keys allowed to connect to our `bind` endpoints; empty means any client that knows our
  /// server key. Checked by a ZAP handler; a client not on the list delivers nothing and produces no events.
  std::vector<std::string> allowed_client_keys;
};

/// Holds a CURVE key pair in Z85 text.
struct curve_keypair {
  /// The public key (40 Z85 characters).
  std::string public_key;
  /// The secret key (40 Z85 characters).
  std::string secret_key;
};

/// Configures one transport instance. Every field has a usable default.
struct transport_config {
  /// Names this node to its peers (shows up in their `peer_event::node`). Empty: a random name.
  /// At most 200 bytes; must not start with a zero byte.
  std::string node_name;
  /// How often a heartbeat is sent to every peer when nothing else is.
  std::chrono::milliseconds heartbeat_interval{250};
  /// How long a peer may stay silent before a `peer_event{up=false}`. Must exceed the interval and the
  /// transfer time of the largest message (a frame in flight delays the heartbeats behind it).
  std::chrono::milliseconds heartbeat_timeout{2000};
  /// Silence after which libzmq closes a TCP connection and the DEALER reconnects (ZMTP heartbeat
  /// timeout; reclaims connections after a network cut). Must exceed the transfer time of the largest
  /// frame: libzmq does not count a frame in progress as traffic. Peer events use `heartbeat_timeout`.
  std::chrono::milliseconds connection_timeout{60'000};
  /// First delay before reconnecting an outgoing connection (ZMQ_RECONNECT_IVL).
  std::chrono::milliseconds reconnect_interval{100};
  /// Upper bound of the reconnect back-off (ZMQ_RECONNECT_IVL_MAX).
  std::chrono::milliseconds reconnect_interval_max{1000};
  /// Largest accepted frame in bytes, in both directions. On receive this is ZMQ_MAXMSGSIZE: a peer that
  /// sends a larger frame is disconnected by libzmq and the frame is never delivered. `send` of a larger
  /// frame fails with errc::too_large.
  std::size_t max_frame_bytes = std::size_t{512} << 20;
  /// Most frames one received message may have (the application's frames, not counting the transport's
  /// own). A longer message is discarded part by part as it is read, never stored whole, and the
  /// connection it came on is dropped: an incoming peer is forgotten and everything later on that
  /// connection ignored; on an outgoing connection the message is dropped. Counted in
  /// `transport_stats::too_many_frames`. libzmq itself still holds a message until its last frame
  /// arrives (its size limit is per frame), so this bounds what prsgd allocates, not what libzmq buffers.
  std::size_t max_frames_per_message = 72;
  /// ZMQ send high-water mark (messages queued per connection inside libzmq).
  int send_hwm = 1000;
  /// ZMQ receive high-water mark (messages queued per connection inside libzmq).
  int receive_hwm = 1000;
  /// Back-pressure bound: bytes handed to `send` for one peer that the network has not yet released.
  /// Above it `send` fails with errc::overloaded (nothing is dropped silently). See transport/README.md.
  std::size_t max_queued_bytes_per_peer = std::size_t{1} << 30;
  /// Frames of at least this size are sent zero-copy (the owner is kept until libzmq frees the bytes);
  /// smaller frames are copied, which is cheaper than the bookkeeping.
  std::size_t zero_copy_threshold = std::size_t{16} << 10;
  /// Keeps freed large receive buffers in the process heap so the next large frame reuses touched memory
  /// instead of fresh pages (see README "Receive memory"). Process-wide (glibc mallopt); zmq only.
  bool reuse_receive_memory = true;
  /// Enables CURVE security when set (zmq only; inproc checks the keys the same way).
  std::optional<curve_options> curve;
  /// Supplies time for heartbeats and timeouts; null means `steady_clock_source::instance()`. `zmq_transport`
  /// needs a real clock; `inproc_transport` follows whatever clock its network uses.
  const clock_source* time_source = nullptr;
};

/// Options for one outgoing connection.
struct connect_options {
  /// The server's CURVE public key (Z85); required when `transport_config::curve` is set.
  std::string server_public_key;
  /// The connection's kernel send buffer (SO_SNDBUF) in bytes; 0 keeps the system's default.
  int send_buffer_bytes = 0;
};

/// Counts what a transport did; a snapshot, cheap to take.
struct transport_stats {
  /// Messages accepted by `send`.
  std::uint64_t messages_sent = 0;
  /// Payload bytes accepted by `send`.
  std::uint64_t bytes_sent = 0;
  /// Messages delivered to `on_message`.
  std::uint64_t messages_received = 0;
  /// Payload bytes delivered to `on_message`.
  std::uint64_t bytes_received = 0;
  /// Messages dropped because the peer was unreachable (incoming peer gone) or the link was cut.
  std::uint64_t messages_dropped = 0;
  /// `send` calls refused with errc::overloaded.
  std::uint64_t sends_refused = 0;
  /// Messages received that did not follow the transport's framing (ignored).
  std::uint64_t malformed_received = 0;
  /// Messages received with more than `max_frames_per_message` frames (discarded, connection dropped).
  std::uint64_t too_many_frames = 0;
  /// Messages that arrived on an incoming connection dropped earlier (ignored).
  std::uint64_t from_dropped_connections = 0;
  /// CURVE handshakes refused by the ZAP handler (a client key not on the allow list).
  std::uint64_t zap_denied = 0;
  /// Times a connection with one client key took over the routing id of a live incoming peer with another
  /// key (that peer went down with errc::unauthorized; nothing meant for it reached the other key).
  std::uint64_t key_conflicts = 0;
  /// Heartbeats sent.
  std::uint64_t heartbeats_sent = 0;
  /// Messages a sending thread wrote to the socket itself while the I/O thread slept (zmq only; see
  /// transport/README.md, "Threads").
  std::uint64_t direct_sends = 0;
};

/// Moves multipart messages between endpoints: the abstract interface the runtime codes against.
///
/// Semantics: messages to one peer arrive in order, whole or not at all, at most once (a message in flight
/// when a connection breaks may be lost; the layer above retries and de-duplicates). Nothing here knows
/// what the frames mean. Pick an implementation with `make_transport` (prsgd::transport_zmq) or build
/// `zmq_transport` / `inproc_transport` directly.
///
/// Thread contract: every member function may be called from any thread, including from inside the
/// handlers. `bind` / `connect` / `disconnect` complete before they return. `send` only enqueues: it never
/// blocks and never runs a handler inline. Handlers stop running once `stop` has returned.
class transport {
 public:
  virtual ~transport() = default;
  transport() = default;
  transport(const transport&) = delete;
  transport& operator=(const transport&) = delete;

  /// Returns this node's name as peers see it.
  [[nodiscard]] virtual const std::string& node_name() const noexcept = 0;

  /// Binds to `endpoint` and returns the actual endpoint, e.g. "tcp://127.0.0.1:*" -> "tcp://127.0.0.1:41233".
  /// Peers that connect here appear as incoming peers. Fails with invalid_argument, io_error (address in use).
  [[nodiscard]] virtual expected<std::string> bind(std::string_view endpoint) = 0;

  /// Starts an outgoing connection to `endpoint` and returns its id at once. The peer goes `up` when the
  /// remote side answers; it is retried (with back-off) until `disconnect`, also after the remote restarts.
  [[nodiscard]] virtual expected<peer_id> connect(std::string_view endpoint, connect_options options) = 0;

  /// Closes a connection (outgoing: stops reconnecting; incoming: forgets the peer). Tells the remote side
  /// (best effort) so it sees `up=false` at once. No event is delivered locally for `peer`.
  virtual expected<void> disconnect(peer_id peer) = 0;

  /// Enqueues `msg` for `peer`. Fails with not_found (unknown or disconnected peer), too_large (a frame
  /// above max_frame_bytes), overloaded (max_queued_bytes_per_peer reached), shutting_down (after stop).
  /// A peer that is merely down is not an error: outgoing messages wait for the reconnect (bounded by the
  /// high-water mark and max_queued_bytes_per_peer); messages to a down incoming peer are dropped and counted.
  [[nodiscard]] virtual expected<void> send(peer_id peer, multipart msg) = 0;

  /// Says goodbye to every peer (best effort), stops delivery and releases all resources. Idempotent.
  virtual void stop() = 0;

  /// Returns a snapshot of the counters.
  [[nodiscard]] virtual transport_stats stats() const = 0;
};

}  // namespace prsgd
