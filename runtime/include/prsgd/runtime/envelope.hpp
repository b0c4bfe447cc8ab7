// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prsgd/common/expected.hpp"
#include "prsgd/transport/frame.hpp"

/// The wire envelope: one multipart message per actor message. Frame 0 is a msgpack header, frames
/// 1..k are raw little-endian payload buffers. See runtime/PROTOCOL.md for the normative description.
namespace prsgd::wire {

/// Returns the protocol version this build speaks; a header with any other version is rejected.
inline constexpr std::uint32_t protocol_version = 1;

/// Lists every message type on the wire; the numeric values are part of the protocol.
enum class message_type : std::uint8_t {
  /// One-way method call: `to` (or `to_name`), `method`, `args`.
  tell = 1,
  /// Method call that wants a `reply` or `error` with the same `correlation_id`.
  ask = 2,
  /// Successful answer to an `ask`, `spawn`, `lookup`, `register_node` or `register_name`.
  reply = 3,
  /// Failed answer to a request; carries `error_code` and `error_context`.
  error = 4,
  /// Asks a node to create an actor of the registered type `type_name`; answered with its address.
  spawn = 5,
  /// Asks that `from` be told (`down`) when the actor `to` stops or its node is lost.
  monitor = 6,
  /// Cancels a `monitor` of `to` by `from`.
  demonitor = 7,
  /// Tells the watcher `to` that the actor `from` stopped, with the reason in `error_code`.
  down = 8,
  /// Liveness signal of node `node` with its `incarnation`.
  heartbeat = 9,
  /// Registers node `node` reachable at `endpoint` with the head; answered with the node list.
  register_node = 10,
  /// Registers the actor `from` under the cluster-wide name `name` with the head.
  register_name = 11,
  /// Asks the head for the address of the named actor `name`, or for the node list if `name` is empty.
  lookup = 12,
  /// Tells a node that node `node` (incarnation `incarnation`) was lost or left.
  node_down = 13,
  /// Tells the head that node `node` leaves the cluster in an orderly way.
  leave = 14,
};

/// Returns the highest valid `message_type` value.
inline constexpr std::uint8_t max_message_type = 14;

/// Returns a stable lower-case name ("tell", "ask", ...) for `t`.
[[nodiscard]] std::string_view to_string(message_type t) noexcept;

/// Describes the element type of a payload frame; the numeric values are part of the protocol.
enum class dtype : std::uint8_t {
  bytes = 0,
  f32 = 1,
  f64 = 2,
  i32 = 3,
  i64 = 4,
  u8 = 5,
  u32 = 6,
  u64 = 7,
  /// The frame holds one msgpack object (e.g. large method arguments).
  msgpack = 8,
};

/// Returns the highest valid `dtype` value.
inline constexpr std::uint8_t max_dtype = 8;

/// Returns the size in bytes of one element of `t` (1 for `bytes` and `msgpack`).
[[nodiscard]] std::size_t element_size(dtype t) noexcept;

/// Names an actor anywhere in the cluster: the node it lives on and its id local to that node.
/// A value type; safe to copy between threads and to send inside messages.
struct actor_address {
  /// Returns the node name ("node-2"); empty means "not set".
  std::string node;
  /// Returns the node-local actor id; 0 means "no actor" (e.g. a node-level sender).
  std::uint64_t id = 0;

