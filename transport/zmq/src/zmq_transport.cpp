// SPDX-License-Identifier: Apache-2.0
// zmq_transport's public API: setup, bind/connect/disconnect through the command queue, send() (queued or
// direct), the counters; make_transport() and the process-wide memory setting. The I/O thread's side is in
// io_loop.cpp, receive.cpp, liveness.cpp, curve.cpp and shutdown.cpp (see zmq_transport_impl.hpp).
#include "prsgd/transport/zmq_transport.hpp"

#include <malloc.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <random>

#include "zmq_transport_impl.hpp"

#include "prsgd/common/log.hpp"
#include "prsgd/transport/inproc_transport.hpp"

namespace prsgd {

using transport_detail::log_component;
using transport_detail::max_node_name;
using transport_detail::z85_to_binary;

namespace {

std::string random_bytes(std::size_t n) {
  std::random_device rd;
  std::string out(n, '\0');
  for (auto& c : out) {
    c = static_cast<char>(rd() & 0xffU);
  }
  return out;
}

std::string random_node_name() {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "node-";
  for (const char c : random_bytes(6)) {
    out += hex[(static_cast<unsigned char>(c) >> 4U) & 0xfU];
    out += hex[static_cast<unsigned char>(c) & 0xfU];
  }
  return out;
}

int to_ms(std::chrono::milliseconds d) { return static_cast<int>(std::min<std::int64_t>(d.count(), 1 << 30)); }

}  // namespace

zmq_transport::impl::impl(transport_config cfg, transport_handlers handlers)
    : cfg_(std::move(cfg)),
      handlers_(std::move(handlers)),
      clock_(cfg_.time_source != nullptr ? *cfg_.time_source : steady_clock_source::instance()) {}

zmq_transport::impl::~impl() {
  stop();
  if (wake_fd_ >= 0) {
    ::close(wake_fd_);
  }
}

expected<void> zmq_transport::impl::start() {
  if (cfg_.node_name.empty()) {
    cfg_.node_name = random_node_name();
  }
  if (cfg_.node_name.size() > max_node_name || cfg_.node_name.front() == '\0' ||
      cfg_.node_name.find('\0') != std::string::npos) {
    return fail(errc::invalid_argument, "node_name must be 1..200 bytes without zero bytes");
  }
  trace_ = transport_detail::wire_trace::from_environment(cfg_.node_name);
  if (cfg_.heartbeat_interval.count() <= 0 || cfg_.heartbeat_timeout <= cfg_.heartbeat_interval) {
    return fail(errc::invalid_argument, "need 0 < heartbeat_interval < heartbeat_timeout");
  }
  if (cfg_.connection_timeout < cfg_.heartbeat_timeout) {
    return fail(errc::invalid_argument, "connection_timeout must be >= heartbeat_timeout");
  }
  if (cfg_.max_frame_bytes == 0 || cfg_.send_hwm < 0 || cfg_.receive_hwm < 0) {
    return fail(errc::invalid_argument, "max_frame_bytes must be > 0 and high-water marks >= 0");
  }
  if (cfg_.max_frames_per_message == 0) {
    return fail(errc::invalid_argument, "max_frames_per_message must be > 0");
  }
  if (cfg_.curve) {
    PRSGD_TRY(load_curve_keys());
  }
  if (cfg_.reuse_receive_memory) {
    retain_freed_memory_for_large_frames();
  }
  incarnation_ = random_bytes(8);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    return fail(errc::io_error, std::string("eventfd: ") + std::strerror(errno));
  }
  try {
    ctx_ = std::make_unique<zmq::context_t>(1);
    if (cfg_.curve) {
      // The ZAP handler must exist before any CURVE handshake; libzmq finds it by this fixed address.
      zap_.emplace(*ctx_, zmq::socket_type::rep);
      zap_->set(zmq::sockopt::linger, 0);
      zap_->bind("inproc://zeromq.zap.01");
    }
    router_.emplace(*ctx_, zmq::socket_type::router);
    configure_common(*router_);
    router_->set(zmq::sockopt::router_mandatory, 1);
    router_->set(zmq::sockopt::router_handover, 1);
    if (cfg_.curve) {
      router_->set(zmq::sockopt::curve_server, 1);
      router_->set(zmq::sockopt::curve_secretkey, cfg_.curve->secret_key);
      router_->set(zmq::sockopt::zap_domain, "prsgd");
    }
    router_fd_ = router_->get(zmq::sockopt::fd);
    if (zap_) {
      zap_fd_ = zap_->get(zmq::sockopt::fd);
    }
  } catch (const zmq::error_t& e) {
    return fail(errc::io_error, std::string("zmq setup: ") + e.what());
  }
  thread_ = std::thread([this] { run(); });
  return {};
}

