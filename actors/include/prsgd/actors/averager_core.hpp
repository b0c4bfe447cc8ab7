// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/actors/actions.hpp"
#include "prsgd/actors/checkpoint.hpp"
#include "prsgd/actors/checkpoint_store.hpp"
#include "prsgd/actors/metrics.hpp"
#include "prsgd/actors/protocol.hpp"
#include "prsgd/actors/status.hpp"
#include "prsgd/algorithms/aggregation.hpp"
#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/algorithms/outer_optimizer.hpp"
#include "prsgd/algorithms/sample_pool.hpp"
#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/common/rate_limiter.hpp"

namespace prsgd::actors {

/// Lists when the barrier may close before every member has submitted.
enum class deadline_policy : std::uint8_t {
  /// Never: wait for every member (or its removal).
  none,
  /// `fixed_deadline` after the round starts, if at least `quorum` have submitted.
  fixed,
  /// median + k·MAD of past arrival offsets after the round starts, if at least `quorum` have submitted.
  adaptive,
};

/// Parses "none" | "fixed" | "adaptive"; returns invalid_argument for anything else.
[[nodiscard]] expected<deadline_policy> parse_deadline_policy(std::string_view name);
/// Returns the name parse_deadline_policy accepts for `policy`.
[[nodiscard]] std::string_view to_string(deadline_policy policy) noexcept;

/// Configures an averager_core. Durations are measured on the injected clock.
struct averager_config {
  training_mode mode = training_mode::restarted_sgd;
  /// Averaging rule; empty = by samples while all I_i are equal, step-normalised as soon as they differ
  /// (FedNova). In minibatch_sgd mode gradients are averaged uniformly or by samples (never step-normalised).
  std::optional<algorithms::averaging_rule> rule;

  /// How I_i is chosen each round (the rules themselves live in algorithms/schedule.hpp):
  /// fixed: `interval`; per_worker: `per_worker_intervals[id]` (or `interval`); paper: ⌈T^{1/4} / N^{3/4}⌉
  /// with T = total_steps, N = |M_r|; time_balanced: I_i = speed_i · τ with τ = N · interval / Σ speed_i, so
  /// the workers reach the barrier together and the mean interval stays `interval`.
  algorithms::interval_kind intervals = algorithms::interval_kind::fixed;
  /// I for `fixed`, the default for `per_worker`, and the target mean for `time_balanced`.
  std::uint64_t interval = 8;
  /// Per-worker I_i for `per_worker`, by the data shard the member holds (ids are assigned at JOIN).
  std::map<member_id, std::uint64_t> per_worker_intervals;
  /// T: local steps per worker over the whole job (for the paper's I and γ rules).
  std::uint64_t total_steps = 10'000;
  /// Bounds for every computed interval.
  std::uint64_t min_interval = 1;
  std::uint64_t max_interval = 1'000'000;
  /// Weight of the newest measurement in the steps/s moving average (time_balanced).
  double speed_ema = 0.5;

  /// The step size γ sent in RESTART: constant (γ = step_size) or paper (γ = step_size_c · sqrt(N / T),
  /// N = |M_r|, T = total_steps); algorithms::learning_rate computes it. Other kinds are refused by validate.
  algorithms::lr_kind step_sizes = algorithms::lr_kind::constant;
  double step_size = 0.05;
  double step_size_c = 1.0;
  /// Linear warm-up of γ over this many rounds (0 = none): round r (counted from 0) of the warm-up sends
  /// γ · (r + 1) / warmup_rounds, so the first round already moves.
  std::uint64_t warmup_rounds = 0;

  deadline_policy deadline = deadline_policy::none;
  std::chrono::nanoseconds fixed_deadline{std::chrono::seconds(10)};
  /// Minimum accepted submissions before a deadline may close the barrier (at least 1).
  std::size_t quorum = 1;
  /// k in median + k·MAD.
  double mad_k = 3.0;
  /// Arrival offsets remembered for the adaptive deadline, and how many are needed before it applies.
  std::size_t adaptive_window = 64;
  std::size_t adaptive_min_samples = 4;
  /// The adaptive deadline is never shorter than this.
  std::chrono::nanoseconds adaptive_floor{std::chrono::milliseconds(1)};

  /// How often the averager heartbeats each known worker, and how long a worker may stay silent.
  std::chrono::nanoseconds heartbeat_interval{std::chrono::seconds(1)};
  std::chrono::nanoseconds heartbeat_timeout{std::chrono::seconds(5)};
  /// The slowest rate a payload is expected to move at, in bytes per second: after a HEARTBEAT that
  /// announces a payload of B bytes, the member is not timed out before heartbeat_timeout + B / this
  /// (docs/decisions/0024). RESTARTs are announced to the workers the same way. 0 = no allowance.
  double slowest_link_bytes_per_s = 125'000;
  /// After resuming from a checkpoint, how long to wait for its members to rejoin before starting.
  std::chrono::nanoseconds rejoin_grace{std::chrono::seconds(2)};

