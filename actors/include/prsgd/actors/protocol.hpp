// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
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
inline constexpr std::uint32_t protocol_version = 6;

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

/// Describes the job a worker must match: what the averager announces in WELCOME (the fingerprints, batch
/// and seed) and in SPEC_REPLY (everything), and what a JOIN's fingerprints are compared with. Empty strings
/// and zeros mean "not checked" / "not set". The fields after `seed` are what a worker started with nothing
/// but the averager's address needs to build the model, load the data and train as the job does.
struct job_spec {
  /// Model fingerprint: the model's name, size and layer shapes (the CLI's model_fingerprint).
  std::string model{};
  /// Data fingerprint: the training set's size, shape and a hash of its labels (data_fingerprint).
  std::string data{};
  /// Mini-batch size every worker uses; samples of a MODEL are checked against steps x batch.
  std::uint64_t batch_size = 0;
  /// Seed for initialisation, shuffling and sharding.
  std::uint64_t seed = 0;
  /// How MODEL and RESTART payloads travel. f32: whole models, lossless. A lossy dtype: a worker sends
  /// its change x_i − x̄_r with error feedback, and the averager sends x̄_{r+1} − x̄_r (with its own error
  /// feedback) to members that hold x̄_r, and the whole x̄ as f32 to everyone else.
  algorithms::wire_dtype wire = algorithms::wire_dtype::f32;
  /// The model's name in the model registry, or a model spec such as mlp:784-64-10.
  std::string model_name{};
  /// The data set's name in the data set registry (never "auto").
  std::string dataset{};
  /// The data set's KEY=VALUE settings, in order.
  std::vector<std::string> data_options{};
  /// Non-IID shards (Dirichlet label skew) and their concentration.
  bool non_iid = false;
  double dirichlet_alpha = 0.5;
  /// The job's base step size γ (RESTART carries each round's) and the local optimiser's momentum.
  double lr = 0;
  double momentum = 0;
  /// Whether a worker keeps its momentum buffer across restarts (false: resets it).
  bool keep_momentum = true;

  friend bool operator==(const job_spec&, const job_spec&) = default;
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
  /// The worker's own initial model (optional payload; null = none). A job whose averager has no model of
  /// its own (`--model external`) starts from the first one it receives (averager_config::initial_from_join).
  flat_buffer initial_model{};
  /// True when the worker can average in shards (split its MODEL over shard owners and assemble x̄ from
  /// their slices); a sharded job refuses a worker that cannot.
  bool sharding = false;
  /// True when the worker reads compressed slice payloads (payload_compression.hpp); a sharded job that
  /// compresses refuses a worker that does not.
  bool reads_compressed = false;
  /// The payload dtypes the worker can read and write (empty: f32 only). A job whose job_spec::wire is
  /// not among them refuses the JOIN.
  std::vector<algorithms::wire_dtype> wire_dtypes{};
  /// The checksum (slice_checksum) of the model the worker built itself and has not trained yet: an averager
  /// whose x̄ of the member's first RESTART has that checksum sends RESTART `held` instead of x̄ (none: the
  /// worker holds nothing it can use).
  std::optional<std::uint64_t> holds{};
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
  /// Sharded averaging: the endpoints of the shard owners, owner k at index k (empty: the averager
  /// averages whole models). The member sends slice k of its model to owner k and gets slice k of x̄ from it.
  std::vector<std::string> owners{};
  /// Sharded averaging: the kernel send buffer (SO_SNDBUF, bytes) of the member's connections to owners on
  /// other hosts; 0 leaves it to the kernel's autotuning.
  std::uint64_t upload_buffer = 0;
  /// Sharded averaging: the member compresses the slices it sends to owners on other hosts
  /// (payload_compression.hpp).
  bool compress = false;
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
  /// flight behind this heartbeat (docs/decisions/0024).
  std::uint64_t transfer_bytes = 0;
};

/// Returns the 64-bit FNV-1a hash of the bytes of `values`: SHARD_REPORT's checksum, and the `hc` of JOIN,
/// RESTART, SHARD_SLICE and SHARD_AVERAGE.
[[nodiscard]] std::uint64_t slice_checksum(std::span<const float> values) noexcept;

