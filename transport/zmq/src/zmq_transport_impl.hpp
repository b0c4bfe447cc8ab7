// SPDX-License-Identifier: Apache-2.0
// zmq_transport::impl, shared by the transport_zmq sources (private: never installed). Which file holds
// what:
//   zmq_transport.cpp  the public API (zmq_transport, make_transport), setup, the command queue, send()
//   io_loop.cpp        the I/O thread's loop and its send path (pending lists, zero copy)
//   receive.cpp        receiving from the ROUTER and the DEALERs, delivery to the handlers
//   liveness.cpp       heartbeats, peer timeouts, forgetting incoming peers
//   curve.cpp          CURVE keys and the ZAP handler
//   shutdown.cpp       stop(), goodbyes, closing the sockets
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include <zmq.hpp>

#include "prsgd/transport/zmq_transport.hpp"

#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/common/rate_limiter.hpp"
#include "prsgd/transport/transport.hpp"
#include "wire_trace.hpp"

namespace prsgd {
namespace transport_detail {

inline constexpr std::string_view log_component = "transport";

// First frame of every transport message (after the ROUTER's routing id): one kind byte, for heartbeats
// followed by the sender's node name.
inline constexpr char kind_data = 'D';
inline constexpr char kind_heartbeat = 'H';
inline constexpr char kind_bye = 'B';

inline constexpr std::size_t max_node_name = 200;
inline constexpr std::size_t curve_key_z85_size = 40;
inline constexpr std::size_t curve_key_size = 32;
inline constexpr int recv_batch = 256;  // messages per socket per loop turn, so no socket starves the others

// Counts bytes handed to `send` for one peer that libzmq has not released yet (the back-pressure measure).
struct peer_counters {
  std::atomic<std::size_t> queued_bytes{0};
};

// Decodes a 40-character Z85 CURVE key into its 32 bytes (curve.cpp).
expected<std::string> z85_to_binary(std::string_view z85);

}  // namespace transport_detail

// The state behind a zmq_transport. Thread contract (transport/README.md, "Thread contract"): the public
// members (start, bind, connect, disconnect, send, stop, stats) may be called from any thread; everything
// else runs on the I/O thread, or on a sending thread that holds io_mutex_ while the I/O thread sleeps in
// poll() (direct send).
// Functions declared `inline` here are defined in the one source file that calls them.
class zmq_transport::impl {
 public:
  impl(transport_config cfg, transport_handlers handlers);
  ~impl();

  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  // ---- public API (zmq_transport.cpp; stop in shutdown.cpp) ----
  expected<void> start();
  const std::string& node_name() const noexcept { return cfg_.node_name; }
  expected<std::string> bind(std::string_view text);
  expected<peer_id> connect(std::string_view text, connect_options options);
  inline expected<void> disconnect(peer_id peer);
  expected<void> send(peer_id peer, multipart msg);
  void stop();
  inline transport_stats stats() const;

 private:
  using peer_counters = transport_detail::peer_counters;

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
    int fd = -1;        // ZMQ_FD
    bool dirty = true;  // called since its last EAGAIN: check ZMQ_EVENTS before blocking
    bool ready = true;  // may have messages waiting: receive without waiting for the fd
    std::string routing_id;
    std::string endpoint;
    std::string remote_node;
    std::shared_ptr<peer_counters> counters;
    bool up = false;
    clock_source::time_point last_rx{};
    clock_source::time_point last_tx{};
    std::deque<pending_message> pending;
  };

  struct in_peer {
    std::string routing_id;
    /// With CURVE: the client's public key (Z85) as the ZAP handler admitted it (libzmq's "User-Id");
    /// otherwise empty. One in_peer is one (routing id, client key) pair.
    std::string client_key;
    /// The key of by_routing_id_: the client key followed by the routing id.
    std::string lookup;
    std::string node;
    std::string address;  // Peer-Address of the connection
    std::shared_ptr<peer_counters> counters;
    bool up = false;
    clock_source::time_point last_rx{};
    clock_source::time_point last_tx{};
    clock_source::time_point down_since{};
    std::deque<pending_message> pending;
  };

  // ---- command queue and wake-ups (zmq_transport.cpp) ----
  template <class T>
  expected<T> call(std::function<expected<T>()> fn);
  inline void rearm_after_direct_send(peer_id peer);
  void configure_common(zmq::socket_t& s) const;

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

