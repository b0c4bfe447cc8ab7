// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::actors {

// What `prsgd status`, the dashboard and /api/status show of a running job: a snapshot the averager core
// takes (averager_core::status), sent in STATUS_REPLY (msgpack) and served as JSON. Times are seconds;
// "-1" means unknown. Each struct lists its fields once, in `fields`, for the codec and the JSON writer.

/// Describes one member (or joiner) of the job.
struct member_status {
  /// The id the averager assigned.
  std::uint64_t id = 0;
  /// Where its messages come from (the connection's peer address; empty when unknown).
  std::string host;
  /// Its JOIN nonce.
  std::uint64_t incarnation = 0;
  /// "training" (restarted, not submitted yet), "waiting" (submitted, waits at the barrier), "joining"
  /// (welcomed, admitted at the next barrier) or "paused" (the job is paused).
  std::string state;
  /// The data shard it holds.
  std::uint64_t shard = 0;
  /// I_i assigned for the current round.
  std::uint64_t interval = 0;
  /// Measured local steps per second (moving average; 0 until measured).
  double steps_per_s = 0;
  /// Seconds it waited at the barrier in the last round it submitted to, and on average.
  double idle_last_s = -1;
  double idle_mean_s = -1;
  /// Seconds since the averager last heard from it.
  double last_seen_s = 0;
  /// Payload bytes received from it and sent to it.
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  /// Its submissions that came late, or were rejected.
  std::uint64_t late = 0;
  std::uint64_t rejected = 0;

  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("id", s.id);
    f("host", s.host);
    f("incarnation", s.incarnation);
    f("state", s.state);
    f("shard", s.shard);
    f("interval", s.interval);
    f("steps_per_s", s.steps_per_s);
    f("idle_last_s", s.idle_last_s);
    f("idle_mean_s", s.idle_mean_s);
    f("last_seen_s", s.last_seen_s);
    f("bytes_in", s.bytes_in);
    f("bytes_out", s.bytes_out);
    f("late", s.late);
    f("rejected", s.rejected);
  }
};

/// Describes a member the averager removed recently.
struct removed_status {
  std::uint64_t id = 0;
  std::uint64_t incarnation = 0;
  /// The round it was removed in.
  std::uint64_t round = 0;
  /// Seconds ago.
  double ago_s = 0;
  /// Why: "left", "heartbeat timeout", "no submission ...", "removed by an operator".
  std::string reason;

  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("id", s.id);
    f("incarnation", s.incarnation);
    f("round", s.round);
    f("ago_s", s.ago_s);
    f("reason", s.reason);
  }
};

