// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_core.hpp"

#include "averager_core_detail.hpp"

#include "prsgd/common/log.hpp"
#include "prsgd/common/secure_random.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

namespace prsgd::actors {

using core_detail::all_finite;
using core_detail::log_component;
using core_detail::reply;
using core_detail::send_to;

std::string_view to_string(submission_status s) noexcept {
  switch (s) {
    case submission_status::accepted: return "accepted";
    case submission_status::late: return "late";
    case submission_status::duplicate: return "duplicate";
    case submission_status::rejected: return "rejected";
  }
  return "unknown";
}

std::string_view to_string(auth_failure f) noexcept {
  switch (f) {
    case auth_failure::bad_token: return "bad_token";
    case auth_failure::wrong_connection: return "wrong_connection";
    case auth_failure::wrong_key: return "wrong_key";
  }
  return "unknown";
}

std::string_view to_string(averager_state s) noexcept {
  switch (s) {
    case averager_state::idle: return "idle";
    case averager_state::rejoin_wait: return "rejoin_wait";
    case averager_state::collecting: return "collecting";
    case averager_state::stopped: return "stopped";
    case averager_state::paused: return "paused";
  }
  return "unknown";
}

averager_core::averager_core(averager_config config, const clock_source& clk)
    : config_(std::move(config)), clock_(&clk) {}

expected<training_mode> parse_training_mode(std::string_view name) {
  if (name == "restarted" || name == "restarted_sgd") {
    return training_mode::restarted_sgd;
  }
  if (name == "minibatch" || name == "minibatch_sgd") {
    return training_mode::minibatch_sgd;
  }
  return fail(errc::invalid_argument, "unknown mode '" + std::string{name} + "' (restarted | minibatch)");
}

expected<deadline_policy> parse_deadline_policy(std::string_view name) {
  if (name == "none") {
    return deadline_policy::none;
  }
  if (name == "fixed") {
    return deadline_policy::fixed;
  }
  if (name == "adaptive") {
    return deadline_policy::adaptive;
  }
  return fail(errc::invalid_argument, "unknown deadline '" + std::string{name} + "' (none | fixed | adaptive)");
}

std::string_view to_string(deadline_policy policy) noexcept {
  switch (policy) {
    case deadline_policy::none: return "none";
    case deadline_policy::fixed: return "fixed";
    case deadline_policy::adaptive: return "adaptive";
  }
  return "unknown";
}

expected<averager_setup> setup_from(checkpoint_store& store) {
  auto inc = store.next_incarnation();
  if (!inc) {
    return std::move(inc).error();
  }
  averager_setup setup;
  setup.incarnation = *inc;
  setup.resume = store.read_newest();
  setup.checkpoints = true;
  return setup;
}

expected<averager_core> averager_core::make(averager_config config, const clock_source& clk,
                                            std::vector<float> initial_model, averager_setup setup) {
  if (initial_model.empty()) {
    return fail(errc::invalid_argument, "averager: the initial model is empty");
  }
  if (config.interval == 0 || config.min_interval == 0 || config.min_interval > config.max_interval) {
    return fail(errc::invalid_argument,
                "averager: intervals must satisfy 1 <= min_interval <= max_interval, interval >= 1");
  }
  if (config.shard_owners > 0) {
    if (config.mode != training_mode::restarted_sgd) {
      return fail(errc::invalid_argument, "averager: sharded averaging needs restarted SGD (not minibatch mode)");
    }
    if (config.outer) {
      return fail(errc::invalid_argument, "averager: sharded averaging has no outer optimiser (--outer)");
    }
    if (config.aggregate.rule == algorithms::aggregate_rule::norm_clip) {
      return fail(errc::invalid_argument,
                  "averager: sharded averaging runs mean, trimmed-mean and median at the owners, not norm-clip");
    }
    if (config.shard_owners > initial_model.size()) {
      return fail(errc::invalid_argument, "averager: more shard owners than model values");
    }
  }
  if (config.heartbeat_timeout <= clock_source::duration::zero() ||
      config.heartbeat_interval <= clock_source::duration::zero()) {
    return fail(errc::invalid_argument, "averager: heartbeat interval and timeout must be positive");
  }
  if (!(config.speed_ema > 0 && config.speed_ema <= 1)) {
    return fail(errc::invalid_argument, "averager: speed_ema must be in (0, 1]");
  }
  if (config.step_sizes != algorithms::lr_kind::constant && config.step_sizes != algorithms::lr_kind::paper) {
    return fail(errc::invalid_argument, "averager: the step size is constant or paper");
  }
  if (config.total_steps == 0 || !(config.step_size > 0)) {
    return fail(errc::invalid_argument, "averager: total_steps and step_size must be positive");
  }
  if (config.deadline == deadline_policy::fixed && config.fixed_deadline <= clock_source::duration::zero()) {
    return fail(errc::invalid_argument, "averager: a fixed deadline must be positive");
  }
  for (const auto& [id, i] : config.per_worker_intervals) {
    if (i == 0) {
      return fail(errc::invalid_argument, "averager: per-worker interval of worker " + std::to_string(id) + " is 0");
    }
  }
  if (auto ok = algorithms::validate(config.aggregate); !ok) {
    return fail(errc::invalid_argument, "averager: " + ok.error().message());
  }
  if (!(config.screen_k == 0 || (std::isfinite(config.screen_k) && config.screen_k >= 1))) {
    return fail(errc::invalid_argument, "averager: screen_k must be 0 (off) or >= 1");
  }
  if (!(config.minibatch_momentum >= 0 && config.minibatch_momentum < 1)) {
    return fail(errc::invalid_argument, "averager: minibatch momentum must be in [0, 1)");
  }
  if (config.data_samples > 0 && (config.spec.batch_size == 0 || config.data_block == 0)) {
    return fail(errc::invalid_argument, "averager: sample ranges need a batch size and a block of at least 1");
  }
  if (config.max_epochs > 0 && config.data_samples == 0) {
    return fail(errc::invalid_argument, "averager: max_epochs counts passes over the data and needs data_samples");
  }
  if (config.mode == training_mode::minibatch_sgd && config.outer) {
    return fail(errc::invalid_argument,
                "averager: the outer optimiser applies to restarted SGD; minibatch mode uses minibatch_momentum");
  }
  config.quorum = std::max<std::size_t>(config.quorum, 1);
  config.min_workers = std::max<std::size_t>(config.min_workers, 1);
  config.adaptive_min_samples = std::max<std::size_t>(config.adaptive_min_samples, 1);
  config.adaptive_window = std::max(config.adaptive_window, config.adaptive_min_samples);
  config.max_evaluations = std::max<std::size_t>(config.max_evaluations, 1);

  averager_core core{std::move(config), clk};
  core.num_shards_ = core.config_.shards > 0 ? core.config_.shards : core.config_.min_workers;
  const auto now = clk.now();
  core.started_at_ = now;
  core.next_heartbeat_ = now + core.config_.heartbeat_interval;
  core.model_size_ = initial_model.size();

  core.incarnation_ = std::max<incarnation_t>(setup.incarnation, 1);
  core.checkpoints_ = setup.checkpoints;
  core.evaluations_ = setup.evaluations;
  auto& resumed = setup.resume;
  if (core.config_.data_samples > 0) {
    const algorithms::pool_config pc{core.config_.data_samples, core.config_.data_block, core.config_.spec.seed,
                                     core.config_.max_epochs};
    if (resumed && resumed->pool && resumed->pool_in_storage_order) {
      return fail(errc::invalid_argument,
                  "averager: the checkpoint (format 4) records its data pool in storage order, which this version "
                  "no longer hands out; resume it with the prsgd that wrote it, or start the job afresh");
    }
    auto pool = resumed && resumed->pool ? algorithms::sample_pool::restore(pc, *resumed->pool)
                                         : algorithms::sample_pool::make(pc);
    if (!pool) {
      return fail(errc::invalid_argument,
                  "averager: the checkpoint's data pool does not fit this job: " + pool.error().message());
    }
    core.pool_ = std::move(*pool);
  }
  if (resumed) {
    if (resumed->identity && core.config_.model_identity) {
      const auto& was = *resumed->identity;
      const auto& now_id = *core.config_.model_identity;
      if (was.name != now_id.name || was.channels != now_id.channels || was.height != now_id.height ||
          was.width != now_id.width || was.classes != now_id.classes) {
        return fail(errc::invalid_argument, "averager: the checkpoint to resume is for model " + was.name + ", not " +
                                                now_id.name + " (or another input shape or class count)");
      }
    }
    if (resumed->finished) {
      return fail(errc::invalid_argument, "averager: the checkpoint is of a job that has finished (round " +
                                              std::to_string(resumed->round) + "); nothing to resume");
    }
    if (resumed->model.size() != initial_model.size()) {
      return fail(errc::invalid_argument, "averager: checkpoint model has " + std::to_string(resumed->model.size()) +
                                              " floats, expected " + std::to_string(initial_model.size()));
    }
    core.round_ = resumed->round;
    core.rounds_completed_ = resumed->rounds_completed;
    core.model_ = std::make_shared<const std::vector<float>>(std::move(resumed->model));
    if (core.config_.outer) {
      auto outer = algorithms::outer_optimizer::make(*core.config_.outer, core.model_size_);
      if (!outer) {
        return outer.error();
      }
      // A checkpoint written without an outer optimiser (or with another size) restarts from zero momentum.
      if (resumed->outer_momentum.size() == core.model_size_) {
        PRSGD_TRY(outer->restore(resumed->outer_momentum));
      }
      core.outer_ = std::move(outer).value();
    }
    if (core.config_.mode == training_mode::minibatch_sgd && core.config_.minibatch_momentum > 0 &&
        resumed->outer_momentum.size() == core.trainable_size()) {
      core.minibatch_momentum_ = std::move(resumed->outer_momentum);
    }
    core.arrival_history_ = std::move(resumed->arrival_history);
    core.counters_.late = resumed->late;
    core.counters_.duplicate = resumed->duplicate;
    core.counters_.rejected = resumed->rejected;
    core.resumed_from_ = resumed->round;
    for (const auto& m : resumed->members) {
      core.restored_[m.member] = m;
      // Ids of this incarnation never repeat the checkpoint's, so nothing addressed to one can match.
      core.next_member_ = std::max(core.next_member_, m.member + 1);
    }
    if (!core.restored_.empty()) {
      core.state_ = averager_state::rejoin_wait;
      core.rejoin_until_ = now + core.config_.rejoin_grace;
    }
    PRSGD_LOG(info, log_component) << "incarnation " << core.incarnation_ << " resumed at round " << core.round_
                                   << " from checkpoint of incarnation " << resumed->averager_incarnation
                                   << ", waiting for " << core.restored_.size() << " members to rejoin";
  } else {
    core.model_ = std::make_shared<const std::vector<float>>(std::move(initial_model));
    core.awaiting_initial_ = core.config_.initial_from_join;
    PRSGD_LOG(info, log_component) << "incarnation " << core.incarnation_ << " starts at round 0"
                                   << (core.awaiting_initial_ ? " from the first member's model" : "");
  }
  if (core.config_.outer && !core.outer_) {
    auto outer = algorithms::outer_optimizer::make(*core.config_.outer, core.model_size_);
    if (!outer) {
      return outer.error();
    }
    core.outer_ = std::move(outer).value();
  }
  return core;
}

// ---- events ----------------------------------------------------------------------------------------

actions averager_core::on_message(const to_averager& m, origin_t from) {
  return std::visit(
      [&](const auto& msg) -> actions {
        using M = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<M, join_msg>) {
          return on_join(msg, from);
        } else if constexpr (std::is_same_v<M, leave_msg>) {
          return on_leave(msg, from);
        } else if constexpr (std::is_same_v<M, heartbeat_msg>) {
          return on_heartbeat(msg, from);
        } else if constexpr (std::is_same_v<M, model_msg>) {
          return on_model(msg, from);
        } else {
          // STATUS, CONTROL and SPEC come from clients that are not members; the shell answers them (status,
          // on_control, spec_reply).
          return with_wakeup(actions{});
        }
      },
      m);
}

