// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/inproc_transport.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <variant>

#include "prsgd/common/check.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd {

namespace transport_detail {

namespace {
constexpr int to_server = 0;
constexpr int to_client = 1;
constexpr std::size_t no_node = static_cast<std::size_t>(-1);
constexpr auto never = clock_source::time_point::max();
}  // namespace

// One simulated process attached to the network. Indices into network_state::nodes_ are stable.
struct node_state {
  std::string name;
  transport_config cfg;
  transport_handlers handlers;
  bool alive = true;
  peer_id next_peer = 1;
  std::vector<std::string> bound;
  transport_stats stats;
};

// One outgoing connection (client side) and, when established, its incoming end on a server node.
struct connection {
  std::size_t client = no_node;
  peer_id client_peer = 0;
  std::string endpoint;
  connect_options options;
  std::size_t server = no_node;  // no_node until established (and again after the server went away)
  peer_id server_peer = 0;
  bool up[2] = {false, false};  // [to_server] = server's view of the client, [to_client] = client's view
  std::optional<clock_source::time_point> broken_since;
  clock_source::time_point next_attempt{};
  std::size_t queued[2] = {0, 0};  // bytes accepted by send and not yet delivered, per direction
};

struct envelope {
  std::uint64_t conn = 0;
  int direction = to_server;
  multipart msg;
  std::size_t bytes = 0;
  bool receive_checked = false;  // receive-stage faults were already applied
};

struct pending_event {
  std::size_t node = no_node;
  peer_event event;
};

using item = std::variant<envelope, pending_event>;

struct network_state {
  network_state(const clock_source& c, fault_injector* f) : time(c), faults(f) {}

  const clock_source& time;
  fault_injector* faults;

  mutable std::mutex mutex;             // guards everything below
  std::recursive_mutex dispatch_mutex;  // serialises handler calls; recursive so stop() works from a handler
  std::condition_variable driver_cv;
  std::deque<node_state> nodes;  // a deque: handlers are used by reference outside the lock
  std::map<std::uint64_t, connection> conns;
  std::uint64_t next_conn = 1;
  std::map<std::pair<std::size_t, peer_id>, std::pair<std::uint64_t, int>> peers;  // (node, peer) -> (conn, side)
  std::map<std::string, std::size_t> endpoints;                                    // bound endpoint -> node
  std::map<std::pair<std::string, std::string>, clock_source::time_point> cuts;    // sorted name pair -> until
  std::map<std::pair<clock_source::time_point, std::uint64_t>, item> timeline;
  std::map<std::pair<std::uint64_t, int>, envelope> held;  // reorder: held until the next message on the link
  std::uint64_t seq = 0;
  int next_port = 40000;
  bool driver_stop = false;
  std::thread driver;

  static std::pair<std::string, std::string> link_key(std::string_view a, std::string_view b) {
    std::string x(a);
    std::string y(b);
    if (y < x) {
      std::swap(x, y);
    }
    return {x, y};
  }

  bool link_cut(const std::string& a, const std::string& b, clock_source::time_point now) const {
    auto it = cuts.find(link_key(a, b));
    return it != cuts.end() && it->second > now;
  }

  void schedule(clock_source::time_point due, item it) {
    timeline.emplace(std::make_pair(due, seq++), std::move(it));
    driver_cv.notify_all();
  }

  void event(std::size_t node, clock_source::time_point due, peer_event ev) {
    if (node != no_node && nodes[node].alive) {
      schedule(due, pending_event{node, std::move(ev)});
    }
  }

  peer_event client_event(const connection& c, std::uint64_t /*id*/, bool up_now, errc reason) const {
    return peer_event{
        c.client_peer, up_now, c.server != no_node ? nodes[c.server].name : std::string{}, c.endpoint, true,
        reason,        {}};
  }

  peer_event server_event(const connection& c, bool up_now, errc reason) const {
    // Like the ZAP handler of zmq_transport: a CURVE server learns the client's public key.
    const auto& cl = nodes[c.client].cfg.curve;
    const bool curve = nodes[c.server].cfg.curve.has_value() && cl.has_value();
    return peer_event{
        c.server_peer, up_now, nodes[c.client].name, {}, false, reason, curve ? cl->public_key : std::string{}};
  }