/// Remembers slice_checksum() of the last model it was asked about, and keeps that model (so its address is
/// not reused): a model that does not change is hashed once.
class checksum_cache {
 public:
  [[nodiscard]] std::uint64_t of(const flat_buffer& values) {
    if (values != hashed_) {
      hashed_ = values;
      value_ = values ? slice_checksum(*values) : 0;
    }
    return value_;
  }

 private:
  flat_buffer hashed_;
  std::uint64_t value_ = 0;
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
  /// Sharded averaging: the model went to the shard owners in slices and this message is the header
  /// alone (`params` empty). The averager's shell fills the two fields below from the owners' receipts.
  bool sliced = false;
  /// Sharded averaging: every owner received its slice, of the right size and finite.
  bool slices_ok = false;
  /// Sharded averaging: ‖x_i − x̄_r‖², summed over the owners' slices (the outlier screen's norms).
  double update_norm2 = 0;
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
  /// Set, and no `model`, when x̄_round is the model the member said it holds (JOIN `holds`): the worker
  /// starts from its own copy, whose checksum this is.
  std::optional<std::uint64_t> held{};
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

/// Asks the averager for the job's spec (worker -> averager) before a worker loads anything: a worker started
/// with only the averager's address learns its model, data set and optimiser from the reply. It makes no
/// member and may be repeated; `incarnation` is a request nonce the reply echoes.
struct spec_request_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
};

/// Answers SPEC (averager -> worker): the job's spec, training mode and model size; `incarnation` echoes
/// the request's nonce.
struct spec_reply_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  job_spec spec{};
  training_mode mode = training_mode::restarted_sgd;
  /// Number of floats in the model.
  std::uint64_t model_size = 0;
};

/// Offers an evaluator (evaluator -> averager): a process that scores x̄ on a test set for the averager,
/// which has none of its own (`--model external`). Repeated every heartbeat interval; it is also the
/// evaluator's heartbeat. `incarnation` is the evaluator's random nonce; `member` is 0.
struct evaluator_hello_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  /// The evaluator's model fingerprint (compared with the job's like a JOIN's; empty = not declared).
  std::string model_fingerprint{};
};

/// Asks an evaluator to score x̄ (averager -> evaluator). `incarnation` is the evaluator's nonce, `round`
/// the rounds closed when x̄ was taken.
struct evaluate_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  /// Names the request; the result carries it back.
  std::uint64_t request = 0;
  /// x̄, shared with the other sends of the round.
  flat_buffer model;
};

/// Reports an evaluator's score of x̄ (evaluator -> averager): accepted only for a request sent to the
/// connection it comes from.
struct evaluation_msg {
  member_id member = 0;
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  /// The request this answers (evaluate_msg::request).
  std::uint64_t request = 0;
  /// The test accuracy of x̄, in [0, 1].
  double accuracy = 0;
  /// The mean cross-entropy of x̄ on the test set (wire key `loss`, optional: empty when the evaluator
  /// does not send one).
  std::optional<double> loss{};
};

/// Returns the first value of slice `k` of `K` contiguous slices of a model of `size` floats (k = K: `size`).
/// Slice k is [slice_begin(size, K, k), slice_begin(size, K, k + 1)); the sizes differ by at most one.
[[nodiscard]] constexpr std::uint64_t slice_begin(std::uint64_t size, std::uint64_t K, std::uint64_t k) noexcept {
  return K == 0 ? 0 : size / K * k + std::min(k, size % K);
}

/// Registers a shard owner with the coordinator and shows it is alive (owner -> coordinator, repeated
/// every heartbeat interval). `incarnation` is the owner process's random nonce; `round` the round of
/// the slice it holds.
struct shard_hello_msg {
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  /// The owner's index k and the number of owners K.
  std::uint64_t shard = 0;
  std::uint64_t shards = 1;
  /// The endpoint workers reach the owner at.
  std::string endpoint{};
  /// True once the owner holds a SHARD_SETUP from `averager_incarnation`.
  bool ready = false;
  /// The owner reads compressed payloads (every owner of this version does).
  bool reads_compressed = false;
};