void averager_core::on_connection(origin_t from, std::string client_key) {
  if (client_key.empty()) {
    connection_keys_.erase(from);
  } else {
    connection_keys_[from] = std::move(client_key);
  }
}

void averager_core::on_disconnected(origin_t from) { connection_keys_.erase(from); }

actions averager_core::on_join(const join_msg& m, origin_t from) {
  actions out;
  const auto now = clock_->now();
  if (state_ == averager_state::stopped) {
    reply(out, m.member, stop_msg{m.member, m.incarnation, incarnation_, round_}, from);
    return with_wakeup(std::move(out));
  }
  auto why = mismatch(m);
  if (!why && sharded() && !m.sharding) {
    why =
        "this job averages in shards (--topology sharded) and this worker cannot take part: it sends whole "
        "models (the Python worker does); run `prsgd worker`, or a star job";
  }
  if (!why && sharded() && config_.compress_between_hosts && !m.reads_compressed) {
    why =
        "this job compresses its payloads between hosts (--wire-compress zstd) and this worker cannot read them; "
        "run it with the averager's prsgd version";
  }
  if (why) {
    ++counters_.refused;
    ++drops_["refused"];
    if (warnings_->refused_join.allow(clock_->now())) {
      PRSGD_LOG(warn, log_component) << "refused a JOIN from connection " << from << ": " << *why
                                     << warnings_->refused_join.suffix();
    }
    reply(out, 0, refused_msg{0, m.incarnation, incarnation_, round_, *why}, from);
    return with_wakeup(std::move(out));
  }
  if (awaiting_initial_) {
    if (auto refusal = adopt_initial_model(m)) {
      ++counters_.refused;
      ++drops_["refused"];
      PRSGD_LOG(warn, log_component) << "refused a JOIN from connection " << from << ": " << *refusal;
      reply(out, 0, refused_msg{0, m.incarnation, incarnation_, round_, *refusal}, from);
      return with_wakeup(std::move(out));
    }
  }
  if (config_.labels_from_members && declared_labels_.empty()) {
    if (const auto at = m.data_fingerprint.find(" labels="); at != std::string::npos) {
      declared_labels_ = m.data_fingerprint.substr(at);
    }
  }
  // The same JOIN again (same nonce, same connection): the worker has not seen our WELCOME yet. Answer with
  // the WELCOME once more, and with the round's RESTART only if none went to the member this round.
  if (auto j = joins_.find({from, m.incarnation}); j != joins_.end()) {
    const member_id id = j->second;
    for (auto* set : {&members_, &pending_}) {
      if (auto it = set->find(id); it != set->end()) {
        it->second.last_seen = now;
        const bool member = set == &members_;
        send_to(out, id, make_welcome(id, it->second, member ? round_ : round_ + 1));
        if (member && state_ == averager_state::collecting && !submissions_.contains(id) && active(id)) {
          send_restart(out, id);
        }
        return with_wakeup(std::move(out));
      }
    }
    joins_.erase(j);  // the member was removed since: this JOIN makes a new one
  }
  const auto shard = free_shard();
  if (!shard) {
    // Every shard is held by a live member or joiner: the worker repeats its JOIN until one is free.
    ++drops_["no_free_shard"];
    PRSGD_LOG(debug, log_component) << "JOIN from connection " << from << " waits: all " << num_shards_
                                    << " shards are held";
    return with_wakeup(std::move(out));
  }
  const member_id id = next_member_++;
  member_entry e;
  e.incarnation = m.incarnation;
  e.last_seen = now;
  e.interval = config_.interval;
  e.speed = m.speed_hint > 0 && std::isfinite(m.speed_hint) ? m.speed_hint : 0;
  e.token = secure_random_u64();
  e.origin = from;
  if (auto k = connection_keys_.find(from); k != connection_keys_.end()) {
    e.client_key = k->second;
  }
  e.shard = *shard;
  e.own_model = m.holds;
  pending_[id] = e;
  file_silence_due(id, e);
  joins_[{from, m.incarnation}] = id;
  PRSGD_LOG(info, log_component) << "worker joins as member " << id << " (shard " << *shard << " of " << num_shards_
                                 << "); admitted at the next barrier";
  // After a resume, any joiner stands in for one checkpointed member: ids are not carried across incarnations.
  if (!restored_.empty()) {
    restored_.erase(restored_.begin());
  }
  out.routes.push_back({id, from});
  // (3) waits for min_workers joiners only before the first round of a fresh job.
  const bool enough = round_ > 0 || resumed_from_.has_value() || pending_.size() >= config_.min_workers;
  const bool starts_now =
      (state_ == averager_state::idle && enough) || (state_ == averager_state::rejoin_wait && restored_.empty());
  const round_t admitted = state_ == averager_state::collecting ? round_ + 1 : round_;
  send_to(out, id, make_welcome(id, e, admitted));
  if (starts_now) {
    start_round(out);  // (1)/(3) idle -> collecting, (4) rejoin_wait -> collecting
  }
  return with_wakeup(std::move(out));
}