  bool curve_allows(const connection& c, std::size_t server) const {
    const auto& s = nodes[server].cfg.curve;
    if (!s) {
      return true;
    }
    const auto& cl = nodes[c.client].cfg.curve;
    if (!cl || c.options.server_public_key != s->public_key) {
      return false;
    }
    return s->allowed_client_keys.empty() || std::find(s->allowed_client_keys.begin(), s->allowed_client_keys.end(),
                                                       cl->public_key) != s->allowed_client_keys.end();
  }

  // Connection bookkeeping at time `now`: establish, break, time out, heal. Caller holds `mutex`.
  void maintain(clock_source::time_point now) {
    for (auto it = cuts.begin(); it != cuts.end();) {
      it = it->second <= now ? cuts.erase(it) : std::next(it);
    }
    std::vector<std::uint64_t> dead;
    for (auto& [id, c] : conns) {
      auto& client = nodes[c.client];
      if (c.server == no_node && client.alive && now >= c.next_attempt) {
        auto ep = endpoints.find(c.endpoint);
        if (ep != endpoints.end() && !link_cut(client.name, nodes[ep->second].name, now) &&
            curve_allows(c, ep->second)) {
          auto d =
              faults != nullptr
                  ? faults->decide(fault_context{fault_stage::connect, client.name, nodes[ep->second].name, nullptr})
                  : fault_injector::decision{};
          if (d.triggered) {
            c.next_attempt =
                now + std::max<clock_source::duration>(d.duration, std::chrono::duration_cast<clock_source::duration>(
                                                                       client.cfg.reconnect_interval));
          } else {
            c.server = ep->second;
            c.server_peer = nodes[c.server].next_peer++;
            peers[{c.server, c.server_peer}] = {id, to_server};
            c.broken_since.reset();
            c.up[0] = true;
            c.up[1] = true;
            event(c.server, now, server_event(c, true, errc::none));
            event(c.client, now, client_event(c, id, true, errc::none));
          }
        } else {
          c.next_attempt = now + std::chrono::duration_cast<clock_source::duration>(client.cfg.reconnect_interval);
        }
      }
      if (c.server == no_node) {
        if (!client.alive) {
          dead.push_back(id);
        }
        continue;
      }
      auto& server = nodes[c.server];
      const bool broken = !client.alive || !server.alive || link_cut(client.name, server.name, now);
      if (broken && !c.broken_since) {
        c.broken_since = now;
      }
      if (!broken && c.broken_since) {
        c.broken_since.reset();
        if (!c.up[to_server]) {
          c.up[to_server] = true;
          event(c.server, now, server_event(c, true, errc::none));
        }
        if (!c.up[to_client]) {
          c.up[to_client] = true;
          event(c.client, now, client_event(c, id, true, errc::none));
        }
      }
      if (c.broken_since) {
        const auto server_deadline =
            *c.broken_since + std::chrono::duration_cast<clock_source::duration>(server.cfg.heartbeat_timeout);
        const auto client_deadline =
            *c.broken_since + std::chrono::duration_cast<clock_source::duration>(client.cfg.heartbeat_timeout);
        if (c.up[to_server] && now >= server_deadline) {
          c.up[to_server] = false;
          event(c.server, now, server_event(c, false, errc::peer_unreachable));
        }
        if (c.up[to_client] && now >= client_deadline) {
          c.up[to_client] = false;
          event(c.client, now, client_event(c, id, false, errc::peer_unreachable));
        }
        if (!server.alive && !c.up[to_client]) {
          detach_server(c);  // the client keeps reconnecting to whoever binds the endpoint next
        } else if (!client.alive && !c.up[to_server]) {
          dead.push_back(id);
        }
      }
    }
    for (const auto id : dead) {
      remove_conn(id);
    }
  }

  void detach_server(connection& c) {
    if (c.server != no_node) {
      peers.erase({c.server, c.server_peer});
    }
    c.server = no_node;
    c.server_peer = 0;
    c.up[0] = false;
    c.up[1] = false;
    c.broken_since.reset();
  }

  void remove_conn(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) {
      return;
    }
    peers.erase({it->second.client, it->second.client_peer});
    if (it->second.server != no_node) {
      peers.erase({it->second.server, it->second.server_peer});
    }
    conns.erase(it);
  }

