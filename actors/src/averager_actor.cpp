// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_actor.hpp"

#include <algorithm>
#include <utility>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::actors {

averager_actor::averager_actor(averager_actor_config config) : config_(std::move(config)) {}

averager_actor::~averager_actor() = default;

void averager_actor::on_start() {
  auto initial = algorithms::model_registry::instance().make(config_.model_name, config_.model);
  if (!initial) {
    PRSGD_LOG(error, "averager") << "cannot build model '" << config_.model_name
                                 << "': " << initial.error().message();
    quit(initial.error());
    return;
  }
  std::vector<float> params((*initial)->params().begin(), (*initial)->params().end());
  config_.core.trainable_params = (*initial)->num_trainable();
  if (config_.test_set) {
    eval_model_ = std::move(*initial);
  }
  auto core = averager_core::make(config_.core, system().core()->time(), std::move(params));
  if (!core) {
    PRSGD_LOG(error, "averager") << "cannot start: " << core.error().message();
    quit(core.error());
    return;
  }
  core_.emplace(std::move(*core));
  if (!config_.metrics_jsonl.empty()) {
    auto w = metrics_writer::open(config_.metrics_jsonl, core_->resumed_from().has_value());
    if (!w) {
      PRSGD_LOG(error, "averager") << "cannot open metrics file: " << w.error().message();
      quit(w.error());
      return;
    }
    writer_.emplace(std::move(*w));
    if (core_->resumed_from()) {
      if (auto ok = writer_->write_resumed(*core_->resumed_from(), core_->incarnation()); !ok) {
        PRSGD_LOG(error, "averager") << "metrics write failed: " << ok.error().message();
      }
    }
  }
  if (core_->resumed_from()) {
    PRSGD_LOG(info, "averager") << "incarnation " << core_->incarnation() << " resumed from checkpoint at round "
                                << *core_->resumed_from();
  } else {
    PRSGD_LOG(info, "averager") << "incarnation " << core_->incarnation() << " starts at round " << core_->round();
  }
  started_ = now();
  rearm();
}

void averager_actor::on_stop(const error& reason) {
  if (reason.code != errc::none && reason.code != errc::shutting_down) {
    PRSGD_LOG(error, "averager") << "stopped: " << reason.message();
  }
}

void averager_actor::attach(std::shared_ptr<transport> link) { link_ = std::move(link); }

void averager_actor::on_wire(peer_id peer, multipart msg) {
  if (!core_ || done_) {
    return;
  }
  auto decoded = decode_to_averager(msg, config_.limits);
  if (!decoded) {
    // Malformed input never reaches the core; it is counted by the transport stats and logged here.
    PRSGD_LOG(warn, "averager") << "dropped malformed message from peer " << peer << ": "
                                << decoded.error().message();
    return;
  }
  std::vector<outbound> out = std::visit(
      [&](auto& m) -> std::vector<outbound> {
        using M = std::decay_t<decltype(m)>;
        peers_[m.member] = peer;
        if constexpr (std::is_same_v<M, join_msg>) {
          PRSGD_LOG(info, "averager") << "JOIN worker " << m.member << " (incarnation " << m.incarnation << ")";
          return core_->on_join(m);
        } else if constexpr (std::is_same_v<M, leave_msg>) {
          PRSGD_LOG(info, "averager") << "LEAVE worker " << m.member;
          return core_->on_leave(m);
        } else if constexpr (std::is_same_v<M, heartbeat_msg>) {
          return core_->on_heartbeat(m);
        } else {
          return core_->on_model(m);
        }
      },
      *decoded);
  send_all(std::move(out));
  after_event();
}

void averager_actor::on_peer(const peer_event& event) {
  PRSGD_LOG(debug, "averager") << "peer " << event.peer << (event.up ? " up" : " down") << " node '" << event.node
                               << "'";
}

void averager_actor::finish() {
  if (!core_ || done_) {
    return;
  }
  send_all(core_->stop());
  after_event();
}