/// Describes the whole job.
struct job_status {
  /// The model's name and the job's model and data fingerprints (empty when not set).
  std::string model;
  std::string fingerprint;
  std::string data_fingerprint;
  /// The averager's state: "idle", "rejoin_wait", "collecting", "paused" or "stopped".
  std::string state;
  /// True while a pause is asked for or in effect (rounds stop starting at the next barrier).
  bool paused = false;
  /// This averager's incarnation.
  std::uint64_t averager_incarnation = 0;
  /// The open round r, the rounds that trained, and the planned trained rounds (0: open-ended).
  std::uint64_t round = 0;
  std::uint64_t trained_rounds = 0;
  std::uint64_t rounds_total = 0;
  /// Epochs done (-1: unknown) and the estimated seconds left (-1: unknown).
  double epoch = -1;
  double eta_s = -1;
  /// Seconds since this averager started.
  double wall_s = 0;
  /// The averaging rule of the last closed round ("samples", "uniform", "step-normalised"; "auto"
  /// before the first close when no rule is fixed) and the aggregation ("mean", "median", ...).
  std::string rule;
  std::string aggregation;
  /// How I_i is chosen ("fixed", "per-worker", "paper", "time-balanced") and the configured I.
  std::string interval_policy;
  std::uint64_t interval = 0;
  /// When the barrier may close early ("none", "fixed", "adaptive"), and the fixed deadline in seconds.
  std::string deadline;
  double deadline_s = 0;
  /// Test accuracy of the newest evaluated x̄ (-1: none yet).
  double test_acc = -1;
  /// Mean test cross-entropy of the same x̄ (-1: none, or its evaluation reported no loss).
  double test_loss = -1;
  /// Cumulative submissions by outcome.
  std::uint64_t accepted = 0;
  std::uint64_t late = 0;
  std::uint64_t duplicate = 0;
  std::uint64_t rejected = 0;
  /// Payload bytes over this incarnation's closed rounds.
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  /// M_r, the joiners waiting for the next barrier, and the members removed recently (newest last).
  std::vector<member_status> members;
  std::vector<member_status> pending;
  std::vector<removed_status> removed;

  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("model", s.model);
    f("fingerprint", s.fingerprint);
    f("data_fingerprint", s.data_fingerprint);
    f("state", s.state);
    f("paused", s.paused);
    f("averager_incarnation", s.averager_incarnation);
    f("round", s.round);
    f("trained_rounds", s.trained_rounds);
    f("rounds_total", s.rounds_total);
    f("epoch", s.epoch);
    f("eta_s", s.eta_s);
    f("wall_s", s.wall_s);
    f("rule", s.rule);
    f("aggregation", s.aggregation);
    f("interval_policy", s.interval_policy);
    f("interval", s.interval);
    f("deadline", s.deadline);
    f("deadline_s", s.deadline_s);
    f("test_acc", s.test_acc);
    f("test_loss", s.test_loss);
    f("accepted", s.accepted);
    f("late", s.late);
    f("duplicate", s.duplicate);
    f("rejected", s.rejected);
    f("bytes_in", s.bytes_in);
    f("bytes_out", s.bytes_out);
    f("members", s.members);
    f("pending", s.pending);
    f("removed", s.removed);
  }
};

/// Returns `s` as one JSON object (no newline); unknown values (-1) are written as null.
[[nodiscard]] std::string to_json(const job_status& s);

/// Returns `s` as the table `prsgd status` prints: a job block, one row per member, then the joiners and
/// the removed members.
[[nodiscard]] std::string to_table(const job_status& s);

/// Lists what an operator may ask of a running job (`prsgd ctl`).
enum class control_op : std::uint8_t {
  /// Start no further round after the next barrier (members keep their place).
  pause,
  /// Start rounds again.
  resume,
  /// Send STOP to member `arg` and drop it (its worker ends).
  remove,
  /// Use interval I = `arg` from the next round.
  set_interval,
  /// Use interval policy `arg` (fixed | per-worker | paper | time-balanced) from the next round.
  set_policy,
  /// Use deadline `arg` ("none", "adaptive", or "fixed:SECONDS") from the next round.
  set_deadline,
  /// Write a checkpoint of the open round now.
  checkpoint,
  /// End the job: STOP to everybody, final evaluation, done line.
  stop,
};

/// Parses "pause" | "resume" | "remove" | "set-interval" | "set-policy" | "set-deadline" | "checkpoint" |
/// "stop"; invalid_argument otherwise.
[[nodiscard]] expected<control_op> parse_control_op(std::string_view name);
/// Returns the name parse_control_op accepts.
[[nodiscard]] std::string_view to_string(control_op op) noexcept;
/// Returns true when `op` needs an argument.
[[nodiscard]] bool needs_argument(control_op op) noexcept;

/// Says whether a steering request may be carried out: with CURVE on, only when the client's public key
/// (Z85) is one of `operator_keys`; without CURVE, only when it came from a loopback address
/// (127.0.0.0/8, ::1, or an ipc:// / inproc:// connection). An empty key or address never qualifies.
struct steering_rule {
  bool curve = false;
  std::vector<std::string> operator_keys;
};
[[nodiscard]] bool may_steer(const steering_rule& rule, std::string_view client_key, std::string_view peer_address);

}  // namespace prsgd::actors
