// SPDX-License-Identifier: Apache-2.0
// Shutting zmq_transport down: stop() from any thread, goodbyes to peers, and the I/O thread's last turn
// that drops what is still queued and closes the sockets.
#include <thread>
#include <variant>
#include <vector>

#include "zmq_transport_impl.hpp"

namespace prsgd {

using transport_detail::kind_bye;

void zmq_transport::impl::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_requested_.store(true, std::memory_order_release);
  if (!thread_.joinable()) {
    return;
  }
  if (std::this_thread::get_id() == io_thread_id_) {
    // stop() from a handler: the loop ends after this turn; the destructor joins.
    return;
  }
  wake();
  std::lock_guard join_lock(join_mutex_);
  if (thread_.joinable()) {
    thread_.join();
  }
}

// Closes one connection; with `say_bye`, tells the remote side first (best effort).
void zmq_transport::impl::close_peer(peer_id id, bool say_bye) {
  if (auto it = outs_.find(id); it != outs_.end()) {
    auto& p = it->second;
    for (auto& pm : p.pending) {
      drop(pm);
    }
    if (say_bye) {
      try {
        zmq::message_t bye(&kind_bye, 1);
        (void)p.sock.send(bye, zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
        // Best effort.
      }
    }
    outs_.erase(it);
    return;
  }
  if (auto it = ins_.find(id); it != ins_.end()) {
    if (say_bye) {
      router_dirty_ = true;
      try {
        zmq::message_t rid(it->second.routing_id.data(), it->second.routing_id.size());
        if (router_->send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          zmq::message_t bye(&kind_bye, 1);
          (void)router_->send(bye, zmq::send_flags::dontwait);
        }
      } catch (const zmq::error_t&) {
        // Best effort.
      }
    }
    remove_incoming(id, errc::none);
  }
}

void zmq_transport::impl::shutdown_sockets() {
  // Say goodbye so peers see the close at once instead of after their timeout.
  std::vector<peer_id> ids;
  for (auto& [id, p] : outs_) {
    ids.push_back(id);
  }
  for (auto& [id, p] : ins_) {
    ids.push_back(id);
  }
  for (const peer_id id : ids) {
    close_peer(id, true);
  }
  // Drop anything still queued so no command (and no promise) is left behind.
  std::vector<command> rest;
  {
    std::lock_guard lock(mutex_);
    rest.swap(commands_);
    commands_waiting_.store(false, std::memory_order_relaxed);
  }
  for (auto& c : rest) {
    if (auto* s = std::get_if<send_command>(&c)) {
      drop(s->msg);
    } else {
      std::get<std::function<void()>>(c)();  // bind/connect after stop: they fail on the closed state below
    }
  }
  outs_.clear();
  router_.reset();
  zap_.reset();
  ctx_.reset();  // waits up to the linger time for the goodbyes
}

}  // namespace prsgd