actions averager_core::on_leave(const leave_msg& m, origin_t from) {
  actions out;
  if (state_ == averager_state::stopped || !authorised(m.member, m.token, from, "LEAVE")) {
    return with_wakeup(std::move(out));
  }
  const auto* e = find_entry(m.member);
  if (e != nullptr && e->incarnation == m.incarnation) {
    remove_worker(m.member, "left");
    maybe_close(out);
  }
  return with_wakeup(std::move(out));
}

actions averager_core::on_heartbeat(const heartbeat_msg& m, origin_t from) {
  actions out;
  if (m.from_averager || state_ == averager_state::stopped) {
    return with_wakeup(std::move(out));
  }
  if (answer_lost_session(out, m.member, m.incarnation, m.averager_incarnation, m.token, from) ||
      !authorised(m.member, m.token, from, "HEARTBEAT")) {
    return with_wakeup(std::move(out));
  }
  for (auto* set : {&members_, &pending_}) {
    if (auto it = set->find(m.member); it != set->end()) {
      if (it->second.incarnation == m.incarnation) {
        auto& e = it->second;
        e.last_seen = clock_->now();
        if (m.transfer_bytes > 0) {
          // Its MODEL is on the way behind this heartbeat: allow for the transfer.
          e.transfer_until =
              std::max(e.transfer_until, e.last_seen + config_.heartbeat_timeout +
                                             transfer_allowance(m.transfer_bytes, config_.slowest_link_bytes_per_s));
        }
        return with_wakeup(std::move(out));
      }
      if (m.incarnation < it->second.incarnation) {
        return with_wakeup(std::move(out));  // a stale heartbeat from before the worker's restart
      }
    }
  }
  // Unknown worker (e.g. it still follows a previous averager incarnation): tell it to rejoin.
  reply(out, m.member, removed_msg{m.member, m.incarnation, incarnation_, round_}, from);
  return with_wakeup(std::move(out));
}

