// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/worker_core.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "prsgd/common/check.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::actors {

namespace {
constexpr std::string_view worker_log = "worker";
}  // namespace

std::string_view to_string(worker_state s) noexcept {
  switch (s) {
    case worker_state::joining: return "joining";
    case worker_state::welcomed: return "welcomed";
    case worker_state::training: return "training";
    case worker_state::submitted: return "submitted";
    case worker_state::left: return "left";
    case worker_state::stopped: return "stopped";
  }
  return "unknown";
}

worker_core::worker_core(worker_config config, const clock_source& clk) : config_(config), clock_(&clk) {
  PRSGD_CHECK(config_.incarnation > 0) << "worker incarnation must be positive";
  PRSGD_CHECK(config_.heartbeat_interval.count() > 0 && config_.join_retry.count() > 0)
      << "worker heartbeat interval and join retry must be positive";
  const auto now = clock_->now();
  last_heard_ = now;
  next_heartbeat_ = now + config_.heartbeat_interval;
  next_join_ = now;
}

join_msg worker_core::make_join() const {
  using algorithms::wire_dtype;
  join_msg m{0,
             config_.incarnation,
             averager_incarnation_,
             last_finished_,
             config_.speed_hint,
             config_.model_fingerprint,
             config_.data_fingerprint};
  m.wire_dtypes = {wire_dtype::f32, wire_dtype::bf16, wire_dtype::f16, wire_dtype::int8};
  return m;
}

void worker_core::send(actions& out, any_msg m) const { out.sends.push_back({member_, std::move(m), std::nullopt}); }

actions worker_core::with_wakeup(actions out) const {
  out.wakeup = next_wakeup();
  return out;
}

actions worker_core::start() {
  actions out;
  if (state_ == worker_state::left || state_ == worker_state::stopped) {
    return with_wakeup(std::move(out));
  }
  state_ = worker_state::joining;  // (1)
  joining_since_ = clock_->now();
  send(out, make_join());
  next_join_ = clock_->now() + config_.join_retry;
  return with_wakeup(std::move(out));
}

void worker_core::rejoin(actions& out) {
  if (state_ == worker_state::training) {
    out.cancel_task = true;
  }
  state_ = worker_state::joining;  // (7)
  joining_since_ = clock_->now();
  member_ = 0;  // a new JOIN makes a new member
  token_ = 0;
  ref_.reset();  // a new member gets the whole model in its first RESTART
  for (auto& u : uplinks_) {
    u.reset();
  }
  send(out, make_join());
  next_join_ = clock_->now() + config_.join_retry;
}

void worker_core::on_welcome(const welcome_msg& m, actions& out) {
  if (m.averager_incarnation < averager_incarnation_) {
    return;  // from a dead averager incarnation
  }
  if (m.averager_incarnation > averager_incarnation_) {
    averager_incarnation_ = m.averager_incarnation;
    have_restart_ = false;
  }
  if (m.heartbeat_interval.count() > 0) {
    config_.heartbeat_interval = m.heartbeat_interval;
  }
  if (state_ == worker_state::joining) {
    state_ = worker_state::welcomed;  // (2)
    member_ = m.member;
    token_ = m.token;
    shard_index_ = m.shard_index;
    num_shards_ = m.num_shards;
    spec_ = m.spec;
    uplinks_.assign(std::max<std::size_t>(m.owners.size(), 1), algorithms::error_feedback{});
    PRSGD_LOG(info, worker_log) << "joined as member " << member_ << " (shard " << shard_index_ << " of " << num_shards_
                                << ") of averager incarnation " << m.averager_incarnation << ", admitted at round "
                                << m.admitted_round;
  }
  (void)out;
}

void worker_core::accept_restart(const restart_msg& m, actions& out) {
  if (m.averager_incarnation < averager_incarnation_) {
    return;
  }
  if (m.averager_incarnation > averager_incarnation_) {
    // (3') A RESTART that overtook its WELCOME from a new averager incarnation: it names us, so we are in.
    averager_incarnation_ = m.averager_incarnation;
    have_restart_ = false;
  } else if (have_restart_ && m.round <= round_) {
    return;  // duplicate or reordered older RESTART
  }
  if (!m.model && m.held) {
    // The averager confirmed a model this worker built, but the shell no longer has it to fill in.
    PRSGD_LOG(warn, worker_log) << "RESTART(" << m.round
                                << ") names a model this worker no longer holds; rejoining for the whole model";
    rejoin(out);
    return;
  }
  if (!m.model) {
    PRSGD_LOG(warn, worker_log) << "ignoring RESTART(" << m.round << ") without a model";
    return;
  }
  flat_buffer model = m.model;
  if (m.base) {
    // A change against the model of RESTART(base): add it in float32, as the averager did to get x̄.
    if (!ref_ || ref_round_ != *m.base || ref_->size() != m.model->size()) {
      PRSGD_LOG(warn, worker_log) << "RESTART(" << m.round << ") is a change against round " << *m.base
                                  << ", but this worker holds "
                                  << (ref_ ? "round " + std::to_string(ref_round_) : std::string{"no model"})
                                  << "; rejoining for the whole model";
      rejoin(out);
      return;
    }
    auto sum = std::make_shared<std::vector<float>>(*ref_);
    const auto& d = *m.model;
    for (std::size_t i = 0; i < sum->size(); ++i) {
      (*sum)[i] += d[i];
    }
    model = std::move(sum);
  }
  if (state_ == worker_state::training) {
    out.cancel_task = true;  // (5)
  }
  ref_ = model;
  ref_round_ = m.round;
  have_restart_ = true;
  round_ = m.round;
  interval_ = std::max<std::uint64_t>(m.interval, 1);
  mode_ = m.mode;
  state_ = worker_state::training;  // (3)/(6)
  out.task = train_task{m.round,          model,      interval_, m.step_size, m.mode, shard_index_, num_shards_,
                        spec_.batch_size, spec_.seed, m.ranges,  member_};
}

