// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/shard_owner_actor.hpp"

#include "wire_link.hpp"

#include <algorithm>
#include <utility>

#include "prsgd/common/log.hpp"

namespace prsgd::actors {

shard_owner_actor::shard_owner_actor(shard_owner_actor_config config) : config_(std::move(config)) {}

void shard_owner_actor::on_start() {}

void shard_owner_actor::attach(std::shared_ptr<transport> link, peer_id coordinator, std::string endpoint) {
  link_ = std::move(link);
  coordinator_ = coordinator;
  config_.core.endpoint = std::move(endpoint);
  core_.emplace(config_.core, system().engine()->time());
  apply(core_->start());
}

void shard_owner_actor::on_wire(peer_id peer, multipart msg) {
  if (finished_ || !core_) {
    return;
  }
  auto decoded = decode_shard(msg, config_.limits);
  if (!decoded) {
    if (malformed_warnings_.allow(now())) {
      PRSGD_LOG(warn, "shard-owner") << "dropped malformed message from peer " << peer << ": "
                                     << decoded.error().message() << malformed_warnings_.suffix();
    }
    return;
  }
  if (peer == coordinator_) {
    apply(core_->on_coordinator(*decoded));
  } else if (const auto* slice = std::get_if<shard_slice_msg>(&*decoded)) {
    apply(core_->on_slice(*slice, peer));
  }
}

round_t shard_owner_actor::round() const { return core_ ? core_->round() : 0; }

void shard_owner_actor::apply(owner_actions a) {
  for (auto& s : a.sends) {
    const peer_id to = s.to_coordinator ? coordinator_ : s.peer;
    if (auto sent = link_->send(to, encode(s.msg)); !sent) {
      PRSGD_LOG(debug, "shard-owner") << "send to peer " << to << " failed: " << sent.error().message();
    }
  }
  if (a.stopped && !finished_) {
    finished_ = true;
    if (timer_) {
      cancel_timer(*timer_);
      timer_.reset();
    }
    if (a.failed) {
      PRSGD_LOG(error, "shard-owner") << *a.failed;
    } else {
      PRSGD_LOG(info, "shard-owner") << "the coordinator ended the job at round " << core_->round();
    }
    if (config_.on_finished) {
      config_.on_finished(a.failed);
    }
    return;
  }
  rearm(a.wakeup);
}

void shard_owner_actor::rearm(std::optional<clock_source::time_point> wakeup) {
  rearm_once(timer_, finished_ ? std::nullopt : wakeup, [this] {
    if (!finished_) {
      apply(core_->tick());
    }
  });
}

expected<std::pair<actor_ref<shard_owner_actor>, std::string>> start_shard_owner(
    actor_system& system, shard_owner_actor_config config, const transport_factory& make_link,
    const std::string& listen, const std::string& coordinator, std::shared_ptr<transport>* link_out,
    const connect_options& connect) {
  auto wired = spawn_wired<shard_owner_actor>(system, std::move(config), make_link);
  if (!wired) {
    return std::move(wired).error();
  }
  auto [handle, shared] = std::move(*wired);
  auto bound = shared->bind(listen);
  if (!bound) {
    return std::move(bound).error();
  }
  auto peer = shared->connect(coordinator, connect);
  if (!peer) {
    return std::move(peer).error();
  }
  // The endpoint workers reach the owner at is known only now; the actor registers once it has it.
  handle.tell(&shard_owner_actor::attach, shared, *peer, *bound);
  if (link_out) {
    *link_out = shared;
  }
  return std::make_pair(handle, *bound);
}

}  // namespace prsgd::actors
