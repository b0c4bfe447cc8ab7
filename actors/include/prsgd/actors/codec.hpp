// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "prsgd/actors/protocol.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/frame.hpp"
#include "prsgd/transport/fwd.hpp"

namespace prsgd::actors {

/// Limits applied when decoding PR-SGD messages from the network.
struct codec_limits {
  /// Largest header frame accepted, in bytes.
  std::size_t max_header_bytes = 16384;
  /// Largest model (or gradient) accepted, in floats (default 256 Mi floats = 1 GiB).
  std::uint64_t max_model_floats = std::uint64_t{1} << 28;
};

/// Encodes a worker-bound message as one multipart message: frame 0 a msgpack header (see
/// actors/PROTOCOL.md), frame 1 the model's raw little-endian floats for RESTART (shared, never copied).
[[nodiscard]] multipart encode(const to_worker& msg);
/// Encodes an averager-bound message; MODEL's parameters travel as frame 1, shared, never copied.
[[nodiscard]] multipart encode(const to_averager& msg);
/// Encodes an operator-bound reply (STATUS_REPLY's status travels as frame 1, msgpack).
[[nodiscard]] multipart encode(const to_operator& msg);
/// Encodes an evaluator-bound message (EVALUATE's x̄ travels as frame 1, shared, never copied).
[[nodiscard]] multipart encode(const to_evaluator& msg);
/// Encodes any message as the overloads above do (what a core's `outbound` holds).
[[nodiscard]] multipart encode(const any_msg& msg);

/// Decodes and validates a message for a worker. Fails with protocol_error (version, type, frame count,
/// sizes that disagree with the header, limits) or decode_failed (not msgpack, wrong field types).
[[nodiscard]] expected<to_worker> decode_to_worker(const multipart& msg, const codec_limits& limits = {});
/// Decodes and validates a message for the averager; errors as for decode_to_worker.
[[nodiscard]] expected<to_averager> decode_to_averager(const multipart& msg, const codec_limits& limits = {});

/// Decodes a reply for a client that is not a member (STATUS_REPLY, CONTROL_REPLY, SPEC_REPLY); errors as for
/// decode_to_worker.
[[nodiscard]] expected<to_operator> decode_to_operator(const multipart& msg, const codec_limits& limits = {});

/// Decodes a message for an evaluator (EVALUATE, STOP, REFUSED); errors as for decode_to_worker.
[[nodiscard]] expected<to_evaluator> decode_to_evaluator(const multipart& msg, const codec_limits& limits = {});

/// Encodes a sharded-averaging message (SHARD_HELLO .. SHARD_REPORT, or STOP to an owner); slices
/// travel as frame 1, shared, never copied.
[[nodiscard]] multipart encode(const shard_msg& msg);
/// Decodes a sharded-averaging message (types 17..23, and STOP); errors as for decode_to_worker. The
/// receiver checks that the type is one it expects.
[[nodiscard]] expected<shard_msg> decode_shard(const multipart& msg, const codec_limits& limits = {});

/// Returns invalid_argument when SPEC_REPLY could not carry `spec` whole: a model or data set name or a data
/// option longer than a header string (256 bytes), or more data options than a header array holds.
[[nodiscard]] expected<void> check_spec_fits(const job_spec& spec);

/// Returns the payload bytes (frames after the header) of an encoded message.
[[nodiscard]] std::uint64_t payload_bytes(const multipart& msg) noexcept;

}  // namespace prsgd::actors