  std::optional<clock_source::time_point> next_due_locked() const {
    std::optional<clock_source::time_point> due;
    auto consider = [&](clock_source::time_point t) {
      if (!due || t < *due) {
        due = t;
      }
    };
    if (!timeline.empty()) {
      consider(timeline.begin()->first.first);
    }
    for (const auto& [key, until] : cuts) {
      if (until != never) {
        consider(until);
      }
    }
    for (const auto& [id, c] : conns) {
      if (c.server == no_node && nodes[c.client].alive) {
        consider(c.next_attempt);
      }
      if (c.broken_since && c.server != no_node) {
        if (c.up[to_server]) {
          consider(*c.broken_since +
                   std::chrono::duration_cast<clock_source::duration>(nodes[c.server].cfg.heartbeat_timeout));
        }
        if (c.up[to_client]) {
          consider(*c.broken_since +
                   std::chrono::duration_cast<clock_source::duration>(nodes[c.client].cfg.heartbeat_timeout));
        }
      }
    }
    return due;
  }

  void close_node(std::size_t node, bool graceful) {
    auto& n = nodes[node];
    if (!n.alive) {
      return;
    }
    n.alive = false;
    for (const auto& ep : n.bound) {
      endpoints.erase(ep);
    }
    n.bound.clear();
    const auto now = time.now();
    if (graceful) {
      std::vector<std::uint64_t> gone;
      for (auto& [id, c] : conns) {
        if (c.client == node) {
          if (c.server != no_node && c.up[to_server]) {
            event(c.server, now, server_event(c, false, errc::shutting_down));
          }
          gone.push_back(id);
        } else if (c.server == node) {
          if (c.up[to_client]) {
            event(c.client, now, client_event(c, id, false, errc::shutting_down));
          }
          detach_server(c);
        }
      }
      for (const auto id : gone) {
        remove_conn(id);
      }
    }
    maintain(now);  // a crash breaks its connections now; the peers' timeouts count from here
    // Drop everything queued for this node's own handlers.
    for (auto it = timeline.begin(); it != timeline.end();) {
      auto* pe = std::get_if<pending_event>(&it->second);
      it = pe != nullptr && pe->node == node ? timeline.erase(it) : std::next(it);
    }
    driver_cv.notify_all();
  }
};

}  // namespace transport_detail

using transport_detail::connection;
using transport_detail::envelope;
using transport_detail::network_state;
using transport_detail::node_state;
using transport_detail::pending_event;

namespace {
constexpr int to_server = 0;
constexpr int to_client = 1;
constexpr std::size_t no_node = static_cast<std::size_t>(-1);
}  // namespace

// ---- inproc_network ----

inproc_network::inproc_network(const clock_source& time_source, fault_injector* faults)
    : state_(std::make_shared<network_state>(time_source, faults)) {}

inproc_network::~inproc_network() { stop_driver(); }

fault_injector* inproc_network::faults() const noexcept { return state_->faults; }

