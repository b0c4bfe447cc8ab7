// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_actor.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::actors {

averager_actor::averager_actor(averager_actor_config config) : config_(std::move(config)) {}

averager_actor::~averager_actor() = default;

void averager_actor::on_start() {
  auto initial = algorithms::model_registry::instance().make(config_.model_name, config_.model);
  if (!initial) {
    PRSGD_LOG(error, "averager") << "cannot build model '" << config_.model_name << "': " << initial.error().message();
    quit(initial.error());
    return;
  }
  std::vector<float> params((*initial)->params().begin(), (*initial)->params().end());
  config_.core.trainable_params = (*initial)->num_trainable();
  if (config_.test_set) {
    idle_evaluators_.push_back(std::move(*initial));
  }

  averager_setup setup;
  setup.incarnation = config_.incarnation;
  store_ = config_.checkpoints;
  if (!store_ && !config_.checkpoint_dir.empty()) {
    auto files = file_checkpoint_store::make(config_.checkpoint_dir);
    if (!files) {
      PRSGD_LOG(error, "averager") << "cannot start: " << files.error().message();
      quit(files.error());
      return;
    }
    store_ = std::make_shared<file_checkpoint_store>(std::move(*files));
  }
  if (store_) {
    auto from_store = setup_from(*store_);
    if (!from_store) {
      PRSGD_LOG(error, "averager") << "cannot start: " << from_store.error().message();
      quit(from_store.error());
      return;
    }
    setup = std::move(*from_store);
  }
  if (setup.resume && setup.resume->finished) {
    // The store holds a finished job: nothing to train, nothing to append to the metrics file.
    PRSGD_LOG(info, "averager") << "the job in the checkpoint store finished at round " << setup.resume->round
                                << "; nothing to do";
    job_summary s;
    s.rounds = setup.resume->round;
    s.trained_rounds = setup.resume->rounds_completed;
    s.model = std::make_shared<const std::vector<float>>(std::move(setup.resume->model));
    s.job_over = false;
    done_ = true;
    if (config_.on_done) {
      config_.on_done(s);
    }
    return;
  }
  setup.evaluations = config_.test_set != nullptr;
  auto core = averager_core::make(config_.core, system().engine()->time(), std::move(params), std::move(setup));
  if (!core) {
    PRSGD_LOG(error, "averager") << "cannot start: " << core.error().message();
    quit(core.error());
    return;
  }
  core_.emplace(std::move(*core));
  if (!config_.metrics_jsonl.empty()) {
    auto w = core_->resumed_from() ? metrics_writer::open_resumed(config_.metrics_jsonl, *core_->resumed_from())
                                   : metrics_writer::open(config_.metrics_jsonl);
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
  rearm(core_->next_wakeup());
}

void averager_actor::on_stop(const error& reason) {
  if (reason.code != errc::none && reason.code != errc::shutting_down) {
    PRSGD_LOG(error, "averager") << "stopped: " << reason.message();
  }
}

void averager_actor::attach(std::shared_ptr<transport> link) { link_ = std::move(link); }

void averager_actor::on_queued(peer_id peer, multipart msg, std::size_t bytes) {
  auto& inbox = *config_.inbox;
  inbox.messages.fetch_sub(1, std::memory_order_relaxed);
  inbox.bytes.fetch_sub(bytes, std::memory_order_relaxed);
  if (const auto dropped = inbox.dropped.exchange(0, std::memory_order_relaxed); dropped != 0) {
    if (config_.on_drop) {
      config_.on_drop("inbox_full", dropped);
    }
    if (inbox_warnings_.allow(now())) {
      PRSGD_LOG(warn, "averager") << "inbox full: dropped " << dropped << " received messages"
                                  << inbox_warnings_.suffix();
    }
  }
  on_wire(peer, std::move(msg));
}

void averager_actor::on_wire(peer_id peer, multipart msg) {
  if (!core_ || done_) {
    return;
  }
  auto decoded = decode_to_averager(msg, config_.limits);
  if (!decoded) {
    // Malformed input never reaches the core; it is counted (on_drop) and logged here, rate-limited.
    if (config_.on_drop) {
      config_.on_drop("malformed", 1);
    }
    if (malformed_warnings_.allow(now())) {
      PRSGD_LOG(warn, "averager") << "dropped malformed message from peer " << peer << ": " << decoded.error().message()
                                  << malformed_warnings_.suffix();
    }
    return;
  }
  if (const auto* spec = std::get_if<spec_request_msg>(&*decoded)) {
    send({0, core_->spec_reply(*spec), peer});  // anyone who may connect may learn the job's spec
    return;
  }
  if (std::holds_alternative<status_request_msg>(*decoded) || std::holds_alternative<control_msg>(*decoded)) {
    on_operator(peer, *decoded);
    return;
  }
  apply(core_->on_message(*decoded, peer));
}

// Hands the growth of the core's drop counters that the owner's metrics show (forwarded_drops) to on_drop.
void averager_actor::report_core_drops() {
  if (!core_) {
    return;
  }
  const auto& drops = core_->drops();
  for (std::size_t i = 0; i < forwarded_drops.size(); ++i) {
    const auto it = drops.find(forwarded_drops[i]);
    const std::uint64_t now_count = it == drops.end() ? 0 : it->second;
    if (now_count > reported_drops_[i] && config_.on_drop) {
      config_.on_drop(forwarded_drops[i], now_count - reported_drops_[i]);
    }
    reported_drops_[i] = now_count;
  }
}

void averager_actor::on_operator(peer_id peer, const to_averager& msg) {
  const auto info = peer_info_.find(peer);
  const std::string address = info == peer_info_.end() ? std::string{} : info->second.address;
  const std::string key = info == peer_info_.end() ? std::string{} : info->second.client_key;
  if (const auto* req = std::get_if<status_request_msg>(&msg)) {
    status_reply_msg reply{0, req->incarnation, core_->incarnation(), core_->round(),
                           std::make_shared<const job_status>(status())};
    send({0, reply, peer});
    return;
  }
  const auto& m = std::get<control_msg>(msg);
  const std::string by = config_.steering.curve ? "key:" + key : "address:" + address;
  control_reply_msg reply;
  if (may_steer(config_.steering, key, address)) {
    reply = carry_out(m, by);
  } else {
    reply.ok = false;
    reply.text = config_.steering.curve
                     ? "not an operator: this client's key is not among the averager's --operator-key files"
                     : "steering without CURVE is allowed from loopback only (this request came from " +
                           (address.empty() ? std::string{"an unknown address"} : address) + ")";
    PRSGD_LOG(warn, "averager") << "refused " << to_string(m.op) << " from " << by << ": " << reply.text;
  }
  reply.incarnation = m.incarnation;
  reply.averager_incarnation = core_->incarnation();
  reply.round = core_->round();
  send({0, reply, peer});
}

control_reply_msg averager_actor::carry_out(const control_msg& m, const std::string& by) {
  control_event event;
  event.action = std::string{to_string(m.op)};
  event.arg = m.arg;
  event.by = by;
  event.at_round = core_->round();
  event.wall_s = core_->status().wall_s;
  auto outcome = core_->on_control(m.op, m.arg);
  event.ok = outcome.ok;
  event.result = outcome.text;
  PRSGD_LOG(info, "averager") << "operator " << by << ": " << event.action << (m.arg.empty() ? "" : " ") << m.arg
                              << ": " << event.result;
  if (writer_) {
    if (auto ok = writer_->write(event); !ok) {
      PRSGD_LOG(error, "averager") << "metrics write failed: " << ok.error().message();
    }
  }
  if (config_.on_control) {
    config_.on_control(event);
  }
  apply(std::move(outcome.act));
  control_reply_msg reply;
  reply.ok = event.ok;
  reply.text = event.result;
  return reply;
}

control_reply_msg averager_actor::control(control_op op, std::string arg, std::string by) {
  if (!core_ || done_) {
    return control_reply_msg{0, 0, 0, 0, false, "the job is over"};
  }
  control_msg m;
  m.op = op;
  m.arg = std::move(arg);
  return carry_out(m, by);
}

job_status averager_actor::status() const {
  if (!core_) {
    return {};
  }
  return core_->status([this](origin_t peer) {
    auto it = peer_info_.find(peer);
    return it == peer_info_.end() ? std::string{} : it->second.address;
  });
}

void averager_actor::on_peer(const peer_event& event) {
  if (!event.outgoing) {
    if (event.up) {
      peer_info_[event.peer] = {event.address, event.client_key};
    } else {
      peer_info_.erase(event.peer);
    }
  }
  PRSGD_LOG(debug, "averager") << "peer " << event.peer << (event.up ? " up" : " down") << " node '" << event.node
                               << "'";
  if (!core_) {
    return;
  }
  // The connection's client key (CURVE) binds the members that join over it; see averager_core::on_connection.
  if (event.up) {
    core_->on_connection(event.peer, event.client_key);
  } else {
    core_->on_disconnected(event.peer);
  }
}

void averager_actor::finish() {
  if (!core_ || done_) {
    return;
  }
  apply(core_->stop());
}

void averager_actor::suspend() {
  if (!core_ || done_) {
    return;
  }
  if (!store_) {
    PRSGD_LOG(error, "averager") << "cannot checkpoint before exiting (no checkpoint store); stopping the job instead";
    finish();
    return;
  }
  // The core releases the held lines and then asks for the checkpoint of the open round; apply() writes
  // them in that order. A failed write is logged there: the next incarnation resumes from the previous
  // checkpoint and runs the rounds after it again.
  PRSGD_LOG(info, "averager") << "checkpointing round " << core_->round()
                              << "; exiting without stopping the workers (a restarted averager resumes)";
  apply(core_->suspend());
}

round_t averager_actor::round() const { return core_ ? core_->round() : 0; }

submission_counters averager_actor::counters() const { return core_ ? core_->counters() : submission_counters{}; }

int averager_actor::times_counted(round_t r, member_id m) const { return core_ ? core_->times_counted(r, m) : 0; }

std::vector<member_id> averager_actor::members() const { return core_ ? core_->members() : std::vector<member_id>{}; }

// ---- carrying out the core's actions ------------------------------------------------------------------

void averager_actor::apply(actions a) {
  for (const auto& r : a.routes) {
    peers_[r.member] = r.via;
  }
  std::vector<std::pair<const outbound*, errc>> failed;
  for (const auto& o : a.sends) {
    if (auto code = send(o); code != errc::none) {
      failed.emplace_back(&o, code);
    }
  }
  for (auto& e : a.evaluations) {
    evaluate(std::move(e));
  }
  for (const auto& m : a.lines) {
    write_line(m);
  }
  for (const auto& c : a.checkpoints) {
    write_checkpoint(c);
  }
  if (a.done) {
    report_done(*a.done);
  }
  rearm(a.wakeup);
  report_core_drops();
  // Refused sends go back to the core once this result is carried out (it retries a RESTART or removes the
  // member); what it answers may only fail again with messages it does not retry, so this ends.
  for (const auto& [o, code] : failed) {
    if (core_ && !done_) {
      apply(core_->on_send_failed(o->member, o->msg, code));
    }
  }
}

void averager_actor::write_checkpoint(const checkpoint_state& s) {
  if (!store_) {
    return;
  }
  if (auto ok = store_->write(s); !ok) {
    PRSGD_LOG(error, "averager") << "checkpoint at round " << s.round << " failed: " << ok.error().message();
    return;
  }
  (void)store_->prune(config_.checkpoints_kept);  // a failure is logged by the store; the new checkpoint is safe
}

errc averager_actor::send(const outbound& o) {
  if (!link_) {
    return errc::none;
  }
  peer_id to = 0;
  if (o.via) {
    to = *o.via;
  } else if (auto it = peers_.find(o.member); it != peers_.end()) {
    to = it->second;
  } else {
    return errc::none;  // no accepted message from this worker in this incarnation: nowhere to send
  }
  auto sent = link_->send(to, encode(o.msg));
  if (sent) {
    return errc::none;
  }
  if (config_.on_drop) {
    config_.on_drop("send_failed", 1);
  }
  if (send_failure_warnings_.allow(now())) {
    PRSGD_LOG(warn, "averager") << "send to worker " << o.member << " failed: " << sent.error().message()
                                << send_failure_warnings_.suffix();
  }
  return o.via ? errc::none : sent.error().code;  // a reply to a stranger is not retried
}

void averager_actor::evaluate(evaluation_request request) {
  std::shared_ptr<algorithms::model> model;
  if (!idle_evaluators_.empty()) {
    model = std::move(idle_evaluators_.back());
    idle_evaluators_.pop_back();
  } else if (auto made = algorithms::model_registry::instance().make(config_.model_name, config_.model)) {
    // The core runs more than one evaluation at a time (averager_config::max_evaluations): one model each.
    model = std::move(*made);
  } else {
    // Reported like any failed evaluation, through the compute pool: never from inside apply().
    run_compute([e = made.error()]() -> double { throw std::runtime_error(e.message()); },
                [this, request = std::move(request)](expected<double> acc) mutable {
                  on_evaluated(std::move(request), std::move(acc));
                });
    return;
  }
  // The model is handed to the compute pool and back; the strand does not touch it meanwhile.
  auto test = config_.test_set;
  auto params = request.model;
  run_compute(
      [model, test, params]() -> double {
        auto ok = model->set_params(*params);
        if (!ok) {
          throw std::runtime_error(ok.error().message());
        }
        return model->evaluate(*test).accuracy;
      },
      [this, model, request = std::move(request)](expected<double> acc) mutable {
        idle_evaluators_.push_back(std::move(model));
        on_evaluated(std::move(request), std::move(acc));
      });
}

// Here the shell holds an evaluated x̄ (request.model, after request.rounds rounds) with its accuracy.
void averager_actor::on_evaluated(evaluation_request request, expected<double> accuracy) {
  if (!core_) {
    return;
  }
  if (!accuracy) {
    PRSGD_LOG(error, "averager") << "evaluation of x̄ after round " << request.rounds
                                 << " failed: " << accuracy.error().message();
  }
  if (accuracy && config_.on_model) {
    config_.on_model({request.rounds, request.model, *accuracy, false});
  }
  apply(core_->on_evaluated(request.id, accuracy ? std::optional<double>{*accuracy} : std::nullopt));
}

void averager_actor::write_line(const round_metrics& m) {
  if (writer_) {
    if (auto ok = writer_->write(m); !ok) {
      PRSGD_LOG(error, "averager") << "metrics write failed: " << ok.error().message();
    }
  }
  if (config_.on_round) {
    config_.on_round(m);
  }
}

// Here the shell holds the final x̄ (s.model) and, when the job is over, writes the done line.
void averager_actor::report_done(const job_summary& s) {
  done_ = true;
  if (s.job_over && writer_) {
    if (auto ok = writer_->write_done(s.test_acc, s.rounds, s.trained_rounds, s.wall_s); !ok) {
      PRSGD_LOG(error, "averager") << "metrics write failed: " << ok.error().message();
    }
  }
  if (s.final_checkpoint) {
    write_checkpoint(*s.final_checkpoint);  // after the done line: a crash in between runs the end again
  }
  PRSGD_LOG(info, "averager") << (s.job_over ? "done" : "incarnation over") << " after " << s.rounds << " rounds";
  if (s.job_over && config_.on_model) {
    config_.on_model({s.rounds, s.model, s.test_acc, true});
  }
  if (config_.on_done) {
    config_.on_done(s);
  }
}

void averager_actor::rearm(std::optional<clock_source::time_point> wakeup) {
  if (timer_) {
    cancel_timer(*timer_);
    timer_.reset();
  }
  if (!core_ || done_ || !wakeup) {
    return;
  }
  auto delay = std::max(clock_source::duration::zero(), *wakeup - now());
  timer_ = schedule_once(delay, [this] {
    timer_.reset();
    if (core_ && !done_) {
      apply(core_->tick());
    }
  });
}

expected<std::pair<actor_ref<averager_actor>, std::string>> start_averager(actor_system& system,
                                                                           averager_actor_config config,
                                                                           const transport_factory& make_link,
                                                                           const std::string& listen,
                                                                           std::shared_ptr<transport>* link_out) {
  const std::pair<std::size_t, std::size_t> limits{std::max<std::size_t>(config.inbox_max_messages, 1),
                                                   std::max<std::size_t>(config.inbox_max_bytes, 1)};
  auto credit = std::make_shared<averager_inbox>();
  config.inbox = credit;
  auto ref = system.spawn<averager_actor>(std::move(config));
  if (!ref) {
    return std::move(ref).error();
  }
  auto handle = *ref;
  transport_handlers handlers;
  // The inbox is bounded: the I/O thread reserves room before it queues, and drops (counted) when full.
  handlers.on_message = [handle, credit = std::move(credit), max_messages = limits.first, max_bytes = limits.second](
                            peer_id peer, multipart msg) {
    const std::size_t bytes = total_size(msg);
    const std::size_t queued = credit->messages.fetch_add(1, std::memory_order_relaxed);
    const std::size_t queued_bytes = credit->bytes.fetch_add(bytes, std::memory_order_relaxed);
    if (queued >= max_messages || queued_bytes + bytes > max_bytes) {
      credit->messages.fetch_sub(1, std::memory_order_relaxed);
      credit->bytes.fetch_sub(bytes, std::memory_order_relaxed);
      credit->dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    handle.tell(&averager_actor::on_queued, peer, std::move(msg), bytes);
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
