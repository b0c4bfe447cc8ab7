// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/shard_owner_core.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
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

constexpr const char* owner_log = "shard-owner";

// Returns Σ (x_i − ref_i)², in double, and whether every x_i is finite. Eight independent sums, added up in a
// fixed order at the end, so the loop vectorises and the result does not depend on the CPU.
std::pair<double, bool> distance2(const std::vector<float>& x, const std::vector<float>& ref) noexcept {
  constexpr std::size_t lanes = 8;
  std::array<double, lanes> sum{};
  std::uint32_t bad = 0;
  const std::size_t n = x.size();
  const std::size_t whole = n - n % lanes;
  for (std::size_t i = 0; i < whole; i += lanes) {
    for (std::size_t j = 0; j < lanes; ++j) {
      const float v = x[i + j];
      bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & 0x7f800000U) == 0x7f800000U);
      const double d = static_cast<double>(v) - static_cast<double>(ref[i + j]);
      sum[j] += d * d;
    }
  }
  for (std::size_t i = whole; i < n; ++i) {
    const float v = x[i];
    bad |= static_cast<std::uint32_t>(!std::isfinite(v));
    const double d = static_cast<double>(v) - static_cast<double>(ref[i]);
    sum[i - whole] += d * d;
  }
  const double total = ((sum[0] + sum[1]) + (sum[2] + sum[3])) + ((sum[4] + sum[5]) + (sum[6] + sum[7]));
  return {total, bad == 0};
}

}  // namespace

std::uint64_t slice_checksum(std::span<const float> values) noexcept {
  std::uint64_t h = 14695981039346656037ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (std::size_t i = 0; i < values.size() * sizeof(float); ++i) {
    h = (h ^ bytes[i]) * 1099511628211ULL;
  }
  return h;
}

shard_owner_core::shard_owner_core(shard_owner_config config, const clock_source& clk)
    : config_(std::move(config)), clock_(&clk), hello_every_(config_.heartbeat_interval) {
  config_.relay_chunk = std::max<std::uint64_t>(config_.relay_chunk, 1);
}

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
  m.reads_compressed = true;
  out.sends.push_back({true, 0, m});
  next_hello_ = clock_->now() + hello_every_;
}