/// Hands an owner its slice of x̄ (coordinator -> owner): at registration, and to a newer coordinator
/// incarnation's owners. `model` holds slice `shard` of x̄_round; `offset` is its first index.
struct shard_setup_msg {
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  std::uint64_t shard = 0;
  std::uint64_t shards = 1;
  std::uint64_t offset = 0;
  /// Size of the whole model.
  std::uint64_t model_size = 0;
  std::chrono::nanoseconds heartbeat_interval{0};
  flat_buffer model;
  /// The job's wire dtype (job_spec::wire): how the owner's slices of x̄ travel to the members.
  algorithms::wire_dtype wire = algorithms::wire_dtype::f32;
  /// Ring gather: the owners pass every new slice of x̄ on around a ring (SHARD_RELAY to the owner at
  /// `ring_next`, the endpoint of owner k + 1 mod K), and a member that names a home owner gets all of x̄
  /// from that one owner. False: every owner sends its slice to every member itself.
  bool ring = false;
  std::string ring_next{};
  /// The owner compresses what it sends to other hosts: its relays, and its slices for members that do not
  /// name it their home (payload_compression.hpp).
  bool compress = false;
};

/// Names one member's submission an owner combines: its id, token, samples and steps (for the weights).
struct shard_input {
  member_id member = 0;
  session_token token = 0;
  std::uint64_t samples = 0;
  std::uint64_t steps = 0;
  bool operator==(const shard_input&) const = default;
};

/// Names a member an owner sends its slice of x̄ to.
struct shard_recipient {
  member_id member = 0;
  session_token token = 0;
  bool operator==(const shard_recipient&) const = default;
};

/// Tells the owners what to do with round `round` (coordinator -> every owner). With `combine`, the
/// barrier of round `round` − 1 closed: combine the listed members' slices of that round with `rule`
/// and `aggregate` into slice k of x̄_round (no inputs: x̄ stays). Then send x̄_round's slice to every
/// member of `recipients`, and report (SHARD_REPORT), with the slice itself when `fetch`. Without
/// `combine` and for the owner's current round, it only adds recipients (and reports again).
struct shard_round_msg {
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  bool combine = false;
  std::vector<shard_input> inputs;
  std::uint8_t rule = 0;       // algorithms::averaging_rule
  std::uint8_t aggregate = 0;  // algorithms::aggregate_rule (mean, trimmed mean, median)
  double trim = 0;
  std::vector<shard_recipient> recipients;
  bool fetch = false;
};

/// Carries slice `shard` of a member's model for round `round` (worker -> owner). Without `model` it
/// only tells the owner the connection `member` listens on (sent after every WELCOME).
struct shard_slice_msg {
  member_id member = 0;
  session_token token = 0;
  round_t round = 0;
  std::uint64_t shard = 0;
  flat_buffer model;
  /// How `model` travels (job_spec::wire); its values are exactly representable in it.
  algorithms::wire_dtype dtype = algorithms::wire_dtype::f32;
  /// True when `model` is slice k of the change x_i − x̄_round, not of the model.
  bool delta = false;
  /// Without `model`: the owner on the member's own host, which sends it every slice of x̄ when the job
  /// gathers x̄ around a ring (none: every owner sends its own slice).
  std::optional<std::uint64_t> home{};
  /// Without `model`: the slice_checksum() of slice `shard` of the model the member already holds (the one
  /// it built itself, before its first RESTART). An owner whose slice of x̄ has that checksum answers with
  /// SHARD_AVERAGE `held` instead of sending the slice (none: the member holds nothing it can use).
  std::optional<std::uint64_t> holds{};
  /// `model` travels compressed if that makes it smaller (payload_compression.hpp); set on receipt when it did.
  bool compressed = false;
};

