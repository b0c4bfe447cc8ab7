// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/zmq_transport.hpp"

#include <malloc.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <variant>

#include <zmq.hpp>

#include "prsgd/common/check.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/transport/inproc_transport.hpp"

namespace prsgd {

namespace {

constexpr std::string_view log_component = "transport";

// First frame of every transport message (after the ROUTER's routing id): one kind byte, for heartbeats
// followed by the sender's node name.
constexpr char kind_data = 'D';
constexpr char kind_heartbeat = 'H';
constexpr char kind_bye = 'B';

constexpr std::size_t max_node_name = 200;
constexpr std::size_t curve_key_z85_size = 40;
constexpr std::size_t curve_key_size = 32;
constexpr int recv_batch = 256;  // messages per socket per loop turn, so no socket starves the others

// Counts bytes handed to `send` for one peer that libzmq has not released yet (the back-pressure measure).
struct peer_counters {
  std::atomic<std::size_t> queued_bytes{0};
};

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

expected<std::string> z85_to_binary(std::string_view z85) {
  if (z85.size() != curve_key_z85_size) {
    return fail(errc::invalid_argument, "CURVE key must be 40 Z85 characters");
  }
  std::string text(z85);
  std::array<std::uint8_t, curve_key_size> out{};
  if (zmq_z85_decode(out.data(), text.c_str()) == nullptr) {
    return fail(errc::invalid_argument, "malformed Z85 CURVE key");
  }
  return std::string(reinterpret_cast<const char*>(out.data()), out.size());
}

int to_ms(std::chrono::milliseconds d) { return static_cast<int>(std::min<std::int64_t>(d.count(), 1 << 30)); }

}  // namespace

class zmq_transport::impl {
 public:
  impl(transport_config cfg, transport_handlers handlers)
      : cfg_(std::move(cfg)),
        handlers_(std::move(handlers)),
        clock_(cfg_.time_source != nullptr ? *cfg_.time_source : steady_clock::instance()) {}

  ~impl() {
    stop();
    if (wake_fd_ >= 0) {
      ::close(wake_fd_);
    }
  }

  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  expected<void> start() {
    if (cfg_.node_name.empty()) {
      cfg_.node_name = random_node_name();
    }
    if (cfg_.node_name.size() > max_node_name || cfg_.node_name.front() == '\0' ||
        cfg_.node_name.find('\0') != std::string::npos) {
      return fail(errc::invalid_argument, "node_name must be 1..200 bytes without zero bytes");
    }
    if (cfg_.heartbeat_interval.count() <= 0 || cfg_.heartbeat_timeout <= cfg_.heartbeat_interval) {
      return fail(errc::invalid_argument, "need 0 < heartbeat_interval < heartbeat_timeout");
    }
    if (cfg_.connection_timeout < cfg_.heartbeat_timeout) {
      return fail(errc::invalid_argument, "connection_timeout must be >= heartbeat_timeout");
    }
    if (cfg_.max_frame_bytes == 0 || cfg_.send_hwm < 0 || cfg_.receive_hwm < 0) {
      return fail(errc::invalid_argument, "max_frame_bytes must be > 0 and high-water marks >= 0");
    }
    if (cfg_.curve) {
      PRSGD_TRY(z85_to_binary(cfg_.curve->public_key));
      PRSGD_TRY(z85_to_binary(cfg_.curve->secret_key));
      for (const auto& key : cfg_.curve->allowed_client_keys) {
        auto bin = z85_to_binary(key);
        if (!bin) {
          return fail(errc::invalid_argument, "allowed_client_keys: " + bin.error().context);
        }
        allowed_keys_.push_back(std::move(*bin));
      }
      if (zmq_has("curve") == 0) {
        return fail(errc::unsupported, "libzmq was built without CURVE");
      }
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

  const std::string& node_name() const noexcept { return cfg_.node_name; }

  expected<std::string> bind(std::string_view text) {
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
        return fail(e.num() == EINVAL ? errc::invalid_argument : errc::io_error,
                    "bind " + spec + ": " + e.what());
      }
    });
  }

