// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/shard_owner_core.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <utility>

#include "prsgd/algorithms/aggregation.hpp"
#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/algorithms/wire_change.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::actors {
namespace {

constexpr const char* log_component = "shard-owner";

}  // namespace

std::uint64_t slice_checksum(const std::vector<float>& values) noexcept {
  std::uint64_t h = 14695981039346656037ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (std::size_t i = 0; i < values.size() * sizeof(float); ++i) {
    h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return h;
}

shard_owner_core::shard_owner_core(shard_owner_config config, const clock_source& clk)
    : config_(std::move(config)), clock_(&clk), hello_every_(config_.heartbeat_interval) {}

owner_actions shard_owner_core::start() {
  owner_actions out;
  hello(out);
  return finish(std::move(out));
}

owner_actions shard_owner_core::tick() {
  owner_actions out;
  if (!stopped_ && clock_->now() >= next_hello_) {
    hello(out);
  }
  return finish(std::move(out));
}

void shard_owner_core::hello(owner_actions& out) {
  shard_hello_msg m;
  m.incarnation = config_.incarnation;
  m.averager_incarnation = coordinator_;
  m.round = round_;
  m.shard = config_.shard;
  m.shards = config_.shards;
  m.endpoint = config_.endpoint;
  m.ready = ready_;
  out.sends.push_back({true, 0, m});
  next_hello_ = clock_->now() + hello_every_;
}

owner_actions shard_owner_core::on_coordinator(const shard_msg& msg) {
  owner_actions out;
  if (stopped_) {
    return finish(std::move(out));
  }
  if (const auto* setup = std::get_if<shard_setup_msg>(&msg)) {
    if (ready_ && setup->averager_incarnation <= coordinator_) {
      return finish(std::move(out));  // a repeated SETUP of the incarnation it follows
    }
    const std::uint64_t begin = slice_begin(setup->model_size, config_.shards, config_.shard);
    const std::uint64_t end = slice_begin(setup->model_size, config_.shards, config_.shard + 1);
    if (setup->shard != config_.shard || setup->shards != config_.shards || setup->offset != begin || !setup->model ||
        setup->model->size() != end - begin) {
      out.stopped = true;
      out.failed = "the coordinator set this owner up as shard " + std::to_string(setup->shard) + "/" +
                   std::to_string(setup->shards) + " (offset " + std::to_string(setup->offset) + "), but it is " +
                   std::to_string(config_.shard) + "/" + std::to_string(config_.shards);
      stopped_ = true;
      return finish(std::move(out));
    }
    ready_ = true;
    coordinator_ = setup->averager_incarnation;
    round_ = setup->round;
    offset_ = begin;
    length_ = end - begin;
    slice_ = setup->model;
    if (setup->heartbeat_interval.count() > 0) {
      hello_every_ = setup->heartbeat_interval;
    }
    slices_.clear();
    routes_.clear();
    recipients_.clear();
    served_.clear();
    broken_.reset();
    wire_ = setup->wire;
    downlink_.reset();
    change_.reset();
    holders_.clear();
    PRSGD_LOG(info, log_component) << "shard " << config_.shard << "/" << config_.shards << ": values [" << begin
                                   << ", " << end << ") of x̄ at round " << round_ << " from coordinator incarnation "
                                   << coordinator_;
    hello(out);  // tells the coordinator at once that this owner is ready
    return finish(std::move(out));
  }
  if (std::holds_alternative<stop_msg>(msg)) {
    stopped_ = true;
    out.stopped = true;
    return finish(std::move(out));
  }
  const auto* order = std::get_if<shard_round_msg>(&msg);
  if (order == nullptr || !ready_ || order->averager_incarnation != coordinator_) {
    return finish(std::move(out));
  }
  if (order->combine) {
    if (order->round <= round_) {
      return finish(std::move(out));  // repeated
    }
    if (order->round != round_ + 1) {
      broken_ = "asked for round " + std::to_string(order->round) + " while holding round " + std::to_string(round_);
    } else {
      combine(*order);
    }
  } else if (order->round != round_) {
    if (order->round > round_) {
      broken_ =
          "recipients for round " + std::to_string(order->round) + " while holding round " + std::to_string(round_);
    }
    return finish(std::move(out));
  }
  for (const auto& to : order->recipients) {
    recipients_.emplace(to.member, to.token);
    serve(out, to);
  }
  report(out, order->fetch, !broken_, broken_.value_or(""));
  return finish(std::move(out));
}

void shard_owner_core::combine(const shard_round_msg& order) {
  std::vector<float> next(slice_->begin(), slice_->end());
  if (!order.inputs.empty()) {
    std::vector<algorithms::contribution> inputs;
    for (const auto& in : order.inputs) {
      auto it = slices_.find({in.member, in.token});
      if (it == slices_.end()) {
        broken_ =
            "the slice of member " + std::to_string(in.member) + " for round " + std::to_string(round_) + " is missing";
        break;
      }
      inputs.push_back(
          {std::span<const float>(*it->second.model), static_cast<double>(in.samples), static_cast<double>(in.steps)});
    }
    if (!broken_) {
      // The same functions as a star averager, applied to this slice: the rules are coordinate-wise.
      const auto rule = static_cast<algorithms::averaging_rule>(order.rule);
      algorithms::aggregate_options options;
      options.rule = static_cast<algorithms::aggregate_rule>(order.aggregate);
      options.trim = order.trim;
      expected<void> done;
      if (options.rule == algorithms::aggregate_rule::mean) {
        done = algorithms::average(inputs, *slice_, rule, next);
      } else {
        auto weights = algorithms::averaging_weights(inputs, rule);
        done = weights ? algorithms::aggregate(inputs, *weights, *slice_, options, next)
                       : expected<void>{std::move(weights).error()};
      }
      if (!done) {
        broken_ = "combining round " + std::to_string(round_) + " failed: " + done.error().message();
      }
    }
  }
  if (broken_) {
    PRSGD_LOG(error, log_component) << *broken_;
    return;
  }
  holders_.clear();
  for (const auto& in : order.inputs) {
    holders_.emplace(in.member, in.token);
  }
  next = settle_change(std::move(next));
  round_ = order.round;
  slice_ = std::make_shared<const std::vector<float>>(std::move(next));
  slices_.clear();
  recipients_.clear();
  served_.clear();
}

// With a lossy wire dtype, encodes x̄_{r+1} − x̄_r of this slice with error feedback and defines the new slice
// as x̄_r plus the decoded change, added in float32: exactly what a member holding x̄_r rebuilds.
std::vector<float> shard_owner_core::settle_change(std::vector<float> next) {
  change_.reset();
  if (!algorithms::lossy(wire_) || next.size() != slice_->size()) {
    return next;
  }
  if (auto change = algorithms::settle_change(*slice_, next, wire_, downlink_)) {
    change_ = std::make_shared<const std::vector<float>>(std::move(*change));
  }  // else f16 overflow (a change beyond 65504): this round's slice goes whole, as f32, to everyone
  return next;
}

void shard_owner_core::serve(owner_actions& out, const shard_recipient& to) {
  const std::pair<member_id, session_token> key{to.member, to.token};
  if (broken_ || served_.contains(key) || !recipients_.contains(key)) {
    return;
  }
  auto route = routes_.find(to.member);
  if (route == routes_.end() || route->second.first != to.token) {
    return;  // the member has not attached yet; its SHARD_SLICE without a model triggers the send
  }
  served_.insert(key);
  shard_average_msg m{to.member, to.token, round_, config_.shard, slice_};
  if (change_ && round_ > 0 && holders_.contains(key)) {
    m.model = change_;  // the member rebuilds this slice of x̄_r from the x̄_{r−1} it trained from
    m.dtype = wire_;
    m.base = round_ - 1;
  }
  out.sends.push_back({false, route->second.second, std::move(m)});
}

void shard_owner_core::report(owner_actions& out, bool fetch, bool ok, std::string why) {
  shard_report_msg m;
  m.incarnation = config_.incarnation;
  m.averager_incarnation = coordinator_;
  m.round = round_;
  m.shard = config_.shard;
  m.checksum = slice_checksum(*slice_);
  bool finite = true;
  for (float v : *slice_) {
    finite = finite && std::isfinite(v);
  }
  m.ok = ok && finite;
  m.why = !ok ? std::move(why) : finite ? std::string{} : "the combined slice has NaN/Inf";
  if (fetch) {
    m.model = slice_;
  }
  out.sends.push_back({true, 0, std::move(m)});
}

owner_actions shard_owner_core::on_slice(const shard_slice_msg& msg, origin_t from) {
  owner_actions out;
  if (stopped_ || !ready_ || msg.shard != config_.shard) {
    return finish(std::move(out));
  }
  if (!msg.model) {
    routes_[msg.member] = {msg.token, from};
    serve(out, {msg.member, msg.token});
    return finish(std::move(out));
  }
  if (msg.round != round_) {
    return finish(std::move(out));  // late (the round closed) or for a round this owner has not reached
  }
  const std::pair<member_id, session_token> key{msg.member, msg.token};
  if (!slices_.contains(key)) {
    std::size_t same_member = 0;
    for (auto it = slices_.lower_bound({msg.member, 0}); it != slices_.end() && it->first.first == msg.member; ++it) {
      ++same_member;
    }
    if (same_member >= config_.slices_per_member) {
      return finish(std::move(out));
    }
  }
  shard_ack_msg ack{msg.member, msg.token, msg.round, config_.shard, false, 0};
  flat_buffer model = msg.model;
  if (msg.delta && model->size() == length_) {
    // A slice of x_i − x̄_r: the member's slice is x̄_r + change, added in float32.
    auto full = std::make_shared<std::vector<float>>(*slice_);
    for (std::size_t i = 0; i < length_; ++i) {
      (*full)[i] += (*msg.model)[i];
    }
    model = std::move(full);
  }
  if (model->size() == length_) {
    double sum = 0;
    bool finite = true;
    for (std::size_t i = 0; i < length_; ++i) {
      const float v = (*model)[i];
      finite = finite && std::isfinite(v);
      const double d = static_cast<double>(v) - static_cast<double>((*slice_)[i]);
      sum += d * d;
    }
    ack.ok = finite && std::isfinite(sum);
    ack.norm2 = ack.ok ? sum : 0;
  }
  if (ack.ok) {
    // A repeated slice keeps the first copy: the coordinator counts a (member, round) once anyway.
    slices_.try_emplace(key, held_slice{model, from});
  }
  routes_[msg.member] = {msg.token, from};
  out.sends.push_back({true, 0, ack});
  return finish(std::move(out));
}

owner_actions shard_owner_core::finish(owner_actions out) {
  if (!stopped_) {
    out.wakeup = next_hello_;
  }
  return out;
}

}  // namespace prsgd::actors
