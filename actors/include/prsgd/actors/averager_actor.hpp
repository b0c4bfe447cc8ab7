// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "prsgd/actors/actions.hpp"
#include "prsgd/actors/averager_core.hpp"
#include "prsgd/actors/checkpoint_store.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/metrics.hpp"
#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/common/rate_limiter.hpp"
#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::actors {

/// Makes the transport an actor talks through; the handlers forward into the actor (see start_*).
using transport_factory = std::function<expected<std::unique_ptr<transport>>(transport_handlers)>;

/// Hands x̄ to the averager's owner (to save it): after each evaluation, and once at the end of the job.
struct model_snapshot {
  /// Rounds closed when x̄ was taken (x̄ is the average that closed the last of them).
  round_t rounds = 0;
  /// x̄, shared read-only.
  flat_buffer params;
  /// x̄'s test accuracy (empty when it was not evaluated, or the evaluation failed).
  std::optional<double> test_acc;
  /// True for the job's final x̄: sent once, right before on_done, when the job ended (not when it
  /// was suspended to a checkpoint).
  bool final = false;
};

/// Counts what the transport's I/O thread queued for an averager actor that the actor has not handled
/// yet (the inbox credit), and what it dropped because the inbox was full. Thread-safe: atomics only.
struct averager_inbox {
  std::atomic<std::size_t> messages{0};
  std::atomic<std::size_t> bytes{0};
  std::atomic<std::uint64_t> dropped{0};
};

/// Configures an averager_actor.
struct averager_actor_config {
  /// The barrier protocol (including when to checkpoint and when to evaluate).
  averager_config core;
  /// The model's initial parameters come from this registry model (and seed); it is also what the
  /// evaluator builds to score x̄.
  std::string model_name;
  algorithms::model_config model;
  /// Test set for evaluation in this process (null: none here).
  std::shared_ptr<const algorithms::dataset> test_set;
  /// Evaluator processes (EVALUATOR_HELLO) score x̄ instead of this process, which then never runs the
  /// test set (`--evaluate-on evaluators`); without a live evaluator a round's test_acc is null. Always so
  /// for an external model.
  bool remote_evaluation = false;
  /// A model the averager does not build (`--model external`): x̄ has this many floats (> 0), and
  /// `model_name`/`model` are not used. Its initial value is `initial_model` when that is not empty, else
  /// the first member's (averager_config::initial_from_join, set by the actor). x̄ is scored by connected
  /// evaluator processes (EVALUATOR_HELLO), never in this process.
  std::size_t external_size = 0;
  std::vector<float> initial_model;
  /// How long an evaluator process may take to answer before that evaluation counts as failed (test_acc
  /// null).
  std::chrono::nanoseconds evaluation_timeout{std::chrono::seconds(60)};
  /// Directory for checkpoints (empty: none, unless `checkpoints` is set). With a store, the store
  /// numbers the incarnations and a new averager resumes from its newest valid checkpoint.
  std::string checkpoint_dir;
  /// Checkpoints kept in the store (at least 1).
  std::size_t checkpoints_kept = 3;
  /// A checkpoint store to use instead of `checkpoint_dir` (e.g. an in-memory one in tests); shared with
  /// whoever made it, used only on the actor's strand.
  std::shared_ptr<checkpoint_store> checkpoints;
  /// Averager incarnation when there is no checkpoint store.
  incarnation_t incarnation = 1;
  /// JSON-lines metrics file (empty: none).
  std::string metrics_jsonl;
  /// Limits for decoding worker messages.
  codec_limits limits;
  /// Called on the actor's strand after each round's metrics line is final (test_acc filled in).
  std::function<void(const round_metrics&)> on_round;
  /// Called on the actor's strand with every evaluated x̄, then once with the final x̄ (see
  /// model_snapshot). Keep it short: copy the pointer and write elsewhere.
  std::function<void(const model_snapshot&)> on_model;
  /// Called once on the actor's strand when the job is over (after the done line), when a suspended
  /// incarnation ends (`job_over` false), or at start when the checkpoint store holds a finished job
  /// (`job_over` false, nothing run and nothing written).
  std::function<void(const job_summary&)> on_done;
  /// Called on the actor's strand with messages the shell dropped and the reason: "malformed" (did not
  /// decode), "send_failed" (the transport refused a send: the peer's queue was full or it is gone),
  /// "inbox_full" (received while the actor's inbox was at its bound; reported with the next message), or
  /// the core's "bad_token", "wrong_connection", "wrong_key" (a message naming a member it does not
  /// belong to) and "send_failed_removed" (a member removed because its RESTART could not be sent); see
  /// averager_core::drops.
  std::function<void(std::string_view reason, std::uint64_t count)> on_drop;
  /// Bounds what the I/O thread may queue for the actor: received messages not yet handled, and their
  /// bytes. A message above either bound is dropped on the I/O thread and counted ("inbox_full"); the
  /// sender's protocol retries (a JOIN is repeated, a lost MODEL is a missing submission).
  std::size_t inbox_max_messages = 10000;
  std::size_t inbox_max_bytes = std::size_t{4} << 30;
  /// Who may steer the job (CONTROL messages, `prsgd ctl`): operator keys with CURVE, loopback without.
  steering_rule steering;
  /// Called on the actor's strand with every operator request carried out or refused, after its line
  /// is in the metrics file.
  std::function<void(const control_event&)> on_control;
  /// The inbox's counters, shared with the transport handlers; start_averager sets it.
  std::shared_ptr<averager_inbox> inbox;
  /// Sharded averaging (core.shard_owners > 0): called once on the actor's strand when the job cannot go
  /// on because a shard owner failed (went silent, restarted, or reported a broken slice), with one line
  /// saying which. The actor has sent STOP to the workers and the other owners and reports nothing else.
  std::function<void(const std::string& why)> on_failed;
  /// Sharded averaging: the kernel send buffer, in bytes, that members give their connections to owners on
  /// other hosts (WELCOME's `upload_buffer`; 0 = the kernel's autotuning). A small one keeps a member's
  /// K − 1 simultaneous uploads from overflowing a shallow queue on its link.
  std::uint64_t upload_buffer = 0;
};

