// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/shard_owner_actor.hpp"

#include "wire_link.hpp"

#include <algorithm>
#include <utility>

#include "prsgd/common/log.hpp"
#include "prsgd/transport/endpoint.hpp"

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
  } else if (const auto* relay = std::get_if<shard_relay_msg>(&*decoded)) {
    if (config_.relay_key.empty() || relay_peers_.contains(peer)) {
      incoming_relay_.emplace(relay->model, std::move(msg));
      apply(core_->on_relay(*relay));
      incoming_relay_.reset();
    } else if (malformed_warnings_.allow(now())) {
      PRSGD_LOG(warn, "shard-owner") << "dropped SHARD_RELAY from peer " << peer
                                     << ", which did not prove the job's server key" << malformed_warnings_.suffix();
    }
  }
}

void shard_owner_actor::on_peer_event(const peer_event& e) {
  if (e.outgoing) {
    if (next_ && e.peer == *next_) {
      next_up_ = e.up;
    }
    return;
  }
  if (config_.relay_key.empty()) {
    return;
  }
  if (e.up && e.client_key == config_.relay_key) {
    relay_peers_.insert(e.peer);
  } else if (!e.up) {
    relay_peers_.erase(e.peer);
  }
}

round_t shard_owner_actor::round() const { return core_ ? core_->round() : 0; }

void shard_owner_actor::apply(owner_actions a) {
  if (a.connect_next && *a.connect_next != next_endpoint_) {
    if (next_) {
      (void)link_->disconnect(*next_);
      next_.reset();
    }
    next_endpoint_ = *a.connect_next;
    const auto next = endpoint::parse(next_endpoint_);
    next_on_this_host_ = next && next->on_this_host();
    if (auto peer = link_->connect(next_endpoint_, config_.next_connect)) {
      next_ = *peer;
      next_up_ = false;
      rearm_once(next_timer_, now() + config_.next_timeout, [this] {
        if (finished_ || next_up_) {
          return;
        }
        owner_actions stop;
        stop.stopped = true;
        stop.failed =
            "the next owner of the ring at " + next_endpoint_ + " did not answer within " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(config_.next_timeout).count()) +
            " ms (is it running there? with CURVE, does its allow list hold the server key?)";
        apply(std::move(stop));
      });
    } else {
      a.stopped = true;
      a.failed = "cannot connect to the next owner of the ring at " + next_endpoint_ + ": " + peer.error().message();
    }
  }
  for (auto& s : a.sends) {
    if (s.to_next) {
      if (!next_) {
        continue;
      }
      // A chunk passed on unchanged goes as it came: the core forwards the message it got, whose values are
      // the buffer the codec decoded from that message alone.
      auto* relay = std::get_if<shard_relay_msg>(&s.msg);
      const bool as_received = relay != nullptr && incoming_relay_ && relay->model == incoming_relay_->first;
      if (relay != nullptr && next_on_this_host_) {
        relay->compressed = false;  // the next owner is on this host: compressing would only cost CPU
      }
      multipart wire = as_received ? std::move(incoming_relay_->second) : encode(s.msg);
      if (as_received) {
        incoming_relay_.reset();
      }
      if (auto sent = link_->send(*next_, std::move(wire)); !sent) {
        PRSGD_LOG(debug, "shard-owner") << "send to the next owner failed: " << sent.error().message();
      }
      continue;
    }
    const peer_id to = s.to_coordinator ? coordinator_ : s.peer;
    if (auto sent = link_->send(to, encode(s.msg)); !sent) {
      PRSGD_LOG(debug, "shard-owner") << "send to peer " << to << " failed: " << sent.error().message();
    }
  }
  if (a.stopped && !finished_) {
    finished_ = true;
    for (auto* t : {&timer_, &next_timer_}) {
      if (*t) {
        cancel_timer(**t);
        t->reset();
      }
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