  expected<peer_id> connect(std::string_view text, connect_options options) {
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
        p.last_tx = clock::time_point{};
        outs_.emplace(id, std::move(p));
        return id;
      } catch (const zmq::error_t& e) {
        return fail(e.num() == EINVAL ? errc::invalid_argument : errc::io_error,
                    "connect " + spec + ": " + e.what());
      }
    });
    if (done) {
      std::lock_guard lock(mutex_);
      directory_.emplace(id, counters);
    }
    return done;
  }

  expected<void> disconnect(peer_id peer) {
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

  expected<void> send(peer_id peer, multipart msg) {
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
        return fail(errc::overloaded, std::to_string(queued) + " bytes already queued for peer " +
                                          std::to_string(peer));
      }
      counters->queued_bytes.fetch_add(bytes, std::memory_order_relaxed);
      messages_sent_.fetch_add(1, std::memory_order_relaxed);
      bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
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

  void stop() {
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

  transport_stats stats() const {
    transport_stats s;
    s.messages_sent = messages_sent_.load();
    s.bytes_sent = bytes_sent_.load();
    s.messages_received = messages_received_.load();
    s.bytes_received = bytes_received_.load();
    s.messages_dropped = messages_dropped_.load();
    s.sends_refused = sends_refused_.load();
    s.malformed_received = malformed_received_.load();
    s.heartbeats_sent = heartbeats_sent_.load();
    s.direct_sends = direct_sends_.load();
    return s;
  }

 private:
  struct pending_message {
    multipart frames;
    std::shared_ptr<peer_counters> counters;
    std::size_t bytes = 0;
  };

  struct send_command {
    peer_id peer;
    pending_message msg;
  };
  using command = std::variant<send_command, std::function<void()>>;

  struct out_peer {
    zmq::socket_t sock;
    int fd = -1;          // ZMQ_FD
    bool dirty = true;    // called since its last EAGAIN: check ZMQ_EVENTS before blocking
    bool ready = true;    // may have messages waiting: receive without waiting for the fd
    std::string routing_id;
    std::string endpoint;
    std::string remote_node;
    std::shared_ptr<peer_counters> counters;
    bool up = false;
    clock::time_point last_rx{};
    clock::time_point last_tx{};
    std::deque<pending_message> pending;
  };

  struct in_peer {
    std::string routing_id;
    std::string node;
    std::shared_ptr<peer_counters> counters;
    bool up = false;
    clock::time_point last_rx{};
    clock::time_point last_tx{};
    clock::time_point down_since{};
    std::deque<pending_message> pending;
  };

  // Runs `fn` on the I/O thread and waits for its result (inline when already on it).
  template <class T>
  expected<T> call(std::function<expected<T>()> fn) {
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

  // Wakes the I/O thread if it is (about to be) blocked in poll. Pairs with the fence in run(): either
  // the I/O thread sees commands_waiting_ before it blocks, or we see io_sleeping_ and write the eventfd.
  void wake_if_sleeping() const {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (io_sleeping_.load(std::memory_order_relaxed)) {
      wake();
    }
  }

  void wake() const {
    const std::uint64_t one = 1;
    // A full eventfd counter still wakes the poller, so a failed write loses nothing.
    [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof(one));
  }

  // After a direct send (the caller holds io_mutex_ while the I/O thread sleeps in poll() on the
  // sockets' ZMQ_FDs): the send may have processed the socket's pending commands, consuming the edge
  // that poll() waits for. Query ZMQ_EVENTS (which processes the rest): if a message is readable or
  // ours is still pending (high-water mark), hand it to the I/O thread with a wake-up; otherwise the
  // socket is clean and its ZMQ_FD will signal the next change, so the I/O thread can sleep on.
  void rearm_after_direct_send(peer_id peer) {
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

  void configure_common(zmq::socket_t& s) const {
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

  // ---- I/O thread ----

  void run() {
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

  // ZMQ_EVENTS of `sock` (processes its pending commands); 0 on error.
  static int socket_events(zmq::socket_t& sock) {
    try {
      return sock.get(zmq::sockopt::events);
    } catch (const zmq::error_t&) {
      return 0;
    }
  }

  long poll_timeout_ms() const {
    const auto ivl = cfg_.heartbeat_interval.count();
    return std::clamp<long>(static_cast<long>(ivl / 5), 1, 100);
  }

  void drain_commands() {
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
  bool try_send(zmq::socket_t& sock, const std::string* routing_id, char kind, pending_message& pm) {
    try {
      if (routing_id != nullptr) {
        zmq::message_t rid(routing_id->data(), routing_id->size());
        auto r = sock.send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        if (!r) {
          return false;
        }
      }
      zmq::message_t head(&kind, 1);
      const auto head_flags = pm.frames.empty() ? zmq::send_flags::dontwait
                                                : (zmq::send_flags::sndmore | zmq::send_flags::dontwait);
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
      const auto flags = i + 1 < pm.frames.size() ? (zmq::send_flags::sndmore | zmq::send_flags::dontwait)
                                                  : zmq::send_flags::dontwait;
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

  void drop(pending_message& pm) {
    pm.counters->queued_bytes.fetch_sub(pm.bytes, std::memory_order_relaxed);
    pm.bytes = 0;
    pm.frames.clear();
    messages_dropped_.fetch_add(1, std::memory_order_relaxed);
  }

  void enqueue_or_send(peer_id peer, pending_message pm) {
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

  void flush_all_pending() {
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

  // Receives one whole multipart message without blocking; returns false when none is waiting.
  static bool receive_parts(zmq::socket_t& sock, std::vector<zmq::message_t>& parts) {
    parts.clear();
    zmq::message_t m;
    if (!sock.recv(m, zmq::recv_flags::dontwait)) {
      return false;
    }
    bool more = m.more();
    parts.push_back(std::move(m));
    while (more) {
      zmq::message_t next;
      // libzmq delivers the rest of a message atomically once its first part is readable.
      (void)sock.recv(next, zmq::recv_flags::none);
      more = next.more();
      parts.push_back(std::move(next));
    }
    return true;
  }

  static multipart to_frames(std::vector<zmq::message_t>& parts, std::size_t first) {
    multipart out;
    out.reserve(parts.size() - first);
    for (std::size_t i = first; i < parts.size(); ++i) {
      auto owner = std::make_shared<zmq::message_t>(std::move(parts[i]));
      const void* data = owner->data();
      const std::size_t size = owner->size();
      out.push_back(frame::share(std::shared_ptr<const void>(std::move(owner)), data, size));
    }
    return out;
  }

  void deliver(peer_id peer, multipart msg) {
    messages_received_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(total_size(msg), std::memory_order_relaxed);
    if (handlers_.on_message) {
      handlers_.on_message(peer, std::move(msg));
    }
  }

  void emit(peer_event ev) {
    PRSGD_LOG(debug, log_component) << cfg_.node_name << ": peer " << ev.peer << " (" << ev.node << ") "
                                    << (ev.up ? "up" : "down");
    if (handlers_.on_peer) {
      handlers_.on_peer(ev);
    }
  }

  // Receives up to recv_batch messages; leaves router_ready_ set when more may be waiting.
  void receive_router() {
    auto& parts = rx_parts_;
    for (int n = 0; n < recv_batch; ++n) {
      try {
        if (!receive_parts(*router_, parts)) {
          router_dirty_ = false;  // EAGAIN after any sends from handlers: every command processed
          return;
        }
      } catch (const zmq::error_t& e) {
        PRSGD_LOG(warn, log_component) << "router receive: " << e.what();
        router_dirty_ = true;
        return;
      }
      if (parts.size() < 2 || parts[1].size() < 1) {
        malformed_received_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      std::string& rid = rid_scratch_;
      rid.assign(static_cast<const char*>(parts[0].data()), parts[0].size());
      const char kind = *static_cast<const char*>(parts[1].data());
      auto found = by_routing_id_.find(rid);
      if (kind == kind_bye) {
        if (found != by_routing_id_.end()) {
          remove_incoming(found->second, errc::shutting_down);
        }
        continue;
      }
      if (kind != kind_data && kind != kind_heartbeat) {
        malformed_received_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      peer_id id = 0;
      if (found == by_routing_id_.end()) {
        id = next_id_.fetch_add(1);
        in_peer p;
        p.routing_id = rid;
        p.node = rid.substr(0, rid.find('\0'));
        p.counters = std::make_shared<peer_counters>();
        {
          std::lock_guard lock(mutex_);
          directory_.emplace(id, p.counters);
        }
        ins_.emplace(id, std::move(p));
        by_routing_id_.emplace(rid, id);
      } else {
        id = found->second;
      }
      auto& p = ins_.at(id);
      p.last_rx = clock_.now();
      if (!p.up) {
        p.up = true;
        emit(peer_event{id, true, p.node, {}, false, errc::none});
        send_heartbeat_in(p);  // so the client learns our name and goes up without waiting a full interval
      }
      if (kind == kind_data) {
        deliver(id, to_frames(parts, 2));
      }
    }
    router_ready_ = true;  // batch used up: continue next turn without waiting
  }

  // Receives up to recv_batch messages; leaves the peer's `ready` set when more may be waiting.
  void receive_dealer(peer_id id) {
    auto& parts = rx_parts_;
    for (int n = 0; n < recv_batch; ++n) {
      auto it = outs_.find(id);
      if (it == outs_.end()) {
        return;  // a handler disconnected it
      }
      auto& p = it->second;
      try {
        if (!receive_parts(p.sock, parts)) {
          p.dirty = false;  // EAGAIN after any sends from handlers: every command processed
          return;
        }
      } catch (const zmq::error_t& e) {
        PRSGD_LOG(warn, log_component) << "dealer receive: " << e.what();
        p.dirty = true;
        return;
      }
      if (parts.empty() || parts[0].size() < 1) {
        malformed_received_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const auto* head = static_cast<const char*>(parts[0].data());
      const char kind = head[0];
      if (kind == kind_bye) {
        if (p.up) {
          p.up = false;
          emit(peer_event{id, false, p.remote_node, p.endpoint, true, errc::shutting_down});
        }
        continue;
      }
      if (kind != kind_data && kind != kind_heartbeat) {
        malformed_received_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (kind == kind_heartbeat && parts[0].size() > 1) {
        p.remote_node.assign(head + 1, parts[0].size() - 1);
      }
      p.last_rx = clock_.now();
      if (!p.up) {
        p.up = true;
        emit(peer_event{id, true, p.remote_node, p.endpoint, true, errc::none});
      }
      if (kind == kind_data) {
        deliver(id, to_frames(parts, 1));
      }
    }
    if (auto it = outs_.find(id); it != outs_.end()) {
      it->second.ready = true;  // batch used up
    }
  }

  void send_heartbeat_in(in_peer& p) {
    router_dirty_ = true;
    std::string head(1, kind_heartbeat);
    head += cfg_.node_name;
    try {
      zmq::message_t rid(p.routing_id.data(), p.routing_id.size());
      if (!router_->send(rid, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return;
      }
      zmq::message_t h(head.data(), head.size());
      (void)router_->send(h, zmq::send_flags::dontwait);
      heartbeats_sent_.fetch_add(1, std::memory_order_relaxed);
    } catch (const zmq::error_t&) {
      // EHOSTUNREACH: not connected right now; the timeout logic handles it.
    }
    p.last_tx = clock_.now();
  }

  void send_heartbeat_out(out_peer& p) {
    p.dirty = true;
    try {
      zmq::message_t h(&kind_heartbeat, 1);
      if (p.sock.send(h, zmq::send_flags::dontwait)) {
        heartbeats_sent_.fetch_add(1, std::memory_order_relaxed);
      }
    } catch (const zmq::error_t& e) {
      PRSGD_LOG(warn, log_component) << "heartbeat: " << e.what();
    }
    p.last_tx = clock_.now();
  }

  void tick() {
    const auto now = clock_.now();
    const auto ivl = std::chrono::duration_cast<clock::duration>(cfg_.heartbeat_interval);
    const auto timeout = std::chrono::duration_cast<clock::duration>(cfg_.heartbeat_timeout);
    for (auto& [id, p] : outs_) {
      if (now - p.last_tx >= ivl && p.pending.empty()) {
        send_heartbeat_out(p);
      }
      if (p.up && now - p.last_rx > timeout) {
        p.up = false;
        emit(peer_event{id, false, p.remote_node, p.endpoint, true, errc::peer_unreachable});
      }
    }
    std::vector<peer_id> forget;
    const auto forget_after = std::max<clock::duration>(timeout * 10, std::chrono::seconds(60));
    for (auto& [id, p] : ins_) {
      if (now - p.last_tx >= ivl && p.pending.empty()) {
        send_heartbeat_in(p);
      }
      if (p.up && now - p.last_rx > timeout) {
        p.up = false;
        p.down_since = now;
        while (!p.pending.empty()) {
          drop(p.pending.front());
          p.pending.pop_front();
        }
        emit(peer_event{id, false, p.node, {}, false, errc::peer_unreachable});
      } else if (!p.up && now - p.down_since > forget_after) {
        forget.push_back(id);
      }
    }
    for (const peer_id id : forget) {
      remove_incoming(id, errc::none);
    }
  }

  void remove_incoming(peer_id id, errc reason) {
    auto it = ins_.find(id);
    if (it == ins_.end()) {
      return;
    }
    auto& p = it->second;
    for (auto& pm : p.pending) {
      drop(pm);
    }
    const bool was_up = p.up;
    const std::string node = p.node;
    by_routing_id_.erase(p.routing_id);
    ins_.erase(it);
    {
      std::lock_guard lock(mutex_);
      directory_.erase(id);
    }
    if (was_up && reason != errc::none) {
      emit(peer_event{id, false, node, {}, false, reason});
    }
  }

  // Closes one connection; with `say_bye`, tells the remote side first (best effort).
  void close_peer(peer_id id, bool say_bye) {
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

  void answer_zap() {
    std::vector<zmq::message_t> parts;
    for (int n = 0; n < recv_batch; ++n) {
      try {
        if (!receive_parts(*zap_, parts)) {
          return;
        }
        // ZAP request (RFC 27): version, request id, domain, address, routing id, mechanism, credentials...
        std::string request_id = parts.size() > 1 ? parts[1].to_string() : std::string{};
        bool allowed = false;
        if (parts.size() >= 7 && parts[0].to_string_view() == "1.0" && parts[5].to_string_view() == "CURVE") {
          const std::string key = parts[6].to_string();
          allowed = allowed_keys_.empty() ||
                    std::find(allowed_keys_.begin(), allowed_keys_.end(), key) != allowed_keys_.end();
        }
        if (!allowed) {
          zap_denied_.fetch_add(1, std::memory_order_relaxed);
          PRSGD_LOG(warn, log_component) << cfg_.node_name << ": CURVE client key not allowed; connection refused";
        }
        std::array<std::string, 6> reply{"1.0", request_id, allowed ? "200" : "400",
                                         allowed ? "OK" : "client key not allowed", "", ""};
        for (std::size_t i = 0; i < reply.size(); ++i) {
          zmq::message_t m(reply[i].data(), reply[i].size());
          (void)zap_->send(m, i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
        }
      } catch (const zmq::error_t& e) {
        PRSGD_LOG(warn, log_component) << "ZAP handler: " << e.what();
        return;
      }
    }
    zap_ready_ = true;  // batch used up
  }

  void shutdown_sockets() {
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

  transport_config cfg_;
  transport_handlers handlers_;
  const clock& clock_;
  std::vector<std::string> allowed_keys_;  // binary 32-byte keys
  std::string incarnation_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::mutex join_mutex_;
  std::atomic<std::thread::id> io_thread_id_{};
  std::atomic<peer_id> next_id_{1};

  std::mutex io_mutex_;  // the sockets and the I/O state below: held by the I/O thread except in poll()
  std::mutex mutex_;     // guards commands_, directory_ and stopping_ (taken after io_mutex_, never before)
  std::vector<command> commands_;
  std::atomic<bool> commands_waiting_{false};  // commands_ is not empty (set under mutex_)
  std::atomic<bool> io_sleeping_{false};       // the I/O thread is about to block or is blocked in poll
  std::atomic<bool> stop_requested_{false};
  std::unordered_map<peer_id, std::shared_ptr<peer_counters>> directory_;
  bool stopping_ = false;

  // Owned by the I/O thread once it runs; a direct sender uses them while holding io_mutex_.
  std::unique_ptr<zmq::context_t> ctx_;
  std::optional<zmq::socket_t> router_;
  std::optional<zmq::socket_t> zap_;
  std::map<peer_id, out_peer> outs_;
  std::map<peer_id, in_peer> ins_;
  std::unordered_map<std::string, peer_id> by_routing_id_;
  std::vector<command> batch_;               // drained commands (reused)
  std::vector<zmq::message_t> rx_parts_;     // received parts (reused)
  std::string rid_scratch_;                  // received routing id (reused)
  int router_fd_ = -1;
  int zap_fd_ = -1;
  bool direct_sent_ = false;  // a thread sent directly since the I/O thread last woke (see send())
  bool router_dirty_ = true;
  bool router_ready_ = true;
  bool zap_ready_ = true;
  clock::time_point next_tick_{};

  std::atomic<std::uint64_t> messages_sent_{0};
  std::atomic<std::uint64_t> bytes_sent_{0};
  std::atomic<std::uint64_t> messages_received_{0};
  std::atomic<std::uint64_t> bytes_received_{0};
  std::atomic<std::uint64_t> messages_dropped_{0};
  std::atomic<std::uint64_t> sends_refused_{0};
  std::atomic<std::uint64_t> malformed_received_{0};
  std::atomic<std::uint64_t> heartbeats_sent_{0};
  std::atomic<std::uint64_t> direct_sends_{0};
  std::atomic<std::uint64_t> zap_denied_{0};
};

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

// ---- CURVE keys and memory ----

expected<curve_keypair> generate_curve_keypair() {
  if (zmq_has("curve") == 0) {
    return fail(errc::unsupported, "libzmq was built without CURVE");
  }
  std::array<char, 41> pub{};
  std::array<char, 41> sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return fail(errc::io_error, std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  }
  return curve_keypair{std::string(pub.data(), 40), std::string(sec.data(), 40)};
}

expected<std::string> curve_public_key(std::string_view secret_key) {
  PRSGD_TRY(z85_to_binary(secret_key));
  std::string sec(secret_key);
  std::array<char, 41> pub{};
  if (zmq_curve_public(pub.data(), sec.c_str()) != 0) {
    return fail(errc::invalid_argument, std::string("zmq_curve_public: ") + zmq_strerror(zmq_errno()));
  }
  return std::string(pub.data(), 40);
}

void retain_freed_memory_for_large_frames() {
  static std::once_flag once;
  std::call_once(once, [] {
    // libzmq mallocs every large received frame. glibc serves those with fresh mmap()s whose first touch
    // costs ~16 us per 4 KiB page here; keeping them in the heap makes the next frame reuse touched pages.
    // One arena: glibc's per-thread arenas still mmap any block above their 64 MiB heap size (libzmq
    // decodes on its own thread), so only the main arena's sbrk heap can recycle 64 MiB+ frames.
    const bool ok = mallopt(M_ARENA_MAX, 1) == 1 && mallopt(M_MMAP_MAX, 0) == 1 &&
                    mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
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
      auto* n = new inproc_network(steady_clock::instance());  // NOLINT(cppcoreguidelines-owning-memory)
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
