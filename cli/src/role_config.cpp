// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/role_config.hpp"

#include "external_model.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "option_tables.hpp"
#include "prsgd/actors/codec.hpp"
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
  core.shard_owners = s.topology == "sharded" ? static_cast<std::size_t>(std::max(s.shards, 1)) : 0;
  core.ring_gather = s.topology == "sharded" && s.gather == "ring";
  core.compress_between_hosts = s.topology == "sharded" && s.wire_compress == "zstd";
  if (o.model.model == external_model_name) {
    // The averager never sees an external job's data: members declare the label hash (labels_from_members).
    core.spec.model = external_model_fingerprint(static_cast<std::size_t>(o.external.model_size));
    core.spec.data = external_data_fingerprint(o.external.train_size);
    core.labels_from_members = true;
    core.spec.batch_size = static_cast<std::uint64_t>(o.model.batch);
    core.spec.seed = o.model.seed;
  } else {
    auto spec = job_spec_from(o.model, data);
    PRSGD_TRY(spec);
    core.spec = std::move(*spec);
  }
  auto wire = algorithms::parse_wire_dtype(s.wire_dtype);
  PRSGD_TRY(wire);
  core.spec.wire = *wire;

  cfg.model_name = o.model.model;
  cfg.model = data.model;
  cfg.upload_buffer = static_cast<std::uint64_t>(s.upload_buffer_kib) * 1024;
  // Evaluator processes score x̄ for an external model always, for a built-in one with --evaluate-on
  // evaluators; the averager then never runs the test set itself.
  cfg.remote_evaluation = s.evaluate_on == "evaluators" || o.model.model == external_model_name;
  cfg.test_set = cfg.remote_evaluation ? nullptr : data.test;
  cfg.evaluation_timeout = std::chrono::milliseconds{o.external.eval_timeout_ms};
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
  cfg.core.join_timeout = std::chrono::milliseconds{o.join_timeout_ms};
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

expected<actors::job_spec> job_spec_from(const model_options& m, const job_data& data) {
  actors::job_spec spec;
  auto fingerprint = model_fingerprint(m, data);
  PRSGD_TRY(fingerprint);
  spec.model = std::move(*fingerprint);
  spec.data = data_fingerprint(data);
  spec.batch_size = static_cast<std::uint64_t>(m.batch);
  spec.seed = m.seed;
  spec.model_name = m.model;
  spec.dataset = data.name;
  spec.data_options = m.data_options;
  spec.non_iid = m.non_iid;
  spec.dirichlet_alpha = m.dirichlet_alpha;
  spec.lr = m.lr;
  spec.momentum = m.momentum;
  spec.keep_momentum = m.momentum_on_restart != "reset";
  PRSGD_TRY(actors::check_spec_fits(spec));
  return spec;
}

namespace {

// "batch mismatch: --batch 32 was given, the job at tcp://h:7500 uses 64".
prsgd::unexpected mismatch(const std::string& field, const std::string& option, const std::string& given,
                           const std::string& averager, const std::string& verb, const std::string& job) {
  return fail(errc::invalid_argument, field + " mismatch: " + option + " " + given + " was given, the job at " +
                                          averager + " " + verb + " " + job);
}

std::string data_options_text(const std::vector<std::string>& options) {
  if (options.empty()) {
    return "none";
  }
  std::string out;
  for (const auto& kv : options) {
    out += (out.empty() ? "" : ",") + kv;
  }
  return out;
}

}  // namespace

expected<model_options> adopt_job_spec(const actors::job_spec& spec, const model_options& o,
                                       const std::vector<std::string>& given, const std::string& averager) {
  const auto is_given = [&](std::string_view name) {
    return std::find(given.begin(), given.end(), name) != given.end();
  };
  model_options out = o;
  out.model = spec.model_name;
  out.dataset = spec.dataset;
  out.data_options = spec.data_options;
  out.batch = static_cast<int>(spec.batch_size);
  out.lr = spec.lr;
  out.momentum = spec.momentum;
  out.momentum_on_restart = spec.keep_momentum ? "keep" : "reset";
  out.seed = spec.seed;
  out.non_iid = spec.non_iid;
  out.dirichlet_alpha = spec.dirichlet_alpha;
  // In the order of --help, so that the first disagreement named is the first option listed.
  if (is_given("--model") && o.model != spec.model_name) {
    return mismatch("model", "--model", o.model, averager, "trains", spec.model_name);
  }
  if (is_given("--dataset")) {
    // "auto" means the data set of the model: the given one, else the job's.
    model_options resolved = o;
    resolved.model = is_given("--model") ? o.model : spec.model_name;
    if (resolve_dataset(resolved) != spec.dataset) {
      return mismatch("data set", "--dataset", o.dataset, averager, "trains on", spec.dataset);
    }
  }
  if (is_given("--data-option")) {
    auto mine = parse_data_options(o.data_options);
    PRSGD_TRY(mine);
    auto theirs = parse_data_options(spec.data_options);
    PRSGD_TRY(theirs);
    if (*mine != *theirs) {
      return mismatch("data option", "--data-option", data_options_text(o.data_options), averager, "uses",
                      data_options_text(spec.data_options));
    }
  }
  if (is_given("--batch") && static_cast<std::uint64_t>(o.batch) != spec.batch_size) {
    return mismatch("batch", "--batch", std::to_string(o.batch), averager, "uses", std::to_string(spec.batch_size));
  }
  if (is_given("--lr") && o.lr != spec.lr) {
    return mismatch("step size", "--lr", detail::number_text(o.lr), averager, "uses", detail::number_text(spec.lr));
  }
  if (is_given("--momentum") && o.momentum != spec.momentum) {
    return mismatch("momentum", "--momentum", detail::number_text(o.momentum), averager, "uses",
                    detail::number_text(spec.momentum));
  }
  if (is_given("--momentum-on-restart") && o.momentum_on_restart != out.momentum_on_restart) {
    return mismatch("momentum on restart", "--momentum-on-restart", o.momentum_on_restart, averager, "uses",
                    out.momentum_on_restart);
  }
  if (is_given("--seed") && o.seed != spec.seed) {
    return mismatch("seed", "--seed", std::to_string(o.seed), averager, "uses", std::to_string(spec.seed));
  }
  if (is_given("--non-iid") && o.non_iid != spec.non_iid) {
    return fail(errc::invalid_argument, std::string{"sharding mismatch: "} +
                                            (o.non_iid ? "--non-iid was given, the job at " + averager + " is IID"
                                                       : "the job at " + averager + " shards non-IID (--non-iid)"));
  }
  if (is_given("--dirichlet-alpha") && spec.non_iid && o.dirichlet_alpha != spec.dirichlet_alpha) {
    return mismatch("label skew", "--dirichlet-alpha", detail::number_text(o.dirichlet_alpha), averager, "uses",
                    detail::number_text(spec.dirichlet_alpha));
  }
  return out;
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
