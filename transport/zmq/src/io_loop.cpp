// SPDX-License-Identifier: Apache-2.0
// The I/O thread of zmq_transport: its poll() loop, the command queue's drain, and the send path (pending
// lists, zero-copy frames). The loop's rules are in transport/README.md, "Thread contract".
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "zmq_transport_impl.hpp"

#include "prsgd/common/log.hpp"

namespace prsgd {

using transport_detail::kind_data;
using transport_detail::log_component;
using transport_detail::peer_counters;

namespace {

// Keeps a zero-copy frame's owner alive until libzmq frees the bytes (possibly on libzmq's own thread).
struct zero_copy_hold {
  std::shared_ptr<const void> owner;
  std::shared_ptr<peer_counters> counters;
  std::size_t size;
};

void release_zero_copy(void* /*data*/, void* hint) noexcept {
  auto* hold = static_cast<zero_copy_hold*>(hint);
  hold->counters->queued_bytes.fetch_sub(hold->size, std::memory_order_relaxed);
  delete hold;  // NOLINT(cppcoreguidelines-owning-memory): ownership passed through libzmq's C callback
}

}  // namespace

void zmq_transport::impl::run() {
  io_thread_id_ = std::this_thread::get_id();
  // The loop polls the eventfd and each socket's ZMQ_FD directly. ZMQ_FD only signals *changes*: it
  // is readable while the socket has unprocessed commands, and any call on the socket (send, recv,
  // ZMQ_EVENTS) may process them. So a socket is "clean" once a recv returned EAGAIN (all commands
  // processed, nothing to read) with no call on it since; any send on it makes it "dirty", and a dirty
  // socket's ZMQ_EVENTS is checked before blocking. That keeps the turn at one blocking poll() plus
  // libzmq's own per-recv work, instead of zmq_poll's two passes with a ZMQ_EVENTS query per socket.
  std::vector<pollfd> fds;
  std::vector<peer_id> fd_peers;
  const auto tick_period = std::chrono::milliseconds(poll_timeout_ms());
  next_tick_ = clock_.now();
  // The I/O thread owns the sockets except while it blocks in poll(), when a sending thread may take
  // them over (send(): direct send).
  std::unique_lock io_lock(io_mutex_);
  while (!stop_requested_.load(std::memory_order_acquire)) {
    bool any_ready = router_ready_ || (zap_ && zap_ready_);
    if (router_dirty_) {
      router_dirty_ = false;
      if ((socket_events(*router_) & ZMQ_POLLIN) != 0) {
        router_ready_ = any_ready = true;
      }
    }
    bool router_pending = false;
    fds.clear();
    fd_peers.clear();
    fds.push_back(pollfd{wake_fd_, POLLIN, 0});
    fds.push_back(pollfd{router_fd_, POLLIN, 0});
    if (zap_) {
      fds.push_back(pollfd{zap_fd_, POLLIN, 0});
    }
    const std::size_t first_out = fds.size();
    for (auto& [id, p] : outs_) {
      if (p.dirty) {
        p.dirty = false;
        const int ev = socket_events(p.sock);
        if ((ev & ZMQ_POLLIN) != 0 || (!p.pending.empty() && (ev & ZMQ_POLLOUT) != 0)) {
          p.ready = true;
        }
      }
      any_ready = any_ready || p.ready;
      fds.push_back(pollfd{p.fd, POLLIN, 0});
      fd_peers.push_back(id);
    }
    for (auto& [id, p] : ins_) {
      router_pending = router_pending || !p.pending.empty();
    }
    int timeout_ms = 0;
    if (!any_ready) {
      const auto until_tick = std::chrono::ceil<std::chrono::milliseconds>(next_tick_ - clock_.now());
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(until_tick.count(), 0, tick_period.count()));
      if (router_pending) {
        timeout_ms = std::min(timeout_ms, 1);  // a ROUTER has no per-peer POLLOUT; retry soon
      }
    }
    io_lock.unlock();
    io_sleeping_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (commands_waiting_.load(std::memory_order_relaxed)) {
      timeout_ms = 0;
    }
    const int rc = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), timeout_ms);
    io_sleeping_.store(false, std::memory_order_relaxed);
    io_lock.lock();
    direct_sent_ = false;
    if (rc < 0 && errno != EINTR) {
      PRSGD_LOG(error, log_component) << "poll failed: " << std::strerror(errno);
    }
    if (fds[0].revents != 0) {
      std::uint64_t count = 0;
      [[maybe_unused]] const auto n = ::read(wake_fd_, &count, sizeof(count));
    }
    if (commands_waiting_.load(std::memory_order_relaxed)) {
      drain_commands();
    }
    if (router_ready_ || fds[1].revents != 0) {
      router_ready_ = false;
      receive_router();
    }
    if (zap_ && (zap_ready_ || fds[2].revents != 0)) {
      zap_ready_ = false;
      answer_zap();
    }
    for (std::size_t i = 0; i < fd_peers.size(); ++i) {
      auto it = outs_.find(fd_peers[i]);
      if (it != outs_.end() && (it->second.ready || fds[first_out + i].revents != 0)) {
        it->second.ready = false;
        receive_dealer(fd_peers[i]);
      }
    }
    flush_all_pending();
    if (const auto now = clock_.now(); now >= next_tick_) {
      tick();
      next_tick_ = now + tick_period;
    }
  }
  shutdown_sockets();
}