  /// Returns true when both the node and the id are set.
  [[nodiscard]] bool valid() const noexcept { return !node.empty() && id != 0; }
  friend bool operator==(const actor_address&, const actor_address&) = default;
};

/// Names a frame of the transport: an immutable, ref-counted byte range (zero-copy payloads).
using buffer = ::prsgd::frame;

/// Describes and carries one payload frame.
struct payload {
  /// Returns the raw little-endian bytes (frame 1+i on the wire).
  buffer data;
  /// Returns the element type; `bytes` when not known.
  dtype type = dtype::bytes;
  /// Returns the optional shape; when non-empty, its product times `element_size(type)` must equal the size.
  std::vector<std::uint64_t> shape;
  /// Returns the optional CRC-32 (zlib polynomial) of the bytes; verified on decode when present.
  std::optional<std::uint32_t> crc32;
};

/// Returns the CRC-32 (the zlib/IEEE polynomial) of `bytes`.
[[nodiscard]] std::uint32_t crc32(std::span<const std::byte> bytes) noexcept;

/// The decoded header frame. Which fields are required depends on `type` (PROTOCOL.md, "Types").
struct header {
  /// Returns the protocol version; always `protocol_version` after a successful decode.
  std::uint32_t version = protocol_version;
  /// Returns the message type.
  message_type type = message_type::tell;
  /// Returns the sending actor (or, with id 0, the sending node).
  actor_address from;
  /// Returns the receiving actor; unset (`!to.valid()`) when `to_name` is used instead.
  actor_address to;
  /// Returns the receiver's registered name, when addressed by name.
  std::string to_name;
  /// Returns the request id chosen by the requester, echoed in the reply; 0 means none.
  std::uint64_t correlation_id = 0;
  /// Returns the method name for `tell` and `ask`.
  std::string method;
  /// Returns the registered actor type name for `spawn`.
  std::string type_name;
  /// Returns the actor name for `spawn` (optional), `register_name` and `lookup`.
  std::string name;
  /// Returns the node name for `spawn` (target), `heartbeat`, `register_node`, `node_down`, `leave`.
  std::string node;
  /// Returns the transport endpoint for `register_node` ("tcp://127.0.0.1:5555").
  std::string endpoint;
  /// Returns the sender's incarnation (node or actor restart counter); 0 when unused.
  std::uint64_t incarnation = 0;
  /// Returns the error code for `error` and `down` (`errc::none` for a normal stop).
  errc error_code = errc::none;
  /// Returns the human-readable error context for `error` and `down`.
  std::string error_context;
  /// Returns msgpack-encoded method arguments (`tell`, `ask`, `spawn`) or result (`reply`).
  std::vector<std::byte> args;
};

/// The whole message: a header and its payload frames.
struct envelope {
  /// Returns the header (frame 0).
  header hdr;
  /// Returns the payload frames (frames 1..k), in order.
  std::vector<payload> payloads;
};

/// Bounds everything a decoder accepts; the encoder applies the same bounds so it never sends what a
/// default receiver rejects.
struct limits {
  /// Returns the largest header frame in bytes.
  std::size_t max_header_bytes = 64 * 1024;
  /// Returns the largest number of payload frames.
  std::size_t max_payloads = 64;
  /// Returns the largest single payload frame in bytes.
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 31;
  /// Returns the largest total size (header plus payloads) in bytes.
  std::uint64_t max_total_bytes = std::uint64_t{1} << 32;
  /// Returns the longest actor, method and type name in bytes.
  std::size_t max_name_bytes = 256;
  /// Returns the longest node name in bytes.
  std::size_t max_node_bytes = 64;
  /// Returns the longest endpoint in bytes.
  std::size_t max_endpoint_bytes = 256;
  /// Returns the longest error context in bytes.
  std::size_t max_context_bytes = 4096;
  /// Returns the largest shape rank.
  std::size_t max_rank = 8;
  /// Returns true when payload checksums present in the header are verified on decode.
  bool verify_checksums = true;
};

/// Returns the frames of `env`: frame 0 is the new header, frames 1..k share the payload buffers
/// (no copy). Fails with `invalid_argument`/`too_large` when `env` breaks the protocol or `lim`.
[[nodiscard]] expected<multipart> encode(const envelope& env, const limits& lim = {});

/// Returns only the header frame of `env` (frame 0), validated like `encode`.
[[nodiscard]] expected<buffer> encode_header(const envelope& env, const limits& lim = {});

/// Returns the envelope in `frames`, validated against the protocol and `lim`; payloads share the
/// frames' buffers. Never throws: malformed msgpack gives `decode_failed`; wrong version, unknown
/// type, missing or out-of-bounds fields and size mismatches give `protocol_error`; oversize frames
/// give `too_large`; a wrong checksum gives `checksum_mismatch`.
[[nodiscard]] expected<envelope> decode(std::span<const buffer> frames, const limits& lim = {});

/// Returns the type and correlation id of a header frame that `decode` rejected, when both can still be
/// read (a msgpack map with `t` and a non-zero `c`), so that a waiting sender can be answered with an
/// error. Never throws; nullopt for anything else.
[[nodiscard]] std::optional<std::pair<message_type, std::uint64_t>> peek_request(const buffer& header_frame,
                                                                                 const limits& lim = {});

/// Returns an error when `hdr` lacks a field its type requires or a field is out of bounds.
[[nodiscard]] expected<void> validate(const header& hdr, const limits& lim = {});

}  // namespace prsgd::wire
