// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/actors/checkpoint.hpp"
#include "prsgd/actors/metrics.hpp"
#include "prsgd/actors/protocol.hpp"
#include "prsgd/common/clock.hpp"

namespace prsgd::actors {

/// Holds one message a core wants sent.
struct outbound {
  /// The worker at the other end: the recipient of an averager message, the sender of a worker message.
  member_id member = 0;
  /// The message.
  any_msg msg;
  /// Set on a reply to a sender the core has not accepted (REMOVED to an unknown worker, STOP to a late
  /// joiner): send it on the connection the message came in on, and record no route for it.
  std::optional<origin_t> via;
};

/// Tells the averager shell where `member`'s messages go from now on: the core accepted a JOIN or a MODEL
/// of the member's current incarnation that arrived on `via`.
struct route {
  member_id member = 0;
  origin_t via = 0;
};

/// Asks a worker shell to train: restart from `model`, run `interval` local steps with `step_size` (or, in
/// minibatch_sgd mode, compute one mini-batch gradient at `model`), then call worker_core::on_trained.
struct train_task {
  round_t round = 0;
  flat_buffer model;
  std::uint64_t interval = 1;
  double step_size = 0;
  training_mode mode = training_mode::restarted_sgd;
  /// The data shard the averager assigned (WELCOME) and the job's batch size and seed (0 = the shell's own).
  std::uint64_t shard_index = 0;
  std::uint64_t num_shards = 1;
  std::uint64_t batch_size = 0;
  std::uint64_t seed = 0;
  /// The samples to train on (RESTART's ranges); empty = draw batches from the shard's sampler.
  std::vector<index_range> ranges;
  /// The member id: with `seed` and `round`, it seeds the order the member visits its ranges in.
  member_id member = 0;
};

/// Asks the averager shell to score x̄ on its test set and report with averager_core::on_evaluated(id, ...).
struct evaluation_request {
  /// Names the request in on_evaluated; increases by one per request.
  std::uint64_t id = 0;
  /// Rounds closed when x̄ was taken: the model is x̄_rounds.
  round_t rounds = 0;
  /// x̄, shared read-only (no copy).
  flat_buffer model;
  /// True for the job's final x̄ (the last closed round's, or the current one when the job was stopped).
  bool final = false;
};

/// Holds one evaluation of x̄: its test accuracy and, when the evaluator computed it, its mean test
/// cross-entropy.
struct evaluation_score {
  double accuracy = 0;
  std::optional<double> loss;
};

/// Returns the score of x̄ evaluated on the test set: a test loss that is NaN or infinite is reported as none.
[[nodiscard]] inline evaluation_score score_of(double accuracy, double loss) {
  return {accuracy, std::isfinite(loss) ? std::optional<double>{loss} : std::nullopt};
}

/// Holds the averager's cumulative counters of submissions, by what happened to them.
struct submission_counters {
  std::uint64_t accepted = 0;
  std::uint64_t late = 0;
  std::uint64_t duplicate = 0;
  std::uint64_t rejected = 0;
  /// Messages naming a member without its session token or from another connection (any type).
  std::uint64_t unauthorised = 0;
  /// JOINs answered with REFUSED (another model or data set).
  std::uint64_t refused = 0;
};

/// Summarises an averager incarnation once it owes nothing more (see actions::done).
struct job_summary {
  /// Rounds closed, over all incarnations (the current round r), empty ones included.
  round_t rounds = 0;
  /// Rounds that trained (closed with at least one submission), over all incarnations.
  std::uint64_t trained_rounds = 0;
  /// Test accuracy of the last x̄ evaluated (empty without evaluations, or when they all failed).
  std::optional<double> test_acc;
  /// Mean test cross-entropy of the same x̄ (empty when that evaluation reported none).
  std::optional<double> test_loss;
  /// Seconds from this incarnation's start to the end.
  double wall_s = 0;
  /// Payload bytes received and sent over this incarnation's closed rounds.
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  /// Cumulative drop counters.
  submission_counters counters;
  /// x̄ at the end, shared read-only.
  flat_buffer model;
  /// True when the job is over (STOP was sent): the metrics file gets its done line. False when only
  /// this incarnation ended (suspended after a checkpoint; a later incarnation resumes the job).
  bool job_over = true;
  /// With checkpoints on and the job over: the final state, marked `finished`, for the shell to write
  /// after the done line, so that an averager started on the store later finds the job finished.
  std::optional<checkpoint_state> final_checkpoint;
};

/// Lists what a shell must do after it fed one event to a protocol core (averager_core or worker_core).
/// The shell works through the fields in declaration order; each core fills only the fields that apply
/// to it (marked). Doing them in this order keeps the guarantees the cores rely on: a route is known
/// before a message is sent over it, metrics lines come out in round order, and the metrics lines of
/// every round before a checkpoint's round are written before that checkpoint (the core hands a
/// checkpoint out only with or after those lines), so a crash at any point leaves each closed round of
/// the resumed history with its line: rounds at or after the checkpoint's round run again and the
/// resumed incarnation drops their earlier lines (metrics_writer::open_resumed).
struct actions {
  /// 1. (averager) Record these routes: later messages for `member` go over `via`.
  std::vector<route> routes;
  /// 2. Send these messages, in order (averager: to `member`'s route or `via`; worker: to the averager).
  std::vector<outbound> sends;
  /// 2b. (averager, sharded averaging) Send these orders to every shard owner, in order.
  std::vector<shard_round_msg> shard_orders;
  /// 3. (worker) Abandon the running train_task: it is obsolete and its result would be ignored.
  bool cancel_task = false;
  /// 4. (worker) Start this train_task; it supersedes any task still running.
  std::optional<train_task> task;
  /// 5. (averager) Start these evaluations; report each with averager_core::on_evaluated.
  std::vector<evaluation_request> evaluations;
  /// 6. (averager) Write these finished metrics lines, in this (round) order.
  std::vector<round_metrics> lines;
  /// 7. (averager) Write these checkpoints to the checkpoint store, each followed by pruning the store.
  std::vector<checkpoint_state> checkpoints;
  /// 8. True once the protocol is over for this core (worker: STOP received or left; averager: STOP
  /// sent or suspended); later events change nothing.
  bool stopped = false;
  /// 8b. (worker) Set with `stopped` when the averager refused the JOIN: the difference it named. The
  /// shell reports it as one line and the worker process exits with status 1.
  std::optional<std::string> refused;
  /// 8c. (worker) Set with `stopped` when no averager welcomed the worker within worker_config::join_timeout:
  /// what it waited for. The shell reports it as one line and the worker process exits with status 1.
  std::optional<std::string> gave_up;
  /// 9. (averager) Set once, when the incarnation owes nothing more (every line out, the final
  /// evaluation in): write the done line if `job_over`, then `final_checkpoint` if set, then report the
  /// summary.
  std::optional<job_summary> done;
  /// 10. Arm the timer that calls tick() at this time, replacing any armed one (empty: no timer).
  std::optional<clock_source::time_point> wakeup;
};

}  // namespace prsgd::actors