  /// Values [0, trainable_params) of the flat model are trainable; the rest are buffers (batch-norm running
  /// statistics). In minibatch_sgd mode workers send gradients for the trainable part and their buffer
  /// values for the rest: the averager steps the first and averages the second. 0 = everything trainable.
  std::size_t trainable_params = 0;
  /// Momentum μ of the averager's SGD step in minibatch_sgd mode (PyTorch's rule: b = μ·b + ḡ,
  /// x̄ −= γ·b); the buffer is checkpointed. In [0, 1).
  double minibatch_momentum = 0;

  /// How the round's weighted updates x_i − x̄ (the gradients themselves in minibatch_sgd mode) are
  /// combined: mean (the averaging above), trimmed mean, coordinate-wise median or norm clipping
  /// (algorithms/aggregation.hpp).
  algorithms::aggregate_options aggregate;
  /// Outlier screen: an update whose norm exceeds screen_k × the round's (upper) median update norm is
  /// left out of the round (logged, listed in the metrics line, never counted). 0 = off, else ≥ 1.
  /// With fewer than 3 submissions nothing is screened (algorithms::screen_updates).
  double screen_k = 4.0;

  /// Outer optimiser applied to the averaged delta in restarted_sgd mode (DiLoCo; empty = plain averaging).
  std::optional<algorithms::outer_config> outer;

  /// Ask for a checkpoint after every K-th trained round (0 = never). Only when the shell keeps
  /// checkpoints (averager_setup::checkpoints); the shell writes them to its checkpoint_store. A
  /// checkpoint of round r is handed out only once the metrics lines of the rounds before r are.
  std::uint64_t checkpoint_every = 10;
  /// Recorded in every checkpoint (what `prsgd export` reads). A checkpoint whose recorded identity has
  /// another model name, input shape or class count is refused on resume. Empty = not recorded.
  std::optional<checkpoint_model> model_identity;

  /// Ask for an evaluation of x̄ after every K-th trained round (0: only at epoch ends and at the end).
  /// Only when the shell can evaluate (averager_setup::evaluations).
  std::uint64_t eval_every = 0;
  /// Trained rounds that make one epoch over the training set (0: unknown). x̄ is evaluated at each epoch
  /// end, and the metrics lines carry the epoch.
  std::uint64_t rounds_per_epoch = 0;
  /// Training samples to hand out (0 = none: RESTART carries no ranges and members sample their shards).
  /// With samples, the averager keeps a pool of every epoch's sample indices (algorithms::sample_pool,
  /// in blocks of `data_block` shuffled per epoch with spec.seed) and gives each member interval x batch
  /// of them per round in RESTART; an accepted submission consumes them, anything else returns them to the
  /// pool. Needs spec.batch_size > 0. The metrics' epoch then counts passes over the data.
  std::uint64_t data_samples = 0;
  std::uint64_t data_block = 256;
  /// With data_samples: end the job after this many passes over the training set (0 = by max_rounds).
  std::uint64_t max_epochs = 0;
  /// Evaluations the shell runs at once (at least 1); further requests wait in the core, in order.
  std::size_t max_evaluations = 1;

  /// Workers that must have joined before the first round of a fresh job starts (later rounds, and a job
  /// resumed from a checkpoint, start with whoever is there). At least 1.
  std::size_t min_workers = 1;
  /// Stop after this many trained rounds (0 = run until told otherwise). A round that closes with no
  /// submission (every member gone) does not count, nor does it advance the epoch.
  std::uint64_t max_rounds = 0;
  /// Compute the consensus distance every this many rounds (0 = never; it costs one pass per model).
  std::uint64_t consensus_every = 1;
  /// Accounting records kept per past round (older rounds are forgotten; they can only be late anyway).
  std::uint64_t accounting_rounds_kept = 1'000;