std::size_t inproc_network::poll() {
  auto& s = *state_;
  std::lock_guard dispatch(s.dispatch_mutex);
  std::vector<std::pair<std::size_t, transport_detail::item>> batch;  // (receiver node, item)
  {
    std::lock_guard lock(s.mutex);
    const auto now = s.time.now();
    s.maintain(now);
    while (!s.timeline.empty() && s.timeline.begin()->first.first <= now) {
      auto node = s.timeline.extract(s.timeline.begin());
      auto& it = node.mapped();
      if (auto* pe = std::get_if<pending_event>(&it)) {
        batch.emplace_back(pe->node, std::move(it));
        continue;
      }
      auto& env = std::get<envelope>(it);
      auto cit = s.conns.find(env.conn);
      if (cit == s.conns.end()) {
        continue;  // connection gone: the message is lost with it
      }
      auto& c = cit->second;
      c.queued[env.direction] -= std::min(c.queued[env.direction], env.bytes);
      const std::size_t from = env.direction == to_server ? c.client : c.server;
      const std::size_t to = env.direction == to_server ? c.server : c.client;
      // The link was checked at send time; a message already on its way survives a later cut.
      if (to == no_node || from == no_node || !s.nodes[to].alive) {
        s.nodes[from == no_node ? c.client : from].stats.messages_dropped++;
        continue;
      }
      bool oversize = false;
      for (const auto& f : env.msg) {
        oversize = oversize || f.size() > s.nodes[to].cfg.max_frame_bytes;
      }
      if (oversize) {
        s.nodes[to].stats.malformed_received++;
        continue;
      }
      int copies = 1;
      if (s.faults != nullptr && !env.receive_checked) {
        auto d = s.faults->decide(fault_context{fault_stage::receive, s.nodes[from].name, s.nodes[to].name, &env.msg});
        if (d.triggered) {
          switch (d.action) {
            case fault_action::drop: s.nodes[from].stats.messages_dropped++; continue;
            case fault_action::delay:
              env.receive_checked = true;
              c.queued[env.direction] += env.bytes;
              s.schedule(now + d.duration, std::move(it));
              continue;
            case fault_action::duplicate: copies = 2; break;
            case fault_action::reorder: {
              env.receive_checked = true;
              const auto key = std::make_pair(env.conn, env.direction + 2);  // +2: receive-side hold
              if (s.held.count(key) == 0) {
                s.held.emplace(key, std::move(env));
                continue;
              }
              break;
            }
            case fault_action::disconnect:
              s.cuts[network_state::link_key(s.nodes[from].name, s.nodes[to].name)] =
                  d.duration.count() > 0 ? now + d.duration : transport_detail::never;
              c.broken_since = now;
              s.nodes[from].stats.messages_dropped++;
              continue;
          }
        }
      }
      const auto hold_key = std::make_pair(env.conn, env.direction + 2);
      for (int i = 0; i < copies; ++i) {
        batch.emplace_back(to, envelope{env.conn, env.direction, env.msg, env.bytes, true});
      }
      if (auto h = s.held.find(hold_key); h != s.held.end() && h->second.conn == env.conn) {
        batch.emplace_back(to, std::move(h->second));
        s.held.erase(h);
      }
    }
  }
  std::size_t delivered = 0;
  for (auto& [node, it] : batch) {
    transport_handlers* handlers = nullptr;
    peer_id peer = 0;
    {
      std::lock_guard lock(s.mutex);
      if (!s.nodes[node].alive) {
        continue;
      }
      handlers = &s.nodes[node].handlers;
      if (auto* env = std::get_if<envelope>(&it)) {
        auto cit = s.conns.find(env->conn);
        if (cit == s.conns.end()) {
          continue;
        }
        peer = env->direction == to_server ? cit->second.server_peer : cit->second.client_peer;
        if (peer == 0) {
          continue;
        }
        s.nodes[node].stats.messages_received++;
        s.nodes[node].stats.bytes_received += env->bytes;
      }
    }
    // Handlers live in node_state (a stable vector element) and are never modified after make().
    if (auto* env = std::get_if<envelope>(&it)) {
      if (handlers->on_message) {
        handlers->on_message(peer, std::move(env->msg));
      }
    } else if (handlers->on_peer) {
      handlers->on_peer(std::get<pending_event>(it).event);
    }
    ++delivered;
  }
  return delivered;
}

std::size_t inproc_network::run_until_idle() {
  std::size_t total = 0;
  for (std::size_t n = poll(); n > 0; n = poll()) {
    total += n;
  }
  return total;
}

std::optional<clock_source::time_point> inproc_network::next_due() const {
  std::lock_guard lock(state_->mutex);
  return state_->next_due_locked();
}

std::size_t inproc_network::in_flight() const {
  std::lock_guard lock(state_->mutex);
  std::size_t n = state_->held.size();
  for (const auto& [key, it] : state_->timeline) {
    n += std::holds_alternative<envelope>(it) ? 1 : 0;
  }
  return n;
}

void inproc_network::cut(std::string_view a, std::string_view b) {
  std::lock_guard lock(state_->mutex);
  state_->cuts[network_state::link_key(a, b)] = transport_detail::never;
  state_->maintain(state_->time.now());
}

void inproc_network::restore(std::string_view a, std::string_view b) {
  std::lock_guard lock(state_->mutex);
  state_->cuts.erase(network_state::link_key(a, b));
  state_->driver_cv.notify_all();
}