void averager_actor::suspend() {
  if (!core_ || done_) {
    return;
  }
  if (auto ok = core_->checkpoint_now(); !ok) {
    PRSGD_LOG(error, "averager") << "cannot checkpoint before exiting (" << ok.error().message()
                                 << "); stopping the job instead";
    finish();
    return;
  }
  PRSGD_LOG(info, "averager") << "checkpointed round " << core_->round()
                              << "; exiting without stopping the workers (a restarted averager resumes)";
  // Every closed round gets its line now; an evaluation still running is not waited for (test_acc null).
  for (auto& l : lines_) {
    l.awaiting_eval = false;
  }
  flush_lines();
  end_incarnation();
  if (config_.on_done) {
    config_.on_done(summary_);
  }
}

void averager_actor::end_incarnation() {
  done_ = true;
  if (timer_) {
    cancel_timer(*timer_);
    timer_.reset();
  }
  summary_.rounds = std::max(summary_.rounds, core_->round());
  summary_.test_acc = last_acc_;
  summary_.counters = core_->counters();
  summary_.wall_s = std::chrono::duration<double>(now() - started_).count();
}

round_t averager_actor::round() const { return core_ ? core_->round() : 0; }

submission_counters averager_actor::counters() const { return core_ ? core_->counters() : submission_counters{}; }

int averager_actor::times_counted(round_t r, member_id m) const { return core_ ? core_->times_counted(r, m) : 0; }

std::vector<member_id> averager_actor::members() const { return core_ ? core_->members() : std::vector<member_id>{}; }

void averager_actor::send_all(std::vector<outbound> out) {
  if (!link_) {
    return;
  }
  for (auto& o : out) {
    auto it = peers_.find(o.to);
    if (it == peers_.end()) {
      continue;  // never heard from this worker in this incarnation: nowhere to send
    }
    auto sent = link_->send(it->second, encode(o.msg));
    if (!sent) {
      PRSGD_LOG(debug, "averager") << "send to worker " << o.to << " failed: " << sent.error().message();
    }
  }
}

void averager_actor::after_event() {
  collect_metrics();
  maybe_done();
  rearm();
}

void averager_actor::rearm() {
  if (timer_) {
    cancel_timer(*timer_);
    timer_.reset();
  }
  if (!core_ || done_) {
    return;
  }
  auto wake = core_->next_wakeup();
  if (!wake) {
    return;
  }
  auto delay = std::max(clock::duration::zero(), *wake - now());
  timer_ = schedule_once(delay, [this] {
    timer_.reset();
    if (!core_ || done_) {
      return;
    }
    send_all(core_->tick());
    after_event();
  });
}

void averager_actor::collect_metrics() {
  for (auto& m : core_->drain_metrics()) {
    summary_.rounds = m.round + 1;
    summary_.bytes_in += m.bytes_in;
    summary_.bytes_out += m.bytes_out;
    const round_t closed = m.round + 1;
    const bool last = core_->state() == averager_state::stopped;
    const bool epoch_end = config_.rounds_per_epoch > 0 && closed % config_.rounds_per_epoch == 0;
    m.rounds_total = config_.core.max_rounds;
    if (config_.rounds_per_epoch > 0) {
      m.epoch = static_cast<double>(closed) / static_cast<double>(config_.rounds_per_epoch);
    }
    const bool every = config_.eval_every > 0 && closed % config_.eval_every == 0;
    pending_line line{std::move(m), false};
    if (config_.test_set && (epoch_end || every || last)) {
      line.awaiting_eval = true;
      request_eval(line.metrics.round, core_->model());
      if (last) {
        final_eval_requested_ = true;
      }
    }
    lines_.push_back(std::move(line));
  }
  flush_lines();
}

void averager_actor::request_eval(round_t round, flat_buffer model) {
  eval_queue_.emplace_back(round, std::move(model));
  pump_eval();
}

