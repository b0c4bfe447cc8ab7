// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "prsgd/actors/averager_core.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/metrics.hpp"
#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::actors {

/// Makes the transport an actor talks through; the handlers forward into the actor (see start_*).
using transport_factory = std::function<expected<std::unique_ptr<transport>>(transport_handlers)>;

/// Summarises a finished job, as the averager saw it.
struct job_summary {
  /// Rounds closed.
  round_t rounds = 0;
  /// Test accuracy of the final model (empty without a test set).
  std::optional<double> test_acc;
  /// Seconds from the averager's start to the end.
  double wall_s = 0;
  /// Payload bytes received and sent over all rounds.
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  /// Cumulative drop counters.
  submission_counters counters;
};

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

/// Configures an averager_actor.
struct averager_actor_config {
  /// The barrier protocol.
  averager_config core;
  /// The model's initial parameters come from this registry model (and seed); it is also what the
  /// evaluator builds to score x̄.
  std::string model_name;
  algorithms::model_config model;
  /// Test set for evaluation (null: no evaluation).
  std::shared_ptr<const algorithms::dataset> test_set;
  /// Evaluate x̄ after every K-th round (0: only at epoch ends and the end).
  std::uint64_t eval_every = 0;
  /// Rounds that make one epoch over the training set (0: unknown); x̄ is evaluated at each epoch end.
  std::uint64_t rounds_per_epoch = 0;
  /// JSON-lines metrics file (empty: none).
  std::string metrics_jsonl;
  /// Limits for decoding worker messages.
  codec_limits limits;
  /// Called on the actor's strand after each round's metrics line is final (test_acc filled in).
  std::function<void(const round_metrics&)> on_round;
  /// Called on the actor's strand with every evaluated x̄, then once with the final x̄ (see
  /// model_snapshot). Keep it short: copy the pointer and write elsewhere.
  std::function<void(const model_snapshot&)> on_model;
  /// Called once on the actor's strand when the job is over (after the done line).
  std::function<void(const job_summary&)> on_done;
};

/// Runs an averager_core as an actor: decodes worker messages from a transport, feeds the core, sends
/// its outbound messages, fires its timers, evaluates x̄ off the barrier path on the compute pool, and
/// writes per-round metrics.
/// Thread contract: all members run on the actor's strand (transport callbacks are forwarded with
/// `tell`). The transport is shared with the process that made it and outlives nothing it is given.
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
  /// Handles a peer event (logged; liveness itself is the core's heartbeat timeout).
  void on_peer(const peer_event& event);
  /// Stops the job: STOP to every worker, final evaluation, done line.
  void finish();
  /// Ends this incarnation without ending the job (SIGTERM with a checkpoint directory): writes a
  /// checkpoint of the open round, sends nothing to the workers (they wait for the averager and rejoin
  /// the next incarnation, which resumes the round), writes no done line, then reports on_done.
  /// Falls back to finish() when the checkpoint cannot be written.
  void suspend();
  /// Returns the current round (for tests and status).
  [[nodiscard]] round_t round() const;
  /// Returns the cumulative counters (for tests and status).
  [[nodiscard]] submission_counters counters() const;
  /// Returns how many times (round, member)'s model entered an average (for tests).
  [[nodiscard]] int times_counted(round_t r, member_id m) const;
  /// Returns the current members (for tests and status).
  [[nodiscard]] std::vector<member_id> members() const;

 private:
  struct pending_line {
    round_metrics metrics;
    bool awaiting_eval = false;
  };
  void send_all(std::vector<outbound> out);
  void after_event();
  void rearm();
  void collect_metrics();
  void request_eval(round_t round, flat_buffer model);
  void pump_eval();
  void on_evaluated(round_t round, expected<double> acc);
  void flush_lines();
  void maybe_done();
  /// Marks this incarnation over: stops the timer and fills the summary (finish and suspend share it).
  void end_incarnation();

  averager_actor_config config_;
  std::optional<averager_core> core_;
  std::shared_ptr<transport> link_;
  std::optional<metrics_writer> writer_;
  std::map<member_id, peer_id> peers_;
  std::optional<timer_id> timer_;
  std::deque<pending_line> lines_;
  std::unique_ptr<algorithms::model> eval_model_;
  bool evaluating_ = false;
  model_snapshot evaluating_model_;  // what the running evaluation scores (for on_model)
  std::deque<std::pair<round_t, flat_buffer>> eval_queue_;
  std::optional<double> last_acc_;
  job_summary summary_;
  bool done_ = false;
  bool final_eval_requested_ = false;
  bool final_eval_done_ = false;
  clock::time_point started_{};
  static constexpr round_t final_round_marker = ~round_t{0};
};

/// Spawns an averager_actor, makes its transport with `make_link` (handlers forward into the actor),
/// binds it to `listen` and returns the actor and the bound endpoint (e.g. "tcp://127.0.0.1:40121").
[[nodiscard]] expected<std::pair<actor_ref<averager_actor>, std::string>> start_averager(
    actor_system& system, averager_actor_config config, const transport_factory& make_link, const std::string& listen,
    std::shared_ptr<transport>* link_out = nullptr);

}  // namespace prsgd::actors