  /// x̄_0 comes from the first JOIN that carries a model (join_msg::initial_model) instead of make()'s
  /// `initial_model`, of which only the size counts (`--model external` without `--init-model`). Until one
  /// arrives no round starts, and a JOIN without a model (or of another size) is refused. A job resumed from
  /// a checkpoint takes x̄ from the checkpoint and ignores JOINs' models.
  bool initial_from_join = false;
  /// The members declare the labels: spec.data is the data fingerprint without a label hash, and a JOIN's
  /// may add " labels=H". The first member of this incarnation that declares a hash fixes it; a later JOIN
  /// declaring another one is refused, one declaring none is admitted (external jobs, where the averager
  /// never sees the data).
  bool labels_from_members = false;
  /// The job every member must match: a JOIN whose declared model or data fingerprint differs from a
  /// non-empty one here is answered with REFUSED. Sent in every WELCOME; `batch_size` (when > 0) bounds
  /// the samples a MODEL may claim (samples <= steps x batch).
  job_spec spec;
  /// Data shards handed out in WELCOME (0 = min_workers). A member holds one shard until it is removed; a
  /// JOIN that finds every shard held by a live member or joiner is not answered until one is free (the
  /// worker keeps repeating its JOIN).
  std::size_t shards = 0;
  /// A RESTART the transport refused for back-pressure (overloaded) is sent again this many times, one
  /// heartbeat interval apart, before the member is removed (see averager_core::on_send_failed).
  std::uint32_t send_retries = 3;
  /// A member that has not submitted for this many rounds is removed (0 = never). A round counts when it
  /// closed without the member (a deadline), or when it has been open for this many times the previous
  /// round's duration, and this many times as long as any accepted submission of the round took (each at
  /// least heartbeat_timeout), and the member still has not submitted. The first round of an incarnation
  /// has no previous round: there the wait starts with its first accepted submission.
  std::uint64_t idle_rounds = 2;
  /// Sharded averaging: the number K of shard owner processes (0 = a star: this averager averages whole
  /// models). With K owners, MODELs are headers (model_msg::sliced) whose slices the owners hold, the
  /// core hands out shard_round_msg orders (actions::shard_orders) instead of averaging, and RESTART
  /// carries no model: the members get x̄ from the owners. `model()` is then x̄ only as of the start; the
  /// shell fills x̄ into checkpoints, evaluations and the summary from the owners' reports (rounds whose
  /// order has `fetch` set). Needs restarted_sgd, no outer optimiser, and aggregate mean, trimmed mean
  /// or median.
  std::size_t shard_owners = 0;
  /// Sharded averaging: the owners gather x̄ around a ring (each passes every new slice on to the next
  /// owner) and a member gets all of x̄ from the owner on its own host, instead of every owner sending its
  /// slice to every member (shard_setup_msg::ring). The coordinator sets the owners up once all K have
  /// registered, since each needs the next one's endpoint.
  bool ring_gather = false;
  /// Sharded averaging: members and owners compress the slice payloads they send to other hosts (the values'
  /// top byte through zstd, payload_compression.hpp); a JOIN that cannot read them is refused.
  bool compress_between_hosts = false;
};

/// Says what happened to one received MODEL / gradient.
enum class submission_status : std::uint8_t {
  /// Entered the round's submissions; counted in the average when the barrier closes.
  accepted,
  /// For a round already closed, or sent to a previous averager incarnation.
  late,
  /// Same (worker, round, incarnation) already accepted.
  duplicate,
  /// Not a member, stale worker incarnation, future round, wrong size, NaN/Inf, wrong kind; or, at the
  /// barrier, left out by the outlier screen or part of a round refused for a non-finite x̄.
  rejected,
};

/// Says why a worker message was dropped before it reached the protocol state: it names a member but came
/// from another client key than the member's JOIN (CURVE), carries another session token, or arrived on
/// another connection than the member's JOIN.
enum class auth_failure : std::uint8_t { bad_token, wrong_connection, wrong_key };

/// Returns "bad_token" | "wrong_connection" | "wrong_key".
[[nodiscard]] std::string_view to_string(auth_failure f) noexcept;

/// Returns "accepted" | "late" | "duplicate" | "rejected".
[[nodiscard]] std::string_view to_string(submission_status s) noexcept;

/// Records one received submission for the per-(round, worker) accounting.
struct submission_record {
  round_t round = 0;
  member_id member = 0;
  incarnation_t incarnation = 0;
  submission_status status = submission_status::accepted;
  /// Why it was not accepted (empty when accepted).
  std::string reason;
};

/// Lists the averager's states (see the diagram on averager_core).
enum class averager_state : std::uint8_t { idle, rejoin_wait, collecting, stopped, paused };

/// Returns "idle" | "rejoin_wait" | "collecting" | "stopped" | "paused".
[[nodiscard]] std::string_view to_string(averager_state s) noexcept;

/// Holds what the shell brings to a new averager_core besides its configuration.
struct averager_setup {
  /// This incarnation's number (checkpoint_store::next_incarnation when there is a store). At least 1.
  incarnation_t incarnation = 1;
  /// The checkpoint to resume from (empty: a fresh job starting from the initial model).
  std::optional<checkpoint_state> resume;
  /// True when the shell keeps checkpoints: the core asks for one every `checkpoint_every` rounds.
  bool checkpoints = false;
  /// True when the shell can score x̄ on a test set: the core asks for evaluations (epoch ends,
  /// `eval_every`, the end) and holds each round's metrics line until its accuracy is in.
  bool evaluations = false;
};

/// Returns the setup of an incarnation that keeps its checkpoints in `store`: the next incarnation
/// number (recorded in the store), the newest valid checkpoint to resume from, and checkpoints on.
/// Returns the store's error when the incarnation number cannot be recorded.
[[nodiscard]] expected<averager_setup> setup_from(checkpoint_store& store);

/// Runs the averager's restart-barrier protocol: round r, global model x̄_r, membership M_r, exactly-once
/// accounting, deadlines, interval and step-size assignment, checkpoint and evaluation requests, and the
/// per-round metrics lines in round order.
///
/// Sans-IO: the shell (averager_actor, or a test) feeds it events — worker messages with the connection
/// they came in on, `tick()` when the wakeup it asked for is due, evaluation results, stop/suspend — and
/// does what each returned `actions` says. The core never touches the network, the disk or the test set.
/// Time comes only from the injected clock. Not thread-safe; used only on the owning actor's strand. The
/// clock must outlive it.
///
/// ```
///                (2) resumed from a checkpoint with members
///   make() ─────────────────────────────────────────┐
///     │ (1) no checkpoint / checkpoint without members ▼
///     ▼                                        ┌─────────────┐
///   ┌──────┐ (3) JOIN: start round r at once    │ rejoin_wait │ (5) grace over, nobody back
///   │ idle │ ─────────────────────┐            └─────────────┘ ────────────► idle
///   └──────┘ ◄──────────┐         │     (4) all restored members back, or
///       ▲  (7) M_{r+1}  │         ▼         grace over with >= 1 joiner
///       │      empty    │  ┌────────────┐ ◄──────────────────────────────┘
///       │               └─ │ collecting │ ──┐ (6) barrier closes: every member submitted or
///       │                  └────────────┘ ◄─┘     was removed, or the deadline passed with a
///       │                        │                quorum; average, r+1, admit joiners, RESTART
///       │                        │ (8) max_rounds rounds trained, or stop(): STOP to everybody;
///       │                        │     suspend(): nothing sent (a later incarnation resumes)
///       └────────────────────────┴────────────► stopped
/// ```
/// Any state: JOIN → WELCOME at once (the joiner waits for the next RESTART); LEAVE / heartbeat timeout
/// removes the worker at once (the open barrier stops waiting for it); MODEL is classified exactly once
/// as accepted / late / duplicate / rejected (`accounting()`). When the last member goes with no
/// submission, the round closes empty (x̄ unchanged, r+1) so nothing sent for it can count later; it
/// trains nothing, so it counts toward neither max_rounds nor the epoch, and asks for no checkpoint.
///
/// Operators (`prsgd ctl`, on_control): a pause takes effect at the next barrier, which closes as usual and
/// starts no round (state paused: members keep their place, joiners wait, heartbeats go on); resume starts
/// the next round. Interval, policy and deadline changes apply from the next round; remove sends STOP to
/// the member and drops it at once (as a LEAVE would); checkpoint takes one of the open round now; stop
/// ends the job as stop() does.
///
/// Routes: a worker's messages go over the connection of its last accepted JOIN or MODEL
/// (`actions::routes`); a rejected or forged message from another connection never moves them.
///
/// Metrics lines: each closed round makes one line. A line whose x̄ is evaluated (epoch end, every
/// `eval_every` rounds, the last round) waits for on_evaluated; lines leave in round order, so a line
/// also waits behind an earlier one. Once stopped, the core asks for a final evaluation if the last line
/// did not, and reports `actions::done` when every line is out and every evaluation is in.
class averager_core {
 public:
  /// Creates the core. Resumes from `setup.resume` when set (then `initial_model` only checks the size);
  /// otherwise starts at round 0 with `initial_model`. Returns invalid_argument for a bad config, an
  /// empty model, a checkpoint of another model size, or a checkpoint of a finished job.
  [[nodiscard]] static expected<averager_core> make(averager_config config, const clock_source& clk,
                                                    std::vector<float> initial_model, averager_setup setup = {});

