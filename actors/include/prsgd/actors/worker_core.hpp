// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/actors/actions.hpp"
#include "prsgd/actors/protocol.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"
#include "prsgd/common/clock.hpp"

namespace prsgd::actors {

/// Configures a worker_core.
struct worker_config {
  /// This process's JOIN nonce (secure_random_u64 in `prsgd worker`): the averager tells repeated JOINs of
  /// one worker from JOINs of others by it and the connection. 0 is invalid.
  incarnation_t incarnation = 1;
  /// Fingerprints of the worker's model and training set, sent in JOIN; the averager refuses a worker whose
  /// fingerprints differ from the job's (empty = not declared).
  std::string model_fingerprint;
  std::string data_fingerprint;
  /// Expected local steps per second (0 = unknown), sent in JOIN.
  double speed_hint = 0;
  /// How often to heartbeat the averager (until WELCOME tells otherwise).
  std::chrono::nanoseconds heartbeat_interval{std::chrono::seconds(1)};
  /// Resend JOIN when no WELCOME came within this time.
  std::chrono::nanoseconds join_retry{std::chrono::seconds(1)};
  /// Treat the averager as gone (and keep sending JOIN) after this much silence.
  std::chrono::nanoseconds averager_timeout{std::chrono::seconds(5)};
  /// Give up when no WELCOME came within this time of starting to join (at start(), or at a rejoin after a
  /// removal, a new averager incarnation or the averager's silence): the core stops and says so in
  /// actions::gave_up. 0 = keep trying for ever.
  std::chrono::nanoseconds join_timeout{0};
  /// The slowest rate a payload is expected to move at, in bytes per second: after a HEARTBEAT that
  /// announces a RESTART of B bytes, the averager is not taken for gone before averager_timeout + B / this
  /// (docs/decisions/0024). Each MODEL is announced to the averager the same way. 0 = no allowance.
  double slowest_link_bytes_per_s = 125'000;
};

/// Reports a finished train_task to the worker_core.
struct train_result {
  /// The task's round.
  round_t round = 0;
  /// Local steps actually run (1 for a gradient).
  std::uint64_t steps = 0;
  std::uint64_t samples = 0;
  double loss_sum = 0;
  std::uint64_t loss_count = 0;
  /// The model after the steps (or the gradient).
  flat_buffer params;
};

/// Lists the worker's states (see worker_core's diagram).
enum class worker_state : std::uint8_t { joining, welcomed, training, submitted, left, stopped };

/// Returns "joining" | "welcomed" | "training" | "submitted" | "left" | "stopped".
[[nodiscard]] std::string_view to_string(worker_state s) noexcept;

/// Runs the worker side of the protocol, independent of training code: joins, accepts the right RESTART,
/// hands the owner a train_task, turns its result into MODEL, heartbeats, and rejoins a new averager
/// incarnation. Sans-IO: every entry point returns the `actions` the shell (worker_actor, or a test) must
/// carry out — messages for the averager, a task to start or cancel, the end, the next wakeup.
/// Not thread-safe; used only on the owning actor's strand. The clock must outlive it.
///
/// ```
///  start() (1)                (2) WELCOME         (3) RESTART(r) accepted: task
///  ───────► joining ────────────────────► welcomed ───────────────────► training
///             ▲  ▲ (7) REMOVED, or a new      │                          │    ▲
///             │  │     averager incarnation,  │ (3)                      │    │ (5) newer RESTART(r'):
///             │  │     or averager silent     ▼                          │    │     cancel, new task
///             │  └──────────────────────── submitted ◄───────────────────┘────┘
///             │                                 (4) on_trained(r): MODEL(r)
///             │ (3') RESTART from a new averager incarnation is accepted directly from any state
///   leave() (8) → left        STOP (9) → stopped      (6) submitted + RESTART(r+1) → training
///   joining for longer than join_timeout (10) → stopped, actions::gave_up
/// ```
/// A RESTART is accepted when it names this member and incarnation, comes from the newest averager
/// incarnation seen, and its round is newer than the last accepted one of that incarnation; anything
/// else is a duplicate, reordered or stale message and is ignored.
///
/// With a lossy job dtype (job_spec::wire) the core keeps the model of the last accepted RESTART: a
/// RESTART that carries a change against it is added to it (a change against any other model makes the
/// worker rejoin, which gets it the whole model), and MODEL carries x_i − that model, compressed with
/// error feedback (a gradient is compressed as it is).
class worker_core {
 public:
  /// Creates the core. @pre config.incarnation > 0
  worker_core(worker_config config, const clock_source& clk);

