// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/role_config.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "prsgd/algorithms/aggregation.hpp"
#include "prsgd/algorithms/outer_optimizer.hpp"
#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;

expected<std::optional<algorithms::outer_config>> outer_from(const schedule_options& s) {
  if (s.outer == "none") {
    return std::optional<algorithms::outer_config>{};
  }
  auto kind = algorithms::parse_outer_kind(s.outer);
  PRSGD_TRY(kind);
  algorithms::outer_config outer;
  outer.kind = *kind;
  outer.lr = static_cast<float>(s.outer_lr);
  outer.momentum = static_cast<float>(s.outer_momentum);
  return std::optional<algorithms::outer_config>{outer};
}

}  // namespace

expected<actors::averager_actor_config> averager_config_from(const averager_options& o, const job_data& data,
                                                             const job_length& plan,
                                                             actors::incarnation_t incarnation) {
  const schedule_options& s = o.schedule;
  actors::averager_actor_config cfg;
  auto& core = cfg.core;

  auto mode = actors::parse_training_mode(s.mode);
  PRSGD_TRY(mode);
  core.mode = *mode;
  core.rule = averaging_rule_for(s, o.model);
  auto aggregate = algorithms::parse_aggregate_rule(s.aggregate);
  PRSGD_TRY(aggregate);
  core.aggregate.rule = *aggregate;
  core.aggregate.trim = s.trim;
  core.aggregate.clip = s.clip;
  core.screen_k = s.screen_k;
  if (core.mode == actors::training_mode::minibatch_sgd) {
    core.minibatch_momentum = o.model.momentum;  // the averager takes the SGD step (workers send gradients)
  }

  auto intervals = algorithms::parse_interval_kind(s.interval_policy);
  PRSGD_TRY(intervals);
  core.intervals = *intervals;
  // fixed / paper / minibatch: the planned I (for paper the core derives the same I from total_steps);
  // per-worker: the default for workers without an --intervals entry; time-balanced: the target mean.
  const bool planned = core.intervals == algorithms::interval_kind::fixed ||
                       core.intervals == algorithms::interval_kind::paper ||
                       core.mode == actors::training_mode::minibatch_sgd;
  core.interval = planned ? plan.interval : static_cast<std::uint64_t>(s.interval);
  for (std::size_t i = 0; i < s.intervals.size(); ++i) {
    core.per_worker_intervals[static_cast<actors::member_id>(i)] = static_cast<std::uint64_t>(s.intervals[i]);
  }
  core.total_steps = plan.total_steps;

  auto step_sizes = algorithms::parse_lr_kind(s.step_size);
  PRSGD_TRY(step_sizes);
  if (*step_sizes != algorithms::lr_kind::constant && *step_sizes != algorithms::lr_kind::paper) {
    return fail(errc::invalid_argument, "--step-size must be constant or paper (got '" + s.step_size + "')");
  }
  core.step_sizes = *step_sizes;
  core.step_size = o.model.lr;
  core.step_size_c = o.model.lr;
  core.warmup_rounds = static_cast<std::uint64_t>(s.warmup_rounds);

  auto deadline = actors::parse_deadline_policy(s.deadline);
  PRSGD_TRY(deadline);
  core.deadline = *deadline;
  core.fixed_deadline = std::chrono::milliseconds{s.deadline_ms};
  core.mad_k = s.deadline_mad_k;
  core.quorum = static_cast<std::size_t>(s.quorum);

  auto outer = outer_from(s);
  PRSGD_TRY(outer);
  core.outer = *outer;

  core.heartbeat_interval = std::chrono::milliseconds{o.liveness.heartbeat_ms};
  core.heartbeat_timeout = std::chrono::milliseconds{o.liveness.heartbeat_timeout_ms};
  core.slowest_link_bytes_per_s = o.liveness.slowest_link_mbit * 1e6 / 8;
  core.rejoin_grace = std::max<std::chrono::nanoseconds>(2s, 2 * core.heartbeat_timeout);
  core.checkpoint_every = static_cast<std::uint64_t>(s.checkpoint_every);
  core.max_rounds = plan.rounds;
  core.min_workers = static_cast<std::size_t>(std::max(s.min_workers, 1));
  core.idle_rounds = static_cast<std::uint64_t>(s.idle_rounds);
  core.shards = static_cast<std::size_t>(std::max(s.max_workers, 0));
  auto fingerprint = model_fingerprint(o.model, data);
  PRSGD_TRY(fingerprint);
  core.spec.model = std::move(*fingerprint);
  core.spec.data = data_fingerprint(data);
  core.spec.batch_size = static_cast<std::uint64_t>(o.model.batch);
  core.spec.seed = o.model.seed;
  auto wire = algorithms::parse_wire_dtype(s.wire_dtype);
  PRSGD_TRY(wire);
  core.spec.wire = *wire;

  cfg.model_name = o.model.model;
  cfg.model = data.model;
  cfg.test_set = data.test;
  core.eval_every = static_cast<std::uint64_t>(s.eval_every);
  core.rounds_per_epoch = plan.rounds_per_epoch;
  if (!o.model.non_iid && data.train_size > 0) {
    // The averager hands every member its samples per round; an epoch is one pass over the data, however
    // many members share it. Blocks of at least 256 samples, about 16 to a member's round.
    core.data_samples = data.train_size;
    core.data_block = std::max<std::uint64_t>(256, plan.interval * core.spec.batch_size / 16);
    if (s.rounds <= 0) {
      core.max_epochs = static_cast<std::uint64_t>(std::max(s.epochs, 0));
      core.max_rounds = 0;
    }
  }
  cfg.checkpoint_dir = s.checkpoint_dir;
  cfg.incarnation = incarnation;
  cfg.metrics_jsonl = o.output.metrics_jsonl;
  return cfg;
}