actions averager_core::on_model(const model_msg& msg, origin_t from) {
  actions out;
  if (state_ == averager_state::stopped) {
    return with_wakeup(std::move(out));
  }
  if (msg.params) {
    const auto bytes = wire_bytes(msg.params, msg.dtype);
    round_bytes_in_ += bytes;
    for (auto* set : {&members_, &pending_}) {
      if (auto it = set->find(msg.member); it != set->end()) {
        it->second.bytes_in += bytes;
      }
    }
  }
  // A change x_i − x̄_r becomes the model x̄_r + change; one for another round or of the wrong size is left as
  // it is and refused below (late, round or size).
  std::optional<model_msg> rebuilt;
  if (msg.delta && msg.params && msg.round == round_ && msg.averager_incarnation == incarnation_ && model_ &&
      msg.params->size() == model_->size()) {
    rebuilt = msg;
    auto full = std::make_shared<std::vector<float>>(*model_);
    const auto& d = *msg.params;
    for (std::size_t i = 0; i < full->size(); ++i) {
      (*full)[i] += d[i];
    }
    rebuilt->params = std::move(full);
    rebuilt->delta = false;
  }
  const model_msg& m = rebuilt ? *rebuilt : msg;
  if (answer_lost_session(out, m.member, m.incarnation, m.averager_incarnation, m.token, from)) {
    // Late, as every model sent to a lost incarnation (below), but not held against the id's new holder.
    ++counters_.late;
    ++round_counters_.late;
    accounting_.push_back({m.round, m.member, m.incarnation, submission_status::late,
                           "sent to averager incarnation " + std::to_string(m.averager_incarnation)});
    return with_wakeup(std::move(out));
  }
  if (!authorised(m.member, m.token, from, "MODEL")) {
    return with_wakeup(std::move(out));
  }
  if (m.averager_incarnation != incarnation_) {
    if (m.averager_incarnation < incarnation_) {
      record(m, submission_status::late, "sent to averager incarnation " + std::to_string(m.averager_incarnation));
      if (!members_.contains(m.member) && !pending_.contains(m.member)) {
        reply(out, m.member, removed_msg{m.member, m.incarnation, incarnation_, round_}, from);
      }
    } else {
      record(m, submission_status::rejected,
             "names a future averager incarnation " + std::to_string(m.averager_incarnation), "incarnation");
    }
    return with_wakeup(std::move(out));
  }
  if (m.round < round_) {
    record(m, submission_status::late,
           "round " + std::to_string(m.round) + " is closed (now " + std::to_string(round_) + ")");
    return with_wakeup(std::move(out));
  }
  if (m.round > round_ || state_ != averager_state::collecting) {
    record(m, submission_status::rejected, "round " + std::to_string(m.round) + " is not open", "round");
    return with_wakeup(std::move(out));
  }
  if (auto s = submissions_.find(m.member); s != submissions_.end() && s->second.msg.incarnation == m.incarnation) {
    record(m, submission_status::duplicate, "");
    return with_wakeup(std::move(out));
  }
  auto it = members_.find(m.member);
  if (it == members_.end()) {
    record(m, submission_status::rejected, "worker is not a member of round " + std::to_string(round_), "not_member");
    if (!pending_.contains(m.member)) {
      reply(out, m.member, removed_msg{m.member, m.incarnation, incarnation_, round_}, from);
    }
    return with_wakeup(std::move(out));
  }
  if (it->second.incarnation != m.incarnation) {
    record(m, submission_status::rejected,
           "stale worker incarnation " + std::to_string(m.incarnation) + " (member has " +
               std::to_string(it->second.incarnation) + ")",
           "incarnation");
    return with_wakeup(std::move(out));
  }
  it->second.last_seen = clock_->now();
  if (!active(m.member)) {
    record(m, submission_status::rejected, "member sits round " + std::to_string(round_) + " out (no samples)",
           "round");
    return with_wakeup(std::move(out));
  }
  const bool want_gradient = config_.mode == training_mode::minibatch_sgd;
  // The claims are checked against what this member was assigned: its interval (fewer steps only when the
  // worker says the round was cut short), at most steps x batch samples, a finite loss over at most the
  // samples it claims.
  const std::uint64_t assigned = want_gradient ? 1 : it->second.interval;
  const std::uint64_t batch = config_.spec.batch_size;
  std::string reason;
  std::string_view code;
  if (m.is_gradient != want_gradient) {
    reason = want_gradient ? "a model in minibatch_sgd mode" : "a gradient in restarted_sgd mode";
    code = "kind";
  } else if (m.sliced != sharded()) {
    reason = sharded() ? "a whole model, but this job averages in shards" : "a sliced model, but this job is a star";
    code = "kind";
  } else if (sharded() && !m.slices_ok) {
    reason = "a slice the owners found not finite or of the wrong size";
    code = "non_finite";
  } else if (!sharded() && !m.params) {
    reason = "no parameters";
    code = "size";
  } else if (!sharded() && m.params->size() != model_size_) {
    reason = "size " + std::to_string(m.params->size()) + " != model size " + std::to_string(model_size_);
    code = "size";
  } else if (m.steps == 0 || m.samples == 0) {
    reason = "zero steps or samples";
    code = "steps";
  } else if (m.steps > assigned || (m.steps < assigned && !m.cut)) {
    reason = std::to_string(m.steps) + " steps, assigned " + std::to_string(assigned) +
             (m.steps < assigned ? " (fewer only when cut short)" : "");
    code = "steps";
  } else if (batch > 0 && (m.samples - 1) / batch + 1 > m.steps) {
    reason =
        std::to_string(m.samples) + " samples > " + std::to_string(m.steps) + " steps x batch " + std::to_string(batch);
    code = "samples";
  } else if (pool_ && m.samples > granted_samples(m.member)) {
    reason = std::to_string(m.samples) + " samples > the " + std::to_string(granted_samples(m.member)) +
             " the member was given";
    code = "samples";
  } else if (!std::isfinite(m.loss_sum)) {
    reason = "non-finite loss";
    code = "loss";
  } else if (m.loss_count > m.samples) {
    reason = "loss covers more samples than claimed";
    code = "loss";
  } else if (!sharded() && !all_finite(*m.params)) {
    reason = "NaN/Inf in parameters";
    code = "non_finite";
  }
  if (!reason.empty()) {
    record(m, submission_status::rejected, reason, code);
    return with_wakeup(std::move(out));
  }
  it->second.missed = 0;
  it->second.send_failures = 0;
  it->second.holds = m.round;
  submissions_[m.member] = submission{m, clock_->now()};
  record(m, submission_status::accepted, "");
  if (config_.idle_rounds > 0) {
    // Whoever is still missing gets at least idle_rounds times as long as this submission took.
    const auto took = std::max<clock_source::duration>(clock_->now() - round_start_, config_.heartbeat_timeout);
    const auto at_least = round_start_ + took * static_cast<std::int64_t>(config_.idle_rounds);
    idle_cutoff_ = idle_cutoff_ ? std::max(*idle_cutoff_, at_least) : at_least;
  }
  out.routes.push_back({m.member, from});
  maybe_close(out);
  return with_wakeup(std::move(out));
}