  // ZMQ_EVENTS of `sock` (processes its pending commands); 0 on error.
  static int socket_events(zmq::socket_t& sock) {
    try {
      return sock.get(zmq::sockopt::events);
    } catch (const zmq::error_t&) {
      return 0;
    }
  }

  // ---- I/O thread: loop and send path (io_loop.cpp) ----
  void run();
  inline long poll_timeout_ms() const;
  inline void drain_commands();
  bool try_send(zmq::socket_t& sock, const std::string* routing_id, char kind, pending_message& pm);
  void drop(pending_message& pm) {
    pm.counters->queued_bytes.fetch_sub(pm.bytes, std::memory_order_relaxed);
    pm.bytes = 0;
    pm.frames.clear();
    messages_dropped_.fetch_add(1, std::memory_order_relaxed);
  }

  void enqueue_or_send(peer_id peer, pending_message pm);
  inline void flush_all_pending();

  // ---- receive path (receive.cpp) ----
  /// What receive_parts found.
  enum class received { nothing, message, too_many_frames };
  static received receive_parts(zmq::socket_t& sock, std::vector<zmq::message_t>& parts, std::size_t max_parts);
  static multipart to_frames(std::vector<zmq::message_t>& parts, std::size_t first);
  inline void deliver(peer_id peer, multipart msg);
  void emit(peer_event ev);
  void receive_router();
  void receive_dealer(peer_id id);

  // ---- liveness (liveness.cpp) ----
  void send_heartbeat_in(in_peer& p);
  inline void send_heartbeat_out(out_peer& p);
  void tick();
  void remove_incoming(peer_id id, errc reason);
  void drop_connection(const std::string& lookup);
  void take_routing_id(peer_id id, in_peer& p);

  // ---- CURVE (curve.cpp) ----
  expected<void> load_curve_keys();
  void answer_zap();

  // ---- shutdown (shutdown.cpp) ----
  void close_peer(peer_id id, bool say_bye);
  void shutdown_sockets();

  transport_config cfg_;
  transport_handlers handlers_;
  const clock_source& clock_;
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
  std::unordered_map<std::string, peer_id> by_routing_id_;  // client key + routing id -> peer
  // Routing id -> the incoming peer whose connection holds it now. With ROUTER handover a connection with
  // another client key can take a routing id over; the peer of the other key is then down until its own
  // connection takes the routing id back, so nothing meant for it goes to the other key.
  std::unordered_map<std::string, peer_id> holders_;
  // Routing ids of incoming connections dropped for breaking the frame limit; their messages are ignored.
  // Bounded: the oldest entries go first (a dropped client that reconnects gets a new routing id anyway).
  std::unordered_set<std::string> dropped_ids_;
  std::deque<std::string> dropped_order_;
  std::vector<command> batch_;            // drained commands (reused)
  std::vector<zmq::message_t> rx_parts_;  // received parts (reused)
  std::string rid_scratch_;               // received routing id (reused)
  int router_fd_ = -1;
  int zap_fd_ = -1;
  bool direct_sent_ = false;  // a thread sent directly since the I/O thread last woke (see send())
  bool router_dirty_ = true;
  bool router_ready_ = true;
  bool zap_ready_ = true;
  clock_source::time_point next_tick_{};

  // PRSGD_WIRE_TRACE (wire_trace.hpp): set in start(), before the I/O thread exists; null without it.
  std::unique_ptr<transport_detail::wire_trace> trace_;
  std::atomic<std::uint64_t> messages_sent_{0};
  std::atomic<std::uint64_t> bytes_sent_{0};
  std::atomic<std::uint64_t> messages_received_{0};
  std::atomic<std::uint64_t> bytes_received_{0};
  std::atomic<std::uint64_t> messages_dropped_{0};
  std::atomic<std::uint64_t> sends_refused_{0};
  std::atomic<std::uint64_t> malformed_received_{0};
  std::atomic<std::uint64_t> too_many_frames_{0};
  rate_limiter zap_warnings_;  // ZAP refusals are caused by remote input: a few lines per 10 s
  std::atomic<std::uint64_t> from_dropped_{0};
  std::atomic<std::uint64_t> heartbeats_sent_{0};
  std::atomic<std::uint64_t> direct_sends_{0};
  std::atomic<std::uint64_t> zap_denied_{0};
  std::atomic<std::uint64_t> key_conflicts_{0};
};

}  // namespace prsgd