/// Runs an averager_core as an actor: the shell around the sans-IO core. It decodes worker messages from
/// a transport and feeds them to the core with the connection they came in on, then carries out the
/// returned `actions`: records routes, writes checkpoints to its checkpoint_store, encodes and sends,
/// runs evaluations of x̄ on the compute pool (off the barrier path) and feeds the accuracy back, writes
/// the metrics lines, reports the end, and arms the timer for the core's tick().
/// Thread contract: all members run on the actor's strand (transport callbacks are forwarded with
/// `tell`); an evaluation model is owned by one compute job at a time. The transport is shared with the
/// process that made it.
class averager_actor : public actor {
 public:
  explicit averager_actor(averager_actor_config config);
  ~averager_actor() override;

  void on_start() override;
  void on_stop(const error& reason) override;

  /// Takes the transport to talk through (called once, right after spawn).
  void attach(std::shared_ptr<transport> link);
  /// Handles one multipart message from a worker.
  void on_wire(peer_id peer, multipart msg);
  /// Handles a message of `bytes` bytes that the I/O thread queued against the config's `inbox`.
  void on_queued(peer_id peer, multipart msg, std::size_t bytes);
  /// Handles a peer event (logged; liveness itself is the core's heartbeat timeout).
  void on_peer(const peer_event& event);
  /// Stops the job: STOP to every worker, final evaluation, done line.
  void finish();
  /// Ends this incarnation without ending the job (SIGTERM with a checkpoint directory): writes the
  /// held metrics lines, then a checkpoint of the open round, sends nothing to the workers (they wait for
  /// the averager and rejoin the next incarnation, which resumes the round), writes no done line, then
  /// reports on_done. Falls back to finish() without a checkpoint store; when the checkpoint write
  /// fails, the next incarnation resumes from the previous checkpoint.
  void suspend();
  /// Returns the current round (for tests and status).
  [[nodiscard]] round_t round() const;
  /// Returns the cumulative counters (for tests and status).
  [[nodiscard]] submission_counters counters() const;
  /// Returns how many times (round, member)'s model entered an average (for tests).
  [[nodiscard]] int times_counted(round_t r, member_id m) const;
  /// Returns the current members (for tests and status).
  [[nodiscard]] std::vector<member_id> members() const;
  /// Returns the evaluators connected now (for tests and status).
  [[nodiscard]] std::size_t evaluators() const noexcept { return evaluators_.size(); }
  /// Returns the job's status (what STATUS answers), with each member's host; empty before the start.
  [[nodiscard]] job_status status() const;
  /// Carries out an operator request from this process (the HTTP dashboard's steering, already
  /// authorised by its token); `by` names the requester in the log and the metrics line.
  [[nodiscard]] control_reply_msg control(control_op op, std::string arg, std::string by);