actions averager_core::tick() {
  actions out;
  if (state_ == averager_state::stopped) {
    return with_wakeup(std::move(out));
  }
  if (state_ != averager_state::collecting && work_done()) {
    // Resumed from the checkpoint of the last planned round (the previous incarnation died before its
    // done line): nothing is left to train.
    end_job(out);
    return with_wakeup(std::move(out));
  }
  const auto now = clock_->now();
  std::vector<member_id> silent;
  for (const auto* set : {&members_, &pending_}) {
    for (const auto& [id, e] : *set) {
      if (now >= silence_due(e)) {
        silent.push_back(id);
      }
    }
  }
  for (member_id id : silent) {
    const auto inc = members_.contains(id) ? members_[id].incarnation : pending_[id].incarnation;
    remove_worker(id, "heartbeat timeout");
    send_to(out, id, removed_msg{id, inc, incarnation_, round_});
  }
  if (state_ == averager_state::collecting && idle_cutoff_ && now >= *idle_cutoff_) {
    remove_idle(out);
  }
  if (state_ == averager_state::collecting) {
    resend_restarts(out);
  }
  if (state_ == averager_state::rejoin_wait && now >= rejoin_until_) {
    PRSGD_LOG(info, log_component) << "rejoin grace over; " << restored_.size()
                                   << " checkpointed members did not return";
    restored_.clear();
    if (pending_.empty()) {
      state_ = averager_state::idle;  // (5)
    } else {
      start_round(out);  // (4)
    }
  }
  maybe_close(out);
  if (state_ != averager_state::stopped && now >= next_heartbeat_) {
    for (const auto* set : {&members_, &pending_}) {
      for (const auto& [id, e] : *set) {
        send_to(out, id, heartbeat_msg{id, e.incarnation, incarnation_, round_, true});
      }
    }
    next_heartbeat_ = now + config_.heartbeat_interval;
  }
  return with_wakeup(std::move(out));
}