// Runs `fn` on the I/O thread and waits for its result (inline when already on it).
template <class T>
expected<T> zmq_transport::impl::call(std::function<expected<T>()> fn) {
  if (std::this_thread::get_id() == io_thread_id_) {
    return fn();
  }
  auto promise = std::make_shared<std::promise<expected<T>>>();
  auto future = promise->get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return fail(errc::shutting_down, "transport stopped");
    }
    commands_.emplace_back(std::function<void()>([promise, f = std::move(fn)] { promise->set_value(f()); }));
    commands_waiting_.store(true, std::memory_order_relaxed);
  }
  wake();
  return future.get();
}

expected<std::string> zmq_transport::impl::bind(std::string_view text) {
  auto ep = endpoint::parse(text);
  if (!ep) {
    return ep.error();
  }
  std::string spec = ep->str();
  if (ep->scheme == endpoint::kind::tcp && ep->port == "0") {
    spec = "tcp://" + ep->address + ":*";
  }
  return call<std::string>([this, spec]() -> expected<std::string> {
    try {
      router_->bind(spec);
      return router_->get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return fail(e.num() == EINVAL ? errc::invalid_argument : errc::io_error, "bind " + spec + ": " + e.what());
    }
  });
}

expected<peer_id> zmq_transport::impl::connect(std::string_view text, connect_options options) {
  auto ep = endpoint::parse(text);
  if (!ep) {
    return ep.error();
  }
  if (ep->wildcard_port()) {
    return fail(errc::invalid_argument, "cannot connect to a wildcard port: " + std::string(text));
  }
  if (cfg_.curve && !z85_to_binary(options.server_public_key)) {
    return fail(errc::invalid_argument, "CURVE is on: connect needs the server's Z85 public key");
  }
  const peer_id id = next_id_.fetch_add(1);
  auto counters = std::make_shared<peer_counters>();
  std::string spec = ep->str();
  auto done = call<peer_id>([this, id, spec, counters, options]() -> expected<peer_id> {
    try {
      out_peer p;
      p.sock = zmq::socket_t(*ctx_, zmq::socket_type::dealer);
      configure_common(p.sock);
      p.routing_id = cfg_.node_name;
      p.routing_id += '\0';
      p.routing_id += incarnation_;
      p.routing_id.append(reinterpret_cast<const char*>(&id), sizeof(id));
      p.sock.set(zmq::sockopt::routing_id, p.routing_id);
      if (options.send_buffer_bytes > 0) {
        p.sock.set(zmq::sockopt::sndbuf, options.send_buffer_bytes);
      }
      if (cfg_.curve) {
        p.sock.set(zmq::sockopt::curve_serverkey, options.server_public_key);
        p.sock.set(zmq::sockopt::curve_publickey, cfg_.curve->public_key);
        p.sock.set(zmq::sockopt::curve_secretkey, cfg_.curve->secret_key);
      }
      p.sock.connect(spec);
      p.fd = p.sock.get(zmq::sockopt::fd);
      p.endpoint = spec;
      p.counters = counters;
      p.last_rx = clock_.now();
      p.last_tx = clock_source::time_point{};
      outs_.emplace(id, std::move(p));
      return id;
    } catch (const zmq::error_t& e) {
      return fail(e.num() == EINVAL ? errc::invalid_argument : errc::io_error, "connect " + spec + ": " + e.what());
    }
  });
  if (done) {
    std::lock_guard lock(mutex_);
    directory_.emplace(id, counters);
  }
  return done;
}

inline expected<void> zmq_transport::impl::disconnect(peer_id peer) {
  {
    std::lock_guard lock(mutex_);
    if (directory_.erase(peer) == 0) {
      return fail(errc::not_found, "unknown peer " + std::to_string(peer));
    }
  }
  auto r = call<bool>([this, peer]() -> expected<bool> {
    close_peer(peer, true);
    return true;
  });
  if (!r) {
    return r.error();
  }
  return {};
}