 private:
  /// The core's drop reasons that are also reported through on_drop: messages naming a member from
  /// elsewhere, and members removed because their RESTART could not be sent.
  static constexpr std::array<std::string_view, 4> forwarded_drops{"bad_token", "wrong_connection", "wrong_key",
                                                                   "send_failed_removed"};
  void report_core_drops();
  /// Carries out what the core asked for, in the order of the fields of `actions`.
  void apply(actions a);
  /// `filled`: sharded, x̄ is in `s` already (else the shell first gets it from the owners).
  void write_checkpoint(const checkpoint_state& s, bool filled = false);
  /// Sends `o`; returns the transport's error code when it refused (errc::none when sent or not routable).
  errc send(const outbound& o);
  void evaluate(evaluation_request request, bool filled = false);
  void on_evaluated(evaluation_request request, expected<evaluation_score> score);
  void write_line(const round_metrics& m);
  void report_done(const job_summary& s, bool filled = false);
  void rearm(std::optional<clock_source::time_point> wakeup);
  // Sharded averaging (config_.core.shard_owners > 0): the coordinator's side of the shard owners.
  /// Handles SHARD_HELLO, SHARD_ACK and SHARD_REPORT from an owner.
  void on_shard(peer_id peer, const shard_msg& msg);
  /// Holds a sliced MODEL header until every owner acknowledged its slice, then hands it to the core.
  void hold_model(const model_msg& m, peer_id from);
  void release_model(const std::tuple<round_t, member_id, session_token>& key);
  /// Sends `order` to every owner.
  void send_order(const shard_round_msg& order);
  /// Calls `use` with x̄_round once the owners reported it (asking them for it when needed).
  void with_model(round_t round, std::function<void(const flat_buffer&)> use);
  void check_owners();
  void fail_job(const std::string& why);
  /// Answers STATUS and CONTROL from operator clients (not members; the core never sees them).
  void on_operator(peer_id peer, const to_averager& msg);
  [[nodiscard]] control_reply_msg carry_out(const control_msg& m, const std::string& by);
  /// Whether evaluator processes score x̄ (averager_actor_config::remote_evaluation, or an external model).
  [[nodiscard]] bool evaluates_remotely() const noexcept {
    return config_.remote_evaluation || config_.external_size > 0;
  }
  /// Handles EVALUATOR_HELLO and EVALUATION from evaluator processes (the core never sees them: it only asks
  /// for evaluations and takes their results).
  void on_evaluator(peer_id peer, const to_averager& msg);
  /// Sends `request` to a connected evaluator, or reports it failed at once when none is connected.
  void evaluate_remotely(evaluation_request request);
  /// Fails evaluations past their deadline and forgets evaluators silent for the heartbeat timeout (or whose
  /// connection went down); rearms itself while there is anything to watch.
  void watch_evaluators();
  void fail_evaluations_of(peer_id peer, const char* why);