actions averager_core::stop() {
  actions out;
  if (state_ != averager_state::stopped) {
    end_job(out);
  }
  return with_wakeup(std::move(out));
}

actions averager_core::suspend() {
  actions out;
  if (state_ == averager_state::stopped) {
    return with_wakeup(std::move(out));
  }
  PRSGD_LOG(info, log_component) << "incarnation " << incarnation_ << " suspended at round " << round_;
  state_ = averager_state::stopped;  // (8), nothing sent: the workers wait for the next incarnation
  suspended_ = true;
  deadline_.reset();
  out.stopped = true;
  // Every closed round gets its line now; an evaluation still running is not waited for (test_acc null).
  for (auto& l : lines_) {
    l.awaiting.reset();
  }
  eval_queue_.clear();
  evaluating_.clear();
  if (checkpoints_ && !awaiting_initial_) {
    held_checkpoints_.push_back(snapshot());  // the open round: a later incarnation resumes it
  }
  flush_lines(out);
  maybe_done(out);
  return with_wakeup(std::move(out));
}

actions averager_core::on_evaluated(std::uint64_t id, std::optional<double> accuracy, std::optional<double> loss) {
  actions out;
  auto it = evaluating_.find(id);
  if (it == evaluating_.end()) {
    return with_wakeup(std::move(out));
  }
  const round_t rounds = it->second;
  evaluating_.erase(it);
  if (accuracy && (!last_acc_ || rounds >= last_acc_rounds_)) {
    last_acc_ = accuracy;
    last_loss_ = loss;
    last_acc_rounds_ = rounds;
  }
  for (auto& l : lines_) {
    if (l.awaiting == id) {
      l.awaiting.reset();
      l.metrics.test_acc = accuracy;
      l.metrics.test_loss = accuracy ? loss : std::nullopt;
      break;
    }
  }
  pump_evaluations(out);
  flush_lines(out);
  maybe_done(out);
  return with_wakeup(std::move(out));
}