expected<void> zmq_transport::impl::send(peer_id peer, multipart msg) {
  std::size_t bytes = 0;
  for (const auto& f : msg) {
    if (f.size() > cfg_.max_frame_bytes) {
      return fail(errc::too_large, "frame of " + std::to_string(f.size()) + " bytes > max_frame_bytes " +
                                       std::to_string(cfg_.max_frame_bytes));
    }
    bytes += f.size();
  }
  const bool on_io_thread = std::this_thread::get_id() == io_thread_id_;
  // Direct send: when the I/O thread is idle in poll() (it holds io_mutex_ at every other moment), the
  // sending thread takes the sockets over and sends itself, so the message does not wait for an
  // eventfd wake-up of the I/O thread (one thread wake-up fewer on the critical path of a remote call).
  // ZeroMQ sockets may move between threads with a full memory barrier; the mutex provides it.
  std::unique_lock<std::mutex> io_lock;
  if (!on_io_thread && io_sleeping_.load(std::memory_order_relaxed)) {
    io_lock = std::unique_lock<std::mutex>(io_mutex_, std::try_to_lock);
    // One direct send per sleep of the I/O thread: a thread that pipelines many messages queues the
    // rest and wakes the I/O thread once, which sends them while the caller goes on (measured: direct
    // sends for every pipelined message cut 1:1 async calls/s by ~20 %).
    if (io_lock.owns_lock() && direct_sent_) {
      io_lock.unlock();
    }
  }
  bool direct = false;
  bool wake_needed = false;
  std::shared_ptr<peer_counters> inline_counters;  // for a send on the I/O thread or a direct send
  std::string traced;                              // PRSGD_WIRE_TRACE's line for this message
  {
    // One lock for the lookup and the enqueue (the I/O thread takes it once per turn to swap the queue).
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return fail(errc::shutting_down, "transport stopped");
    }
    auto it = directory_.find(peer);
    if (it == directory_.end()) {
      return fail(errc::not_found, "unknown peer " + std::to_string(peer));
    }
    const std::shared_ptr<peer_counters>& counters = it->second;
    const std::size_t queued = counters->queued_bytes.load(std::memory_order_relaxed);
    if (queued > 0 && queued + bytes > cfg_.max_queued_bytes_per_peer) {
      sends_refused_.fetch_add(1, std::memory_order_relaxed);
      return fail(errc::overloaded, std::to_string(queued) + " bytes already queued for peer " + std::to_string(peer));
    }
    counters->queued_bytes.fetch_add(bytes, std::memory_order_relaxed);
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    if (trace_) {
      traced = trace_->line("tx", peer, msg);  // written below, once the lock is released
    }
    // A direct send must not overtake this thread's earlier, still queued messages: only with an
    // empty queue (a drained message has been sent or sits in the peer's pending list, which
    // enqueue_or_send respects; draining happens under io_mutex_, which we hold).
    direct = !on_io_thread && io_lock.owns_lock() && commands_.empty();
    if (!on_io_thread && !direct) {
      wake_needed = commands_.empty();
      commands_.emplace_back(send_command{peer, pending_message{std::move(msg), counters, bytes}});
      commands_waiting_.store(true, std::memory_order_relaxed);
    } else {
      inline_counters = counters;
    }
  }
  if (!traced.empty()) {
    trace_->write(traced);
  }
  if (on_io_thread || direct) {
    // On the I/O thread (a handler replying) or holding the sockets: no queue hop, per-thread order kept.
    enqueue_or_send(peer, pending_message{std::move(msg), std::move(inline_counters), bytes});
    if (direct) {
      direct_sent_ = true;
      direct_sends_.fetch_add(1, std::memory_order_relaxed);
      rearm_after_direct_send(peer);
    }
    return {};
  }
  if (wake_needed) {
    wake_if_sleeping();
  }
  return {};
}

inline transport_stats zmq_transport::impl::stats() const {
  transport_stats s;
  s.messages_sent = messages_sent_.load();
  s.bytes_sent = bytes_sent_.load();
  s.messages_received = messages_received_.load();
  s.bytes_received = bytes_received_.load();
  s.messages_dropped = messages_dropped_.load();
  s.sends_refused = sends_refused_.load();
  s.malformed_received = malformed_received_.load();
  s.too_many_frames = too_many_frames_.load();
  s.from_dropped_connections = from_dropped_.load();
  s.zap_denied = zap_denied_.load();
  s.key_conflicts = key_conflicts_.load();
  s.heartbeats_sent = heartbeats_sent_.load();
  s.direct_sends = direct_sends_.load();
  return s;
}