void inproc_network::start_driver() {
  std::lock_guard lock(state_->mutex);
  if (state_->driver.joinable()) {
    return;
  }
  state_->driver_stop = false;
  state_->driver = std::thread([this] {
    auto& s = *state_;
    while (true) {
      {
        std::unique_lock wait_lock(s.mutex);
        if (s.driver_stop) {
          return;
        }
        const auto due = s.next_due_locked();
        const auto now = s.time.now();
        if (!due || *due > now) {
          // Real time drives a real clock; cap the wait so a clock that jumps is noticed too.
          const auto wait = due ? std::min<clock_source::duration>(*due - now, std::chrono::milliseconds(50))
                                : clock_source::duration(std::chrono::milliseconds(50));
          s.driver_cv.wait_for(wait_lock, wait);
          continue;
        }
      }
      (void)poll();
    }
  });
}

void inproc_network::stop_driver() {
  std::thread t;
  {
    std::lock_guard lock(state_->mutex);
    state_->driver_stop = true;
    state_->driver_cv.notify_all();
    t = std::move(state_->driver);
  }
  if (t.joinable()) {
    t.join();
  }
}

// ---- inproc_transport ----

inproc_transport::inproc_transport(std::shared_ptr<network_state> net, std::size_t node)
    : net_(std::move(net)), node_(node) {
  std::lock_guard lock(net_->mutex);
  name_ = net_->nodes[node_].name;
}

expected<std::unique_ptr<inproc_transport>> inproc_transport::make(inproc_network& network, transport_config config,
                                                                   transport_handlers handlers) {
  auto& s = *network.state_;
  if (config.heartbeat_interval.count() <= 0 || config.heartbeat_timeout <= config.heartbeat_interval) {
    return fail(errc::invalid_argument, "need 0 < heartbeat_interval < heartbeat_timeout");
  }
  std::size_t index = 0;
  {
    std::lock_guard lock(s.mutex);
    if (config.node_name.empty()) {
      config.node_name = "inproc-" + std::to_string(s.nodes.size());
    }
    if (config.node_name.size() > 200 || config.node_name.find('\0') != std::string::npos) {
      return fail(errc::invalid_argument, "node_name must be 1..200 bytes without zero bytes");
    }
    node_state n;
    n.name = config.node_name;
    n.cfg = std::move(config);
    n.handlers = std::move(handlers);
    s.nodes.push_back(std::move(n));
    index = s.nodes.size() - 1;
  }
  return std::unique_ptr<inproc_transport>(new inproc_transport(network.state_, index));
}

inproc_transport::~inproc_transport() { stop(); }

const std::string& inproc_transport::node_name() const noexcept { return name_; }

expected<std::string> inproc_transport::bind(std::string_view text) {
  auto ep = endpoint::parse(text);
  if (!ep) {
    return ep.error();
  }
  std::lock_guard lock(net_->mutex);
  auto& n = net_->nodes[node_];
  if (!n.alive) {
    return fail(errc::shutting_down, "transport stopped");
  }
  if (ep->wildcard_port()) {
    ep->port = std::to_string(net_->next_port++);
  }
  const std::string key = ep->str();
  if (net_->endpoints.count(key) != 0) {
    return fail(errc::io_error, "bind " + key + ": address in use");
  }
  net_->endpoints.emplace(key, node_);
  n.bound.push_back(key);
  net_->driver_cv.notify_all();
  return key;
}

expected<peer_id> inproc_transport::connect(std::string_view text, connect_options options) {
  auto ep = endpoint::parse(text);
  if (!ep) {
    return ep.error();
  }
  if (ep->wildcard_port()) {
    return fail(errc::invalid_argument, "cannot connect to a wildcard port: " + std::string(text));
  }
  std::lock_guard lock(net_->mutex);
  auto& n = net_->nodes[node_];
  if (!n.alive) {
    return fail(errc::shutting_down, "transport stopped");
  }
  if (n.cfg.curve && options.server_public_key.size() != 40) {
    return fail(errc::invalid_argument, "CURVE is on: connect needs the server's Z85 public key");
  }
  connection c;
  c.client = node_;
  c.client_peer = n.next_peer++;
  c.endpoint = ep->str();
  c.options = std::move(options);
  c.next_attempt = net_->time.now();
  const auto id = net_->next_conn++;
  net_->peers[{node_, c.client_peer}] = {id, to_client};
  const peer_id result = c.client_peer;
  net_->conns.emplace(id, std::move(c));
  net_->driver_cv.notify_all();
  return result;
}

