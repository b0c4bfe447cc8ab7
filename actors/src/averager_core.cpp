// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_core.hpp"

#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/common/check.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/common/secure_random.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

namespace prsgd::actors {

namespace {

constexpr std::string_view log_component = "averager";

// Queues `m` for `member`, over the member's route.
void send_to(actions& out, member_id member, any_msg m) { out.sends.push_back({member, std::move(m), std::nullopt}); }

// Queues `m` as a reply over the connection the message came in on (no route is recorded for it).
void reply(actions& out, member_id member, any_msg m, origin_t via) {
  out.sends.push_back({member, std::move(m), via});
}

double to_seconds(clock_source::duration d) { return std::chrono::duration<double>(d).count(); }

std::string_view rule_name(algorithms::averaging_rule r) {
  switch (r) {
    case algorithms::averaging_rule::uniform: return "uniform";
    case algorithms::averaging_rule::by_samples: return "samples";
    case algorithms::averaging_rule::step_normalised: return "step-normalised";
  }
  return "unknown";
}

double median_of(std::vector<double> v) {
  PRSGD_CHECK(!v.empty()) << "median of nothing";
  const auto mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  return m;
}

bool all_finite(const std::vector<float>& v) {
  return Eigen::Map<const Eigen::VectorXf>(v.data(), static_cast<Eigen::Index>(v.size())).allFinite();
}

// (1/N) Σ ||x_i − avg||², one vectorised pass per input.
double consensus_distance(const std::vector<algorithms::contribution>& inputs, const std::vector<float>& avg) {
  const Eigen::Map<const Eigen::VectorXf> mean(avg.data(), static_cast<Eigen::Index>(avg.size()));
  double sum = 0;
  for (const auto& in : inputs) {
    const Eigen::Map<const Eigen::VectorXf> x(in.params.data(), static_cast<Eigen::Index>(in.params.size()));
    sum += static_cast<double>((x - mean).squaredNorm());
  }
  return sum / static_cast<double>(inputs.size());
}

}  // namespace

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
    PRSGD_LOG(info, log_component) << "incarnation " << core.incarnation_ << " starts at round 0";
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
          // STATUS and CONTROL come from operator clients; the shell answers them (status, on_control).
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
  if (auto why = mismatch(m)) {
    ++counters_.refused;
    ++drops_["refused"];
    if (warnings_->refused_join.allow(clock_->now())) {
      PRSGD_LOG(warn, log_component) << "refused a JOIN from connection " << from << ": " << *why
                                     << warnings_->refused_join.suffix();
    }
    reply(out, 0, refused_msg{0, m.incarnation, incarnation_, round_, *why}, from);
    return with_wakeup(std::move(out));
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
  pending_[id] = e;
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
  if (m.from_averager || state_ == averager_state::stopped || !authorised(m.member, m.token, from, "HEARTBEAT")) {
    return with_wakeup(std::move(out));
  }
  for (auto* set : {&members_, &pending_}) {
    if (auto it = set->find(m.member); it != set->end()) {
      if (it->second.incarnation == m.incarnation) {
        it->second.last_seen = clock_->now();
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

actions averager_core::on_model(const model_msg& m, origin_t from) {
  actions out;
  if (state_ == averager_state::stopped) {
    return with_wakeup(std::move(out));
  }
  if (m.params) {
    round_bytes_in_ += m.params->size() * sizeof(float);
    for (auto* set : {&members_, &pending_}) {
      if (auto it = set->find(m.member); it != set->end()) {
        it->second.bytes_in += m.params->size() * sizeof(float);
      }
    }
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
  } else if (!m.params) {
    reason = "no parameters";
    code = "size";
  } else if (m.params->size() != model_size_) {
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
  } else if (!std::isfinite(m.loss_sum) || m.loss_count > m.samples) {
    reason = std::isfinite(m.loss_sum) ? "loss covers more samples than claimed" : "non-finite loss";
    code = "loss";
  } else if (!all_finite(*m.params)) {
    reason = "NaN/Inf in parameters";
    code = "non_finite";
  }
  if (!reason.empty()) {
    record(m, submission_status::rejected, reason, code);
    return with_wakeup(std::move(out));
  }
  it->second.missed = 0;
  it->second.send_failures = 0;
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
      if (now - e.last_seen > config_.heartbeat_timeout) {
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
  if (checkpoints_) {
    held_checkpoints_.push_back(snapshot());  // the open round: a later incarnation resumes it
  }
  flush_lines(out);
  maybe_done(out);
  return with_wakeup(std::move(out));
}

actions averager_core::on_evaluated(std::uint64_t id, std::optional<double> accuracy) {
  actions out;
  auto it = evaluating_.find(id);
  if (it == evaluating_.end()) {
    return with_wakeup(std::move(out));
  }
  const round_t rounds = it->second;
  evaluating_.erase(it);
  if (accuracy && (!last_acc_ || rounds >= last_acc_rounds_)) {
    last_acc_ = accuracy;
    last_acc_rounds_ = rounds;
  }
  for (auto& l : lines_) {
    if (l.awaiting == id) {
      l.awaiting.reset();
      l.metrics.test_acc = accuracy;
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
  for (const auto* set : {&members_, &pending_}) {
    for (const auto& [id, e] : *set) {
      t = std::min(t, e.last_seen + config_.heartbeat_timeout + clock_source::duration{1});
    }
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
    for (const auto& [id, e] : members_) {
      if (e.resend_at) {
        t = std::min(t, *e.resend_at);
      }
    }
  }
  return t;
}

actions averager_core::with_wakeup(actions out) const {
  out.wakeup = next_wakeup();
  return out;
}

// ---- membership --------------------------------------------------------------------------------------

void averager_core::remove_worker(member_id id, const char* why) {
  std::erase_if(joins_, [id](const auto& kv) { return kv.second == id; });
  if (auto g = grants_.find(id); g != grants_.end() && !submissions_.contains(id)) {
    // Lost before its samples entered x̄: another member trains them later in the epoch.
    pool_->give_back(g->second);
    grants_.erase(g);
  }
  if (const auto* e = find_entry(id)) {
    constexpr std::size_t removals_kept = 16;
    removed_.push_back({id, e->incarnation, round_, clock_->now(), why});
    if (removed_.size() > removals_kept) {
      removed_.pop_front();
    }
  }
  if (members_.erase(id) > 0) {
    if (state_ == averager_state::collecting && !submissions_.contains(id)) {
      ++round_removed_;
    }
    PRSGD_LOG(info, log_component) << "worker " << id << " removed in round " << round_ << ": " << why;
  } else if (pending_.erase(id) > 0) {
    PRSGD_LOG(info, log_component) << "joining worker " << id << " dropped: " << why;
  }
}

void averager_core::admit_pending() {
  for (auto& [id, e] : pending_) {
    members_[id] = e;
  }
  pending_.clear();
}

void averager_core::start_round(actions& out) {
  if (work_done()) {
    end_job(out);  // (8): a resumed incarnation whose checkpoint already had every planned round
    return;
  }
  if (pause_) {
    // An operator paused the job: no round starts; joiners wait, members keep their place.
    if (state_ != averager_state::paused) {
      PRSGD_LOG(info, log_component) << "paused before round " << round_;
    }
    state_ = averager_state::paused;
    deadline_.reset();
    idle_cutoff_.reset();
    return;
  }
  admit_pending();
  if (members_.empty()) {
    state_ = averager_state::idle;  // (7)
    deadline_.reset();
    return;
  }
  state_ = averager_state::collecting;
  round_start_ = clock_->now();
  submissions_.clear();
  round_removed_ = 0;
  assign_intervals();
  round_step_size_ = current_step_size();
  compute_deadline();
  grants_.clear();
  round_members_ = 0;
  for (auto& [id, e] : members_) {
    if (pool_ && !grant_samples(id, e)) {
      continue;  // nothing left to hand out this round: the member sits it out
    }
    ++round_members_;
    send_restart(out, id);
  }
  if (round_members_ == 0) {
    // Only when the pool is spent, which work_done() above already caught; never wait on nobody.
    state_ = averager_state::idle;
    deadline_.reset();
    return;
  }
  idle_cutoff_.reset();
  if (config_.idle_rounds > 0 && last_round_duration_) {
    // The first round of an incarnation has no measure yet: its cutoff is set by its first submission.
    const auto each = std::max<clock_source::duration>(*last_round_duration_, config_.heartbeat_timeout);
    idle_cutoff_ = round_start_ + each * static_cast<std::int64_t>(config_.idle_rounds);
  }
  PRSGD_LOG(debug, log_component) << "round " << round_ << " starts with " << members_.size() << " members";
}

void averager_core::end_job(actions& out) {
  for (const auto* set : {&members_, &pending_}) {
    for (const auto& [id, e] : *set) {
      send_to(out, id, stop_msg{id, e.incarnation, incarnation_, round_});
    }
  }
  state_ = averager_state::stopped;  // (8)
  deadline_.reset();
  out.stopped = true;
  maybe_done(out);
}

// ---- barrier -----------------------------------------------------------------------------------------

void averager_core::maybe_close(actions& out) {
  if (state_ != averager_state::collecting) {
    return;
  }
  const bool everyone = std::all_of(members_.begin(), members_.end(), [&](const auto& kv) {
    return submissions_.contains(kv.first) || !active(kv.first);
  });
  if (everyone) {
    close_barrier(out, false);  // (6)
    return;
  }
  if (deadline_ && clock_->now() >= *deadline_ && submissions_.size() >= config_.quorum) {
    close_barrier(out, true);  // (6) by deadline
  }
}

// (6): the round's accepted submissions become x̄_{r+1}; then the next round starts (or the job ends).
void averager_core::close_barrier(actions& out, bool by_deadline) {
  round_metrics rm = open_record(by_deadline);
  last_round_duration_ = clock_->now() - round_start_;
  for (const auto& [id, sub] : submissions_) {
    if (auto it = members_.find(id); it != members_.end()) {
      const double waited = to_seconds(clock_->now() - sub.at);
      it->second.idle_last_s = waited;
      it->second.idle_sum_s += waited;
      ++it->second.idle_rounds;
    }
  }
  if (!submissions_.empty()) {
    constexpr double weight = 0.3;  // of the newest round in the ETA's round time
    mean_round_s_ = mean_round_s_ ? (1 - weight) * *mean_round_s_ + weight * rm.round_s : rm.round_s;
  }
  idle_cutoff_.reset();
  // A member the round closed without (a deadline) missed it; idle_rounds misses in a row remove it.
  std::vector<std::pair<member_id, incarnation_t>> idle;
  for (auto& [id, e] : members_) {
    if (!submissions_.contains(id) && active(id) && config_.idle_rounds > 0 && ++e.missed >= config_.idle_rounds) {
      idle.emplace_back(id, e.incarnation);
    }
  }
  for (const auto& [id, inc] : idle) {
    send_to(out, id, removed_msg{id, inc, incarnation_, round_});
    remove_worker(id, "no submission in the last rounds");
  }
  std::vector<float> next;  // x̄_{r+1}; a new buffer, since workers may still hold x̄_r
  // Only a round that trained counts toward the planned rounds and epochs, asks for a checkpoint or an
  // evaluation: an empty round (every member gone before submitting) or a refused one only moves r on.
  bool trained = !submissions_.empty();
  if (trained) {
    round_inputs inputs = collect(rm);
    screen(inputs, rm);
    const auto rule = weigh(inputs);
    last_rule_ = rule;
    rm.rule = std::string(rule_name(rule));
    rm.aggregate = std::string(algorithms::to_string(config_.aggregate.rule));
    bool averaged = false;
    std::vector<float> avg = average(inputs, rule, averaged);
    if (config_.consensus_every > 0 && round_ % config_.consensus_every == 0) {
      rm.consensus_distance = consensus_distance(inputs.contributions, avg);
    }
    // The optimiser states change only if x̄_{r+1} is adopted.
    auto outer_before = outer_;
    auto momentum_before = minibatch_momentum_;
    next = outer_step(std::move(avg), averaged);
    if (!all_finite(next)) {
      // Finite inputs can still overflow (huge values, momentum): keep x̄_r rather than adopt and
      // checkpoint a NaN/Inf model that would stall the job across restarts.
      ++refused_rounds_;
      rm.refused = true;
      rm.submissions = 0;
      rm.samples = 0;
      if (refused_rounds_ == 1) {
        PRSGD_LOG(error, log_component) << "round " << round_ << ": the new x̄ has NaN/Inf; round refused, x̄ kept "
                                        << "(later refusals are counted in the metrics lines, not logged)";
      }
      outer_ = std::move(outer_before);
      minibatch_momentum_ = std::move(momentum_before);
      next = *model_;
      for (const auto& [id, sub] : submissions_) {
        unaccept(id, "round refused: the combined x̄ was not finite");
      }
      submissions_.clear();  // nothing of this round entered x̄
      trained = false;
    }
    if (trained) {
      account();
    }
  } else {
    next = *model_;  // an empty round leaves x̄ unchanged
  }
  rm.wall_s = to_seconds(clock_->now() - started_at_);
  rm.bytes_in = round_bytes_in_;
  rm.bytes_out = round_bytes_out_;
  rm.late = round_counters_.late;
  rm.duplicate = round_counters_.duplicate;
  rm.rejected = round_counters_.rejected;
  rm.unauthorised = round_counters_.unauthorised;
  rm.admitted = pending_.size();
  if (rm.rule.empty()) {
    rm.rule = "none";
  }
  PRSGD_LOG(info, log_component) << "round " << round_ << " closed" << (by_deadline ? " by deadline" : "") << ": "
                                 << rm.submissions << "/" << rm.members << " submissions, " << rm.removed
                                 << " removed, " << rm.admitted << " joining";
  settle_grants(rm);
  rm.trained_rounds = rounds_completed_;
  if (pool_) {
    rm.epoch = pool_->passes();
    if (config_.max_epochs > 0) {
      rm.rounds_total = planned_rounds();
    }
  } else if (config_.rounds_per_epoch > 0) {
    rm.epoch = static_cast<double>(rounds_completed_) / static_cast<double>(config_.rounds_per_epoch);
  }
  advance_round(std::move(next));
  if (trained) {
    request_checkpoint();
  }
  const bool last = work_done();
  record_line(out, std::move(rm), last, trained);
  if (last) {
    end_job(out);  // (8)
  } else {
    start_round(out);
  }
}

// Starts the round's record with what is known before averaging.
round_metrics averager_core::open_record(bool by_deadline) const {
  round_metrics rm;
  rm.round = round_;
  rm.rounds_total = config_.max_rounds;
  rm.members = round_members_;
  rm.submissions = submissions_.size();
  rm.round_s = to_seconds(clock_->now() - round_start_);
  rm.closed_by_deadline = by_deadline;
  rm.removed = round_removed_;
  rm.step_size = round_step_size_;
  rm.interval_min = submissions_.empty() ? 0 : std::numeric_limits<std::uint64_t>::max();
  for (const auto& [id, s] : submissions_) {
    rm.interval_min = std::min(rm.interval_min, s.msg.steps);
    rm.interval_max = std::max(rm.interval_max, s.msg.steps);
  }
  return rm;
}

// Collects the submissions as averaging inputs (no copy of the parameters) and records their samples,
// losses and arrival times; the arrivals also feed the adaptive deadline.
averager_core::round_inputs averager_core::collect(round_metrics& rm) {
  round_inputs in;
  in.contributions.reserve(submissions_.size());
  double loss_sum = 0;
  std::uint64_t loss_count = 0;
  const auto now = clock_->now();
  clock_source::time_point first = now;
  const auto first_steps = submissions_.begin()->second.msg.steps;
  for (const auto& [id, s] : submissions_) {
    in.contributions.push_back(
        {std::span<const float>(*s.msg.params), static_cast<double>(s.msg.samples), static_cast<double>(s.msg.steps)});
    in.steps_differ = in.steps_differ || s.msg.steps != first_steps;
    rm.samples += s.msg.samples;
    if (s.msg.loss_count > 0) {
      loss_sum += s.msg.loss_sum;
      loss_count += s.msg.loss_count;
    }
    first = std::min(first, s.at);
    const double offset = to_seconds(s.at - round_start_);
    rm.arrival_offsets_s.emplace_back(id, offset);
    arrival_history_.push_back(offset);
  }
  if (arrival_history_.size() > config_.adaptive_window) {
    arrival_history_.erase(arrival_history_.begin(),
                           arrival_history_.end() - static_cast<std::ptrdiff_t>(config_.adaptive_window));
  }
  rm.barrier_wait_s = to_seconds(now - first);
  if (loss_count > 0) {
    rm.train_loss = loss_sum / static_cast<double>(loss_count);
  }
  return in;
}

// Chooses how the submissions are weighed: the configured rule, else by samples while every worker ran
// the same number of steps and step-normalised (FedNova) once they differ. Gradients (minibatch_sgd) are
// never step-normalised.
algorithms::averaging_rule averager_core::weigh(const round_inputs& in) const {
  if (config_.mode == training_mode::minibatch_sgd) {
    return config_.rule == algorithms::averaging_rule::uniform ? algorithms::averaging_rule::uniform
                                                               : algorithms::averaging_rule::by_samples;
  }
  if (config_.rule) {
    return *config_.rule;
  }
  return in.steps_differ ? algorithms::averaging_rule::step_normalised : algorithms::averaging_rule::by_samples;
}

// Leaves out of the round every update whose norm is more than screen_k times the round's median (the
// submission is not counted: it never enters x̄). Updates are x_i − x̄, or the gradients themselves.
void averager_core::screen(round_inputs& in, round_metrics& rm) {
  if (config_.screen_k <= 0 || in.contributions.size() < 3) {
    return;
  }
  const bool gradients = config_.mode == training_mode::minibatch_sgd;
  const auto norms = algorithms::update_norms(in.contributions,
                                              gradients ? std::span<const float>{} : std::span<const float>(*model_));
  if (!norms) {
    return;  // every size was checked on receipt
  }
  const auto verdict = algorithms::screen_updates(*norms, config_.screen_k);
  if (verdict.rejected.empty()) {
    return;
  }
  std::vector<member_id> ids;
  for (const auto& [id, s] : submissions_) {
    ids.push_back(id);
  }
  round_inputs kept;
  for (std::size_t i : verdict.kept) {
    kept.contributions.push_back(in.contributions[i]);
    kept.steps_differ = kept.steps_differ || in.contributions[i].steps != in.contributions[verdict.kept[0]].steps;
  }
  for (std::size_t i : verdict.rejected) {
    const member_id id = ids[i];
    const double ratio = (*norms)[i] / verdict.median_norm;
    rm.screened.emplace_back(id, ratio);
    rm.samples -= submissions_.at(id).msg.samples;
    if (warnings_->screened.allow(clock_->now())) {
      PRSGD_LOG(warn, log_component) << "round " << round_ << ": left out the update of worker " << id << ": norm "
                                     << (*norms)[i] << " is " << ratio << " x the round's median "
                                     << verdict.median_norm << " (limit " << config_.screen_k << " x)"
                                     << warnings_->screened.suffix();
    }
    unaccept(id, "left out by the outlier screen (update norm " + std::to_string(ratio) + " x the median)");
    submissions_.erase(id);
    ++screened_total_;
  }
  rm.submissions = submissions_.size();
  in = std::move(kept);
}

// Combines the submissions into a new buffer; `ok` says whether it succeeded (else x̄ is kept).
std::vector<float> averager_core::average(const round_inputs& in, algorithms::averaging_rule rule, bool& ok) const {
  std::vector<float> avg(model_size_);
  const auto combine = [&]() -> expected<void> {
    if (config_.aggregate.rule == algorithms::aggregate_rule::mean) {
      return algorithms::average(in.contributions, *model_, rule, avg);
    }
    auto weights = algorithms::averaging_weights(in.contributions, rule);
    PRSGD_TRY(weights);
    // Gradients (minibatch_sgd) are the updates themselves: the reference is zero.
    const bool gradients = config_.mode == training_mode::minibatch_sgd;
    return algorithms::aggregate(in.contributions, *weights,
                                 gradients ? std::span<const float>{} : std::span<const float>(*model_),
                                 config_.aggregate, avg);
  };
  auto done = combine();
  ok = done.has_value();
  if (!ok) {
    // Every input was validated, so this is not peer behaviour; keep x̄ rather than corrupt it.
    PRSGD_LOG(error, log_component) << "round " << round_ << ": averaging failed (" << done.error().message()
                                    << "); x̄ left unchanged";
    avg = *model_;
  }
  return avg;
}

// Turns the average into x̄_{r+1}: in minibatch_sgd mode one SGD step on the averaged gradient; otherwise
// the outer optimiser's step on the averaged delta, or the average itself.
std::vector<float> averager_core::outer_step(std::vector<float> avg, bool averaged) {
  if (config_.mode == training_mode::minibatch_sgd) {
    // One SGD step on the averaged gradient of the trainable prefix, with the γ announced for this round
    // (and momentum, PyTorch's rule); the buffers after it are averaged values, taken as they are.
    std::vector<float> next = *model_;
    const auto g = static_cast<float>(round_step_size_);
    const std::size_t trainable = trainable_size();
    if (config_.minibatch_momentum > 0) {
      const auto mu = static_cast<float>(config_.minibatch_momentum);
      minibatch_momentum_.resize(trainable, 0.0F);
      for (std::size_t k = 0; k < trainable; ++k) {
        minibatch_momentum_[k] = mu * minibatch_momentum_[k] + avg[k];
        next[k] -= g * minibatch_momentum_[k];
      }
    } else {
      for (std::size_t k = 0; k < trainable; ++k) {
        next[k] -= g * avg[k];
      }
    }
    for (std::size_t k = trainable; k < model_size_; ++k) {
      next[k] = avg[k];
    }
    return next;
  }
  if (averaged && outer_) {
    std::vector<float> next(model_size_);
    if (auto applied = outer_->apply(*model_, avg, next); !applied) {
      PRSGD_LOG(error, log_component) << "round " << round_ << ": outer optimiser failed (" << applied.error().message()
                                      << "); using the plain average";
      return avg;
    }
    return next;
  }
  return avg;
}

// Marks every averaged (round, worker) as counted — exactly once — and updates the speed estimates.
void averager_core::account() {
  for (const auto& [id, s] : submissions_) {
    const int times = ++counted_[std::make_pair(round_, id)];
    PRSGD_CHECK(times == 1) << "worker " << id << " counted twice in round " << round_;
  }
  update_speeds();
  ++rounds_completed_;
}

// r+1 with x̄_{r+1}; the per-round state starts over.
void averager_core::advance_round(std::vector<float> next) {
  bytes_in_ += round_bytes_in_;
  bytes_out_ += round_bytes_out_;
  ++round_;
  model_ = std::make_shared<const std::vector<float>>(std::move(next));
  submissions_.clear();
  deadline_.reset();
  round_bytes_in_ = 0;
  round_bytes_out_ = 0;
  round_counters_ = {};
  prune_accounting();
}

// Takes a checkpoint of round r (x̄_r and the schedule) after every checkpoint_every-th trained round. It
// is held until the lines of every round before r are out (flush_lines), so a crash after the checkpoint
// never loses a line the resumed incarnation will not write again.
void averager_core::request_checkpoint() {
  if (!checkpoints_ || config_.checkpoint_every == 0 || rounds_completed_ == 0 ||
      rounds_completed_ % config_.checkpoint_every != 0) {
    return;
  }
  held_checkpoints_.push_back(snapshot());
}

// Queues the closed round's metrics line, asking for an evaluation of x̄_{r+1} at epoch ends, every
// eval_every trained rounds and at the last round; releases whatever lines are ready.
void averager_core::record_line(actions& out, round_metrics rm, bool last, bool trained) {
  const round_t closed = rm.round + 1;
  const bool epoch_end =
      pool_ ? epoch_closed_
            : trained && config_.rounds_per_epoch > 0 && rounds_completed_ % config_.rounds_per_epoch == 0;
  const bool every = trained && config_.eval_every > 0 && rounds_completed_ % config_.eval_every == 0;
  held_line line{std::move(rm), std::nullopt};
  if (evaluations_ && (epoch_end || every || last)) {
    line.awaiting = next_eval_id_;
    request_evaluation(out, closed, last);
  }
  lines_.push_back(std::move(line));
  flush_lines(out);
}

// ---- schedules ---------------------------------------------------------------------------------------

std::uint64_t averager_core::clamp_interval(double v) const {
  if (!std::isfinite(v) || v < 1) {
    v = 1;
  }
  const auto i = static_cast<std::uint64_t>(std::llround(std::min(v, 1e18)));
  return std::clamp(i, config_.min_interval, config_.max_interval);
}

void averager_core::assign_intervals() {
  if (config_.mode == training_mode::minibatch_sgd) {
    for (auto& [id, e] : members_) {
      e.interval = 1;
    }
    return;
  }
  // The rules live in algorithms::intervals_for_round; here the members become its worker indices.
  const auto to_int = [](std::uint64_t v) {
    return static_cast<int>(std::min<std::uint64_t>(v, static_cast<std::uint64_t>(std::numeric_limits<int>::max())));
  };
  algorithms::interval_schedule schedule;
  schedule.kind = config_.intervals;
  schedule.fixed_interval = to_int(config_.interval);
  schedule.total_steps = static_cast<std::int64_t>(std::min<std::uint64_t>(
      config_.total_steps, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())));
  schedule.min_interval = to_int(config_.min_interval);
  schedule.max_interval = to_int(config_.max_interval);
  std::vector<double> speeds;
  speeds.reserve(members_.size());
  for (const auto& [id, e] : members_) {
    const auto it = config_.per_worker_intervals.find(e.shard);
    schedule.per_worker.push_back(to_int(it != config_.per_worker_intervals.end() ? it->second : config_.interval));
    speeds.push_back(e.speed);
  }
  const int n = to_int(std::max<std::size_t>(members_.size(), 1));
  const auto intervals = algorithms::intervals_for_round(schedule, n, speeds);
  std::size_t k = 0;
  for (auto& [id, e] : members_) {
    // make() checked every field intervals_for_round checks, so this falls back only on an unforeseen error.
    e.interval =
        clamp_interval(intervals ? static_cast<double>((*intervals)[k]) : static_cast<double>(config_.interval));
    ++k;
  }
}

void averager_core::update_speeds() {
  for (const auto& [id, s] : submissions_) {
    auto it = members_.find(id);
    const double secs = to_seconds(s.at - round_start_);
    if (it == members_.end() || !(secs > 0)) {
      continue;
    }
    it->second.speed =
        algorithms::smoothed_rate(it->second.speed, static_cast<double>(s.msg.steps) / secs, config_.speed_ema);
  }
}

double averager_core::current_step_size() const {
  algorithms::lr_schedule schedule;
  schedule.kind = config_.step_sizes;
  schedule.base_lr = config_.step_size;
  schedule.c = config_.step_size_c;
  schedule.num_workers = static_cast<int>(std::min<std::size_t>(
      std::max<std::size_t>(members_.size(), 1), static_cast<std::size_t>(std::numeric_limits<int>::max())));
  schedule.total_steps = static_cast<std::int64_t>(std::min<std::uint64_t>(
      config_.total_steps, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())));
  schedule.warmup_steps = static_cast<std::int64_t>(config_.warmup_rounds);
  // The schedule counts rounds here, from 1: round r of the warm-up sends γ · (r + 1) / warmup_rounds.
  return algorithms::learning_rate(schedule, static_cast<std::int64_t>(rounds_completed_) + 1);
}

void averager_core::compute_deadline() {
  deadline_.reset();
  switch (config_.deadline) {
    case deadline_policy::none: break;
    case deadline_policy::fixed: deadline_ = round_start_ + config_.fixed_deadline; break;
    case deadline_policy::adaptive: {
      if (arrival_history_.size() < config_.adaptive_min_samples) {
        break;
      }
      const double med = median_of(arrival_history_);
      std::vector<double> dev;
      dev.reserve(arrival_history_.size());
      for (double x : arrival_history_) {
        dev.push_back(std::abs(x - med));
      }
      const double secs = std::max(med + config_.mad_k * median_of(std::move(dev)), to_seconds(config_.adaptive_floor));
      deadline_ =
          round_start_ + std::chrono::duration_cast<clock_source::duration>(std::chrono::duration<double>(secs));
      break;
    }
  }
}

// ---- bookkeeping -------------------------------------------------------------------------------------

void averager_core::record(const model_msg& m, submission_status s, std::string reason, std::string_view code) {
  if (!code.empty()) {
    ++drops_[std::string{code}];
  }
  switch (s) {
    case submission_status::accepted:
      ++counters_.accepted;
      ++round_counters_.accepted;
      break;
    case submission_status::late:
      ++counters_.late;
      ++round_counters_.late;
      break;
    case submission_status::duplicate:
      ++counters_.duplicate;
      ++round_counters_.duplicate;
      break;
    case submission_status::rejected:
      ++counters_.rejected;
      ++round_counters_.rejected;
      if (warnings_->rejected_model.allow(clock_->now())) {
        PRSGD_LOG(warn, log_component) << "rejected MODEL of worker " << m.member << " (incarnation " << m.incarnation
                                       << ", round " << m.round << "): " << reason
                                       << warnings_->rejected_model.suffix();
      }
      break;
  }
  if (s == submission_status::late || s == submission_status::duplicate) {
    PRSGD_LOG(debug, log_component) << to_string(s) << " MODEL of worker " << m.member << " round " << m.round
                                    << (reason.empty() ? "" : ": ") << reason;
  }
  if (s == submission_status::late || s == submission_status::rejected) {
    for (auto* set : {&members_, &pending_}) {
      if (auto it = set->find(m.member); it != set->end()) {
        ++(s == submission_status::late ? it->second.late : it->second.rejected);
      }
    }
  }
  accounting_.push_back({m.round, m.member, m.incarnation, s, std::move(reason)});
}

// Turns member `id`'s accepted record of the open round into a rejected one (it did not enter x̄ after all).
void averager_core::unaccept(member_id id, std::string reason) {
  for (auto it = accounting_.rbegin(); it != accounting_.rend(); ++it) {
    if (it->round == round_ && it->member == id && it->status == submission_status::accepted) {
      it->status = submission_status::rejected;
      it->reason = std::move(reason);
      --counters_.accepted;
      ++counters_.rejected;
      return;
    }
  }
}

void averager_core::prune_accounting() {
  if (round_ <= config_.accounting_rounds_kept) {
    return;
  }
  const round_t oldest = round_ - config_.accounting_rounds_kept;
  std::erase_if(accounting_, [&](const submission_record& r) { return r.round < oldest; });
  std::erase_if(counted_, [&](const auto& kv) { return kv.first.first < oldest; });
}

checkpoint_state averager_core::snapshot() const {
  checkpoint_state s;
  s.averager_incarnation = incarnation_;
  s.round = round_;
  s.model = *model_;
  for (const auto* set : {&members_, &pending_}) {
    for (const auto& [id, e] : *set) {
      s.members.push_back({id, e.incarnation, e.interval, e.speed});
    }
  }
  s.rounds_completed = rounds_completed_;
  if (outer_) {
    s.outer_momentum.assign(outer_->state().begin(), outer_->state().end());
  } else if (!minibatch_momentum_.empty()) {
    s.outer_momentum = minibatch_momentum_;  // the same slot: the two modes never share a checkpoint
  }
  s.arrival_history = arrival_history_;
  s.late = counters_.late;
  s.duplicate = counters_.duplicate;
  s.rejected = counters_.rejected;
  s.identity = config_.model_identity;
  if (pool_) {
    // The open round's grants go back: a resumed incarnation runs this round again with new members.
    auto pool = *pool_;
    for (const auto& [id, grant] : grants_) {
      pool.give_back(grant);
    }
    s.pool = pool.save();
  }
  return s;
}

welcome_msg averager_core::make_welcome(member_id id, const member_entry& e, round_t admitted) const {
  welcome_msg w{id,       e.incarnation, incarnation_, round_,
                admitted, config_.mode,  model_size_,  config_.heartbeat_interval};
  w.token = e.token;
  w.shard_index = e.shard;
  w.num_shards = num_shards_;
  w.spec = config_.spec;
  return w;
}

restart_msg averager_core::make_restart(member_id id) const {
  const auto& e = members_.at(id);
  restart_msg m{id, e.incarnation, incarnation_, round_, model_, e.interval, round_step_size_, config_.mode, {}};
  if (auto g = grants_.find(id); g != grants_.end()) {
    m.ranges.reserve(g->second.size());
    for (const auto& r : g->second) {
      m.ranges.emplace_back(r.begin, r.end);
    }
  }
  return m;
}

bool averager_core::grant_samples(member_id id, member_entry& e) {
  const std::uint64_t batch = config_.spec.batch_size;
  auto grant = pool_->take(e.interval * batch, max_restart_ranges);
  if (grant.empty()) {
    return false;
  }
  std::uint64_t n = 0;
  for (const auto& r : grant) {
    n += r.size();
  }
  // Fewer samples than interval x batch (the last passes, or a fragmented pool): fewer steps, the last
  // batch possibly short.
  e.interval = std::min(e.interval, (n + batch - 1) / batch);
  grants_[id] = std::move(grant);
  return true;
}

std::uint64_t averager_core::granted_samples(member_id id) const {
  std::uint64_t n = 0;
  if (auto g = grants_.find(id); g != grants_.end()) {
    for (const auto& r : g->second) {
      n += r.size();
    }
  }
  return n;
}

void averager_core::settle_grants(round_metrics& rm) {
  epoch_closed_ = false;
  if (!pool_) {
    return;
  }
  const auto done_before = pool_->epochs_done();
  for (const auto& [id, grant] : grants_) {
    if (submissions_.contains(id)) {
      pool_->consume(grant);
      for (const auto& r : grant) {
        rm.data.push_back({id, r.epoch, r.begin, r.end});
      }
    } else {
      pool_->give_back(grant);  // not in x̄: the samples go to another member later in the epoch
    }
  }
  grants_.clear();
  epoch_closed_ = pool_->epochs_done() > done_before;
}

std::uint64_t averager_core::planned_rounds() const {
  std::uint64_t per_round = 0;
  for (const auto* set : {&members_, &pending_}) {
    for (const auto& [id, e] : *set) {
      per_round += e.interval * config_.spec.batch_size;
    }
  }
  const std::uint64_t left = pool_->remaining();
  return rounds_completed_ + (per_round == 0 ? 0 : (left + per_round - 1) / per_round);
}

std::vector<algorithms::sample_range> averager_core::grant_of(member_id member) const {
  auto g = grants_.find(member);
  return g == grants_.end() ? std::vector<algorithms::sample_range>{} : g->second;
}

void averager_core::send_restart(actions& out, member_id id) {
  auto& e = members_.at(id);
  if (e.restarted == round_) {
    return;  // at most one RESTART per member and round, however many JOINs ask
  }
  e.restarted = round_;
  e.resend_at.reset();
  send_to(out, id, make_restart(id));
  round_bytes_out_ += model_size_ * sizeof(float);
  e.bytes_out += model_size_ * sizeof(float);
}

actions averager_core::on_send_failed(member_id member, const any_msg& msg, errc code) {
  actions out;
  ++drops_["send_failed"];
  const auto* restart = std::get_if<restart_msg>(&msg);
  auto it = members_.find(member);
  if (restart == nullptr || state_ != averager_state::collecting || restart->round != round_ || it == members_.end() ||
      it->second.incarnation != restart->incarnation || submissions_.contains(member)) {
    return with_wakeup(std::move(out));  // nothing waits for it
  }
  auto& e = it->second;
  ++e.send_failures;
  if (code == errc::overloaded && e.send_failures <= config_.send_retries) {
    e.restarted.reset();  // send_restart may send this round's RESTART once more
    e.resend_at = clock_->now() + config_.heartbeat_interval;
    if (warnings_->send_failed.allow(clock_->now())) {
      PRSGD_LOG(warn, log_component) << "RESTART of round " << round_ << " to worker " << member << " not sent ("
                                     << to_string(code) << "); retry " << e.send_failures << " of "
                                     << config_.send_retries << warnings_->send_failed.suffix();
    }
    return with_wakeup(std::move(out));
  }
  ++drops_["send_failed_removed"];
  const std::string why = "its RESTART could not be sent (" + std::string{to_string(code)} + ", " +
                          std::to_string(e.send_failures) + (e.send_failures == 1 ? " attempt)" : " attempts)");
  send_to(out, member, removed_msg{member, e.incarnation, incarnation_, round_});
  remove_worker(member, why.c_str());
  maybe_close(out);
  return with_wakeup(std::move(out));
}

// Sends again the RESTARTs whose retry time has come (members that still have not submitted).
void averager_core::resend_restarts(actions& out) {
  const auto now = clock_->now();
  std::vector<member_id> due;
  for (const auto& [id, e] : members_) {
    if (e.resend_at && *e.resend_at <= now) {
      due.push_back(id);
    }
  }
  for (const member_id id : due) {
    members_.at(id).resend_at.reset();
    if (state_ == averager_state::collecting && !submissions_.contains(id)) {
      send_restart(out, id);
    }
  }
}

// Removes every member that has not submitted by the idle cutoff (it heartbeats, so the timeout misses it).
void averager_core::remove_idle(actions& out) {
  idle_cutoff_.reset();
  std::vector<std::pair<member_id, incarnation_t>> idle;
  for (const auto& [id, e] : members_) {
    if (!submissions_.contains(id) && active(id)) {
      idle.emplace_back(id, e.incarnation);
    }
  }
  for (const auto& [id, inc] : idle) {
    ++drops_["idle"];
    send_to(out, id, removed_msg{id, inc, incarnation_, round_});
    remove_worker(id, "no submission within the idle limit");
  }
}

const averager_core::member_entry* averager_core::find_entry(member_id member) const {
  for (const auto* set : {&members_, &pending_}) {
    if (auto it = set->find(member); it != set->end()) {
      return &it->second;
    }
  }
  return nullptr;
}

bool averager_core::authorised(member_id member, session_token token, origin_t from, std::string_view what) {
  const auto* e = find_entry(member);
  if (e == nullptr) {
    return true;  // names nobody we know: the handlers treat it as a stranger
  }
  std::optional<auth_failure> failure;
  const auto key = connection_keys_.find(from);
  if (!e->client_key.empty() && (key == connection_keys_.end() || key->second != e->client_key)) {
    failure = auth_failure::wrong_key;
  } else if (token != e->token) {
    failure = auth_failure::bad_token;
  } else if (from != e->origin) {
    failure = auth_failure::wrong_connection;
  }
  if (!failure) {
    return true;
  }
  ++counters_.unauthorised;
  ++round_counters_.unauthorised;
  ++drops_[std::string{to_string(*failure)}];
  if (warnings_->unauthorised.allow(clock_->now())) {
    PRSGD_LOG(warn, log_component) << "refused " << what << " naming member " << member << " from connection " << from
                                   << ": " << to_string(*failure) << warnings_->unauthorised.suffix();
  }
  return false;
}

std::optional<std::string> averager_core::mismatch(const join_msg& m) const {
  const auto differs = [](const std::string& job, const std::string& worker) { return !job.empty() && worker != job; };
  if (differs(config_.spec.model, m.model_fingerprint)) {
    return "model mismatch: the job trains " + config_.spec.model + ", the worker has " +
           (m.model_fingerprint.empty() ? std::string{"no model fingerprint"} : m.model_fingerprint);
  }
  if (differs(config_.spec.data, m.data_fingerprint)) {
    return "data mismatch: the job trains on " + config_.spec.data + ", the worker has " +
           (m.data_fingerprint.empty() ? std::string{"no data fingerprint"} : m.data_fingerprint);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> averager_core::free_shard() const {
  std::vector<bool> held(num_shards_, false);
  for (const auto* set : {&members_, &pending_}) {
    for (const auto& [id, e] : *set) {
      if (e.shard < held.size()) {
        held[e.shard] = true;
      }
    }
  }
  for (std::size_t k = 0; k < held.size(); ++k) {
    if (!held[k]) {
      return k;
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> averager_core::shard_of(member_id member) const {
  const auto* e = find_entry(member);
  return e == nullptr ? std::nullopt : std::optional<std::uint64_t>{e->shard};
}

// ---- evaluations and metrics lines ------------------------------------------------------------------

void averager_core::request_evaluation(actions& out, round_t rounds, bool final) {
  eval_queue_.push_back(evaluation_request{next_eval_id_++, rounds, model_, final});
  final_eval_requested_ = final_eval_requested_ || final;
  pump_evaluations(out);
}

void averager_core::pump_evaluations(actions& out) {
  while (evaluating_.size() < config_.max_evaluations && !eval_queue_.empty()) {
    evaluating_.emplace(eval_queue_.front().id, eval_queue_.front().rounds);
    out.evaluations.push_back(std::move(eval_queue_.front()));
    eval_queue_.pop_front();
  }
}

void averager_core::flush_lines(actions& out) {
  while (!lines_.empty() && !lines_.front().awaiting) {
    out.lines.push_back(std::move(lines_.front().metrics));
    lines_.pop_front();
  }
  // A checkpoint of round c leaves once every line of the rounds before c has (the shell writes lines
  // before checkpoints).
  while (!held_checkpoints_.empty() &&
         (lines_.empty() || held_checkpoints_.front().round <= lines_.front().metrics.round)) {
    out.checkpoints.push_back(std::move(held_checkpoints_.front()));
    held_checkpoints_.pop_front();
  }
}

void averager_core::maybe_done(actions& out) {
  if (done_ || state_ != averager_state::stopped) {
    return;
  }
  if (evaluations_ && !suspended_ && !final_eval_requested_) {
    // Stopped without closing a final round (stop() from the shell): score the current x̄ once more.
    request_evaluation(out, round_, true);
  }
  if (!lines_.empty() || !evaluating_.empty() || !eval_queue_.empty()) {
    return;
  }
  done_ = true;
  out.done = summary(!suspended_);
  if (checkpoints_ && !suspended_) {
    // Marks the store finished: an averager started on it later has nothing to do.
    auto last = snapshot();
    last.finished = true;
    out.done->final_checkpoint = std::move(last);
  }
}

job_summary averager_core::summary(bool job_over) const {
  job_summary s;
  s.rounds = round_;
  s.trained_rounds = rounds_completed_;
  s.test_acc = last_acc_;
  s.wall_s = to_seconds(clock_->now() - started_at_);
  s.bytes_in = bytes_in_;
  s.bytes_out = bytes_out_;
  s.counters = counters_;
  s.model = model_;
  s.job_over = job_over;
  return s;
}

// ---- operators ---------------------------------------------------------------------------------------

namespace {

// Parses a whole decimal number.
std::optional<std::uint64_t> parse_count(std::string_view text) {
  std::uint64_t v = 0;
  const auto* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc{} || r.ptr != end) {
    return std::nullopt;
  }
  return v;
}

}  // namespace

averager_core::control_outcome averager_core::on_control(control_op op, std::string_view arg) {
  control_outcome o;
  const auto done = [&](bool ok, std::string text) {
    o.ok = ok;
    o.text = std::move(text);  // the shell logs it with who asked
    o.act = with_wakeup(std::move(o.act));
    return std::move(o);
  };
  if (state_ == averager_state::stopped) {
    return done(false, "the job is over");
  }
  const std::string next_round =
      "from round " + std::to_string(state_ == averager_state::collecting ? round_ + 1 : round_);
  switch (op) {
    case control_op::pause:
      if (pause_) {
        return done(true, "already paused");
      }
      pause_ = true;
      if (state_ == averager_state::idle) {
        state_ = averager_state::paused;
        return done(true, "paused");
      }
      if (state_ != averager_state::collecting) {
        return done(true, "pauses before the first round");
      }
      return done(true, "pauses at the barrier of round " + std::to_string(round_));
    case control_op::resume: {
      if (!pause_) {
        return done(false, "not paused");
      }
      pause_ = false;
      if (state_ == averager_state::paused) {
        state_ = averager_state::idle;
        if (!members_.empty() || !pending_.empty()) {
          start_round(o.act);
          return done(true, "resumed: round " + std::to_string(round_) + " starts");
        }
        return done(true, "resumed: the next JOIN starts round " + std::to_string(round_));
      }
      return done(true, "resumed: the pause had not taken effect yet");
    }
    case control_op::remove: {
      const auto id = parse_count(arg);
      const auto* e = id ? find_entry(*id) : nullptr;
      if (e == nullptr) {
        return done(false, "no member or joiner " + std::string{arg});
      }
      const round_t in_round = round_;
      send_to(o.act, *id, stop_msg{*id, e->incarnation, incarnation_, round_});
      remove_worker(*id, "removed by an operator");
      maybe_close(o.act);
      return done(true,
                  "member " + std::to_string(*id) + " removed in round " + std::to_string(in_round) + " (sent STOP)");
    }
    case control_op::set_interval: {
      const auto n = parse_count(arg);
      if (!n || *n < config_.min_interval || *n > config_.max_interval) {
        return done(false, "the interval must be a whole number in [" + std::to_string(config_.min_interval) + ", " +
                               std::to_string(config_.max_interval) + "], not '" + std::string{arg} + "'");
      }
      if (config_.mode == training_mode::minibatch_sgd) {
        return done(false, "mini-batch SGD always runs I = 1");
      }
      config_.interval = *n;
      return done(true, "interval I = " + std::to_string(*n) + " " + next_round);
    }
    case control_op::set_policy: {
      auto kind = algorithms::parse_interval_kind(arg);
      if (!kind) {
        return done(false, kind.error().message());
      }
      if (config_.mode == training_mode::minibatch_sgd) {
        return done(false, "mini-batch SGD always runs I = 1");
      }
      config_.intervals = *kind;
      return done(true, "interval policy " + std::string{algorithms::to_string(*kind)} + " " + next_round);
    }
    case control_op::set_deadline: {
      const auto colon = arg.find(':');
      auto policy = parse_deadline_policy(arg.substr(0, colon));
      if (!policy) {
        return done(false, "deadline: none | adaptive | fixed:SECONDS, not '" + std::string{arg} + "'");
      }
      if (*policy == deadline_policy::fixed) {
        double secs = 0;
        const auto text = colon == std::string_view::npos ? std::string_view{} : arg.substr(colon + 1);
        const auto r = std::from_chars(text.data(), text.data() + text.size(), secs);
        if (text.empty() || r.ec != std::errc{} || r.ptr != text.data() + text.size() || !(secs > 0) ||
            !std::isfinite(secs) || secs > 1e6) {
          return done(false, "a fixed deadline needs positive seconds: fixed:SECONDS");
        }
        config_.fixed_deadline =
            std::chrono::duration_cast<clock_source::duration>(std::chrono::duration<double>(secs));
      } else if (colon != std::string_view::npos) {
        return done(false, "only a fixed deadline takes seconds");
      }
      config_.deadline = *policy;
      return done(true, "deadline " + std::string{arg} + " " + next_round);
    }
    case control_op::checkpoint:
      if (!checkpoints_) {
        return done(false, "this averager keeps no checkpoints (start it with --checkpoint-dir)");
      }
      held_checkpoints_.push_back(snapshot());
      flush_lines(o.act);
      return done(true, "checkpoint of round " + std::to_string(round_));
    case control_op::stop:
      end_job(o.act);
      return done(true, "stopping after " + std::to_string(rounds_completed_) + " trained rounds");
  }
  return done(false, "unknown action");
}

job_status averager_core::status(const std::function<std::string(origin_t)>& host_of) const {
  const auto now = clock_->now();
  job_status s;
  if (config_.model_identity) {
    s.model = config_.model_identity->name;
  }
  s.fingerprint = config_.spec.model;
  s.data_fingerprint = config_.spec.data;
  s.state = std::string{to_string(state_)};
  s.paused = pause_;
  s.averager_incarnation = incarnation_;
  s.round = round_;
  s.trained_rounds = rounds_completed_;
  s.rounds_total = config_.max_rounds;
  if (config_.rounds_per_epoch > 0) {
    s.epoch = static_cast<double>(rounds_completed_) / static_cast<double>(config_.rounds_per_epoch);
  }
  if (config_.max_rounds > 0 && mean_round_s_) {
    const auto left = config_.max_rounds > rounds_completed_ ? config_.max_rounds - rounds_completed_ : 0;
    s.eta_s = static_cast<double>(left) * *mean_round_s_;
  }
  s.wall_s = to_seconds(now - started_at_);
  if (last_rule_) {
    s.rule = std::string{rule_name(*last_rule_)};
  } else if (config_.rule) {
    s.rule = std::string{rule_name(*config_.rule)};
  } else {
    s.rule = "auto";
  }
  s.aggregation = std::string{algorithms::to_string(config_.aggregate.rule)};
  s.interval_policy = std::string{algorithms::to_string(config_.intervals)};
  s.interval = config_.interval;
  s.deadline = std::string{to_string(config_.deadline)};
  s.deadline_s = to_seconds(config_.fixed_deadline);
  s.test_acc = last_acc_.value_or(-1);
  s.accepted = counters_.accepted;
  s.late = counters_.late;
  s.duplicate = counters_.duplicate;
  s.rejected = counters_.rejected;
  s.bytes_in = bytes_in_;
  s.bytes_out = bytes_out_;
  const auto row = [&](member_id id, const member_entry& e, std::string state) {
    member_status m;
    m.id = id;
    m.host = host_of ? host_of(e.origin) : std::string{};
    m.incarnation = e.incarnation;
    m.state = std::move(state);
    m.shard = e.shard;
    m.interval = e.interval;
    m.steps_per_s = e.speed;
    m.idle_last_s = e.idle_last_s;
    m.idle_mean_s = e.idle_rounds > 0 ? e.idle_sum_s / static_cast<double>(e.idle_rounds) : -1;
    m.last_seen_s = std::max(0.0, to_seconds(now - e.last_seen));
    m.bytes_in = e.bytes_in;
    m.bytes_out = e.bytes_out;
    m.late = e.late;
    m.rejected = e.rejected;
    return m;
  };
  for (const auto& [id, e] : members_) {
    std::string state = "idle";
    if (state_ == averager_state::paused) {
      state = "paused";
    } else if (state_ == averager_state::collecting) {
      state = submissions_.contains(id) ? "waiting" : "training";
    }
    s.members.push_back(row(id, e, std::move(state)));
  }
  for (const auto& [id, e] : pending_) {
    s.pending.push_back(row(id, e, "joining"));
  }
  for (const auto& r : removed_) {
    s.removed.push_back({r.id, r.incarnation, r.round, std::max(0.0, to_seconds(now - r.at)), r.reason});
  }
  return s;
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
