// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/averager_core.hpp"

#include "averager_core_detail.hpp"

#include "prsgd/common/log.hpp"

#include <algorithm>
#include <utility>

namespace prsgd::actors {

using core_detail::log_component;
using core_detail::reply;
using core_detail::send_to;

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
  const auto need = pool_ ? round_need() : std::pair<std::uint64_t, std::uint64_t>{0, 0};
  for (auto& [id, e] : members_) {
    if (pool_ && !grant_samples(id, e, need)) {
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
  // Sharded: the header only; the member assembles x̄_r from the owners' slices.
  restart_msg m{id,         e.incarnation,    incarnation_, round_, sharded() ? flat_buffer{} : model_,
                e.interval, round_step_size_, config_.mode, {}};
  if (!sharded() && restart_change_ && round_ > 0 && e.holds == round_ - 1) {
    m.model = restart_change_;  // the member rebuilds x̄_r from the x̄_{r−1} it trained from
    m.dtype = config_.spec.wire;
    m.base = round_ - 1;
  } else if (!sharded() && e.own_model && model_ && *e.own_model == checksums_.of(model_)) {
    m.model.reset();  // the member built x̄_r itself (a fresh job's x̄_0, from the same seed): it keeps its copy
    m.held = e.own_model;
  }
  if (auto g = grants_.find(id); g != grants_.end()) {
    m.ranges.reserve(g->second.size());
    for (const auto& r : g->second) {
      m.ranges.push_back(algorithms::global_positions(r, config_.data_samples));  // the range implies its epoch
    }
  }
  return m;
}

std::pair<std::uint64_t, std::uint64_t> averager_core::round_need() const {
  std::uint64_t want = 0;
  for (const auto& [id, e] : members_) {
    want += e.interval * config_.spec.batch_size;
  }
  return {pool_->remaining(), want};
}

bool averager_core::grant_samples(member_id id, member_entry& e, const std::pair<std::uint64_t, std::uint64_t>& need) {
  const std::uint64_t batch = config_.spec.batch_size;
  const auto [rest, want] = need;
  const std::uint64_t members = members_.size();
  std::uint64_t count = e.interval * batch;
  // The end of an --epochs job is shared by every member, in proportion to its interval, so that x̄ does not
  // end as one member's model, its last local steps averaged with no one's:
  if (rest > want && rest - want < members * batch) {
    // less than a batch per member would be left after this round: it goes out with this round;
    count += (rest - want + members - 1) / members;
  } else if (rest > 0 && rest <= want) {
    // the last round: its samples are split instead of handed out first come, first served.
    count = std::max<std::uint64_t>(1, (rest * e.interval * batch + want - 1) / want);
  }
  auto grant = pool_->take(count, max_restart_ranges);
  if (grant.empty()) {
    return false;
  }
  std::uint64_t n = 0;
  for (const auto& r : grant) {
    n += r.size();
  }
  // Fewer samples than interval x batch (the last passes, or a fragmented pool): fewer steps, the last
  // batch possibly short; a share of the job's tail: one more, short step.
  e.interval = (n + batch - 1) / batch;
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
  auto m = make_restart(id);
  e.own_model.reset();  // only a member's first RESTART can confirm the model it built
  const auto bytes = wire_bytes(m.model, m.dtype);
  if (bytes > 0) {
    // Announce the payload on the same connection, ahead of it: the worker does not take us for gone
    // while it is in flight (docs/decisions/0024).
    heartbeat_msg hb{id, e.incarnation, incarnation_, round_, true};
    hb.transfer_bytes = bytes;
    send_to(out, id, hb);
  }
  send_to(out, id, std::move(m));
  if (sharded()) {
    order_recipient(out, id);
    return;
  }
  round_bytes_out_ += bytes;
  e.bytes_out += bytes;
}

void averager_core::order_recipient(actions& out, member_id id) const {
  const shard_recipient to{id, members_.at(id).token};
  if (out.shard_orders.empty() || out.shard_orders.back().combine || out.shard_orders.back().round != round_) {
    shard_round_msg order;
    order.averager_incarnation = incarnation_;
    order.round = round_;
    out.shard_orders.push_back(std::move(order));
  }
  out.shard_orders.back().recipients.push_back(to);
}

shard_round_msg averager_core::make_combine(algorithms::averaging_rule rule) const {
  shard_round_msg order;
  order.averager_incarnation = incarnation_;
  order.combine = true;
  for (const auto& [id, sub] : submissions_) {
    order.inputs.push_back({id, sub.msg.token, sub.msg.samples, sub.msg.steps});
  }
  order.rule = static_cast<std::uint8_t>(rule);
  order.aggregate = static_cast<std::uint8_t>(config_.aggregate.rule);
  order.trim = config_.aggregate.trim;
  return order;
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
    resend_due_.emplace(*e.resend_at, member);
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
// A member whose heartbeat announced its MODEL is at work, whatever the round before measured (the first
// round of a fresh job moves no model down, so the second can take twice as long): it is spared until
// that transfer's allowance is over, and the cutoff comes back then. Once a round only, so that announcing
// again and again cannot keep a member that never submits.
void averager_core::remove_idle(actions& out) {
  idle_cutoff_.reset();
  const auto now = clock_->now();
  std::vector<std::pair<member_id, incarnation_t>> idle;
  for (auto& [id, e] : members_) {
    if (submissions_.contains(id) || !active(id)) {
      continue;
    }
    if (e.transfer_until > now && e.idle_spared_in != round_) {
      e.idle_spared_in = round_;
      const auto again = e.transfer_until + clock_source::duration{1};
      idle_cutoff_ = idle_cutoff_ ? std::max(*idle_cutoff_, again) : again;
      continue;
    }
    idle.emplace_back(id, e.incarnation);
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

bool averager_core::answer_lost_session(actions& out, member_id member, incarnation_t incarnation,
                                        incarnation_t averager_incarnation, session_token token, origin_t from) {
  const auto* e = find_entry(member);
  if (averager_incarnation >= incarnation_ || e == nullptr || token == e->token) {
    return false;
  }
  reply(out, member, removed_msg{member, incarnation, incarnation_, round_}, from);
  return true;
}

std::optional<std::string> averager_core::mismatch(const join_msg& m) const {
  const auto differs = [](const std::string& job, const std::string& worker) { return !job.empty() && worker != job; };
  if (differs(config_.spec.model, m.model_fingerprint)) {
    return "model mismatch: the job trains " + config_.spec.model + ", the worker has " +
           (m.model_fingerprint.empty() ? std::string{"no model fingerprint"} : m.model_fingerprint);
  }
  std::string data = m.data_fingerprint;
  std::string labels;
  if (const auto at = data.find(" labels="); config_.labels_from_members && at != std::string::npos) {
    labels = data.substr(at);
    data.resize(at);
  }
  if (differs(config_.spec.data, data)) {
    return "data mismatch: the job trains on " + config_.spec.data + ", the worker has " +
           (m.data_fingerprint.empty() ? std::string{"no data fingerprint"} : m.data_fingerprint);
  }
  if (!labels.empty() && !declared_labels_.empty() && labels != declared_labels_) {
    return "data mismatch: the job's members train on" + declared_labels_ + ", the worker has" + labels;
  }
  const auto wire = config_.spec.wire;
  const bool reads = wire == algorithms::wire_dtype::f32 ||
                     std::find(m.wire_dtypes.begin(), m.wire_dtypes.end(), wire) != m.wire_dtypes.end();
  if (!reads) {
    std::string has;
    for (const auto d : m.wire_dtypes) {
      has += (has.empty() ? "" : ", ") + std::string{algorithms::to_string(d)};
    }
    return "wire dtype mismatch: the job sends " + std::string{algorithms::to_string(wire)} +
           " payloads, the worker reads " + (has.empty() ? std::string{"f32"} : has) + " only";
  }
  return std::nullopt;
}

std::optional<std::string> averager_core::adopt_initial_model(const join_msg& m) {
  if (!m.initial_model) {
    return std::string{
        "the job has no model yet: the first member must send its initial model with its JOIN "
        "(or the averager needs --init-model)"};
  }
  if (m.initial_model->size() != model_size_) {
    return "initial model mismatch: the job's model has " + std::to_string(model_size_) + " floats, the worker's " +
           std::to_string(m.initial_model->size());
  }
  if (!core_detail::all_finite(*m.initial_model)) {
    return std::string{"the worker's initial model holds NaN or Inf"};
  }
  model_ = m.initial_model;
  awaiting_initial_ = false;
  PRSGD_LOG(info, log_component) << "x̄_0 is the model of the first member's JOIN (" << model_size_ << " floats)";
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

}  // namespace prsgd::actors
