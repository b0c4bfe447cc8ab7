// SPDX-License-Identifier: Apache-2.0
// The head role on the runtime's remote-node layer: a head node (`wire::make_head`), the averager's
// registration (a node attached to the head with one named endpoint actor) and the workers' lookup.
// `prsgd head` itself (signals, exit status) is in head_main.cpp.
#include "head_role.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "prsgd/cli/key_files.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/head.hpp"
#include "prsgd/runtime/node.hpp"
#include "prsgd/runtime/remote.hpp"
#include "prsgd/transport/endpoint.hpp"
#include "prsgd/transport/zmq_transport.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

constexpr std::string_view component = "head";

/// Answers `endpoint()` with the endpoint workers connect to; lives in the averager's process.
class averager_endpoint_actor final : public actor {
 public:
  explicit averager_endpoint_actor(std::string endpoint) : endpoint_(std::move(endpoint)) {}
  /// Returns the averager's worker-facing endpoint.
  [[nodiscard]] std::string endpoint() const { return endpoint_; }

 private:
  std::string endpoint_;
};

/// An actor system with one node on it. Member order matters: the node goes first, then the system, and the
/// registry outlives both.
struct node_host {
  wire::remote_registry registry;
  actor_system system;
  std::unique_ptr<wire::node> node;

  node_host() : system(small_system()) {
    registry.add<averager_endpoint_actor>("prsgd.averager_endpoint")
        .method("endpoint", &averager_endpoint_actor::endpoint);
  }
  node_host(const node_host&) = delete;
  node_host& operator=(const node_host&) = delete;
  ~node_host() {
    if (node) {
      node->stop();  // says goodbye: the head drops this node and its names at once
    }
    node.reset();
    system.shutdown(2s);
  }

  static config small_system() {
    config c;
    c.threads = 1;
    c.compute_threads = 1;
    return c;
  }
};

wire::transport_factory zmq_nodes() {
  return [](transport_config c, transport_handlers h) { return make_transport("zmq", std::move(c), std::move(h)); };
}

void set_liveness(transport_config& t, const liveness_options& liveness) {
  t.heartbeat_interval = std::chrono::milliseconds{liveness.heartbeat_ms};
  t.heartbeat_timeout = std::chrono::milliseconds{liveness.heartbeat_timeout_ms};
}

/// Gives the node `cfg` this process's CURVE keys: it serves with its own key pair and reaches the head
/// (and the other nodes) with the server key.
expected<void> set_curve(wire::node_config& cfg, const security_options& security) {
  auto curve = load_curve(security);
  PRSGD_TRY(curve);
  cfg.transport.curve = std::move(curve->own);
  cfg.server_public_key = std::move(curve->server_public_key);
  return {};
}

/// Returns a node name unique to this process and call: ROLE-PID-RANDOM.
std::string unique_node_name(const std::string& role) {
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return role + "-" + std::to_string(::getpid()) + "-" + suffix;
}

/// Config of a node that joins `head`, serving on `local_address` (an OS-chosen port).
expected<wire::node_config> client_config(const std::string& role, const std::string& head,
                                          const std::string& local_address, const liveness_options& liveness,
                                          const security_options& security, std::chrono::milliseconds request_timeout) {
  wire::node_config cfg;
  PRSGD_TRY(set_curve(cfg, security));
  cfg.name = unique_node_name(role);
  cfg.bind = "tcp://" + local_address + ":*";
  cfg.head = head;
  cfg.request_timeout = request_timeout;
  set_liveness(cfg.transport, liveness);
  return cfg;
}

/// Returns `e` with `what` in front of its context.
error with_context(const error& e, const std::string& what) { return error{e.code, what + ": " + e.context}; }

std::chrono::milliseconds remaining(steady::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
}

}  // namespace

std::string advertised_endpoint(const std::string& bound, const std::string& host) {
  auto ep = endpoint::parse(bound);
  if (!ep || ep->scheme != endpoint::kind::tcp) {
    return bound;
  }
  const std::string& a = ep->address;
  if (a == "0.0.0.0" || a == "*" || a == "::" || a == "[::]") {
    return "tcp://" + host + ":" + ep->port;
  }
  return bound;
}

expected<std::string> local_address_towards(const std::string& head) {
  auto ep = endpoint::parse(head);
  if (!ep) {
    return fail(errc::invalid_argument, "bad head endpoint '" + head + "': " + ep.error().context);
  }
  if (ep->scheme != endpoint::kind::tcp) {
    return std::string{"127.0.0.1"};
  }
  // A connected UDP socket sends nothing, but the kernel picks the source address it would use.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string port = ep->wildcard_port() ? std::string{"9"} : ep->port;
  if (const int rc = ::getaddrinfo(ep->address.c_str(), port.c_str(), &hints, &found); rc != 0 || found == nullptr) {
    return fail(errc::not_found, "head host '" + ep->address + "' does not resolve: " + ::gai_strerror(rc));
  }
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0) {
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      sockaddr_in local{};
      socklen_t len = sizeof local;
      char text[INET_ADDRSTRLEN] = {};
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
          ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr) {
        out = text;
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (out.empty() || out == "0.0.0.0") {
    return fail(errc::not_found, "no local address routes to the head host '" + ep->address + "'");
  }
  return out;
}