owner_actions shard_owner_core::on_coordinator(const shard_msg& msg) {
  owner_actions out;
  if (stopped_) {
    return finish(std::move(out));
  }
  if (const auto* setup = std::get_if<shard_setup_msg>(&msg)) {
    if (ready_ &&
        (setup->averager_incarnation < coordinator_ ||
         (setup->averager_incarnation == coordinator_ && setup->ring == ring_ && setup->ring_next == ring_next_))) {
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
    compress_ = setup->compress;
    downlink_.reset();
    change_.reset();
    holders_.clear();
    model_size_ = setup->model_size;
    ring_ = setup->ring && config_.shards > 1;
    ring_next_ = setup->ring_next;
    parts_.assign(config_.shards, std::nullopt);
    early_.clear();
    PRSGD_LOG(info, owner_log) << "shard " << config_.shard << "/" << config_.shards << ": values [" << begin << ", "
                               << end << ") of x̄ at round " << round_ << " from coordinator incarnation "
                               << coordinator_ << (ring_ ? ", ring gather to " + ring_next_ : std::string{});
    relayed_own_ = false;  // x̄ as of the start goes from every owner to every member, as without the ring
    if (ring_) {
      out.connect_next = ring_next_;
    }
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
      if (ring_ && !broken_) {
        relay_own(out);
      }
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
    PRSGD_LOG(error, owner_log) << *broken_;
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
  if (ring_) {
    auto early = early_.find(round_);
    parts_ = early != early_.end() ? std::move(early->second) : relayed_round(config_.shards);
    early_.erase(early_.begin(), early_.upper_bound(round_));
  }
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
  if (broken_ || !recipients_.contains(key)) {
    return;
  }
  auto found = routes_.find(to.member);
  if (found == routes_.end() || found->second.token != to.token) {
    return;  // the member has not attached yet; its SHARD_SLICE without a model triggers the send
  }
  route& r = found->second;
  const bool holder = holders_.contains(key);
  const bool as_change = sends_change();
  const bool has_home = ring_ && r.home && *r.home < config_.shards;
  const bool home_here = has_home && *r.home == config_.shard;
  // This owner's own slice: unless the member's home passes it on. A change relayed from here is of no use
  // to a member that did not train from its base, so such a member gets the whole slice from here.
  const bool via_home = has_home && !home_here && relayed_own_ && !(as_change && !holder);
  if (!via_home && served_.emplace(to.member, to.token, config_.shard).second) {
    shard_average_msg m{to.member, to.token, round_, config_.shard, slice_};
    if (as_change && holder) {
      m.model = change_;  // the member rebuilds this slice of x̄_r from the x̄_{r−1} it trained from
      m.dtype = wire_;
      m.base = round_ - 1;
    } else if (r.holds && *r.holds == checksums_.of(slice_)) {
      m.model.reset();  // the member built this slice itself (a fresh job's x̄_0): it keeps its copy
      m.held = *r.holds;
    }
    m.compressed = compress_ && !home_here;  // a member whose home is here is on this host
    out.sends.push_back({false, r.conn, std::move(m)});
  }
  r.holds.reset();  // only the first slice of x̄ a member gets can be one it built itself
  if (!home_here) {
    return;
  }
  for (std::uint64_t k = 0; k < parts_.size(); ++k) {
    const auto& part = parts_[k];
    if (k == config_.shard || !part || part->missing > 0 || (part->base && !holder) ||
        served_.contains({to.member, to.token, k})) {
      continue;
    }
    served_.emplace(to.member, to.token, k);
    shard_average_msg m{to.member, to.token, round_, k, part->values, part->dtype, part->base};
    out.sends.push_back({false, r.conn, std::move(m)});
  }
}

void shard_owner_core::serve_all(owner_actions& out) {
  for (const auto& [member, token] : recipients_) {
    serve(out, {member, token});
  }
}

void shard_owner_core::relay_own(owner_actions& out) {
  relayed_own_ = true;
  const bool as_change = sends_change();
  const auto& whole = as_change ? *change_ : *slice_;
  const std::uint64_t chunk = config_.relay_chunk;
  for (std::uint64_t at = 0; at < whole.size(); at += chunk) {
    const auto end = std::min<std::uint64_t>(whole.size(), at + chunk);
    shard_relay_msg m{coordinator_, round_, config_.shard,
                      std::make_shared<const std::vector<float>>(whole.begin() + static_cast<std::ptrdiff_t>(at),
                                                                 whole.begin() + static_cast<std::ptrdiff_t>(end))};
    m.offset = at;
    if (as_change) {
      m.dtype = wire_;
      m.base = round_ - 1;
    }
    m.compressed = compress_;
    owner_send s{false, 0, std::move(m)};
    s.to_next = true;
    out.sends.push_back(std::move(s));
  }
}

owner_actions shard_owner_core::on_relay(const shard_relay_msg& msg) {
  owner_actions out;
  const std::uint64_t k = msg.shard;
  const std::uint64_t chunk = config_.relay_chunk;
  const std::uint64_t length =
      k < config_.shards ? slice_begin(model_size_, config_.shards, k + 1) - slice_begin(model_size_, config_.shards, k)
                         : 0;
  // Chunks come whole and at their place: offset a multiple of the chunk, size up to the slice's end.
  if (stopped_ || !ready_ || !ring_ || msg.averager_incarnation != coordinator_ || k >= config_.shards ||
      k == config_.shard || msg.round < round_ || msg.round > round_ + 2 || !msg.model || msg.offset % chunk != 0 ||
      msg.offset >= length || msg.model->size() != std::min(chunk, length - msg.offset)) {
    return finish(std::move(out));
  }
  auto& part = msg.round == round_ ? parts_[k] : [&]() -> std::optional<relayed>& {
    auto& later = early_[msg.round];
    later.resize(config_.shards);
    return later[k];
  }();
  if (!part || part->dtype != msg.dtype || part->base != msg.base) {
    const std::size_t chunks = static_cast<std::size_t>((length + chunk - 1) / chunk);
    part = relayed{std::make_shared<std::vector<float>>(length), std::vector<bool>(chunks, false), chunks, msg.dtype,
                   msg.base};
  }
  const auto index = static_cast<std::size_t>(msg.offset / chunk);
  if (part->chunks[index]) {
    return finish(std::move(out));  // a repeated chunk
  }
  part->chunks[index] = true;
  --part->missing;
  if ((config_.shard + 1) % config_.shards != k) {
    // Passed on first: the next owner's link is the slow part, the members on this host are not.
    owner_send s{false, 0, msg};
    std::get<shard_relay_msg>(s.msg).compressed = compress_;
    s.to_next = true;
    out.sends.push_back(std::move(s));
  }
  std::copy(msg.model->begin(), msg.model->end(), part->values->begin() + static_cast<std::ptrdiff_t>(msg.offset));
  if (part->missing == 0 && msg.round == round_) {
    serve_all(out);
  }
  return finish(std::move(out));
}

std::size_t shard_owner_core::relayed_slices() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(parts_.begin(), parts_.end(), [](const auto& p) { return p && p->missing == 0; }));
}

void shard_owner_core::report(owner_actions& out, bool fetch, bool ok, std::string why) {
  shard_report_msg m;
  m.incarnation = config_.incarnation;
  m.averager_incarnation = coordinator_;
  m.round = round_;
  m.shard = config_.shard;
  m.checksum = checksums_.of(slice_);
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
    routes_[msg.member] = route{msg.token, from, msg.home, msg.holds};
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
    const auto [sum, finite] = distance2(*model, *slice_);
    ack.ok = finite && std::isfinite(sum);
    ack.norm2 = ack.ok ? sum : 0;
  }
  if (ack.ok) {
    // A repeated slice keeps the first copy: the coordinator counts a (member, round) once anyway.
    slices_.try_emplace(key, held_slice{model, from});
  }
  auto& r = routes_[msg.member];
  if (r.token != msg.token) {
    r.home.reset();  // a new membership names its home when it attaches
  }
  r.token = msg.token;
  r.conn = from;
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