  /// Handles any worker message that arrived on connection `from` (dispatches to the handlers below).
  [[nodiscard]] actions on_message(const to_averager& m, origin_t from);
  /// Records that connection `from` belongs to the client key `client_key` (the CURVE public key the
  /// transport's handshake proved; empty: no key). A member joined over a connection with a key is bound
  /// to that key: a message naming it from a connection with no or another key is dropped (`wrong_key`).
  void on_connection(origin_t from, std::string client_key);
  /// Forgets the key of connection `from` (it went down; it is recorded again if it comes back).
  void on_disconnected(origin_t from);
  /// Handles JOIN: answers WELCOME at once; admits at the next barrier (or starts a round when idle).
  [[nodiscard]] actions on_join(const join_msg& m, origin_t from = 0);
  /// Handles LEAVE: removes the worker; may close the barrier.
  [[nodiscard]] actions on_leave(const leave_msg& m, origin_t from = 0);
  /// Handles a worker HEARTBEAT: refreshes liveness; an unknown worker is told REMOVED so it rejoins.
  [[nodiscard]] actions on_heartbeat(const heartbeat_msg& m, origin_t from = 0);
  /// Handles MODEL (or a gradient): classifies it exactly once; may close the barrier.
  [[nodiscard]] actions on_model(const model_msg& m, origin_t from = 0);
  /// Takes a message for `member` that the shell could not hand to the transport (`code`: overloaded when
  /// the member's connection holds too many unsent bytes, too_large, not_found for a connection that is
  /// gone). A RESTART of the open round for a member that has not submitted is sent again one heartbeat
  /// interval later, at most `send_retries` times (only for overloaded: the other errors do not pass);
  /// after that the member is removed with the reason, so the barrier never waits for a model that never
  /// left. Every failure is counted (`drops()["send_failed"]`, removals `["send_failed_removed"]`).
  /// Other messages are repeated by the protocol itself (heartbeats, a WELCOME for every JOIN) and are
  /// only counted.
  [[nodiscard]] actions on_send_failed(member_id member, const any_msg& msg, errc code);
  /// Carries out an operator's request (the shell checked that the sender may steer). `text` is the one
  /// line the operator gets back; `ok` is false for a request that changes nothing (bad argument, no
  /// checkpoint store, unknown member, job over).
  struct control_outcome {
    actions act;
    bool ok = false;
    std::string text;
  };
  [[nodiscard]] control_outcome on_control(control_op op, std::string_view arg);
  /// Returns a snapshot of the job and every member for `prsgd status` and the dashboard. `host_of` names
  /// the host behind a connection (empty: unknown).
  [[nodiscard]] job_status status(const std::function<std::string(origin_t)>& host_of = {}) const;
  /// Answers a SPEC request: the job's spec, mode and model size, echoing the request's nonce. Changes
  /// nothing (the asker is no member).
  [[nodiscard]] spec_reply_msg spec_reply(const spec_request_msg& m) const;
  /// Handles time: heartbeat timeouts, deadlines, rejoin grace, averager heartbeats, RESTART retries.
  [[nodiscard]] actions tick();
  /// Ends the job: STOP to every known worker; later worker messages are ignored (a JOIN gets STOP).
  [[nodiscard]] actions stop();
  /// Ends this incarnation without ending the job: sends nothing, releases every held metrics line
  /// without waiting for its evaluation, then (with checkpoints on) asks for a checkpoint of the open
  /// round, and reports done with `job_over` false.
  [[nodiscard]] actions suspend();
  /// Takes the result of evaluation request `id`: x̄'s test accuracy, or empty when it failed, and its mean
  /// test cross-entropy when the evaluation computed one. Unknown ids (answered twice, or after suspend)
  /// are ignored.
  [[nodiscard]] actions on_evaluated(std::uint64_t id, std::optional<double> accuracy,
                                     std::optional<double> loss = std::nullopt);

