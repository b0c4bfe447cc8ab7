// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "prsgd/actors/status.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::actors {

/// Identifies a member of one averager incarnation; assigned by the averager in WELCOME (0 = none yet).
/// A worker that joins again (after REMOVED, a restart of its process, or a new averager incarnation)
/// becomes a new member with a new id.
using member_id = std::uint64_t;
/// For the averager: counts its restarts (a higher value supersedes a lower one). For a worker: a random
/// nonce that names one worker process's JOIN (repeated JOINs with the same nonce on the same connection
/// are one joiner). 0 = unknown.
using incarnation_t = std::uint64_t;
/// The secret the averager hands a member in WELCOME; every later message of that member carries it.
using session_token = std::uint64_t;
/// Numbers restart rounds; round r starts from the global model x̄_r.
using round_t = std::uint64_t;
/// Holds a flat parameter (or gradient) buffer shared read-only between the averager and N sends.
using flat_buffer = std::shared_ptr<const std::vector<float>>;
/// Names the connection a message arrived on (the shell's transport peer id). The cores never interpret
/// it: they hand it back in a `route` once they accept the message, or in `outbound::via` for a reply.
using origin_t = std::uint64_t;

/// Names the version of these protocol messages; bump on any field change.
inline constexpr std::uint32_t protocol_version = 4;

/// Lists the two training modes that share the barrier machinery.
enum class training_mode : std::uint8_t {
  /// Parallel Restarted SGD: workers run I_i local steps and submit their model.
  restarted_sgd,
  /// Parallel mini-batch SGD (the paper's baseline): every round each worker computes one mini-batch
  /// gradient at x̄_r and submits it; the averager averages the gradients and applies one SGD step
  /// x̄_{r+1} = x̄_r − γ·ḡ itself, so RESTART always carries a model and I = 1.
  minibatch_sgd,
};

/// Returns "restarted_sgd" or "minibatch_sgd".
[[nodiscard]] constexpr std::string_view to_string(training_mode m) noexcept {
  return m == training_mode::restarted_sgd ? "restarted_sgd" : "minibatch_sgd";
}

/// Parses the command line's "restarted" | "minibatch" (or to_string's names); invalid_argument otherwise.
[[nodiscard]] expected<training_mode> parse_training_mode(std::string_view name);

// Every message carries `member` (the worker the message is from or for), `incarnation` (that worker's
// incarnation), `averager_incarnation` (the averager incarnation the sender knows; 0 = none yet) and
// `round` (actors/PROTOCOL.md). Handlers on both sides are idempotent and tolerate duplicates and reordering.

/// Describes the job a worker must match: what the averager announces in WELCOME, and what a JOIN's
/// fingerprints are compared with. Empty strings and zeros mean "not checked" / "not set".
struct job_spec {
  /// Model fingerprint: the model's name, size and layer shapes (the CLI's model_fingerprint).
  std::string model{};
  /// Data fingerprint: the training set's size, shape and a hash of its labels (data_fingerprint).
  std::string data{};
  /// Mini-batch size every worker uses; samples of a MODEL are checked against steps x batch.
  std::uint64_t batch_size = 0;
  /// Seed for shuffling and sharding.
  std::uint64_t seed = 0;
  /// How MODEL and RESTART payloads travel. f32: whole models, lossless. A lossy dtype: a worker sends
  /// its change x_i − x̄_r with error feedback, and the averager sends x̄_{r+1} − x̄_r (with its own error
  /// feedback) to members that hold x̄_r, and the whole x̄ as f32 to everyone else.
  algorithms::wire_dtype wire = algorithms::wire_dtype::f32;
};

/// Asks to join the job (worker -> averager). Sent at start, after being removed, and whenever the worker
/// sees a new averager incarnation. `member` is 0: the averager assigns the id. `incarnation` is the
/// worker's join nonce; a JOIN repeated with the same nonce on the same connection is the same joiner.
struct join_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  /// The averager incarnation the worker last saw (0 = none).
  incarnation_t averager_incarnation = 0;
  /// The last round the worker finished (0 = none); informational.
  round_t round = 0;
  /// Expected local steps per second (0 = unknown); seeds time-balanced interval assignment.
  double speed_hint = 0;
  /// The worker's model and data fingerprints (job_spec::model, job_spec::data); empty = not declared.
  std::string model_fingerprint{};
  std::string data_fingerprint{};
  /// The payload dtypes the worker can read and write (empty: f32 only). A job whose job_spec::wire is
  /// not among them refuses the JOIN.
  std::vector<algorithms::wire_dtype> wire_dtypes{};
};

/// Refuses a JOIN for good (averager -> worker): the worker does not fit the job (another model or data
/// set). `incarnation` is the refused JOIN's nonce; `reason` names the difference. The worker ends.
struct refused_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  std::string reason{};
};

/// Acknowledges a JOIN at once (averager -> worker); the worker is admitted at `admitted_round`.
struct welcome_msg {
  member_id member = 0;
  /// The worker incarnation this WELCOME answers.
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  /// The averager's current round.
  round_t round = 0;
  /// The round whose RESTART will admit the worker (round + 1, or round when it starts a round at once).
  round_t admitted_round = 0;
  /// Training mode of the job.
  training_mode mode = training_mode::restarted_sgd;
  /// Number of floats in the model.
  std::uint64_t model_size = 0;
  /// How often the worker should send HEARTBEAT.
  std::chrono::nanoseconds heartbeat_interval{0};
  /// The member's session token: every later message of the member carries it.
  session_token token = 0;
  /// The data shard the member trains: index in [0, num_shards). No two live members hold the same one.
  std::uint64_t shard_index = 0;
  std::uint64_t num_shards = 1;
  /// The job the member joined.
  job_spec spec{};
};