expected<void> inproc_transport::disconnect(peer_id peer) {
  std::lock_guard lock(net_->mutex);
  auto it = net_->peers.find({node_, peer});
  if (it == net_->peers.end()) {
    return fail(errc::not_found, "unknown peer " + std::to_string(peer));
  }
  const auto [conn_id, side] = it->second;
  auto& c = net_->conns.at(conn_id);
  const auto now = net_->time.now();
  if (side == to_client) {
    if (c.server != no_node && c.up[to_server]) {
      net_->event(c.server, now, net_->server_event(c, false, errc::shutting_down));
    }
    net_->remove_conn(conn_id);
  } else {
    if (c.up[to_client]) {
      net_->event(c.client, now, net_->client_event(c, conn_id, false, errc::shutting_down));
    }
    // Like zmq: the client keeps its connection and reappears as a new incoming peer.
    net_->detach_server(c);
  }
  return {};
}

expected<void> inproc_transport::send(peer_id peer, multipart msg) {
  auto& s = *net_;
  std::lock_guard lock(s.mutex);
  auto& n = s.nodes[node_];
  if (!n.alive) {
    return fail(errc::shutting_down, "transport stopped");
  }
  auto it = s.peers.find({node_, peer});
  if (it == s.peers.end()) {
    return fail(errc::not_found, "unknown peer " + std::to_string(peer));
  }
  std::size_t bytes = 0;
  for (const auto& f : msg) {
    if (f.size() > n.cfg.max_frame_bytes) {
      return fail(errc::too_large, "frame of " + std::to_string(f.size()) + " bytes > max_frame_bytes");
    }
    bytes += f.size();
  }
  const auto [conn_id, side] = it->second;
  auto& c = s.conns.at(conn_id);
  const int direction = side == to_client ? to_server : to_client;
  if (c.queued[direction] > 0 && c.queued[direction] + bytes > n.cfg.max_queued_bytes_per_peer) {
    n.stats.sends_refused++;
    return fail(errc::overloaded, std::to_string(c.queued[direction]) + " bytes already queued");
  }
  n.stats.messages_sent++;
  n.stats.bytes_sent += bytes;
  const auto now = s.time.now();
  const bool established = c.server != no_node && !c.broken_since && s.nodes[c.server].alive && s.nodes[c.client].alive;
  if (!established || s.link_cut(s.nodes[c.client].name, s.nodes[c.server].name, now)) {
    n.stats.messages_dropped++;
    return {};
  }
  const std::string& to_name = s.nodes[direction == to_server ? c.server : c.client].name;
  auto when = now;
  int copies = 1;
  bool hold = false;
  if (s.faults != nullptr) {
    auto d = s.faults->decide(fault_context{fault_stage::send, n.name, to_name, &msg});
    if (d.triggered) {
      switch (d.action) {
        case fault_action::drop: n.stats.messages_dropped++; return {};
        case fault_action::delay: when = now + d.duration; break;
        case fault_action::duplicate: copies = 2; break;
        case fault_action::reorder: hold = true; break;
        case fault_action::disconnect:
          s.cuts[network_state::link_key(n.name, to_name)] =
              d.duration.count() > 0 ? now + d.duration : transport_detail::never;
          c.broken_since = now;
          n.stats.messages_dropped++;
          return {};
      }
    }
  }
  const auto key = std::make_pair(conn_id, direction);
  if (hold && s.held.count(key) == 0) {
    c.queued[direction] += bytes;
    s.held.emplace(key, envelope{conn_id, direction, std::move(msg), bytes, false});
    return {};
  }
  for (int i = 0; i < copies; ++i) {
    c.queued[direction] += bytes;
    s.schedule(when, envelope{conn_id, direction, msg, bytes, false});
  }
  if (auto h = s.held.find(key); h != s.held.end()) {
    s.schedule(when, std::move(h->second));
    s.held.erase(h);
  }
  return {};
}

void inproc_transport::stop() {
  {
    std::lock_guard lock(net_->mutex);
    net_->close_node(node_, true);
  }
  // Wait for a delivery in progress on another thread, so no handler runs after stop() returns.
  std::lock_guard dispatch(net_->dispatch_mutex);
}

void inproc_transport::kill() {
  {
    std::lock_guard lock(net_->mutex);
    net_->close_node(node_, false);
  }
  std::lock_guard dispatch(net_->dispatch_mutex);
}

transport_stats inproc_transport::stats() const {
  std::lock_guard lock(net_->mutex);
  return net_->nodes[node_].stats;
}

}  // namespace prsgd
