// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_core.hpp"

#include "averager_core_detail.hpp"

#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/algorithms/wire_change.hpp"
#include "prsgd/common/check.hpp"
#include "prsgd/common/log.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <utility>

namespace prsgd::actors {

using core_detail::all_finite;
using core_detail::consensus_distance;
using core_detail::log_component;
using core_detail::median_of;
using core_detail::rule_name;
using core_detail::send_to;
using core_detail::to_seconds;

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
    if (!sharded() && config_.consensus_every > 0 && round_ % config_.consensus_every == 0) {
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
  // Sharded: the owners combine what entered x̄ (after the screen; nothing when the round was empty).
  std::optional<shard_round_msg> combine;
  if (sharded()) {
    combine = make_combine(trained ? last_rule_.value_or(algorithms::averaging_rule::by_samples)
                                   : algorithms::averaging_rule::by_samples);
  }
  advance_round(std::move(next));
  const std::size_t checkpoints_before = held_checkpoints_.size();
  if (trained) {
    request_checkpoint();
  }
  const bool last = work_done();
  const std::uint64_t evals_before = next_eval_id_;
  record_line(out, std::move(rm), last, trained);
  if (combine) {
    // x̄_{r+1} comes back to this process only when a checkpoint, an evaluation or the end needs it.
    combine->round = round_;
    combine->fetch = last || held_checkpoints_.size() != checkpoints_before || next_eval_id_ != evals_before ||
                     !out.checkpoints.empty();
    out.shard_orders.push_back(std::move(*combine));
  }
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
    // Sharded: the parameters are at the owners; the weights need only samples and steps.
    in.contributions.push_back({s.msg.params ? std::span<const float>(*s.msg.params) : std::span<const float>{},
                                static_cast<double>(s.msg.samples), static_cast<double>(s.msg.steps)});
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
  expected<std::vector<double>> norms = std::vector<double>{};
  if (sharded()) {
    // The owners measured ‖x_i − x̄‖² slice by slice (SHARD_ACK); the shell summed them.
    for (const auto& [id, s] : submissions_) {
      norms->push_back(std::sqrt(std::max(s.msg.update_norm2, 0.0)));
    }
  } else {
    norms = algorithms::update_norms(in.contributions,
                                     gradients ? std::span<const float>{} : std::span<const float>(*model_));
  }
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
  if (sharded()) {
    // The owners combine the slices (order_combine); validate the weights here as star would.
    auto weights = algorithms::averaging_weights(in.contributions, rule);
    ok = weights.has_value();
    if (!ok) {
      PRSGD_LOG(error, log_component) << "round " << round_ << ": averaging failed (" << weights.error().message()
                                      << ")";
    }
    return *model_;
  }
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
  next = settle_change(std::move(next));
  ++round_;
  model_ = std::make_shared<const std::vector<float>>(std::move(next));
  submissions_.clear();
  deadline_.reset();
  round_bytes_in_ = 0;
  round_bytes_out_ = 0;
  round_counters_ = {};
  prune_accounting();
}

std::vector<float> averager_core::settle_change(std::vector<float> next) {
  restart_change_.reset();
  const auto dtype = config_.spec.wire;
  // Sharded: each owner settles its slice's change itself (shard_owner_core).
  if (sharded() || !algorithms::lossy(dtype) || !model_ || model_->size() != next.size()) {
    return next;
  }
  // Every member rebuilds x̄_{r+1} = x̄_r + change with the same float32 additions, so this is bit for bit
  // the model they train from and the one checkpoints record. A change beyond f16's range is not sent:
  // this round's x̄ goes whole, as f32, to everyone.
  if (auto change = algorithms::settle_change(*model_, next, dtype, downlink_)) {
    restart_change_ = std::make_shared<const std::vector<float>>(std::move(*change));
  }
  return next;
}

std::uint64_t averager_core::wire_bytes(const flat_buffer& values, algorithms::wire_dtype dtype) {
  return values ? algorithms::encoded_size(dtype, values->size()) : 0;
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

}  // namespace prsgd::actors
