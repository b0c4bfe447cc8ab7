// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_actor.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "prsgd/actors/shard_owner_core.hpp"
#include "prsgd/algorithms/model.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::actors {

averager_actor::averager_actor(averager_actor_config config) : config_(std::move(config)) {}

averager_actor::~averager_actor() = default;

void averager_actor::on_start() {
  std::vector<float> params;
  if (config_.external_size > 0) {
    // An external model: only its size is known here; x̄_0 is the --init-model file or the first member's.
    if (!config_.initial_model.empty() && config_.initial_model.size() != config_.external_size) {
      const error e{errc::invalid_argument, "the initial model has " + std::to_string(config_.initial_model.size()) +
                                                " floats, the job's model " + std::to_string(config_.external_size)};
      PRSGD_LOG(error, "averager") << "cannot start: " << e.message();
      quit(e);
      return;
    }
    config_.core.initial_from_join = config_.initial_model.empty();
    params = config_.initial_model.empty() ? std::vector<float>(config_.external_size, 0.0F)
                                           : std::move(config_.initial_model);
    config_.initial_model = {};
    config_.core.trainable_params = 0;
  } else {
    auto initial = algorithms::model_registry::instance().make(config_.model_name, config_.model);
    if (!initial) {
      PRSGD_LOG(error, "averager") << "cannot build model '" << config_.model_name
                                   << "': " << initial.error().message();
      quit(initial.error());
      return;
    }
    params.assign((*initial)->params().begin(), (*initial)->params().end());
    config_.core.trainable_params = (*initial)->num_trainable();
    if (config_.test_set && !evaluates_remotely()) {
      idle_evaluators_.push_back(std::move(*initial));
    }
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
  setup.evaluations = config_.test_set != nullptr || evaluates_remotely();
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
  if (core_->sharded()) {
    owners_.resize(config_.core.shard_owners);
    owners_round_ = core_->round();
    xbar_[core_->round()] = core_->model();
    PRSGD_LOG(info, "averager") << "sharded averaging: waiting for " << owners_.size()
                                << " shard owners before workers may join";
    check_owners();
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
  // Sharded: the owners' reports still count after the end, which waits for the final x̄ from them.
  if (!core_ || (done_ && owners_.empty())) {
    return;
  }
  auto decoded = decode_to_averager(msg, config_.limits);
  if (!decoded && core_->sharded()) {
    if (auto shard = decode_shard(msg, config_.limits)) {
      on_shard(peer, *shard);
      return;
    }
  }
  if (done_) {
    return;
  }
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
  if (std::holds_alternative<evaluator_hello_msg>(*decoded) || std::holds_alternative<evaluation_msg>(*decoded)) {
    on_evaluator(peer, *decoded);
    return;
  }
  if (core_->sharded()) {
    if (std::holds_alternative<join_msg>(*decoded) && !owners_ready_) {
      return;  // not before every owner holds its slice; the worker repeats its JOIN
    }
    if (const auto* m = std::get_if<model_msg>(&*decoded); m != nullptr && m->sliced) {
      hold_model(*m, peer);
      return;
    }
  }
  apply(core_->on_message(*decoded, peer));
}

// ---- sharded averaging: the shard owners ---------------------------------------------------------------

void averager_actor::on_shard(peer_id peer, const shard_msg& msg) {
  if (failed_) {
    return;
  }
  if (const auto* hello = std::get_if<shard_hello_msg>(&msg)) {
    if (hello->shards != owners_.size()) {
      if (shard_warnings_.allow(now())) {
        PRSGD_LOG(warn, "averager") << "ignored shard owner " << hello->shard << "/" << hello->shards << " at "
                                    << hello->endpoint << ": this job has " << owners_.size() << " shards"
                                    << shard_warnings_.suffix();
      }
      return;
    }
    if (config_.core.compress_between_hosts && !hello->reads_compressed) {
      fail_job("shard owner " + std::to_string(hello->shard) + "/" + std::to_string(owners_.size()) + " at " +
               hello->endpoint +
               " cannot read compressed payloads (an older prsgd): run it with this averager's version");
      return;
    }
    auto& slot = owners_[hello->shard];
    if (slot.nonce != hello->incarnation) {
      if (slot.ready && (orders_sent_ || owners_ready_)) {
        fail_job("shard owner " + std::to_string(hello->shard) + "/" + std::to_string(owners_.size()) +
                 " restarted (now at " + hello->endpoint + "); its slice of x̄ and of the open round are gone");
        return;
      }
      const bool known_before = all_owners_known();
      const bool moved = slot.nonce != 0 && slot.endpoint != hello->endpoint;
      slot = owner_slot{peer, hello->incarnation, hello->endpoint, now(), false};
      PRSGD_LOG(info, "averager") << "shard owner " << hello->shard << "/" << owners_.size() << " at "
                                  << hello->endpoint << " registered";
      if (ring_gather() && !orders_sent_) {
        const std::size_t k = hello->shard;
        if (!known_before && all_owners_known()) {
          // The owners set up so far waited for this one: each needs the next one's endpoint.
          for (std::size_t j = 0; j < owners_.size(); ++j) {
            if (j != k) {
              set_up_owner(j);
            }
          }
        } else if (moved) {
          set_up_owner((k + owners_.size() - 1) % owners_.size());  // the owner that passes slices on to it
        }
      }
    }
    slot.peer = peer;
    slot.last_seen = now();
    if (hello->ready && hello->averager_incarnation == core_->incarnation()) {
      slot.ready = true;
    } else if (!orders_sent_) {
      set_up_owner(hello->shard);
    } else {
      fail_job("shard owner " + std::to_string(hello->shard) + "/" + std::to_string(owners_.size()) +
               " lost its slice of x̄ after the job started");
      return;
    }
    if (!owners_ready_ && std::all_of(owners_.begin(), owners_.end(), [](const auto& o) { return o.ready; })) {
      owners_ready_ = true;
      PRSGD_LOG(info, "averager") << "all " << owners_.size() << " shard owners hold their slices; workers may join";
    }
    return;
  }
  // Acks and reports count only from the connection the owner registered on.
  const auto from_owner = [&](std::uint64_t k) { return k < owners_.size() && owners_[k].peer == peer; };
  if (const auto* ack = std::get_if<shard_ack_msg>(&msg)) {
    if (!from_owner(ack->shard) || ack->round != core_->round()) {
      return;
    }
    owners_[ack->shard].last_seen = now();
    const auto key = std::make_tuple(ack->round, ack->member, ack->token);
    auto& held = held_models_[key];
    held.acked.resize(owners_.size(), false);
    if (!held.acked[ack->shard]) {
      held.acked[ack->shard] = true;
      held.ok = held.ok && ack->ok;
      held.norm2 += ack->norm2;
    }
    release_model(key);
    return;
  }
  if (const auto* report = std::get_if<shard_report_msg>(&msg)) {
    if (!from_owner(report->shard) || report->averager_incarnation != core_->incarnation()) {
      return;
    }
    owners_[report->shard].last_seen = now();
    const std::string who = "shard owner " + std::to_string(report->shard) + "/" + std::to_string(owners_.size());
    if (!report->ok) {
      fail_job(who + " cannot go on: " + report->why);
      return;
    }
    PRSGD_LOG(debug, "averager") << "x̄ of round " << report->round << " slice " << report->shard << " checksum "
                                 << report->checksum;
    if (!report->model) {
      return;
    }
    if (slice_checksum(*report->model) != report->checksum) {
      fail_job(who + " reported a slice of round " + std::to_string(report->round) +
               " that does not match its checksum");
      return;
    }
    auto& parts = assembling_[report->round];
    parts.resize(owners_.size());
    parts[report->shard] = report->model;
    if (std::any_of(parts.begin(), parts.end(), [](const flat_buffer& b) { return !b; })) {
      return;
    }
    auto x = std::make_shared<std::vector<float>>();
    for (const auto& part : parts) {
      x->insert(x->end(), part->begin(), part->end());
    }
    assembling_.erase(report->round);
    fetching_.erase(report->round);
    xbar_[report->round] = std::move(x);
    while (xbar_.size() > 4) {
      xbar_.erase(xbar_.begin());
    }
    const flat_buffer ready = xbar_[report->round];
    auto waiting = std::move(waiting_);
    waiting_.clear();
    for (auto& [round, use] : waiting) {
      if (round == report->round) {
        use(ready);
      } else {
        waiting_.emplace_back(round, std::move(use));
      }
    }
  }
}

bool averager_actor::ring_gather() const noexcept { return config_.core.ring_gather && owners_.size() > 1; }

bool averager_actor::all_owners_known() const noexcept {
  return std::all_of(owners_.begin(), owners_.end(), [](const owner_slot& o) { return o.nonce != 0; });
}

void averager_actor::set_up_owner(std::size_t k) {
  if (ring_gather() && !all_owners_known()) {
    return;  // set up once the ring is complete
  }
  // Its slice of x̄ as of the start (a fresh job's x̄_0, or the checkpoint's x̄).
  const auto& x = *core_->model();
  const std::uint64_t begin = slice_begin(x.size(), owners_.size(), k);
  const std::uint64_t end = slice_begin(x.size(), owners_.size(), k + 1);
  shard_setup_msg setup{owners_[k].nonce,
                        core_->incarnation(),
                        core_->round(),
                        k,
                        owners_.size(),
                        begin,
                        x.size(),
                        config_.core.heartbeat_interval,
                        std::make_shared<const std::vector<float>>(x.begin() + static_cast<std::ptrdiff_t>(begin),
                                                                   x.begin() + static_cast<std::ptrdiff_t>(end))};
  setup.wire = config_.core.spec.wire;
  setup.compress = config_.core.compress_between_hosts;
  if (ring_gather()) {
    setup.ring = true;
    setup.ring_next = owners_[(k + 1) % owners_.size()].endpoint;
  }
  (void)link_->send(owners_[k].peer, encode(shard_msg{std::move(setup)}));
}

void averager_actor::hold_model(const model_msg& m, peer_id from) {
  if (m.round != core_->round()) {
    apply(core_->on_message(m, from));  // the core counts it as late or rejected
    return;
  }
  const auto key = std::make_tuple(m.round, m.member, m.token);
  auto& held = held_models_[key];
  if (!held.has_header) {
    held.header = m;
    held.has_header = true;
    held.from = from;
  }
  release_model(key);
}

void averager_actor::release_model(const std::tuple<round_t, member_id, session_token>& key) {
  auto it = held_models_.find(key);
  if (it == held_models_.end() || !it->second.has_header || it->second.acked.size() != owners_.size() ||
      !std::all_of(it->second.acked.begin(), it->second.acked.end(), [](bool b) { return b; })) {
    return;
  }
  model_msg m = it->second.header;
  m.slices_ok = it->second.ok;
  m.update_norm2 = it->second.norm2;
  const peer_id from = it->second.from;
  held_models_.erase(it);
  apply(core_->on_message(m, from));
}

void averager_actor::send_order(const shard_round_msg& order) {
  orders_sent_ = true;
  owners_round_ = std::max(owners_round_, order.round);
  if (order.fetch) {
    fetching_.insert(order.round);
  }
  const multipart wire = encode(shard_msg{order});
  for (const auto& o : owners_) {
    if (auto sent = link_->send(o.peer, wire); !sent) {
      PRSGD_LOG(warn, "averager") << "order for round " << order.round << " to shard owner at " << o.endpoint
                                  << " failed: " << sent.error().message();
    }
  }
  // Receipts of rounds that closed can no longer count.
  while (!held_models_.empty() && std::get<0>(held_models_.begin()->first) < core_->round()) {
    const bool has_header = held_models_.begin()->second.has_header;
    const model_msg late = held_models_.begin()->second.header;
    const peer_id from = held_models_.begin()->second.from;
    held_models_.erase(held_models_.begin());
    if (has_header) {
      apply(core_->on_message(late, from));
    }
  }
}

void averager_actor::with_model(round_t round, std::function<void(const flat_buffer&)> use) {
  if (auto it = xbar_.find(round); it != xbar_.end()) {
    use(it->second);
    return;
  }
  if (failed_) {
    return;
  }
  if (round != owners_round_) {
    PRSGD_LOG(error, "averager") << "x̄ of round " << round << " is no longer held by the shard owners (they hold round "
                                 << owners_round_ << "); skipped";
    return;
  }
  waiting_.emplace_back(round, std::move(use));
  if (!fetching_.contains(round)) {
    shard_round_msg fetch;
    fetch.averager_incarnation = core_->incarnation();
    fetch.round = round;
    fetch.fetch = true;
    send_order(fetch);
  }
}

void averager_actor::check_owners() {
  owner_timer_ = schedule_once(config_.core.heartbeat_interval, [this] {
    owner_timer_.reset();
    if (done_ || failed_) {
      return;
    }
    for (std::size_t k = 0; k < owners_.size(); ++k) {
      const auto& o = owners_[k];
      if (o.ready && now() - o.last_seen > config_.core.heartbeat_timeout) {
        fail_job("shard owner " + std::to_string(k) + "/" + std::to_string(owners_.size()) + " at " + o.endpoint +
                 " went silent for more than " +
                 std::to_string(
                     std::chrono::duration_cast<std::chrono::milliseconds>(config_.core.heartbeat_timeout).count()) +
                 " ms; its slice of x̄ is lost");
        return;
      }
    }
    check_owners();
  });
}

void averager_actor::fail_job(const std::string& why) {
  if (failed_ || done_) {
    return;
  }
  failed_ = true;
  PRSGD_LOG(error, "averager") << why << "; the job stops (restart the owners and the averager with "
                               << "--checkpoint-dir to resume from the last checkpoint)";
  const multipart stop = encode(shard_msg{stop_msg{0, 0, core_->incarnation(), core_->round()}});
  for (const auto& o : owners_) {
    if (o.peer != 0) {
      (void)link_->send(o.peer, stop);
    }
  }
  apply(core_->stop());  // STOP to the workers; the summary waits for an x̄ that never comes
  done_ = true;
  if (timer_) {
    cancel_timer(*timer_);
    timer_.reset();
  }
  if (config_.on_failed) {
    config_.on_failed(why);
  }
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
      if (evaluators_.erase(event.peer) != 0) {
        fail_evaluations_of(event.peer, "its connection went down");
      }
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
  if (!owners_.empty()) {
    for (auto& o : a.sends) {
      if (auto* w = std::get_if<welcome_msg>(&o.msg)) {
        for (const auto& owner : owners_) {
          w->owners.push_back(owner.endpoint);
        }
        w->upload_buffer = config_.upload_buffer;
        w->compress = config_.core.compress_between_hosts;
      }
    }
  }
  std::vector<std::pair<const outbound*, errc>> failed;
  for (const auto& o : a.sends) {
    if (auto code = send(o); code != errc::none) {
      failed.emplace_back(&o, code);
    }
  }
  for (const auto& order : a.shard_orders) {
    send_order(order);
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

void averager_actor::write_checkpoint(const checkpoint_state& s, bool filled) {
  if (!store_) {
    return;
  }
  if (!owners_.empty() && !filled) {
    // Sharded: x̄ of the checkpoint's round comes from the owners.
    with_model(s.round, [this, s](const flat_buffer& x) {
      checkpoint_state with_x = s;
      with_x.model = *x;
      write_checkpoint(with_x, true);
    });
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

void averager_actor::evaluate(evaluation_request request, bool filled) {
  if (!owners_.empty() && !filled) {
    // Sharded: x̄ of the evaluated round comes from the owners.
    with_model(request.rounds, [this, request](const flat_buffer& x) mutable {
      request.model = x;
      evaluate(std::move(request), true);
    });
    return;
  }
  if (evaluates_remotely()) {
    evaluate_remotely(std::move(request));
    return;
  }
  std::shared_ptr<algorithms::model> model;
  if (!idle_evaluators_.empty()) {
    model = std::move(idle_evaluators_.back());
    idle_evaluators_.pop_back();
  } else if (auto made = algorithms::model_registry::instance().make(config_.model_name, config_.model)) {
    // The core runs more than one evaluation at a time (averager_config::max_evaluations): one model each.
    model = std::move(*made);
  } else {
    // Reported like any failed evaluation, through the compute pool: never from inside apply().
    run_compute([e = made.error()]() -> evaluation_score { throw std::runtime_error(e.message()); },
                [this, request = std::move(request)](expected<evaluation_score> score) mutable {
                  on_evaluated(std::move(request), std::move(score));
                });
    return;
  }
  // The model is handed to the compute pool and back; the strand does not touch it meanwhile.
  auto test = config_.test_set;
  auto params = request.model;
  run_compute(
      [model, test, params]() -> evaluation_score {
        auto ok = model->set_params(*params);
        if (!ok) {
          throw std::runtime_error(ok.error().message());
        }
        const auto e = model->evaluate(*test);
        return score_of(e.accuracy, e.loss);
      },
      [this, model, request = std::move(request)](expected<evaluation_score> score) mutable {
        idle_evaluators_.push_back(std::move(model));
        on_evaluated(std::move(request), std::move(score));
      });
}

// Here the shell holds an evaluated x̄ (request.model, after request.rounds rounds) with its accuracy.
void averager_actor::on_evaluated(evaluation_request request, expected<evaluation_score> score) {
  if (!core_) {
    return;
  }
  if (!score && score.error().code == errc::not_found) {
    PRSGD_LOG(info, "averager") << "x̄ after round " << request.rounds
                                << " is not evaluated: " << score.error().message();
  } else if (!score) {
    PRSGD_LOG(error, "averager") << "evaluation of x̄ after round " << request.rounds
                                 << " failed: " << score.error().message();
  }
  if (score && config_.on_model) {
    config_.on_model({request.rounds, request.model, score->accuracy, false});
  }
  if (!score) {
    apply(core_->on_evaluated(request.id, std::nullopt));
    return;
  }
  apply(core_->on_evaluated(request.id, score->accuracy, score->loss));
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
void averager_actor::report_done(const job_summary& s, bool filled) {
  if (!owners_.empty() && !filled) {
    if (failed_) {
      return;
    }
    done_ = true;  // nothing else reaches the core meanwhile
    with_model(s.rounds, [this, s](const flat_buffer& x) {
      job_summary with_x = s;
      with_x.model = x;
      if (with_x.final_checkpoint) {
        with_x.final_checkpoint->model = *x;
      }
      report_done(with_x, true);
    });
    return;
  }
  if (!owners_.empty() && s.job_over) {
    const multipart stop = encode(shard_msg{stop_msg{0, 0, core_->incarnation(), core_->round()}});
    for (const auto& o : owners_) {
      (void)link_->send(o.peer, stop);  // the job is over: the owners end
    }
  }
  done_ = true;
  if (s.job_over && writer_) {
    if (auto ok = writer_->write_done(s.test_acc, s.test_loss, s.rounds, s.trained_rounds, s.wall_s); !ok) {
      PRSGD_LOG(error, "averager") << "metrics write failed: " << ok.error().message();
    }
  }
  if (s.final_checkpoint) {
    write_checkpoint(*s.final_checkpoint, true);  // after the done line: a crash in between runs the end again
  }
  if (s.job_over) {
    // Evaluators end with the job; after a suspend they stay and offer themselves to the next incarnation.
    for (const auto& [peer, e] : evaluators_) {
      (void)link_->send(peer, encode(to_evaluator{stop_msg{0, e.nonce, core_->incarnation(), s.rounds}}));
    }
  }
  evaluators_.clear();
  remote_evaluations_.clear();
  if (evaluator_timer_) {
    cancel_timer(*evaluator_timer_);
    evaluator_timer_.reset();
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
  rearm_once(timer_, !core_ || done_ ? std::nullopt : wakeup, [this] {
    if (core_ && !done_) {
      apply(core_->tick());
    }
  });
}

// ---- evaluator processes ----------------------------------------------------------------------------

void averager_actor::on_evaluator(peer_id peer, const to_averager& msg) {
  if (const auto* hello = std::get_if<evaluator_hello_msg>(&msg)) {
    const std::string& job = config_.core.spec.model;
    std::string why;
    if (!evaluates_remotely()) {
      why = "this averager evaluates x̄ itself (it runs without --evaluate-on evaluators)";
    } else if (!job.empty() && hello->model_fingerprint != job) {
      why = "model mismatch: the job trains " + job + ", the evaluator has " +
            (hello->model_fingerprint.empty() ? std::string{"no model fingerprint"} : hello->model_fingerprint);
    }
    if (!why.empty()) {
      if (evaluator_warnings_.allow(now())) {
        PRSGD_LOG(warn, "averager") << "refused an evaluator on connection " << peer << ": " << why
                                    << evaluator_warnings_.suffix();
      }
      (void)link_->send(
          peer, encode(to_evaluator{refused_msg{0, hello->incarnation, core_->incarnation(), core_->round(), why}}));
      return;
    }
    auto [it, fresh] = evaluators_.try_emplace(peer);
    if (!fresh && it->second.nonce != hello->incarnation) {
      fail_evaluations_of(peer, "it restarted");  // another evaluator process on the same connection id
      it->second.in_flight = 0;
    }
    it->second.nonce = hello->incarnation;
    it->second.last_seen = now();
    if (fresh) {
      PRSGD_LOG(info, "averager") << "evaluator on connection " << peer << " connected (" << evaluators_.size()
                                  << " now)";
      watch_evaluators();
    }
    return;
  }
  const auto& result = std::get<evaluation_msg>(msg);
  auto it = remote_evaluations_.find(result.request);
  // Only the connection the request went to may answer it, once, naming this incarnation and the request's
  // round; anything else is dropped (a result meant for an earlier incarnation may carry a reused id).
  if (it == remote_evaluations_.end() || it->second.peer != peer ||
      result.averager_incarnation != core_->incarnation() || result.round != it->second.request.rounds) {
    if (evaluator_warnings_.allow(now())) {
      PRSGD_LOG(warn, "averager") << "dropped an evaluation result for request " << result.request
                                  << " from connection " << peer << ": no such request is open for it"
                                  << evaluator_warnings_.suffix();
    }
    return;
  }
  auto request = std::move(it->second.request);
  remote_evaluations_.erase(it);
  if (auto e = evaluators_.find(peer); e != evaluators_.end()) {
    e->second.in_flight -= std::min<std::size_t>(e->second.in_flight, 1);
    e->second.last_seen = now();
  }
  if (!(std::isfinite(result.accuracy) && result.accuracy >= 0 && result.accuracy <= 1)) {
    on_evaluated(std::move(request), error{errc::protocol_error, "the evaluator reported an accuracy outside [0, 1]"});
    return;
  }
  if (result.loss && !(std::isfinite(*result.loss) && *result.loss >= 0)) {
    on_evaluated(std::move(request),
                 error{errc::protocol_error, "the evaluator reported a loss that is negative or not finite"});
    return;
  }
  on_evaluated(std::move(request), evaluation_score{result.accuracy, result.loss});
}

void averager_actor::evaluate_remotely(evaluation_request request) {
  // The least busy evaluator gets it (ties: the lowest connection id).
  auto best = evaluators_.end();
  for (auto it = evaluators_.begin(); it != evaluators_.end(); ++it) {
    if (best == evaluators_.end() || it->second.in_flight < best->second.in_flight) {
      best = it;
    }
  }
  if (best == evaluators_.end()) {
    // Nobody to score x̄: the round's test_acc stays null. Reported from a timer, never from inside apply().
    schedule_once(clock_source::duration::zero(), [this, request = std::move(request)]() mutable {
      on_evaluated(std::move(request), error{errc::not_found, "no evaluator is connected"});
    });
    return;
  }
  const peer_id peer = best->first;
  evaluate_msg m{0, best->second.nonce, core_->incarnation(), request.rounds, request.id, request.model};
  if (auto sent = link_->send(peer, encode(to_evaluator{m})); !sent) {
    schedule_once(clock_source::duration::zero(), [this, request = std::move(request), e = sent.error()]() mutable {
      on_evaluated(std::move(request), e);
    });
    return;
  }
  ++best->second.in_flight;
  const std::uint64_t id = request.id;
  remote_evaluations_[id] = remote_evaluation{std::move(request), peer, now() + config_.evaluation_timeout};
  watch_evaluators();
}

void averager_actor::fail_evaluations_of(peer_id peer, const char* why) {
  std::vector<evaluation_request> failed;
  for (auto it = remote_evaluations_.begin(); it != remote_evaluations_.end();) {
    if (it->second.peer == peer) {
      failed.push_back(std::move(it->second.request));
      it = remote_evaluations_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& request : failed) {
    on_evaluated(std::move(request), error{errc::peer_unreachable, std::string{"the evaluator left: "} + why});
  }
}

void averager_actor::watch_evaluators() {
  if (evaluator_timer_ || done_ || (evaluators_.empty() && remote_evaluations_.empty())) {
    return;
  }
  evaluator_timer_ = schedule_once(config_.core.heartbeat_interval, [this] {
    evaluator_timer_.reset();
    if (done_) {
      return;
    }
    const auto t = now();
    std::vector<peer_id> silent;
    for (const auto& [peer, e] : evaluators_) {
      if (t - e.last_seen > config_.core.heartbeat_timeout) {
        silent.push_back(peer);
      }
    }
    for (const peer_id peer : silent) {
      PRSGD_LOG(warn, "averager") << "evaluator on connection " << peer << " went silent; forgetting it";
      evaluators_.erase(peer);
      fail_evaluations_of(peer, "it went silent");
    }
    std::vector<evaluation_request> late;
    for (auto it = remote_evaluations_.begin(); it != remote_evaluations_.end();) {
      if (t >= it->second.deadline) {
        if (auto e = evaluators_.find(it->second.peer); e != evaluators_.end()) {
          e->second.in_flight -= std::min<std::size_t>(e->second.in_flight, 1);
        }
        late.push_back(std::move(it->second.request));
        it = remote_evaluations_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& request : late) {
      on_evaluated(std::move(request), error{errc::timeout, "the evaluator did not answer in time"});
    }
    watch_evaluators();
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