inline long zmq_transport::impl::poll_timeout_ms() const {
  const auto ivl = cfg_.heartbeat_interval.count();
  return std::clamp<long>(static_cast<long>(ivl / 5), 1, 100);
}

inline void zmq_transport::impl::drain_commands() {
  {
    std::lock_guard lock(mutex_);
    batch_.swap(commands_);
    commands_waiting_.store(false, std::memory_order_relaxed);
  }
  for (auto& c : batch_) {
    if (auto* s = std::get_if<send_command>(&c)) {
      enqueue_or_send(s->peer, std::move(s->msg));
    } else {
      std::get<std::function<void()>>(c)();
    }
  }
  batch_.clear();  // keeps the capacity: no allocation per turn
}

// Builds and sends one message. Returns false (and sends nothing) when the first part would block.
// On a ROUTER, `routing_id` is non-null; an unreachable peer drops the message (returns true).
bool zmq_transport::impl::try_send(zmq::socket_t& sock, const std::string* routing_id, char kind, pending_message& pm) {
  try {
    if (routing_id != nullptr) {
      zmq::message_t rid(routing_id->data(), routing_id->size());
      auto r = sock.send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (!r) {
        return false;
      }
    }
    zmq::message_t head(&kind, 1);
    const auto head_flags =
        pm.frames.empty() ? zmq::send_flags::dontwait : (zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    auto r = sock.send(head, head_flags);
    if (!r) {
      // Only possible without a routing id: the routed part has already reserved the pipe.
      return false;
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) {
      drop(pm);
      return true;
    }
    PRSGD_LOG(warn, log_component) << "send failed: " << e.what();
    drop(pm);
    return true;
  }
  // Later parts cannot hit the high-water mark: libzmq counts whole messages against it.
  for (std::size_t i = 0; i < pm.frames.size(); ++i) {
    auto& f = pm.frames[i];
    const auto flags =
        i + 1 < pm.frames.size() ? (zmq::send_flags::sndmore | zmq::send_flags::dontwait) : zmq::send_flags::dontwait;
    try {
      if (f.size() >= cfg_.zero_copy_threshold && f.size() > 0) {
        // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): released by release_zero_copy.
        auto* hold = new zero_copy_hold{f.owner(), pm.counters, f.size()};
        zmq::message_t m(const_cast<std::byte*>(f.data()), f.size(), &release_zero_copy, hold);
        pm.bytes -= f.size();
        (void)sock.send(m, flags);
      } else {
        zmq::message_t m(f.data(), f.size());
        pm.counters->queued_bytes.fetch_sub(f.size(), std::memory_order_relaxed);
        pm.bytes -= f.size();
        (void)sock.send(m, flags);
      }
    } catch (const zmq::error_t& e) {
      PRSGD_LOG(warn, log_component) << "send of part " << i << " failed: " << e.what();
    }
    f = frame{};
  }
  return true;
}

void zmq_transport::impl::enqueue_or_send(peer_id peer, pending_message pm) {
  if (auto it = outs_.find(peer); it != outs_.end()) {
    auto& p = it->second;
    p.dirty = true;
    if (p.pending.empty() && try_send(p.sock, nullptr, kind_data, pm)) {
      p.last_tx = clock_.now();
      return;
    }
    p.pending.push_back(std::move(pm));
    return;
  }
  if (auto it = ins_.find(peer); it != ins_.end()) {
    auto& p = it->second;
    if (!p.up) {
      drop(pm);
      return;
    }
    router_dirty_ = true;
    if (p.pending.empty() && try_send(*router_, &p.routing_id, kind_data, pm)) {
      p.last_tx = clock_.now();
      return;
    }
    p.pending.push_back(std::move(pm));
    return;
  }
  drop(pm);  // disconnected between send() and now
}

inline void zmq_transport::impl::flush_all_pending() {
  for (auto& [id, p] : outs_) {
    p.dirty = p.dirty || !p.pending.empty();
    while (!p.pending.empty() && try_send(p.sock, nullptr, kind_data, p.pending.front())) {
      p.pending.pop_front();
      p.last_tx = clock_.now();
    }
  }
  for (auto& [id, p] : ins_) {
    router_dirty_ = router_dirty_ || !p.pending.empty();
    while (!p.pending.empty() && try_send(*router_, &p.routing_id, kind_data, p.pending.front())) {
      p.pending.pop_front();
      p.last_tx = clock_.now();
    }
  }
}

}  // namespace prsgd