actions worker_core::on_message(const to_worker& msg) {
  actions out;
  if (state_ == worker_state::left || state_ == worker_state::stopped) {
    return with_wakeup(std::move(out));
  }
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        // A WELCOME or REFUSED answers our JOIN (its nonce); everything else must name the member we became.
        if constexpr (std::is_same_v<T, welcome_msg>) {
          if (m.incarnation == config_.incarnation && m.member != 0 &&
              (state_ == worker_state::joining || m.member == member_)) {
            last_heard_ = clock_->now();
            on_welcome(m, out);
          }
          return;
        } else if constexpr (std::is_same_v<T, refused_msg>) {
          if (m.incarnation == config_.incarnation && state_ == worker_state::joining) {
            PRSGD_LOG(error, worker_log) << "the averager refused this worker: " << m.reason;
            state_ = worker_state::stopped;
            out.stopped = true;
            out.refused = m.reason;
          }
          return;
        }
        if (m.member != member_) {
          return;  // misaddressed
        }
        if constexpr (std::is_same_v<T, welcome_msg> || std::is_same_v<T, refused_msg>) {
          // handled above
        } else if constexpr (std::is_same_v<T, restart_msg>) {
          if (m.incarnation == config_.incarnation) {
            last_heard_ = clock_->now();
            accept_restart(m, out);
          }
        } else if constexpr (std::is_same_v<T, heartbeat_msg>) {
          if (!m.from_averager || m.averager_incarnation < averager_incarnation_) {
            return;
          }
          last_heard_ = clock_->now();
          if (m.transfer_bytes > 0) {
            // A RESTART is on its way behind this heartbeat: allow for the transfer.
            quiet_until_ =
                std::max(quiet_until_, last_heard_ + config_.averager_timeout +
                                           transfer_allowance(m.transfer_bytes, config_.slowest_link_bytes_per_s));
          }
          if (m.averager_incarnation > averager_incarnation_ && state_ != worker_state::joining) {
            PRSGD_LOG(info, worker_log) << "member " << member_ << " sees new averager incarnation "
                                        << m.averager_incarnation << "; rejoining";
            rejoin(out);  // (7)
          }
        } else if constexpr (std::is_same_v<T, removed_msg>) {
          if (m.incarnation != config_.incarnation || m.averager_incarnation < averager_incarnation_) {
            return;
          }
          last_heard_ = clock_->now();
          // Only rejoin once per removal: while joining, the pending JOIN (and its retries) suffice.
          if (state_ != worker_state::joining) {
            PRSGD_LOG(info, worker_log) << "member " << member_ << " removed by averager incarnation "
                                        << m.averager_incarnation << "; rejoining";
            rejoin(out);  // (7)
          }
        } else if constexpr (std::is_same_v<T, stop_msg>) {
          if (m.averager_incarnation >= averager_incarnation_) {
            if (state_ == worker_state::training) {
              out.cancel_task = true;
            }
            state_ = worker_state::stopped;  // (9)
            out.stopped = true;
          }
        }
      },
      msg);
  return with_wakeup(std::move(out));
}