// After a direct send (the caller holds io_mutex_ while the I/O thread sleeps in poll() on the
// sockets' ZMQ_FDs): the send may have processed the socket's pending commands, consuming the edge
// that poll() waits for. Query ZMQ_EVENTS (which processes the rest): if a message is readable or
// ours is still pending (high-water mark), hand it to the I/O thread with a wake-up; otherwise the
// socket is clean and its ZMQ_FD will signal the next change, so the I/O thread can sleep on.
inline void zmq_transport::impl::rearm_after_direct_send(peer_id peer) {
  bool wake_io = false;
  if (auto it = outs_.find(peer); it != outs_.end()) {
    auto& p = it->second;
    const int ev = socket_events(p.sock);
    if ((ev & ZMQ_POLLIN) != 0 || !p.pending.empty()) {
      p.ready = true;
      wake_io = true;
    } else {
      p.dirty = false;
    }
  } else if (auto in = ins_.find(peer); in != ins_.end()) {
    const int ev = socket_events(*router_);
    if ((ev & ZMQ_POLLIN) != 0) {
      router_ready_ = true;
      wake_io = true;
    } else {
      router_dirty_ = false;
    }
    wake_io = wake_io || !in->second.pending.empty();  // a ROUTER has no POLLOUT per peer: retry soon
  }
  if (wake_io) {
    wake();
  }
}

void zmq_transport::impl::configure_common(zmq::socket_t& s) const {
  s.set(zmq::sockopt::linger, 100);
  s.set(zmq::sockopt::sndhwm, cfg_.send_hwm);
  s.set(zmq::sockopt::rcvhwm, cfg_.receive_hwm);
  s.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(cfg_.max_frame_bytes));
  s.set(zmq::sockopt::reconnect_ivl, to_ms(cfg_.reconnect_interval));
  s.set(zmq::sockopt::reconnect_ivl_max, to_ms(cfg_.reconnect_interval_max));
  // ZMTP heartbeats close half-dead TCP connections (network cut) so the DEALER reconnects.
  s.set(zmq::sockopt::heartbeat_ivl, to_ms(cfg_.heartbeat_interval));
  s.set(zmq::sockopt::heartbeat_timeout, to_ms(cfg_.connection_timeout));
  s.set(zmq::sockopt::heartbeat_ttl, to_ms(cfg_.connection_timeout));
}
// ---- zmq_transport ----

zmq_transport::zmq_transport(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
zmq_transport::~zmq_transport() = default;

expected<std::unique_ptr<zmq_transport>> zmq_transport::make(transport_config config, transport_handlers handlers) {
  auto p = std::make_unique<impl>(std::move(config), std::move(handlers));
  PRSGD_TRY(p->start());
  return std::unique_ptr<zmq_transport>(new zmq_transport(std::move(p)));
}

const std::string& zmq_transport::node_name() const noexcept { return impl_->node_name(); }
expected<std::string> zmq_transport::bind(std::string_view endpoint) { return impl_->bind(endpoint); }
expected<peer_id> zmq_transport::connect(std::string_view endpoint, connect_options options) {
  return impl_->connect(endpoint, std::move(options));
}
expected<void> zmq_transport::disconnect(peer_id peer) { return impl_->disconnect(peer); }
expected<void> zmq_transport::send(peer_id peer, multipart msg) { return impl_->send(peer, std::move(msg)); }
void zmq_transport::stop() { impl_->stop(); }
transport_stats zmq_transport::stats() const { return impl_->stats(); }

// ---- receive memory and make_transport ----

void retain_freed_memory_for_large_frames() {
  static std::once_flag once;
  std::call_once(once, [] {
    // libzmq mallocs every large received frame. glibc serves those with fresh mmap()s whose first touch
    // costs ~16 us per 4 KiB page here; keeping them in the heap makes the next frame reuse touched pages.
    // One arena: glibc's per-thread arenas still mmap any block above their 64 MiB heap size (libzmq
    // decodes on its own thread), so only the main arena's sbrk heap can recycle 64 MiB+ frames.
    const bool ok =
        mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
    PRSGD_LOG(debug, log_component) << "retain freed memory for large frames: " << (ok ? "on" : "failed");
  });
}

expected<std::unique_ptr<transport>> make_transport(std::string_view kind, transport_config config,
                                                    transport_handlers handlers) {
  if (kind == "zmq") {
    auto t = zmq_transport::make(std::move(config), std::move(handlers));
    if (!t) {
      return t.error();
    }
    return std::unique_ptr<transport>(std::move(*t));
  }
  if (kind == "inproc") {
    // One process-wide simulated network on the real clock, driven by its own thread; never destroyed,
    // so transports made here may outlive static destruction order.
    static auto* network = [] {
      auto* n = new inproc_network(steady_clock_source::instance());  // NOLINT(cppcoreguidelines-owning-memory)
      n->start_driver();
      return n;
    }();
    auto t = inproc_transport::make(*network, std::move(config), std::move(handlers));
    if (!t) {
      return t.error();
    }
    return std::unique_ptr<transport>(std::move(*t));
  }
  return fail(errc::invalid_argument, "unknown transport '" + std::string(kind) + "' (zmq, inproc)");
}

}  // namespace prsgd