void averager_actor::pump_eval() {
  if (evaluating_ || !eval_model_ || eval_queue_.empty()) {
    return;
  }
  evaluating_ = true;
  auto [r, params] = std::move(eval_queue_.front());
  eval_queue_.pop_front();
  evaluating_model_ = {r == final_round_marker ? core_->round() : r + 1, params, std::nullopt, false};
  // The evaluation model is handed to the compute pool and back; the strand does not touch it meanwhile.
  auto* model_ptr = eval_model_.get();
  auto test = config_.test_set;
  run_compute(
      [model_ptr, test, params = std::move(params)]() -> double {
        auto ok = model_ptr->set_params(*params);
        if (!ok) {
          throw std::runtime_error(ok.error().message());
        }
        return model_ptr->evaluate(*test).accuracy;
      },
      [this, round = r](expected<double> acc) { on_evaluated(round, std::move(acc)); });
}

void averager_actor::on_evaluated(round_t round, expected<double> acc) {
  evaluating_ = false;
  if (!acc) {
    PRSGD_LOG(error, "averager") << "evaluation of round " << round << " failed: " << acc.error().message();
  } else {
    last_acc_ = *acc;
  }
  if (round == final_round_marker) {
    final_eval_done_ = true;
  }
  if (acc && config_.on_model) {
    evaluating_model_.test_acc = *acc;
    config_.on_model(evaluating_model_);
  }
  evaluating_model_ = {};
  for (auto& line : lines_) {
    if (line.awaiting_eval && line.metrics.round == round) {
      line.awaiting_eval = false;
      if (acc) {
        line.metrics.test_acc = *acc;
      }
      break;
    }
  }
  pump_eval();
  flush_lines();
  maybe_done();
}

void averager_actor::flush_lines() {
  while (!lines_.empty() && !lines_.front().awaiting_eval) {
    auto& m = lines_.front().metrics;
    if (writer_) {
      auto ok = writer_->write(m);
      if (!ok) {
        PRSGD_LOG(error, "averager") << "metrics write failed: " << ok.error().message();
      }
    }
    if (config_.on_round) {
      config_.on_round(m);
    }
    lines_.pop_front();
  }
}

void averager_actor::maybe_done() {
  if (done_ || !core_ || core_->state() != averager_state::stopped) {
    return;
  }
  if (config_.test_set && eval_model_ && !final_eval_requested_) {
    // Stopped without closing a final round (finish() or a signal): score the current x̄ once more.
    final_eval_requested_ = true;
    request_eval(final_round_marker, core_->model());
    return;
  }
  if (!lines_.empty() || evaluating_ || !eval_queue_.empty()) {
    return;
  }
  end_incarnation();
  if (writer_) {
    auto ok = writer_->write_done(summary_.test_acc, summary_.rounds, summary_.wall_s);
    if (!ok) {
      PRSGD_LOG(error, "averager") << "metrics write failed: " << ok.error().message();
    }
  }
  PRSGD_LOG(info, "averager") << "done after " << summary_.rounds << " rounds";
  if (config_.on_model) {
    config_.on_model({summary_.rounds, core_->model(), summary_.test_acc, true});
  }
  if (config_.on_done) {
    config_.on_done(summary_);
  }
}

expected<std::pair<actor_ref<averager_actor>, std::string>> start_averager(actor_system& system,
                                                                           averager_actor_config config,
                                                                           const transport_factory& make_link,
                                                                           const std::string& listen,
                                                                           std::shared_ptr<transport>* link_out) {
  auto ref = system.spawn<averager_actor>(std::move(config));
  if (!ref) {
    return std::move(ref).error();
  }
  auto handle = *ref;
  transport_handlers handlers;
  handlers.on_message = [handle](peer_id peer, multipart msg) {
    handle.tell(&averager_actor::on_wire, peer, std::move(msg));
  };
  handlers.on_peer = [handle](const peer_event& ev) { handle.tell(&averager_actor::on_peer, ev); };
  auto link = make_link(std::move(handlers));
  if (!link) {
    return std::move(link).error();
  }
  std::shared_ptr<transport> shared{std::move(*link)};
  auto bound = shared->bind(listen);
  if (!bound) {
    return std::move(bound).error();
  }
  handle.tell(&averager_actor::attach, shared);
  if (link_out) {
    *link_out = shared;
  }
  return std::make_pair(handle, *bound);
}

}  // namespace prsgd::actors