expected<head_registration> register_averager(const std::string& head, const std::string& averager_endpoint,
                                              const liveness_options& liveness, const security_options& security) {
  const std::chrono::milliseconds timeout{liveness.heartbeat_timeout_ms};
  auto local = local_address_towards(head);
  PRSGD_TRY(local);
  auto node_cfg = client_config("averager", head, *local, liveness, security, timeout);
  PRSGD_TRY(node_cfg);
  auto host = std::make_shared<node_host>();
  auto made = wire::node::make(host->system, host->registry, std::move(*node_cfg), zmq_nodes());
  if (!made) {
    return with_context(made.error(), "cannot register at the head " + head);
  }
  host->node = std::move(*made);
  const std::string advertised = advertised_endpoint(averager_endpoint, *local);
  auto actor = host->system.spawn<averager_endpoint_actor>(advertised);
  if (!actor) {
    return with_context(actor.error(), "cannot start the averager's endpoint actor");
  }
  const std::string name{averager_name};
  // The head drops a lost node's names once that node's heartbeats stop (its own heartbeat timeout).
  const auto deadline = steady::now() + std::max<std::chrono::milliseconds>(3 * timeout, 10s);
  bool waited = false;
  for (;;) {
    auto registered = host->node->register_name(name, actor->addr()).get(timeout + 1s);
    if (registered) {
      break;
    }
    if (registered.error().code != errc::already_exists) {
      return with_context(registered.error(), "registering the averager at the head " + head);
    }
    // Taken. A holder that answers is a live averager of another job; one that does not is a dead predecessor.
    std::string holder_problem = "its node does not answer";
    if (auto holder = host->node->lookup(name).get(timeout + 1s); holder) {
      auto ep =
          host->node->ref<averager_endpoint_actor>(*holder).ask(&averager_endpoint_actor::endpoint).get(timeout + 1s);
      if (ep) {
        return fail(errc::already_exists, "the head " + head + " already has a live averager at " + *ep);
      }
      holder_problem = ep.error().message();
    }
    if (steady::now() >= deadline) {
      return fail(errc::timeout, "the head " + head + " still lists an averager that does not answer (" +
                                     holder_problem + "); is the head's --heartbeat-timeout-ms very long?");
    }
    if (!waited) {
      PRSGD_LOG(info, component) << "the name " << name << " at the head is held by an averager that does not "
                                 << "answer (" << holder_problem << "); waiting for the head to drop it";
      waited = true;
    }
    std::this_thread::sleep_for(250ms);
  }
  PRSGD_LOG(info, component) << "registered the averager (" << advertised << ") at the head " << head << " as node "
                             << host->node->name();
  return head_registration{std::shared_ptr<void>{std::move(host)}};
}

expected<std::string> lookup_averager(const std::string& head, const liveness_options& liveness,
                                      const security_options& security, std::chrono::milliseconds timeout) {
  const auto deadline = steady::now() + timeout;
  auto local = local_address_towards(head);
  PRSGD_TRY(local);
  const std::chrono::milliseconds heartbeat_timeout{liveness.heartbeat_timeout_ms};
  const std::string name{averager_name};
  std::shared_ptr<node_host> host;
  std::string last = "the head did not answer";
  for (;;) {
    const auto left = remaining(deadline);
    if (left <= 0ms) {
      break;
    }
    const auto step = std::max<std::chrono::milliseconds>(std::min(heartbeat_timeout, left), 50ms);
    if (!host) {
      auto node_cfg = client_config("worker", head, *local, liveness, security, step);
      PRSGD_TRY(node_cfg);
      host = std::make_shared<node_host>();
      auto made = wire::node::make(host->system, host->registry, std::move(*node_cfg), zmq_nodes());
      if (made) {
        host->node = std::move(*made);
      } else {
        last = "the head does not answer (" + made.error().message() + ")";
        host.reset();
      }
    }
    if (host) {
      auto addr = host->node->lookup(name).get(step + 500ms);
      if (addr) {
        auto ep =
            host->node->ref<averager_endpoint_actor>(*addr).ask(&averager_endpoint_actor::endpoint).get(step + 500ms);
        if (ep) {
          return *ep;
        }
        last = "the registered averager does not answer (" + ep.error().message() + ")";
      } else if (addr.error().code == errc::not_found) {
        last = "no averager is registered at the head";
      } else {
        last = "the head does not answer (" + addr.error().message() + ")";
      }
    }
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(250ms, std::max(remaining(deadline), 0ms)));
  }
  return fail(errc::timeout, "no averager found through the head " + head + " within " +
                                 std::to_string(timeout.count()) + " ms: " + last);
}

expected<head_server> head_server::start(const std::string& listen, const liveness_options& liveness,
                                         const security_options& security) {
  auto host = std::make_shared<node_host>();
  wire::node_config cfg;
  PRSGD_TRY(set_curve(cfg, security));
  cfg.name = "head";
  cfg.bind = listen;
  cfg.request_timeout = std::chrono::milliseconds{liveness.heartbeat_timeout_ms};
  set_liveness(cfg.transport, liveness);
  auto made = wire::make_head(host->system, host->registry, std::move(cfg), zmq_nodes());
  if (!made) {
    return std::move(made).error();
  }
  host->node = std::move(*made);
  std::string bound = host->node->endpoint();
  return head_server{std::shared_ptr<void>{std::move(host)}, std::move(bound)};
}

const std::string& head_server::endpoint() const { return endpoint_; }

void head_server::stop() { state_.reset(); }

}  // namespace prsgd::cli