actions worker_core::on_trained(const train_result& r) {
  actions out;
  if (state_ != worker_state::training || r.round != round_) {
    // Obsolete: superseded by a newer RESTART, a rejoin, or the end of the job.
    return with_wakeup(std::move(out));
  }
  model_msg m;
  m.member = member_;
  m.token = token_;
  m.incarnation = config_.incarnation;
  m.averager_incarnation = averager_incarnation_;
  m.round = r.round;
  m.steps = r.steps;
  m.samples = r.samples;
  m.loss_sum = r.loss_sum;
  m.loss_count = r.loss_count;
  m.params = r.params;
  // The averager tells the mode in RESTART; gradient submissions are marked so it can check the kind.
  m.is_gradient = mode_ == training_mode::minibatch_sgd;
  if (algorithms::lossy(spec_.wire) && r.params) {
    // Send x_i − x̄_r (a gradient as it is), with what the encoding dropped last time added back in.
    const std::span<const float> params = *r.params;
    m.delta = !m.is_gradient && ref_ && ref_->size() == params.size();
    std::vector<float> delta;
    if (m.delta) {
      delta.resize(params.size());
      for (std::size_t i = 0; i < params.size(); ++i) {
        delta[i] = params[i] - (*ref_)[i];
      }
    }
    const std::span<const float> v = m.delta ? std::span<const float>(delta) : params;
    // Slice by slice (the whole vector in a star, compressed straight into what is sent): a shard owner
    // decodes its slice alone, and int8 blocks must not straddle two owners.
    const std::size_t K = uplinks_.size();
    std::vector<float> sent;
    if (K == 1) {
      sent = uplinks_[0].compress(v, spec_.wire);
    } else {
      sent.resize(v.size());
      for (std::size_t k = 0; k < K; ++k) {
        const auto begin = slice_begin(v.size(), K, k);
        const auto end = slice_begin(v.size(), K, k + 1);
        const auto part = uplinks_[k].compress(v.subspan(begin, end - begin), spec_.wire);
        std::copy(part.begin(), part.end(), sent.begin() + static_cast<std::ptrdiff_t>(begin));
      }
    }
    m.params = std::make_shared<const std::vector<float>>(std::move(sent));
    m.dtype = spec_.wire;
  }
  if (m.params) {
    // Announce the payload on the same connection, ahead of it: the averager does not take us for gone
    // while it is in flight (docs/decisions/0024).
    heartbeat_msg hb{member_, config_.incarnation, averager_incarnation_, round_, false, token_};
    hb.transfer_bytes = algorithms::encoded_size(m.dtype, m.params->size());
    send(out, hb);
    // While the payload fills the link, the averager's messages can stall too (on a 2 Mbit/s link they stopped
    // arriving 1.6 s into the upload, most likely as their acknowledgements waited behind it). So do not take
    // the averager for gone before the transfer had its time either.
    quiet_until_ = std::max(quiet_until_, clock_->now() + config_.averager_timeout +
                                              transfer_allowance(hb.transfer_bytes, config_.slowest_link_bytes_per_s));
  }
  send(out, std::move(m));
  ++models_sent_;
  last_finished_ = r.round;
  state_ = worker_state::submitted;  // (4)
  return with_wakeup(std::move(out));
}

actions worker_core::tick() {
  actions out;
  if (state_ == worker_state::left || state_ == worker_state::stopped) {
    return with_wakeup(std::move(out));
  }
  const auto now = clock_->now();
  if (state_ == worker_state::joining && config_.join_timeout.count() > 0 &&
      now - joining_since_ >= config_.join_timeout) {
    const auto secs = std::chrono::duration_cast<std::chrono::duration<double>>(config_.join_timeout).count();
    char text[96];
    std::snprintf(text, sizeof text, "no averager welcomed this worker within %g s", secs);
    PRSGD_LOG(error, worker_log) << text << "; giving up";
    state_ = worker_state::stopped;  // (10)
    out.stopped = true;
    out.gave_up = text;
    return with_wakeup(std::move(out));
  }
  if (state_ != worker_state::joining && now - last_heard_ > config_.averager_timeout && now > quiet_until_) {
    PRSGD_LOG(warn, worker_log) << "member " << member_ << ": averager silent; rejoining";
    rejoin(out);
    last_heard_ = now;  // one rejoin per silence period; JOIN retries continue below
  } else if (state_ == worker_state::joining && now >= next_join_) {
    send(out, make_join());
    next_join_ = now + config_.join_retry;
  }
  if (now >= next_heartbeat_) {
    if (member_ != 0) {  // before the first WELCOME there is no member to speak for
      send(out, heartbeat_msg{member_, config_.incarnation, averager_incarnation_, round_, false, token_});
    }
    next_heartbeat_ = now + config_.heartbeat_interval;
  }
  return with_wakeup(std::move(out));
}

actions worker_core::leave() {
  actions out;
  if (state_ == worker_state::left || state_ == worker_state::stopped) {
    return with_wakeup(std::move(out));
  }
  out.cancel_task = state_ == worker_state::training;
  if (member_ != 0) {
    send(out, leave_msg{member_, config_.incarnation, averager_incarnation_, round_, token_});
  }
  state_ = worker_state::left;  // (8)
  out.stopped = true;
  return with_wakeup(std::move(out));
}

std::optional<clock_source::time_point> worker_core::next_wakeup() const {
  if (state_ == worker_state::left || state_ == worker_state::stopped) {
    return std::nullopt;
  }
  auto t = next_heartbeat_;
  if (state_ == worker_state::joining) {
    t = std::min(t, next_join_);
    if (config_.join_timeout.count() > 0) {
      t = std::min(t, joining_since_ + config_.join_timeout);
    }
  } else {
    t = std::min(t, std::max(last_heard_ + config_.averager_timeout, quiet_until_) + clock_source::duration{1});
  }
  return t;
}

}  // namespace prsgd::actors