std::optional<clock_source::time_point> averager_core::next_wakeup() const {
  if (state_ == averager_state::stopped) {
    return std::nullopt;
  }
  clock_source::time_point t = next_heartbeat_;
  if (auto due = earliest_silence_due()) {
    t = std::min(t, *due);
  }
  // A deadline that passed without a quorum needs no timer: the next accepted MODEL closes the barrier.
  if (state_ == averager_state::collecting && deadline_ && *deadline_ > clock_->now()) {
    t = std::min(t, *deadline_);
  }
  if (state_ == averager_state::rejoin_wait) {
    t = std::min(t, rejoin_until_);
  }
  if (state_ == averager_state::collecting && idle_cutoff_) {
    t = std::min(t, *idle_cutoff_);
  }
  if (state_ == averager_state::collecting) {
    if (auto due = earliest_resend_due()) {
      t = std::min(t, *due);
    }
  }
  return t;
}

clock_source::time_point averager_core::silence_due(const member_entry& e) const {
  return std::max(e.last_seen + config_.heartbeat_timeout, e.transfer_until) + clock_source::duration{1};
}

void averager_core::file_silence_due(member_id id, const member_entry& e) { silence_due_.emplace(silence_due(e), id); }

std::optional<clock_source::time_point> averager_core::earliest_silence_due() const {
  while (!silence_due_.empty()) {
    const auto [t, id] = silence_due_.top();
    const member_entry* e = find_entry(id);
    if (e == nullptr) {
      silence_due_.pop();  // removed since
      continue;
    }
    const auto due = silence_due(*e);
    if (due == t) {
      return t;
    }
    silence_due_.pop();  // heard from since: file it at its current deadline
    silence_due_.emplace(due, id);
  }
  return std::nullopt;
}