  /// Sends the first JOIN.
  [[nodiscard]] actions start();
  /// Handles any averager message.
  [[nodiscard]] actions on_message(const to_worker& m);
  /// Turns a finished task into MODEL (ignored when the task is obsolete).
  [[nodiscard]] actions on_trained(const train_result& r);
  /// Handles time: heartbeats, JOIN retries, averager silence.
  [[nodiscard]] actions tick();
  /// Leaves the job: LEAVE, then ignores everything.
  [[nodiscard]] actions leave();

  /// Returns when `tick()` should run next (empty when left or stopped).
  [[nodiscard]] std::optional<clock_source::time_point> next_wakeup() const;
  /// Returns the state.
  [[nodiscard]] worker_state state() const noexcept { return state_; }
  /// Returns the averager incarnation this worker follows (0 = none yet).
  [[nodiscard]] incarnation_t averager_incarnation() const noexcept { return averager_incarnation_; }
  /// Returns the round of the current (or last) task.
  [[nodiscard]] round_t round() const noexcept { return round_; }
  /// Returns the interval of the current (or last) task.
  [[nodiscard]] std::uint64_t interval() const noexcept { return interval_; }
  /// Returns the member id the averager assigned (0 before the first WELCOME, and while rejoining).
  [[nodiscard]] member_id member() const noexcept { return member_; }
  /// Returns the data shard the averager assigned and the number of shards.
  [[nodiscard]] std::uint64_t shard_index() const noexcept { return shard_index_; }
  [[nodiscard]] std::uint64_t num_shards() const noexcept { return num_shards_; }
  /// Returns how many MODEL messages this worker has sent.
  [[nodiscard]] std::uint64_t models_sent() const noexcept { return models_sent_; }
  /// Returns the model of the last accepted RESTART (empty before one, and after a rejoin).
  [[nodiscard]] const flat_buffer& restart_model() const noexcept { return ref_; }
  /// Returns the round of restart_model().
  [[nodiscard]] round_t restart_round() const noexcept { return ref_round_; }

 private:
  [[nodiscard]] join_msg make_join() const;
  void send(actions& out, any_msg m) const;
  [[nodiscard]] actions with_wakeup(actions out) const;
  void rejoin(actions& out);
  void accept_restart(const restart_msg& m, actions& out);
  void on_welcome(const welcome_msg& m, actions& out);

  worker_config config_;
  const clock_source* clock_;
  worker_state state_ = worker_state::joining;
  member_id member_ = 0;
  session_token token_ = 0;
  std::uint64_t shard_index_ = 0;
  std::uint64_t num_shards_ = 1;
  job_spec spec_;
  incarnation_t averager_incarnation_ = 0;
  bool have_restart_ = false;
  /// When the worker last started joining (start() or rejoin()): join_timeout counts from here.
  clock_source::time_point joining_since_{};
  round_t round_ = 0;
  std::uint64_t interval_ = 1;
  training_mode mode_ = training_mode::restarted_sgd;
  round_t last_finished_ = 0;
  std::uint64_t models_sent_ = 0;
  clock_source::time_point last_heard_{};
  clock_source::time_point quiet_until_{};  // an announced RESTART, or our MODEL, may be in flight until then
  clock_source::time_point next_heartbeat_{};
  clock_source::time_point next_join_{};
  // The model of the last accepted RESTART (round ref_round_), the base of RESTART changes and of MODEL
  // deltas, and what the lossy dtype dropped from earlier MODELs: one residual per slice of a sharded job
  // (WELCOME's owners; one slice in a star), each slice encoded on its own as the shard owner decodes it.
  flat_buffer ref_;
  round_t ref_round_ = 0;
  std::vector<algorithms::error_feedback> uplinks_{1};
};

}  // namespace prsgd::actors
