// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "prsgd/actors/averager_core.hpp"
#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::sim {

/// Describes one simulated job: the averager's policies, the workers, their links and their churn.
struct sim_config {
  /// Workers at the start (and the averager's min_workers).
  std::size_t workers = 8;
  /// Data shards = the most members at once; joiners beyond it wait for a free shard (0 = workers).
  std::size_t max_workers = 0;
  /// Trained rounds to run.
  std::uint64_t rounds = 100;
  /// I (fixed), or the mean I (time-balanced).
  std::uint64_t interval = 16;
  algorithms::interval_kind intervals = algorithms::interval_kind::fixed;
  actors::deadline_policy deadline = actors::deadline_policy::none;
  /// --deadline fixed: seconds after the round starts.
  double deadline_s = 10;
  double deadline_mad_k = 3;
  std::size_t quorum = 1;
  /// Floats of the model the links carry (P). The cores average a small stand-in of `core_floats`.
  double model_floats = 535'818;
  std::size_t core_floats = 4;
  /// Bytes of a message header on the wire (msgpack header and transport framing).
  double header_bytes = 96;
  /// Link rates in bytes/s, each direction (the averager's and every worker's), and one-way latency.
  double averager_rate = 12.5e6;
  double worker_rate = 12.5e6;
  double latency_s = 0.0002;
  /// Seconds per local step of the median worker; worker speeds spread log-uniformly over
  /// [1/speed_spread, speed_spread] times the median (1 = all equal).
  double step_s = 0.01;
  double speed_spread = 1;
  /// Each task is slowed by `straggler_factor` with this probability.
  double straggler_prob = 0;
  double straggler_factor = 4;
  /// Per worker and hour of simulated time: crashes (silent), leaves (LEAVE sent). Joins per hour (new
  /// workers with fresh links and speeds).
  double crash_per_hour = 0;
  double leave_per_hour = 0;
  double join_per_hour = 0;
  /// The averager's and workers' heartbeat interval and timeout (seconds).
  double heartbeat_s = 1;
  double heartbeat_timeout_s = 5;
  std::uint64_t seed = 1;
  /// Stop after this much simulated time even if the rounds are not done.
  double max_sim_s = 1e7;
};

/// Holds what a run measured.
struct sim_result {
  std::uint64_t rounds = 0;  ///< trained rounds
  double sim_s = 0;          ///< simulated seconds to the last round's close
  double rounds_per_hour = 0;
  double round_s_mean = 0;  ///< over trained rounds (the averager's round_s)
  double round_s_median = 0;
  double barrier_wait_s_mean = 0;  ///< first accepted submission to the close
  double utilisation = 0;          ///< worker compute time / worker lifetime, summed over workers
  double members_mean = 0;
  double averager_bytes_per_round = 0;     ///< averager link, in + out
  double worker_bytes_per_round_max = 0;   ///< the busiest worker link, in + out, over the run / rounds
  double worker_bytes_per_round_mean = 0;  ///< over workers that ever joined
  std::uint64_t closed_by_deadline = 0;
  std::uint64_t crashes = 0, leaves = 0, joins = 0, removed = 0;
  std::uint64_t events = 0;
  double wall_s = 0;  ///< real seconds the simulation took
  double cpu_s = 0;   ///< CPU seconds it took (wall_s also counts waiting for a loaded CPU)
};

/// Runs one job: the real averager_core and one worker_core per worker on a fake clock, messages carried
/// by a network model (per-host up and down links shared by the host's transfers, a latency), training
/// replaced by a delay drawn from the worker's speed. Returns invalid_argument for a bad configuration.
[[nodiscard]] expected<sim_result> simulate(const sim_config& config);

/// Returns `r` as one JSON object (no newline).
[[nodiscard]] std::string to_json(const sim_result& r);

}  // namespace prsgd::sim
