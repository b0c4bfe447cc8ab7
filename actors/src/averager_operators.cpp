// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_core.hpp"

#include "averager_core_detail.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

namespace prsgd::actors {

using core_detail::rule_name;
using core_detail::send_to;
using core_detail::to_seconds;

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
  if (evaluations_ && !suspended_ && !final_eval_requested_ && !awaiting_initial_) {
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
  s.test_loss = last_loss_;
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
      if (awaiting_initial_) {
        return done(false, "no model to checkpoint yet: it comes with the first member's JOIN");
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

spec_reply_msg averager_core::spec_reply(const spec_request_msg& m) const {
  spec_reply_msg r;
  r.incarnation = m.incarnation;
  r.averager_incarnation = incarnation_;
  r.round = round_;
  r.spec = config_.spec;
  r.mode = config_.mode;
  r.model_size = model_size_;
  return r;
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
  s.test_loss = last_loss_.value_or(-1);
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

}  // namespace prsgd::actors