  /// What the transport said about an incoming connection when it came up.
  struct peer_info {
    std::string address;
    std::string client_key;
  };
  std::map<peer_id, peer_info> peer_info_;

  averager_actor_config config_;
  std::optional<averager_core> core_;
  std::shared_ptr<checkpoint_store> store_;
  std::shared_ptr<transport> link_;
  // Failed sends (a peer's queue full, a peer gone): warned about a few times per 10 s, and counted by the
  // transport (transport_stats::sends_refused, messages_dropped).
  rate_limiter send_failure_warnings_;
  rate_limiter malformed_warnings_;
  rate_limiter inbox_warnings_;
  std::optional<metrics_writer> writer_;
  std::map<member_id, peer_id> peers_;                                  // routes, as the core accepted them
  std::array<std::uint64_t, forwarded_drops.size()> reported_drops_{};  // core drops already handed to on_drop
  std::optional<timer_id> timer_;
  std::vector<std::shared_ptr<algorithms::model>> idle_evaluators_;
  /// Evaluator processes by connection: their nonce, when they last said hello, and requests in flight.
  struct evaluator_entry {
    incarnation_t nonce = 0;
    clock_source::time_point last_seen{};
    std::size_t in_flight = 0;
  };
  std::map<peer_id, evaluator_entry> evaluators_;
  struct remote_evaluation {
    evaluation_request request;
    peer_id peer = 0;
    clock_source::time_point deadline{};
  };
  std::map<std::uint64_t, remote_evaluation> remote_evaluations_;  // by request id
  std::optional<timer_id> evaluator_timer_;
  rate_limiter evaluator_warnings_;
  bool done_ = false;

  struct owner_slot {
    peer_id peer = 0;
    incarnation_t nonce = 0;
    std::string endpoint;
    clock_source::time_point last_seen{};
    bool ready = false;
  };
  /// A sliced MODEL header and the owners' receipts of its slices (either may come first).
  struct held_model {
    model_msg header;
    bool has_header = false;
    peer_id from = 0;
    std::vector<bool> acked;
    bool ok = true;
    double norm2 = 0;
  };
  [[nodiscard]] bool ring_gather() const noexcept;
  [[nodiscard]] bool all_owners_known() const noexcept;
  /// Sends owner k its SHARD_SETUP (with a ring gather only once every owner registered).
  void set_up_owner(std::size_t k);
  std::vector<owner_slot> owners_;
  bool owners_ready_ = false;
  bool orders_sent_ = false;
  bool failed_ = false;
  round_t owners_round_ = 0;  // the round of the slices the owners hold (the newest order's)
  std::map<std::tuple<round_t, member_id, session_token>, held_model> held_models_;
  std::map<round_t, std::vector<flat_buffer>> assembling_;  // reported slices of x̄_round, by owner
  std::map<round_t, flat_buffer> xbar_;                     // x̄ of the newest fetched rounds
  std::set<round_t> fetching_;                              // rounds whose slices were asked for
  std::vector<std::pair<round_t, std::function<void(const flat_buffer&)>>> waiting_;
  std::optional<timer_id> owner_timer_;
  rate_limiter shard_warnings_;
};

/// Spawns an averager_actor, makes its transport with `make_link` (handlers forward into the actor),
/// binds it to `listen` and returns the actor and the bound endpoint (e.g. "tcp://127.0.0.1:40121").
[[nodiscard]] expected<std::pair<actor_ref<averager_actor>, std::string>> start_averager(
    actor_system& system, averager_actor_config config, const transport_factory& make_link, const std::string& listen,
    std::shared_ptr<transport>* link_out = nullptr);

}  // namespace prsgd::actors