std::optional<clock_source::time_point> averager_core::earliest_resend_due() const {
  while (!resend_due_.empty()) {
    const auto [t, id] = resend_due_.top();
    auto it = members_.find(id);
    if (it != members_.end() && it->second.resend_at == t) {
      return t;
    }
    resend_due_.pop();  // sent, rescheduled or removed since
  }
  return std::nullopt;
}

actions averager_core::with_wakeup(actions out) const {
  out.wakeup = next_wakeup();
  return out;
}

// ---- accessors ---------------------------------------------------------------------------------------

std::vector<member_id> averager_core::members() const {
  std::vector<member_id> ids;
  for (const auto& [id, e] : members_) {
    ids.push_back(id);
  }
  return ids;
}

std::vector<member_id> averager_core::pending() const {
  std::vector<member_id> ids;
  for (const auto& [id, e] : pending_) {
    ids.push_back(id);
  }
  return ids;
}

std::vector<member_id> averager_core::submitted() const {
  std::vector<member_id> ids;
  for (const auto& [id, s] : submissions_) {
    ids.push_back(id);
  }
  return ids;
}

std::optional<std::uint64_t> averager_core::interval_of(member_id member) const {
  auto it = members_.find(member);
  if (it == members_.end()) {
    return std::nullopt;
  }
  return it->second.interval;
}

int averager_core::times_counted(round_t round, member_id member) const {
  auto it = counted_.find({round, member});
  return it == counted_.end() ? 0 : it->second;
}

}  // namespace prsgd::actors