  /// Returns when `tick()` should run next (empty when stopped); every actions result carries it too.
  [[nodiscard]] std::optional<clock_source::time_point> next_wakeup() const;

  /// Returns the current round r.
  [[nodiscard]] round_t round() const noexcept { return round_; }
  /// Returns true when the job averages in shards (averager_config::shard_owners > 0).
  [[nodiscard]] bool sharded() const noexcept { return config_.shard_owners > 0; }
  /// Returns x̄_r, shared.
  [[nodiscard]] const flat_buffer& model() const noexcept { return model_; }
  /// Returns the state.
  [[nodiscard]] averager_state state() const noexcept { return state_; }
  /// Returns this averager's incarnation.
  [[nodiscard]] incarnation_t incarnation() const noexcept { return incarnation_; }
  /// Returns the round this incarnation resumed from a checkpoint at (empty for a fresh start).
  [[nodiscard]] std::optional<round_t> resumed_from() const noexcept { return resumed_from_; }
  /// Returns M_r (ids), sorted.
  [[nodiscard]] std::vector<member_id> members() const;
  /// Returns workers welcomed and waiting for admission at the next barrier, sorted.
  [[nodiscard]] std::vector<member_id> pending() const;
  /// Returns members of the open round that have submitted, sorted.
  [[nodiscard]] std::vector<member_id> submitted() const;
  /// Returns the interval assigned to `member` for the current round (empty for a non-member).
  [[nodiscard]] std::optional<std::uint64_t> interval_of(member_id member) const;
  /// Returns the current deadline of the open barrier (empty when none applies).
  [[nodiscard]] std::optional<clock_source::time_point> deadline() const noexcept { return deadline_; }
  /// Returns the cumulative submission counters.
  [[nodiscard]] const submission_counters& counters() const noexcept { return counters_; }
  /// Returns the cumulative count of dropped messages by reason: "bad_token", "wrong_connection",
  /// "wrong_key" (any message naming a member), "refused" (JOINs answered with REFUSED), and rejected MODELs by claim
  /// ("steps", "samples", "loss", "size", "non_finite", "kind", "not_member", "round", "incarnation").
  [[nodiscard]] const std::map<std::string, std::uint64_t, std::less<>>& drops() const noexcept { return drops_; }
  /// Returns the samples `member` trains in the open round (empty without a pool or a grant).
  [[nodiscard]] std::vector<algorithms::sample_range> grant_of(member_id member) const;
  /// Returns the sample pool (empty when the job hands out no sample ranges).
  [[nodiscard]] const std::optional<algorithms::sample_pool>& pool() const noexcept { return pool_; }
  /// Returns the data shard `member` (a member or joiner) holds.
  [[nodiscard]] std::optional<std::uint64_t> shard_of(member_id member) const;
  /// Returns the number of data shards handed out.
  [[nodiscard]] std::size_t num_shards() const noexcept { return num_shards_; }
  /// Returns every classified submission, oldest first (bounded by accounting_rounds_kept).
  [[nodiscard]] const std::vector<submission_record>& accounting() const noexcept { return accounting_; }
  /// Returns how many times (worker, round)'s model entered an average: 0 or 1, never more.
  [[nodiscard]] int times_counted(round_t round, member_id member) const;
  /// Returns how many submissions the outlier screen has left out, over this incarnation.
  [[nodiscard]] std::uint64_t screened_total() const noexcept { return screened_total_; }
  /// Returns how many rounds were refused because the new x̄ was not finite (x̄ kept), over this incarnation.
  [[nodiscard]] std::uint64_t refused_rounds() const noexcept { return refused_rounds_; }
  /// Returns the averaging rule the last closed round used (empty before the first close).
  [[nodiscard]] std::optional<algorithms::averaging_rule> last_rule() const noexcept { return last_rule_; }
  /// Returns true while x̄_0 is still to come from a member's JOIN (averager_config::initial_from_join).
  [[nodiscard]] bool awaiting_initial_model() const noexcept { return awaiting_initial_; }
  /// Returns the state a checkpoint of this moment would hold (round r with x̄_r, members, schedule).
  [[nodiscard]] checkpoint_state snapshot() const;