/// Announces a voluntary departure (worker -> averager); the barrier stops waiting for it at once.
struct leave_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  session_token token = 0;
};

/// Shows liveness, in both directions. From the averager, `member`/`incarnation` name the recipient.
struct heartbeat_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  /// True when the averager sent it.
  bool from_averager = false;
  /// The member's session token (the recipient's, when the averager sent it).
  session_token token = 0;
  /// Bytes of the payload the sender's next message carries (0 = none announced). Sent right before a
  /// MODEL or RESTART, so that the receiver does not take the sender for gone while the payload is in
  /// flight behind this heartbeat (docs/decisions/0022).
  std::uint64_t transfer_bytes = 0;
};

/// Returns how long a transfer of `bytes` may take at `bytes_per_s` (0 for no bytes or no rate).
[[nodiscard]] inline std::chrono::nanoseconds transfer_allowance(std::uint64_t bytes, double bytes_per_s) noexcept {
  if (bytes == 0 || !(bytes_per_s > 0)) {
    return std::chrono::nanoseconds{0};
  }
  const double ns = static_cast<double>(bytes) / bytes_per_s * 1e9;
  return std::chrono::nanoseconds{static_cast<std::int64_t>(std::min(ns, 1e17))};
}

/// Submits a worker's result for a round (worker -> averager): its model after I_i local steps
/// (restarted_sgd) or one mini-batch gradient at x̄_r (minibatch_sgd, `is_gradient` = true).
struct model_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  /// Local SGD steps run this round (τ_i); 1 for a gradient.
  std::uint64_t steps = 0;
  /// Training samples consumed this round.
  std::uint64_t samples = 0;
  /// Sum of per-sample training losses over the round and how many samples it covers.
  double loss_sum = 0;
  std::uint64_t loss_count = 0;
  /// True for a gradient submission (minibatch_sgd mode).
  bool is_gradient = false;
  /// The flat model (or gradient).
  flat_buffer params;
  session_token token = 0;
  /// True when the worker ran fewer steps than assigned because the round was cut short.
  bool cut = false;
  /// How `params` travels (job_spec::wire). The values are exactly representable in it (quantize()).
  algorithms::wire_dtype dtype = algorithms::wire_dtype::f32;
  /// True when `params` is the change x_i − x̄_round against the model of RESTART(round), not the model.
  bool delta = false;
};

/// Names the training samples [first, second) of the data set.
using index_range = std::pair<std::uint64_t, std::uint64_t>;
/// Caps RESTART's `ranges` (and every other array in a header): the averager never sends more.
inline constexpr std::size_t max_restart_ranges = 512;

/// Starts round `round` for one worker (averager -> worker): restart from `model`, run `interval` steps
/// with step size `step_size` on the samples of `ranges`, then submit MODEL(round).
struct restart_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  /// x̄_round, shared by every recipient; with `base` the change x̄_round − x̄_base instead.
  flat_buffer model;
  /// I_i: local steps this worker runs this round (1 in minibatch_sgd).
  std::uint64_t interval = 1;
  /// γ for this round.
  double step_size = 0;
  training_mode mode = training_mode::restarted_sgd;
  /// The samples this member trains on this round: its batches are drawn from exactly these indices
  /// (interval x batch of them, or fewer at the end of the job). Empty: the member samples its own shard.
  std::vector<index_range> ranges;
  /// How `model` travels: f32 for a whole model, job_spec::wire for a change.
  algorithms::wire_dtype dtype = algorithms::wire_dtype::f32;
  /// Set when `model` is a change against x̄_base, the model of the RESTART the member last trained from;
  /// the worker adds it to that model in float32, so every member and the averager get the same x̄.
  std::optional<round_t> base{};
};

/// Tells a worker the averager no longer counts it (averager -> worker), e.g. after a heartbeat timeout
/// or a message from a stale incarnation; the worker answers with JOIN if it wants to continue.
struct removed_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
};

/// Ends the job (averager -> worker): no further rounds.
struct stop_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
};

/// Asks a running averager for a job_status snapshot (operator -> averager). Sent by `prsgd status` and
/// other clients that are not members: it never joins. `incarnation` is a request nonce the reply echoes.
struct status_request_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
};

/// Answers STATUS (averager -> operator) with the snapshot; `incarnation` echoes the request's nonce.
struct status_reply_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  std::shared_ptr<const job_status> status;
};

/// Steers a running job (operator -> averager): `op` with its argument (`prsgd ctl`). Carried out only
/// for an operator (steering_rule); answered with CONTROL_REPLY.
struct control_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  control_op op = control_op::pause;
  std::string arg{};
};

/// Answers CONTROL (averager -> operator): whether it was accepted and one line saying what happens.
struct control_reply_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  bool ok = false;
  std::string text{};
};

/// Holds any message the averager sends.
using to_worker = std::variant<welcome_msg, restart_msg, heartbeat_msg, removed_msg, stop_msg, refused_msg>;
/// Holds any message a worker sends.
using to_averager = std::variant<join_msg, leave_msg, heartbeat_msg, model_msg, status_request_msg, control_msg>;
/// Holds any message the averager sends to an operator client.
using to_operator = std::variant<status_reply_msg, control_reply_msg>;
/// Holds any protocol message, in either direction (what the cores hand their shells to send).
using any_msg =
    std::variant<join_msg, welcome_msg, leave_msg, heartbeat_msg, model_msg, restart_msg, removed_msg, stop_msg,
                 refused_msg, status_request_msg, status_reply_msg, control_msg, control_reply_msg>;

}  // namespace prsgd::actors