expected<actors::worker_actor_config> worker_config_from(const worker_options& o, const job_data& data,
                                                         actors::incarnation_t incarnation) {
  if (o.model.momentum_on_restart != "keep" && o.model.momentum_on_restart != "reset") {
    return fail(errc::invalid_argument,
                "--momentum-on-restart must be keep or reset (got '" + o.model.momentum_on_restart + "')");
  }
  actors::worker_actor_config cfg;
  cfg.core.incarnation = incarnation;
  auto fingerprint = model_fingerprint(o.model, data);
  PRSGD_TRY(fingerprint);
  cfg.core.model_fingerprint = std::move(*fingerprint);
  cfg.core.data_fingerprint = data_fingerprint(data);
  cfg.core.heartbeat_interval = std::chrono::milliseconds{o.liveness.heartbeat_ms};
  cfg.core.averager_timeout = std::chrono::milliseconds{o.liveness.heartbeat_timeout_ms};
  cfg.core.slowest_link_bytes_per_s = o.liveness.slowest_link_mbit * 1e6 / 8;
  cfg.core.join_retry = std::max<std::chrono::nanoseconds>(std::chrono::milliseconds{o.liveness.heartbeat_ms}, 200ms);
  cfg.model_name = o.model.model;
  cfg.model = data.model;
  cfg.sgd.learning_rate = static_cast<float>(o.model.lr);
  cfg.sgd.momentum = static_cast<float>(o.model.momentum);
  cfg.keep_momentum = o.model.momentum_on_restart == "keep";
  cfg.train_set = data.train;
  cfg.shard.seed = o.model.seed;
  if (o.model.non_iid) {
    cfg.shard.scheme = algorithms::shard_scheme::dirichlet;
    cfg.shard.alpha = o.model.dirichlet_alpha;
  }
  cfg.batch_size = static_cast<std::size_t>(o.model.batch);
  cfg.slowdown = std::chrono::milliseconds{o.slowdown_ms};
  return cfg;
}

expected<void> limit_frames_to_model(transport_config& cfg, std::size_t num_params) {
  constexpr std::size_t room = std::size_t{1} << 20;
  constexpr std::size_t hard_cap = std::size_t{1} << 34;  // 16 GiB: beyond what ZeroMQ and this host handle
  const std::uint64_t codec_cap = actors::codec_limits{}.max_model_floats;
  if (num_params > codec_cap) {
    return fail(errc::too_large, "the model has " + std::to_string(num_params) +
                                     " parameters: a training message carries at most " + std::to_string(codec_cap));
  }
  if (num_params > (hard_cap - room) / sizeof(float)) {
    return fail(errc::too_large, "the model has " + std::to_string(num_params) +
                                     " parameters: its frame would exceed the transport's limit of 16 GiB");
  }
  cfg.max_frame_bytes = num_params * sizeof(float) + room;
  return {};
}

}  // namespace prsgd::cli