 private:
  struct member_entry {
    /// The JOIN's nonce.
    incarnation_t incarnation = 0;
    clock_source::time_point last_seen{};
    /// Not timed out before this: an announced payload is on its way (never moves back).
    clock_source::time_point transfer_until{};
    /// The round in which the idle rule last waited for this member's announced MODEL (once a round).
    std::optional<round_t> idle_spared_in;
    std::uint64_t interval = 1;
    double speed = 0;
    session_token token = 0;
    /// The connection the JOIN came in on: the member's messages are accepted only from it.
    origin_t origin = 0;
    /// The client key of that connection (on_connection; empty without CURVE): the member's messages are
    /// accepted only from a connection with this key.
    std::string client_key;
    std::uint64_t shard = 0;
    /// Rounds in a row without an accepted submission.
    std::uint64_t missed = 0;
    /// The last round a RESTART was sent for (at most one per round).
    std::optional<round_t> restarted;
    /// The round of the member's last accepted MODEL: the worker holds that round's x̄, so the next
    /// RESTART may carry the change since (lossy wire dtypes).
    std::optional<round_t> holds;
    /// The checksum of the model the worker built itself (its JOIN's `holds`), until its first RESTART.
    std::optional<std::uint64_t> own_model;
    /// RESTARTs of the open round the transport refused (on_send_failed), and when to send it again.
    std::uint32_t send_failures = 0;
    std::optional<clock_source::time_point> resend_at;
    // For status(): payload bytes from and to the member, its late and rejected submissions, and how
    // long it waited at the barrier (the last round it was counted in, and the sum over those rounds).
    std::uint64_t bytes_in = 0;
    std::uint64_t bytes_out = 0;
    std::uint64_t late = 0;
    std::uint64_t rejected = 0;
    double idle_last_s = -1;
    double idle_sum_s = 0;
    std::uint64_t idle_rounds = 0;
  };
  /// A member removed recently (status()).
  struct removal {
    member_id id = 0;
    incarnation_t incarnation = 0;
    round_t round = 0;
    clock_source::time_point at{};
    std::string reason;
  };
  struct submission {
    model_msg msg;
    clock_source::time_point at{};
  };
  /// What the accepted submissions of the closing round bring to the average.
  struct round_inputs {
    std::vector<algorithms::contribution> contributions;
    bool steps_differ = false;
  };
  /// A closed round's metrics line, held until its evaluation (if any) is in.
  struct held_line {
    round_metrics metrics;
    std::optional<std::uint64_t> awaiting;
  };

  averager_core(averager_config config, const clock_source& clk);

  // Barrier steps, in the order close_barrier runs them.
  void close_barrier(actions& out, bool by_deadline);
  [[nodiscard]] round_metrics open_record(bool by_deadline) const;
  [[nodiscard]] round_inputs collect(round_metrics& rm);
  [[nodiscard]] algorithms::averaging_rule weigh(const round_inputs& in) const;
  void screen(round_inputs& in, round_metrics& rm);
  [[nodiscard]] std::vector<float> average(const round_inputs& in, algorithms::averaging_rule rule, bool& ok) const;
  [[nodiscard]] std::vector<float> outer_step(std::vector<float> avg, bool averaged);
  void account();
  void advance_round(std::vector<float> next);
  /// Returns x̄_{r+1} as the members will rebuild it: x̄_r plus the quantised change (lossy wire dtypes),
  /// and keeps that change for the RESTARTs; returns `next` unchanged for f32.
  [[nodiscard]] std::vector<float> settle_change(std::vector<float> next);
  /// Returns the payload bytes of `m` on the wire.
  [[nodiscard]] static std::uint64_t wire_bytes(const flat_buffer& values, algorithms::wire_dtype dtype);
  void request_checkpoint();
  /// Sharded averaging: returns the order to combine the closing round's accepted submissions with
  /// `rule` (close_barrier sets its round and `fetch` once the round has advanced).
  [[nodiscard]] shard_round_msg make_combine(algorithms::averaging_rule rule) const;
  /// Sharded averaging: adds `id` to the owners' recipients of x̄_{round_}.
  void order_recipient(actions& out, member_id id) const;
  void record_line(actions& out, round_metrics rm, bool last, bool trained);
  /// Returns true once max_rounds rounds have trained, or max_epochs passes are consumed (never for an
  /// open-ended job).
  [[nodiscard]] bool work_done() const noexcept {
    return (config_.max_rounds > 0 && rounds_completed_ >= config_.max_rounds) || (pool_ && pool_->finished());
  }
  /// Gives a member's samples of the open round to it (pool jobs): interval x batch, or its part of the job's
  /// end (see round_need); returns false when the pool had none.
  bool grant_samples(member_id id, member_entry& e, const std::pair<std::uint64_t, std::uint64_t>& need);
  /// Returns (samples the job still needs, samples this round's members would take at interval x batch each).
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> round_need() const;
  /// Settles the closing round's grants: consumed for the submissions that entered x̄, returned otherwise.
  void settle_grants(round_metrics& rm);
  /// Returns the samples `id` was given for the open round (0 without a grant).
  [[nodiscard]] std::uint64_t granted_samples(member_id id) const;
  /// Returns true when `id` trains in the open round (without a pool: every member).
  [[nodiscard]] bool active(member_id id) const { return !pool_ || grants_.contains(id); }
  /// Estimates the trained rounds the job will have run once its passes are done (pool jobs with max_epochs).
  [[nodiscard]] std::uint64_t planned_rounds() const;