/// Confirms a received slice (owner -> coordinator): whether it had the right size and finite values,
/// and ‖x_i − x̄_r‖² over the slice.
struct shard_ack_msg {
  member_id member = 0;
  session_token token = 0;
  round_t round = 0;
  std::uint64_t shard = 0;
  bool ok = false;
  double norm2 = 0;
};

/// Carries slice `shard` of x̄_round to a member (owner -> worker).
struct shard_average_msg {
  member_id member = 0;
  session_token token = 0;
  round_t round = 0;
  std::uint64_t shard = 0;
  flat_buffer model;
  /// How `model` travels: f32 for a whole slice, job_spec::wire for a change.
  algorithms::wire_dtype dtype = algorithms::wire_dtype::f32;
  /// Set when `model` is slice k of the change x̄_round − x̄_base, for a member that trained from x̄_base.
  std::optional<round_t> base{};
  /// Set, and no `model`, when slice k of x̄_round is the one the member said it holds (SHARD_SLICE
  /// `holds`): the member uses its own copy, whose checksum this is.
  std::optional<std::uint64_t> held{};
  /// `model` travels compressed if that makes it smaller (payload_compression.hpp); set on receipt when it did.
  bool compressed = false;
};

/// Passes slice `shard` of x̄_round on to the next owner of the ring (owner -> owner, ring gather only):
/// the whole slice, or (`base` set, a lossy wire dtype) its change x̄_round − x̄_base in `dtype`, which
/// only the members that trained from x̄_base can use, in chunks (`offset`). Each owner forwards a chunk
/// until the owner before its origin holds it.
struct shard_relay_msg {
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  std::uint64_t shard = 0;
  flat_buffer model;
  algorithms::wire_dtype dtype = algorithms::wire_dtype::f32;
  std::optional<round_t> base{};
  /// `model` is the part of the slice that starts at this value: a slice goes around in chunks, so an owner
  /// passes the first chunk on while the rest still arrives.
  std::uint64_t offset = 0;
  /// `model` travels compressed if that makes it smaller (payload_compression.hpp); set on receipt when it did.
  bool compressed = false;
};

/// Reports an owner's slice of x̄_round (owner -> coordinator): its FNV-1a checksum, whether it is
/// finite, whether the combine found every input, and the slice itself when the order asked for it.
struct shard_report_msg {
  incarnation_t incarnation = 0;
  incarnation_t averager_incarnation = 0;
  round_t round = 0;
  std::uint64_t shard = 0;
  std::uint64_t checksum = 0;
  bool ok = false;
  std::string why{};
  flat_buffer model;
};

/// Holds any message between the shard owners and the coordinator or the workers (STOP ends an owner).
using shard_msg = std::variant<shard_hello_msg, shard_setup_msg, shard_round_msg, shard_slice_msg, shard_ack_msg,
                               shard_average_msg, shard_report_msg, shard_relay_msg, stop_msg>;

/// Holds any message the averager sends.
using to_worker = std::variant<welcome_msg, restart_msg, heartbeat_msg, removed_msg, stop_msg, refused_msg>;
/// Holds any message a worker sends.
using to_averager = std::variant<join_msg, leave_msg, heartbeat_msg, model_msg, status_request_msg, control_msg,
                                 evaluator_hello_msg, evaluation_msg, spec_request_msg>;
/// Holds any message the averager sends to an evaluator.
using to_evaluator = std::variant<evaluate_msg, stop_msg, refused_msg>;
/// Holds any message the averager sends to a client that is not a member (an operator, or a worker asking
/// for the spec).
using to_operator = std::variant<status_reply_msg, control_reply_msg, spec_reply_msg>;
/// Holds any protocol message, in either direction (what the cores hand their shells to send).
using any_msg =
    std::variant<join_msg, welcome_msg, leave_msg, heartbeat_msg, model_msg, restart_msg, removed_msg, stop_msg,
                 refused_msg, status_request_msg, status_reply_msg, control_msg, control_reply_msg, evaluator_hello_msg,
                 evaluate_msg, evaluation_msg, spec_request_msg, spec_reply_msg>;

}  // namespace prsgd::actors