  void start_round(actions& out);
  void end_job(actions& out);
  void maybe_close(actions& out);
  void remove_worker(member_id id, const char* why);
  void admit_pending();
  void assign_intervals();
  void update_speeds();
  void compute_deadline();
  [[nodiscard]] double current_step_size() const;
  /// Returns the size of the trainable prefix (config_.trainable_params, or the whole model).
  [[nodiscard]] std::size_t trainable_size() const noexcept {
    return config_.trainable_params == 0 ? model_size_ : std::min(config_.trainable_params, model_size_);
  }
  [[nodiscard]] std::uint64_t clamp_interval(double v) const;
  void record(const model_msg& m, submission_status s, std::string reason, std::string_view code = {});
  void unaccept(member_id id, std::string reason);
  /// Checks that a message naming a member or joiner carries its token and came over its connection;
  /// counts and logs a failure. Returns true when the message may proceed (also for unknown members).
  [[nodiscard]] bool authorised(member_id member, session_token token, origin_t from, std::string_view what);
  /// When a message naming `member` comes from a worker that still follows an earlier averager incarnation
  /// under an id this one has handed out again (ids given out after the checkpoint it resumed from are given
  /// out anew), told by a token that is not the holder's: answers it with REMOVED over its own connection, so
  /// that it rejoins, and returns true. The holder keeps its place.
  [[nodiscard]] bool answer_lost_session(actions& out, member_id member, incarnation_t incarnation,
                                         incarnation_t averager_incarnation, session_token token, origin_t from);
  [[nodiscard]] const member_entry* find_entry(member_id member) const;
  [[nodiscard]] std::optional<std::string> mismatch(const join_msg& m) const;
  /// Takes x̄_0 from a JOIN (initial_from_join); returns why the JOIN is refused instead.
  [[nodiscard]] std::optional<std::string> adopt_initial_model(const join_msg& m);
  [[nodiscard]] std::optional<std::uint64_t> free_shard() const;
  void send_restart(actions& out, member_id id);
  void remove_idle(actions& out);
  void resend_restarts(actions& out);
  void prune_accounting();
  [[nodiscard]] welcome_msg make_welcome(member_id id, const member_entry& e, round_t admitted) const;
  [[nodiscard]] restart_msg make_restart(member_id id) const;

  void request_evaluation(actions& out, round_t rounds, bool final);
  void pump_evaluations(actions& out);
  void flush_lines(actions& out);
  void maybe_done(actions& out);
  [[nodiscard]] job_summary summary(bool job_over) const;
  /// Sets the wakeup of `out` and returns it (every public event handler ends with it).
  [[nodiscard]] actions with_wakeup(actions out) const;
  /// Returns when `e` counts as silent: heartbeat_timeout after it was last heard from, or later while an
  /// announced payload may still be on its way.
  [[nodiscard]] clock_source::time_point silence_due(const member_entry& e) const;
  /// Files `id`'s heartbeat deadline (a new member or joiner) for next_wakeup.
  void file_silence_due(member_id id, const member_entry& e);
  /// Returns the earliest heartbeat deadline of the members and joiners, after dropping or re-filing the
  /// stale entries at the front of silence_due_.
  [[nodiscard]] std::optional<clock_source::time_point> earliest_silence_due() const;
  /// Returns the earliest RESTART retry time of the members, after dropping the stale entries at the front
  /// of resend_due_.
  [[nodiscard]] std::optional<clock_source::time_point> earliest_resend_due() const;

  averager_config config_;
  const clock_source* clock_;
  incarnation_t incarnation_ = 1;
  bool checkpoints_ = false;
  bool evaluations_ = false;
  std::optional<round_t> resumed_from_;
  averager_state state_ = averager_state::idle;
  round_t round_ = 0;
  std::uint64_t rounds_completed_ = 0;
  flat_buffer model_;
  std::size_t model_size_ = 0;
  std::optional<algorithms::outer_optimizer> outer_;
  // Lossy wire dtypes: x̄_{r} − x̄_{r−1} as sent (quantised) for the RESTARTs of members that hold x̄_{r−1},
  // and what the encoding dropped from earlier changes (carried into the next; not checkpointed).
  flat_buffer restart_change_;
  algorithms::error_feedback downlink_;
  // slice_checksum() of x̄, once per x̄ (a member's first RESTART may confirm it instead of sending it).
  mutable checksum_cache checksums_;
  std::vector<float> minibatch_momentum_;  // b, over the trainable prefix (minibatch_sgd mode)

  std::map<member_id, member_entry> members_;  // M_r
  /// Due times of next_wakeup, earliest first, so that it does not walk every member after each event.
  /// Both are lazy: an entry is checked against its member when it reaches the front. silence_due_ holds at
  /// most one entry per member or joiner, filed when it joins, never later than its real deadline
  /// (last_seen only moves forward): a front entry of a worker heard from since is re-filed at its
  /// current deadline, one of a worker that is gone is dropped. resend_due_ gets an entry each time a
  /// resend_at is set; a front entry that no longer matches its member's resend_at is dropped.
  using due_entry = std::pair<clock_source::time_point, member_id>;
  using due_queue = std::priority_queue<due_entry, std::vector<due_entry>, std::greater<>>;
  mutable due_queue silence_due_;
  mutable due_queue resend_due_;
  std::map<member_id, member_entry> pending_;        // welcomed, admitted at the next barrier
  std::map<member_id, checkpoint_member> restored_;  // checkpointed members not yet back (rejoin_wait)
  std::map<member_id, submission> submissions_;      // accepted for round_
  std::size_t round_members_ = 0;
  double round_step_size_ = 0;
  std::size_t round_removed_ = 0;
  clock_source::time_point round_start_{};
  clock_source::time_point started_at_{};
  clock_source::time_point rejoin_until_{};
  clock_source::time_point next_heartbeat_{};
  std::optional<clock_source::time_point> deadline_;
  std::vector<double> arrival_history_;
  std::uint64_t round_bytes_in_ = 0;
  std::uint64_t round_bytes_out_ = 0;
  std::uint64_t bytes_in_ = 0;  // over this incarnation's closed rounds
  std::uint64_t bytes_out_ = 0;
  submission_counters counters_;
  submission_counters round_counters_;
  std::map<std::string, std::uint64_t, std::less<>> drops_;
  std::map<std::pair<origin_t, incarnation_t>, member_id> joins_;  // (connection, JOIN nonce) -> member
  std::map<origin_t, std::string> connection_keys_;                // client keys of the connections that are up
  /// Warnings caused by remote input, each family a few lines per 10 s ("... and N more like it").
  /// Held by pointer so the core stays movable.
  struct remote_warnings {
    rate_limiter refused_join;
    rate_limiter rejected_model;
    rate_limiter unauthorised;
    rate_limiter screened;
    rate_limiter send_failed;
  };
  std::unique_ptr<remote_warnings> warnings_ = std::make_unique<remote_warnings>();
  member_id next_member_ = 1;
  std::size_t num_shards_ = 1;
  std::optional<clock_source::duration> last_round_duration_;  // of the last round this incarnation closed
  std::optional<clock_source::time_point> idle_cutoff_;
  std::vector<submission_record> accounting_;
  std::map<std::pair<round_t, member_id>, int> counted_;
  std::optional<algorithms::averaging_rule> last_rule_;
  std::uint64_t screened_total_ = 0;
  std::uint64_t refused_rounds_ = 0;
  std::optional<algorithms::sample_pool> pool_;
  /// Samples each member trains in the open round (pool jobs); a member without a grant sits the round out.
  std::map<member_id, std::vector<algorithms::sample_range>> grants_;
  bool epoch_closed_ = false;  // the closing round completed an epoch (pool jobs)

  std::deque<held_line> lines_;                    // closed rounds' lines not yet released, in order
  std::deque<checkpoint_state> held_checkpoints_;  // taken, waiting for the lines of the rounds before them
  std::deque<evaluation_request> eval_queue_;      // asked for, waiting for a free evaluator
  std::map<std::uint64_t, round_t> evaluating_;    // request id -> rounds of the x̄ it scores
  std::uint64_t next_eval_id_ = 1;
  bool final_eval_requested_ = false;
  std::optional<double> last_acc_;   // accuracy of the newest x̄ evaluated
  std::optional<double> last_loss_;  // its test loss (empty when that evaluation reported none)
  round_t last_acc_rounds_ = 0;
  bool suspended_ = false;
  bool done_ = false;
  bool pause_ = false;                  // asked to pause: no round starts until resume
  bool awaiting_initial_ = false;       // x̄_0 still to come from a JOIN (initial_from_join)
  std::string declared_labels_;         // " labels=H" the first member declared (labels_from_members)
  std::deque<removal> removed_;         // the newest removals, oldest first
  std::optional<double> mean_round_s_;  // moving average of trained rounds' durations (ETA)
};

}  // namespace prsgd::actors
